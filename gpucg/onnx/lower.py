"""Each ONNX node as gpucg operator calls (:class:`Call`), their output types from the
operators' own type relations (SymPy sizes), constants and size subgraphs folded on the way.

Elementwise nodes become one-node ``fused`` calls here (an expression over x0, x1, ...);
gpucg/onnx/fuse.py then joins chains of them into one kernel and into the epilogues of dense and
conv2d. The table :data:`TABLE` is the operator coverage (docs/onnx.md prints it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sympy

from ..errors import GpucgError
from ..op import get_op
from ..ops._expr import node as ew_node, placeholders
from ..shape import TensorType, product, simplify_dim
from .graph import DTYPES, Graph, Node, NotSymbolic, OnnxError, UnsupportedError, evaluate, \
    fold_sizes, size_ones


@dataclasses.dataclass
class Call:
    """One gpucg operator call: ``op`` on value names ``inputs`` (constants among them) giving
    ``outputs``; ``nodes``: the ONNX nodes it computes; ``fusion``: what was fused into it;
    ``view``: for a reshape to symbolic sizes, the target sizes (it runs as a view)."""

    op: str
    attrs: dict
    inputs: list
    outputs: list
    nodes: list
    fusion: list = dataclasses.field(default_factory=list)
    view: tuple | None = None


UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
         "Log": "log", "Sqrt": "sqrt", "Abs": "abs", "Neg": "negative"}
BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
          "Max": "maximum", "Min": "minimum", "Equal": "equal", "Less": "less",
          "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal"}
REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod"}


class Lowering:
    """Walks the nodes in order: folds what needs no kernel, lowers the rest to calls."""

    def __init__(self, g: Graph):
        self.g, self.calls, self.unsupported, self.alias = g, [], [], g.alias
        self._count = 0

    def ref(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def const(self, array, hint: str) -> str:
        self._count += 1
        name = f"{hint}#{self._count}"
        self.g.consts[name] = np.ascontiguousarray(array)
        return name

    def emit(self, node: Node, op: str, inputs, outputs=None, **attrs) -> list:
        """A call of ``op``; its output types inferred (names made up when not given)."""
        inputs = [self.ref(i) for i in inputs]
        o = get_op(op)
        types = o.infer(tuple(self.g.type_of(i) for i in inputs), o.make_attrs(**attrs))
        if outputs is None:
            self._count += 1
            outputs = [f"{node.name}/{op}#{self._count}_{k}" for k in range(len(types))]
        for name, t in zip(outputs, types):
            self.g.types[name] = t
        self.calls.append(Call(op, attrs, inputs, list(outputs), [node.label]))
        return outputs

    def elementwise(self, node: Node, op: str, inputs, **attrs) -> None:
        tree = ew_node(op, placeholders(len(inputs)), attrs)
        self.emit(node, "fused", inputs, node.outputs[:1], expr=str(tree))

    def run(self) -> list:
        failed: set = set()  # values of nodes that could not be lowered
        for node in self.g.nodes:
            if any(self.ref(i) in failed for i in node.inputs if i):
                failed.update(node.outputs)  # downstream of one listed: its types are unknown
                if node.domain not in ("ai.onnx", "") or node.op not in TABLE:
                    self.unsupported.append((node, ""))
                continue
            try:
                self.node(node)
            except GpucgError as exc:  # a supported op type used in a way gpucg cannot run
                self.unsupported.append((node, str(exc).splitlines()[0]))
            if self.unsupported and self.unsupported[-1][0] is node:
                failed.update(node.outputs)
        if self.unsupported:
            lines = "\n".join(f"  {n.label} domain {n.domain!r}{': ' + why if why else ''}"
                              for n, why in self.unsupported)
            raise UnsupportedError(f"{len(self.unsupported)} node(s) have no gpucg operator:\n"
                                   f"{lines}\n(supported: {', '.join(sorted(TABLE))})")
        self.g.results = [self.ref(o) for o in self.g.outputs]
        return self.calls

    def node(self, n: Node) -> None:
        g = self.g
        present = [self.ref(i) for i in n.inputs if i]
        kinds = [g.kind(i) for i in present]
        if n.domain not in ("ai.onnx", ""):
            self.unsupported.append((n, ""))
            return
        if n.op == "Constant":
            g.consts[n.outputs[0]] = np.asarray(evaluate(n, [])[0])
            return
        if present and all(k == "const" for k in kinds) and n.op != "Shape":
            for name, value in zip(n.outputs, evaluate(n, [g.consts[i] for i in present])):
                g.consts[name] = np.asarray(value)
            return
        if n.op == "Shape" or (all(k in ("const", "sizes") for k in kinds) and "sizes" in kinds):
            try:
                values = [g.sizes.get(i, g.consts.get(i)) if i else None
                          for i in map(self.ref, n.inputs)]
                types = [g.types.get(i) for i in present]
                out = np.asarray(fold_sizes(n, values, types), dtype=object)
                if all(isinstance(v, (int, np.integer)) or getattr(v, "is_Integer", False)
                       for v in out.reshape(-1)):
                    g.consts[n.outputs[0]] = out.astype(np.int64)
                else:
                    g.sizes[n.outputs[0]] = out
                return
            except NotSymbolic:
                pass
        if present and all(k != "tensor" for k in kinds):
            for name in n.outputs:  # size-dependent: computed once per binding of the sizes
                g.dynamic[name] = n
            return
        handler = TABLE.get(n.op)
        if handler is None:
            self.unsupported.append((n, ""))
            return
        handler(self, n, [self.ref(i) if i else "" for i in n.inputs])


# -- the handlers ------------------------------------------------------------------------------

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


def _conv(lw, n, ins):
    x, w, b = (ins + [""])[:3]
    at = n.attrs
    if w not in lw.g.consts or lw.g.consts[w].ndim != 4:
        raise OnnxError(f"{n.label}: gpucg.onnx runs 2-D convolutions with constant weights")
    pad = {"SAME_UPPER": "SAME", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}.get(
        at.get("auto_pad", "NOTSET"), tuple(at.get("pads", (0, 0, 0, 0))))
    lw.emit(n, "conv2d", [x, w] + ([b] if b else []), n.outputs,
            strides=tuple(at.get("strides", (1, 1))), padding=pad,
            dilation=tuple(at.get("dilations", (1, 1))), groups=int(at.get("group", 1)))


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
    lw.g.types[n.outputs[0]] = TensorType(dims, xt.dtype)
    lw.calls.append(Call("reshape", {}, [x], list(n.outputs), [n.label], view=dims))


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
    have = lw.g.type_of(ins[0]).shape
    rank = max(len(have), len(shape))
    have, shape = (1,) * (rank - len(have)) + have, (1,) * (rank - len(shape)) + tuple(shape)
    if any(a != 1 and b != 1 and a != b for a, b in zip(have, shape)):
        raise OnnxError(f"{n.label}: the input's shape {have} does not broadcast to {shape}")
    out = tuple(a if b == 1 else b for a, b in zip(have, shape))
    if all(isinstance(d, int) for d in out):
        lw.emit(n, "broadcast_to", ins[:1], n.outputs, shape=out)
        return  # symbolic: selected against True of the sizes it grows to, made once per size
    ones = size_ones(lw.g, f"{n.name}/ones", [b if a == 1 else 1 for a, b in zip(have, shape)])
    lw.emit(n, "fused", [ins[0], ones], n.outputs, expr="where(x1, x0, x0)")


TABLE = {**{k: _unary for k in UNARY}, **{k: _binary for k in BINARY}, "Where": _where,
         **{k: _misc_unary for k in ("Reciprocal", "LeakyRelu", "Gelu", "Clip")},
         "Cast": _cast, "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
         "BatchNormalization": _batch_norm, "MaxPool": _pool, "AveragePool": _pool,
         "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool, "Reshape": _reshape,
         **{k: _views for k in ("Transpose", "Flatten", "Squeeze", "Unsqueeze")},
         "Concat": _concat, "Split": _split, "Slice": _slice, "Gather": _gather,
         "Softmax": _softmax, "LogSoftmax": _softmax, "LayerNormalization": _layer_norm,
         **{k: _reduce for k in REDUCE}, "ArgMax": _arg, "ArgMin": _arg, "Expand": _expand,
         "Identity": _alias, "Dropout": _alias}
