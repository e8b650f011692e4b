"""The ONNX nodes on tensors, each as gpucg operator calls: :data:`TABLE` maps an op type to
its handler ``(lowering, node, input names)`` (gpucg/onnx/lower.py runs them; docs/onnx.md
prints the coverage). A node gpucg cannot run raises an OnnxError saying why, which the
lowering lists with the node."""

from __future__ import annotations

import numpy as np
import sympy

from ..ops._expr import node as ew, placeholders
from ..shape import TensorType, product, simplify_dim
from .graph import DTYPES, OnnxError
from ..graph.host import host_value, size_vector

UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
         "Log": "log", "Sqrt": "sqrt", "Abs": "abs", "Neg": "negative"}
BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
          "Max": "maximum", "Min": "minimum", "Equal": "equal", "Less": "less",
          "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal"}
REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod"}


def _ints_of(lw: Lowering, name: str, what: str) -> list:
    if not name:
        return []
    if name not in lw.g.consts:
        raise OnnxError(f"{what} ({name!r}) must be a constant (or computed from sizes only)")
    return [int(v) for v in lw.g.consts[name].reshape(-1)]


def _unary(lw, n, ins):
    lw.elementwise(n, UNARY[n.op], ins[:1])


def _binary(lw, n, ins):
    lw.elementwise(n, BINARY[n.op], ins[:2])


def _where(lw, n, ins):
    lw.elementwise(n, "where", ins)


def _misc_unary(lw, n, ins):
    if n.op == "Reciprocal":
        lw.emit(n, "fused", ins[:1], n.outputs, expr="divide(1.0, x0)")
    elif n.op == "LeakyRelu":
        lw.elementwise(n, "leaky_relu", ins[:1], alpha=float(n.attrs.get("alpha", 0.01)))
    elif n.op == "Gelu":
        lw.elementwise(n, "gelu", ins[:1], approximate=n.attrs.get("approximate", "none"))
    else:  # Clip: bounds from inputs (opset 11+) or attributes
        lo = lw.g.consts[ins[1]].item() if len(ins) > 1 and ins[1] else n.attrs.get("min")
        hi = lw.g.consts[ins[2]].item() if len(ins) > 2 and ins[2] else n.attrs.get("max")
        attrs = {k: float(v) for k, v in (("a_min", lo), ("a_max", hi)) if v is not None}
        lw.elementwise(n, "clip", ins[:1], **attrs)


def _alias(lw, n, ins):  # Identity, Dropout (inference): the input itself
    lw.alias[n.outputs[0]] = ins[0]


def _cast(lw, n, ins):
    lw.emit(n, "cast", ins[:1], n.outputs, dtype=DTYPES[n.attrs["to"]])


def _matmul(lw, n, ins):
    a, b = ins[:2]
    g = lw.g
    if b in g.consts and g.consts[b].ndim == 2 and g.type_of(a).ndim >= 2:
        w = lw.const(g.consts[b].T, f"{n.name}.weight")  # dense's weight is (n, k)
        lw.emit(n, "dense", [a, w], n.outputs)
    else:
        lw.emit(n, "matmul", [a, b], n.outputs)


def _gemm(lw, n, ins):
    a, b, c = (ins + ["", ""])[:3]
    at, g = n.attrs, lw.g
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    if at.get("transA", 0):
        (a,) = lw.emit(n, "transpose", [a], axes=(1, 0))
    if b not in g.consts:
        (y,) = lw.emit(n, "matmul", [a, b], None if c else n.outputs,
                       transpose_b=bool(at.get("transB", 0)), alpha=alpha)
        if c:
            cc = lw.const(g.consts[c] * beta, f"{n.name}.C") if c in g.consts else c
            lw.elementwise(n, "add", [y, cc])
        return
    w = g.consts[b] if at.get("transB", 0) else g.consts[b].T
    inputs = [a, lw.const(w, f"{n.name}.weight")]
    if c:
        if c not in g.consts:
            raise OnnxError(f"{n.label}: C ({c!r}) must be a constant")
        inputs.append(lw.const(np.broadcast_to(g.consts[c] * beta, (w.shape[0],)).astype(
            w.dtype), f"{n.name}.bias"))
    lw.emit(n, "dense", inputs, n.outputs, alpha=alpha)


def _conv_attrs(label: str, at: dict) -> dict:
    """conv2d's attributes from a 2-D Conv's."""
    pad = {"SAME_UPPER": "SAME", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}.get(
        at.get("auto_pad", "NOTSET"), tuple(at.get("pads", (0, 0, 0, 0))))
    return dict(strides=tuple(at.get("strides", (1, 1))), padding=pad,
                dilation=tuple(at.get("dilations", (1, 1))), groups=int(at.get("group", 1)))


def _conv(lw, n, ins):
    x, w, b = (ins + [""])[:3]
    lw.emit(n, "conv2d", [x, w] + ([b] if b else []), n.outputs, **_conv_attrs(n.label, n.attrs))


def _batch_norm(lw, n, ins):
    lw.emit(n, "batch_norm", ins[:5], n.outputs[:1], axis=1,
            eps=float(n.attrs.get("epsilon", 1e-5)))


def _pool(lw, n, ins):
    at = n.attrs
    if len(n.outputs) > 1 and n.outputs[1]:
        raise OnnxError(f"{n.label}: the indices output of MaxPool is not supported")
    pad = {"SAME_UPPER": "SAME", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}.get(
        at.get("auto_pad", "NOTSET"), tuple(at.get("pads", (0, 0, 0, 0))))
    kw = dict(kernel=tuple(at["kernel_shape"]), strides=tuple(at.get("strides", (1, 1))),
              padding=pad, ceil_mode=bool(at.get("ceil_mode", 0)))
    if n.op == "MaxPool":
        lw.emit(n, "max_pool2d", ins[:1], n.outputs[:1],
                dilation=tuple(at.get("dilations", (1, 1))), **kw)
    else:
        lw.emit(n, "avg_pool2d", ins[:1], n.outputs[:1],
                count_include_pad=bool(at.get("count_include_pad", 0)), **kw)


def _global_pool(lw, n, ins):
    lw.emit(n, "global_avg_pool2d" if n.op == "GlobalAveragePool" else "global_max_pool2d",
            ins[:1], n.outputs)


def _reshape(lw, n, ins):
    x, shape = ins[:2]
    g = lw.g
    if shape in g.consts:
        target = list(g.consts[shape].reshape(-1))
    elif shape in g.sizes:
        target = list(g.sizes[shape].reshape(-1))
    else:
        raise OnnxError(f"{n.label}: the target shape ({shape!r}) depends on data")
    xt = g.type_of(x)
    copy = not n.attrs.get("allowzero", 0)  # 0 takes the input's size (allowzero: a size 0)
    dims = [xt.shape[i] if (copy and isinstance(d, (int, np.integer)) and d == 0) else d
            for i, d in enumerate(target)]
    known = [d for d in dims if not (isinstance(d, (int, np.integer)) and d == -1)]
    if len(known) < len(dims):
        rest = sympy.simplify(sympy.sympify(product(xt.shape)) / sympy.sympify(product(known)))
        dims = [rest if (isinstance(d, (int, np.integer)) and d == -1) else d for d in dims]
    dims = tuple(int(d) if sympy.sympify(d).is_Integer else d for d in dims)
    if all(isinstance(d, int) for d in dims):
        lw.emit(n, "reshape", [x], n.outputs, shape=dims)
        return
    lw.view(n, x, dims, n.outputs[0])


def _views(lw, n, ins):
    at, g = n.attrs, lw.g
    if n.op == "Transpose":
        lw.emit(n, "transpose", ins[:1], n.outputs, axes=tuple(at["perm"]) if "perm" in at
                else None)
    elif n.op == "Flatten":
        lw.emit(n, "flatten", ins[:1], n.outputs, axis=int(at.get("axis", 1)))
    else:
        axes = _ints_of(lw, ins[1], f"{n.label} axes") if len(ins) > 1 else at.get("axes", [])
        if n.op == "Squeeze":
            lw.emit(n, "squeeze", ins[:1], n.outputs, axis=tuple(axes) if axes else None)
            return
        rank = g.type_of(ins[0]).ndim + len(axes)
        x = ins[0]
        for k, a in enumerate(sorted(a % rank for a in axes)):
            (x,) = lw.emit(n, "expand_dims", [x], n.outputs if k == len(axes) - 1 else None,
                           axis=a)


def _concat(lw, n, ins):
    lw.emit(n, "concatenate", [i for i in ins if i], n.outputs, axis=int(n.attrs["axis"]))


def _split(lw, n, ins):
    axis = int(n.attrs.get("axis", 0))
    sizes = _ints_of(lw, ins[1], f"{n.label} split") if len(ins) > 1 and ins[1] else \
        list(n.attrs.get("split", []))
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1]) if sizes else len(n.outputs)
    lw.emit(n, "split", ins[:1], n.outputs, indices_or_sections=points, axis=axis)


def _slice(lw, n, ins):
    starts, ends = _ints_of(lw, ins[1], "starts"), _ints_of(lw, ins[2], "ends")
    axes = _ints_of(lw, ins[3], "axes") if len(ins) > 3 and ins[3] else None
    steps = _ints_of(lw, ins[4], "steps") if len(ins) > 4 and ins[4] else None
    clamp = lambda v: max(min(v, 2 ** 31 - 1), -2 ** 31)  # noqa: E731  INT64_MAX means "to the end"
    lw.emit(n, "strided_slice", ins[:1], n.outputs, begin=tuple(map(clamp, starts)),
            end=tuple(map(clamp, ends)), strides=tuple(steps) if steps else None,
            axes=tuple(axes) if axes else None)


def _gather(lw, n, ins):
    lw.emit(n, "take", ins[:2], n.outputs, axis=int(n.attrs.get("axis", 0)))


def _softmax(lw, n, ins):
    axis, rank = int(n.attrs.get("axis", -1 if lw.g.opset.get("ai.onnx", 13) >= 13 else 1)), \
        lw.g.type_of(ins[0]).ndim
    if lw.g.opset.get("ai.onnx", 13) < 13 and axis % rank != rank - 1:
        raise OnnxError(f"{n.label}: before opset 13 Softmax flattens from axis {axis}; only "
                        "the last axis is supported")
    lw.emit(n, "softmax" if n.op == "Softmax" else "log_softmax", ins[:1], n.outputs,
            axis=axis)


def _layer_norm(lw, n, ins):
    x, gamma, beta = (ins + [""])[:3]
    t = lw.g.type_of(x)
    if int(n.attrs.get("axis", -1)) % t.ndim != t.ndim - 1 or len(n.outputs) > 1 and \
            any(n.outputs[1:]):
        raise OnnxError(f"{n.label}: only the last axis is normalized, and only Y is given")
    if not beta:
        beta = lw.const(np.zeros(lw.g.type_of(gamma).shape, np.dtype(t.dtype)), f"{n.name}.B")
    lw.emit(n, "layer_norm", [x, gamma, beta], n.outputs[:1], axis=-1,
            eps=float(n.attrs.get("epsilon", 1e-5)))


def _reduce(lw, n, ins):
    at = n.attrs
    axes = _ints_of(lw, ins[1], "axes") if len(ins) > 1 and ins[1] else at.get("axes")
    lw.emit(n, REDUCE[n.op], ins[:1], n.outputs, axis=tuple(axes) if axes else None,
            keepdims=bool(at.get("keepdims", 1)))


def _arg(lw, n, ins):
    if n.attrs.get("select_last_index", 0):
        raise OnnxError(f"{n.label}: select_last_index=1 is not supported")
    lw.emit(n, n.op.lower(), ins[:1], n.outputs, axis=int(n.attrs.get("axis", 0)),
            keepdims=bool(n.attrs.get("keepdims", 1)))


def _expand(lw, n, ins):
    shape = [simplify_dim(d) for d in lw.g.sizes[ins[1]].reshape(-1)] if ins[1] in lw.g.sizes \
        else _ints_of(lw, ins[1], f"{n.label} shape")
    lw.broadcast(n, ins[0], shape, n.outputs[0])


def _logic(lw, n, ins):
    """Boolean nodes on the comparison operators (And: a * b, Or: max, Xor: a != b, Not: a ==
    0), so that they fuse with the comparisons that make their inputs."""
    x = placeholders(2)
    expr = {"And": lambda: ew("multiply", x, {}), "Or": lambda: ew("maximum", x, {}),
            "Xor": lambda: ew("not_equal", x, {}),
            "Not": lambda: ew("equal", (x[0], 0), {})}[n.op]()
    lw.expression(n, expr, ins[:1] if n.op == "Not" else ins[:2])


def _special(lw, n, ins):
    """IsNaN as x != x; IsInf as |x| (or x, or -x) beyond the dtype's largest finite value."""
    (x,) = placeholders(1)
    if n.op == "IsNaN":
        lw.expression(n, ew("not_equal", (x, x), {}), ins[:1])
        return
    big = float(np.finfo(np.dtype(lw.g.type_of(ins[0]).dtype)).max)
    pos, neg = n.attrs.get("detect_positive", 1), n.attrs.get("detect_negative", 1)
    arg = abs(x) if pos and neg else x if pos else -x
    lw.expression(n, ew("greater", (arg, big), {}) if pos or neg else ew("not_equal", (x, x),
                                                                         {}), ins[:1])


#: ONNX activations -> the elementwise operator and its attributes (ONNX's names and defaults)
ACTIVATIONS = {"HardSigmoid": ("hardsigmoid", ("alpha", "beta")), "HardSwish": ("hardswish", ()),
               "Softplus": ("softplus", ()), "Mish": ("mish", ()), "Elu": ("elu", ("alpha",)),
               "Selu": ("selu", ("alpha", "gamma"))}


def _activation(lw, n, ins):
    op, names = ACTIVATIONS[n.op]
    lw.elementwise(n, op, ins[:1], **{k: float(n.attrs[k]) for k in names if k in n.attrs})


def _conv_nd(lw, n, ins):
    """Conv with one spatial dim as conv2d over a (1, L) image (views in and out)."""
    x, w = ins[:2]
    wt = lw.g.consts.get(w)
    if wt is None:
        raise OnnxError(f"{n.label}: gpucg.onnx runs convolutions with constant weights")
    if wt.ndim == 4:
        return _conv(lw, n, ins)
    if wt.ndim != 3:
        raise OnnxError(f"{n.label}: a convolution with {wt.ndim - 2} spatial dims; gpucg has "
                        "conv2d only (1-D runs as a 1 x L conv2d)")
    at = dict(n.attrs)
    pads = tuple(at.get("pads", (0, 0)))
    at.update(strides=(1,) + tuple(at.get("strides", (1,))),
              dilations=(1,) + tuple(at.get("dilations", (1,))),
              pads=(0, pads[0], 0, pads[1]), kernel_shape=(1,) + tuple(wt.shape[2:]))
    w2 = lw.const(wt[:, :, None, :], f"{n.name}.weight2d")
    (x2,) = lw.emit(n, "expand_dims", [x], axis=2)
    (y2,) = lw.emit(n, "conv2d", [x2, w2] + [b for b in ins[2:3] if b],
                    **_conv_attrs(n.label, at))
    lw.emit(n, "squeeze", [y2], n.outputs[:1], axis=(2,))


def _unsupported(why):
    def handler(lw, n, ins):
        raise OnnxError(f"{n.label}: {why}")
    return handler


def _pad(lw, n, ins):
    at = n.attrs
    mode = at.get("mode", "constant")
    if mode != "constant":
        raise OnnxError(f"{n.label}: Pad mode {mode!r}; gpucg.ops.pad pads with a constant")
    rank = lw.g.type_of(ins[0]).ndim
    pads = _ints_of(lw, ins[1], f"{n.label} pads") if len(ins) > 1 and ins[1] else \
        list(at.get("pads", []))
    value = lw.g.consts[ins[2]].item() if len(ins) > 2 and ins[2] else 0.0
    axes = _ints_of(lw, ins[3], f"{n.label} axes") if len(ins) > 3 and ins[3] else \
        list(range(rank))
    width = [[0, 0] for _ in range(rank)]
    for k, a in enumerate(axes):
        width[a % rank] = [pads[k], pads[k + len(axes)]]
    if all(isinstance(p, int) and p == 0 for w in width for p in w):  # (Swin's window pads
        lw.view(n, ins[0], lw.g.type_of(ins[0]).shape, n.outputs[0])  # at 224: a view)
        return
    lw.emit(n, "pad", ins[:1], n.outputs[:1], pad_width=tuple(map(tuple, width)),
            value=float(value))


def _gather_nd(lw, n, ins):
    """GatherND with indices that depend on the sizes only (the exporters' mask gathers by
    arange): the data seen flat over the indexed axes, indexed by linear positions computed on
    the host once per size, one gpucg take."""
    data, idx = ins[:2]
    g = lw.g
    if int(n.attrs.get("batch_dims", 0)):
        raise OnnxError(f"{n.label}: GatherND with batch_dims is not supported")
    if g.kind(idx) == "tensor":
        raise OnnxError(f"{n.label}: GatherND with indices computed from data (gpucg has no "
                        "scatter/gather-nd operator)")
    shape = g.type_of(data).shape
    k = g.type_of(idx).shape[-1]
    if not isinstance(k, int) or k > len(shape):
        raise OnnxError(f"{n.label}: the index depth {k} must be a constant up to the rank")
    flat_dims = (product(shape[:k]),) + tuple(shape[k:])
    flat = f"{n.name}/flat"
    if all(isinstance(d, int) for d in flat_dims):
        (flat,) = lw.emit(n, "reshape", [data], [flat], shape=flat_dims)
    else:
        lw.view(n, data, flat_dims, flat)
    dims = size_vector(g, f"{n.name}/dims", shape[:k])

    def linear(index, lead):
        index = np.where(index < 0, index + lead, index).astype(np.int64)
        return np.ravel_multi_index(tuple(np.moveaxis(index, -1, 0)), tuple(lead))

    lin = host_value(g, f"{n.name}/linear", "GatherND positions", linear, [idx, dims],
                     TensorType(g.type_of(idx).shape[:-1], "int64"))
    lw.emit(n, "take", [flat, lin], n.outputs[:1], axis=0)


TABLE = {**{k: _unary for k in UNARY}, **{k: _binary for k in BINARY}, "Where": _where,
         **{k: _misc_unary for k in ("Reciprocal", "LeakyRelu", "Gelu", "Clip")},
         "Cast": _cast, "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv_nd,
         "BatchNormalization": _batch_norm, "MaxPool": _pool, "AveragePool": _pool,
         "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool, "Reshape": _reshape,
         **{k: _views for k in ("Transpose", "Flatten", "Squeeze", "Unsqueeze")},
         "Concat": _concat, "Split": _split, "Slice": _slice, "Gather": _gather,
         "Softmax": _softmax, "LogSoftmax": _softmax, "LayerNormalization": _layer_norm,
         **{k: _reduce for k in REDUCE}, "ArgMax": _arg, "ArgMin": _arg, "Expand": _expand,
         "Identity": _alias, "Dropout": _alias,
         **{k: _logic for k in ("And", "Or", "Xor", "Not")}, "IsNaN": _special,
         "IsInf": _special, "GatherND": _gather_nd, **{k: _activation for k in ACTIVATIONS},
         "Pad": _pad,
         "ConvTranspose": _unsupported("gpucg has no transposed convolution operator"),
         "ScatterND": _unsupported("ScatterND on tensors: gpucg has no scatter operator (on "
                                   "sizes or size-dependent values it runs on the host)")}
