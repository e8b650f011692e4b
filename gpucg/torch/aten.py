"""The aten operators on data that map onto gpucg's elementwise, view and shape operators:
:data:`TABLE` maps an overload's name ("aten.add.Tensor") to its handler ``(reader, node,
args)``, ``args`` by the schema's names (value names as :class:`~gpucg.torch.reader.Ref`,
SymInt sizes as expressions). A handler raising a GpucgError leaves its node to torch (the
reader runs it on the host and explain says why); gpucg/torch/aten_nn.py adds the linear
algebra, normalizations, convolutions, pools, attention and the backward operators.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import OpError
from ..graph.host import host_value, size_vector
from ..ops._expr import Expr, lift, node as ew_node
from ..shape import TensorType
from .reader import Ref, TorchGraphError

INT64_MAX = 2 ** 63 - 1


def expr(r, n, fn, args, output=None) -> str:
    """A fused expression ``fn(*operands)`` over ``args`` (value names become x0, x1, ...,
    numbers literals) as node ``n``'s output (or ``output``)."""
    refs, operands = [], []
    for v in args:
        if isinstance(v, str):  # a value: a Ref, or a name a handler's call made
            if v not in refs:
                refs.append(v)
            operands.append(Expr("input", (refs.index(v),)))
        elif isinstance(v, (bool, int, float)):
            operands.append(lift(v))
        else:
            raise TorchGraphError(f"{n.label}: operand {v!r} is neither a tensor nor a number")
    if not refs:
        raise TorchGraphError(f"{n.label}: no tensor operand")
    (out,) = r.expression(n, fn(*operands), refs, output or n.outputs[0])
    return out


def ew(op, **fixed):
    """A handler applying elementwise operator ``op`` to the schema's tensor arguments."""
    def handler(r, n, a):
        operands = [v for k, v in a.items() if k in ("self", "other", "input", "condition")]
        expr(r, n, lambda *x: ew_node(op, x, fixed), operands)
    return handler


def _add(sign):
    def handler(r, n, a):
        alpha = a.get("alpha", 1)
        expr(r, n, lambda x, y: x + y * alpha * sign if alpha * sign != 1 else x + y,
             [a["self"], a["other"]])
    return handler


def _rsub(r, n, a):
    expr(r, n, lambda x, y: y - x * a.get("alpha", 1), [a["self"], a["other"]])


def _div(r, n, a):
    if a.get("rounding_mode") is not None:
        raise OpError(f"{n.label}: division with rounding_mode={a['rounding_mode']!r} (gpucg's "
                      "divide is true division)")
    expr(r, n, lambda x, y: x / y, [a["self"], a["other"]])


def _pow(r, n, a):
    e = a["exponent"]
    if e == 2:
        expr(r, n, lambda x: x * x, [a["self"]])
    elif e == 0.5:
        expr(r, n, lambda x: ew_node("sqrt", (x,), {}), [a["self"]])
    else:
        expr(r, n, lambda x, y: x ** y, [a["self"], e])


def _bool(op):
    """bitwise and logical operators on booleans, as the comparison operators they are on
    0 and 1 (so they fuse with the comparisons that make them)."""
    def handler(r, n, a):
        xs = [a["self"]] + ([a["other"]] if "other" in a else [])
        for x in xs:
            if isinstance(x, Ref) and r.g.type_of(x).dtype != "bool":
                raise OpError(f"{n.label}: bitwise operators on {r.g.type_of(x).dtype}; gpucg "
                              "takes them on booleans")
        fn = {"and": lambda x, y: ew_node("multiply", (x, y), {}),
              "or": lambda x, y: ew_node("maximum", (x, y), {}),
              "xor": lambda x, y: ew_node("not_equal", (x, y), {}),
              "not": lambda x: ew_node("equal", (x, 0), {})}[op]
        expr(r, n, fn, xs)
    return handler


def _where(r, n, a):
    expr(r, n, lambda c, x, y: ew_node("where", (c, x, y), {}),
         [a["condition"], a["self"], a["other"]])


def _masked_fill(r, n, a):
    expr(r, n, lambda x, m, v: ew_node("where", (m, v, x), {}),
         [a["self"], a["mask"], a["value"]])


def _gelu(r, n, a):
    expr(r, n, lambda x: ew_node("gelu", (x,), {"approximate": a["approximate"]}), [a["self"]])


def _clamp(r, n, a):
    lo = a.get("min", a.get("min_val"))
    hi = a.get("max", a.get("max_val"))
    if isinstance(lo, Ref) or isinstance(hi, Ref):
        raise OpError(f"{n.label}: clamp to tensors")
    attrs = {k: float(v) for k, v in (("a_min", lo), ("a_max", hi)) if v is not None}
    expr(r, n, lambda x: ew_node("clip", (x,), attrs), [a["self"]])


def _leaky(r, n, a):
    expr(r, n, lambda x: ew_node("leaky_relu", (x,), {"alpha": float(a["negative_slope"])}),
         [a["self"]])


def _cast(r, n, a):
    dtype = a.get("dtype")
    x = a["self"] if "self" in a else a["a"]
    if dtype is None or dtype == r.g.type_of(x).dtype:
        r.alias[n.outputs[0]] = x
        return
    r.emit(n, "cast", [x], n.outputs[:1], dtype=dtype)


def _same(r, n, a):  # clone, alias, detach, lift_fresh_copy: the value itself
    r.alias[n.outputs[0]] = a["self"]


# -- views and shapes ------------------------------------------------------------------------

def _reshape(r, n, a):
    x = a["self"]
    dims = n.types[0].shape
    if tuple(dims) == tuple(r.g.type_of(x).shape):
        r.alias[n.outputs[0]] = x
    elif all(isinstance(d, int) for d in dims):
        r.emit(n, "reshape", [x], n.outputs[:1], shape=tuple(dims))
    else:
        r.view(n, x, tuple(dims), n.outputs[0])


def _transpose(r, n, a):
    x = a["self"]
    rank = r.g.type_of(x).ndim
    if "dims" in a:
        axes = [d % rank for d in a["dims"]]
    else:
        axes = list(range(rank))
        if rank >= 2:
            d0, d1 = (a["dim0"], a["dim1"]) if "dim0" in a else (0, 1)
            axes[d0 % rank], axes[d1 % rank] = axes[d1 % rank], axes[d0 % rank]
    if axes == sorted(axes):
        r.alias[n.outputs[0]] = x
    else:
        r.emit(n, "transpose", [x], n.outputs[:1], axes=tuple(axes))


def _unsqueeze(r, n, a):
    rank = r.g.type_of(a["self"]).ndim + 1
    r.emit(n, "expand_dims", [a["self"]], n.outputs[:1], axis=a["dim"] % rank)


def _squeeze(r, n, a):
    x = a["self"]
    have = r.g.type_of(x).shape
    dims = a.get("dim", a.get("dims"))
    dims = range(len(have)) if dims is None else [dims] if isinstance(dims, int) else dims
    axes = tuple(sorted({d % len(have) for d in dims if have[d % len(have)] == 1}))
    if not axes:
        r.alias[n.outputs[0]] = x
    else:
        r.emit(n, "squeeze", [x], n.outputs[:1], axis=axes)


def _expand(r, n, a):
    r.broadcast(n, a["self"], n.types[0].shape, n.outputs[0])


def _slice(r, n, a):
    x, dim, step = a["self"], a["dim"], a["step"]
    have = r.g.type_of(x).shape
    dim %= len(have)
    start = 0 if a["start"] is None else a["start"]
    end = INT64_MAX if a["end"] is None else a["end"]
    full = isinstance(end, int) and end >= 2 ** 62 or \
        sympy.simplify(sympy.sympify(end) - sympy.sympify(have[dim])) >= 0
    if start == 0 and step == 1 and full in (True, sympy.true):
        r.alias[n.outputs[0]] = x
        return
    if not (isinstance(start, int) and isinstance(end, int)):
        raise OpError(f"{n.label}: a slice at symbolic bounds ({start}:{end})")
    clamp = lambda v: max(min(v, 2 ** 31 - 1), -2 ** 31)  # noqa: E731
    r.emit(n, "strided_slice", [x], n.outputs[:1], begin=(clamp(start),), end=(clamp(end),),
           strides=(step,), axes=(dim,))


def _select(r, n, a):
    x, dim, index = a["self"], a["dim"], a["index"]
    rank = r.g.type_of(x).ndim
    if not isinstance(index, int):
        raise OpError(f"{n.label}: select at a symbolic index")
    (part,) = r.emit(n, "strided_slice", [x], None, begin=(index,),
                     end=(index + 1 if index != -1 else 2 ** 31 - 1,), axes=(dim % rank,))
    r.emit(n, "squeeze", [part], n.outputs[:1], axis=(dim % rank,))


def _split(r, n, a):
    x = a["self"]
    axis = a["dim"] % r.g.type_of(x).ndim
    sizes = [t.shape[axis] for t in n.types]
    if not all(isinstance(s, int) for s in sizes):
        raise OpError(f"{n.label}: a split into parts of symbolic sizes")
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    r.emit(n, "split", [x], n.outputs, indices_or_sections=points, axis=axis)


def _cat(r, n, a):
    xs = [x for x in a["tensors"] if r.g.type_of(x).shape != (0,)]
    axis = a["dim"] % r.g.type_of(xs[0]).ndim
    if len(xs) == 1:
        r.alias[n.outputs[0]] = xs[0]
        return
    r.emit(n, "concatenate", xs, n.outputs[:1], axis=axis)


def _stack(r, n, a):
    rank = r.g.type_of(a["tensors"][0]).ndim + 1
    axis = a["dim"] % rank
    parts = [r.emit(n, "expand_dims", [x], None, axis=axis)[0] for x in a["tensors"]]
    r.emit(n, "concatenate", parts, n.outputs[:1], axis=axis)


def _take(r, n, a):
    if "weight" in a:  # embedding(weight, indices)
        r.emit(n, "take", [a["weight"], a["indices"]], n.outputs[:1], axis=0)
    else:  # index_select(self, dim, index)
        r.emit(n, "take", [a["self"], a["index"]], n.outputs[:1],
               axis=a["dim"] % r.g.type_of(a["self"]).ndim)


def _index(r, n, a):
    """x[i0, i1, ...] by index tensors on the leading axes: the data seen flat over them,
    read by linear positions (on the host once per size where the indices depend on sizes
    only, as the masks' aranges; else computed by a fused kernel)."""
    x, idx = a["self"], list(a["indices"])
    if any(i is None for i in idx):
        raise OpError(f"{n.label}: an index with None (a slice) between index tensors")
    g = r.g
    shape = g.type_of(x).shape
    k = len(idx)
    lead = shape[:k]
    flat = (sympy.Mul(*lead) if lead else 1,) + tuple(shape[k:])
    flat = tuple(int(d) if sympy.sympify(d).is_Integer else d for d in flat)
    if all(isinstance(d, int) for d in flat):
        (seen,) = r.emit(n, "reshape", [x], None, shape=flat)
    else:
        seen = r.fresh(f"{n.name}/flat")
        r.view(n, x, flat, seen)
    out_lead = n.types[0].shape[:len(n.types[0].shape) - len(shape[k:])]
    if all(g.kind(i) != "tensor" for i in idx):
        dims = size_vector(g, r.fresh(f"{n.name}/dims"), lead)

        def linear(sizes, *index):
            index = np.broadcast_arrays(*[np.where(i < 0, i + d, i) for i, d in
                                          zip(index, sizes)])
            return np.ravel_multi_index(tuple(index), tuple(sizes)).astype(np.int64)

        pos = host_value(g, r.fresh(f"{n.name}/linear"), "index positions", linear,
                         [dims] + idx, TensorType(tuple(out_lead), "int64"))
    else:
        strides = [sympy.Mul(*lead[j + 1:]) for j in range(k)]
        if not all(sympy.sympify(s).is_Integer for s in strides):
            raise OpError(f"{n.label}: index tensors on axes of symbolic sizes")

        def linear_expr(*xs):
            total = None
            for j, i in enumerate(xs):
                wrapped = ew_node("where", (i < 0, i + int(lead[j]), i), {})
                term = wrapped * int(strides[j]) if int(strides[j]) != 1 else wrapped
                total = term if total is None else total + term
            return total
        pos = expr(r, n, linear_expr, idx, r.fresh(f"{n.name}/linear"))
    r.emit(n, "take", [seen, pos], n.outputs[:1], axis=0)


def _shape_only(fill):
    """new_ones, zeros_like, full, ...: a value of the output's shape and dtype, whatever the
    data: made on the host once per size."""
    def handler(r, n, a):
        value = fill if fill is not None else a.get("fill_value", a.get("value"))
        t = n.types[0]
        dims = size_vector(r.g, r.fresh(f"{n.name}/shape"), t.shape)
        dtype = np.dtype(t.dtype)
        host_value(r.g, n.outputs[0], "full", lambda s: np.full(tuple(s), value, dtype),
                   [dims], t)
    handler.shape_only = True
    return handler


UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
         "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "neg": "negative", "erf": "erf",
         "silu": "silu", "hardswish": "hardswish", "mish": "mish"}
COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
           "gt": "greater", "ge": "greater_equal"}

TABLE = {
    **{f"aten.{k}.default": ew(v) for k, v in UNARY.items()},
    **{f"aten.{k}.{o}": ew(v) for k, v in COMPARE.items() for o in ("Tensor", "Scalar")},
    **{f"aten.{k}.default": ew(k) for k in ("maximum", "minimum")},
    "aten.add.Tensor": _add(1), "aten.add.Scalar": _add(1), "aten.sub.Tensor": _add(-1),
    "aten.sub.Scalar": _add(-1), "aten.rsub.Scalar": _rsub, "aten.rsub.Tensor": _rsub,
    "aten.mul.Tensor": ew("multiply"), "aten.mul.Scalar": ew("multiply"),
    "aten.div.Tensor": _div, "aten.div.Scalar": _div, "aten.div.Tensor_mode": _div,
    "aten.true_divide.Tensor": _div, "aten.pow.Tensor_Scalar": _pow,
    "aten.where.self": _where, "aten.masked_fill.Scalar": _masked_fill,
    "aten.masked_fill.Tensor": _masked_fill, "aten.gelu.default": _gelu,
    "aten.clamp.default": _clamp, "aten.clamp_min.default": _clamp,
    "aten.hardtanh.default": _clamp, "aten.leaky_relu.default": _leaky,
    **{f"aten.bitwise_{k}.Tensor": _bool(k) for k in ("and", "or", "xor")},
    **{f"aten.logical_{k}.default": _bool(k) for k in ("and", "or", "xor", "not")},
    "aten.bitwise_not.default": _bool("not"),
    "aten._to_copy.default": _cast, "prims.convert_element_type.default": _cast,
    **{f"aten.{k}.default": _same for k in ("clone", "alias", "detach", "lift_fresh_copy")},
    **{f"aten.{k}.default": _reshape for k in ("view", "_unsafe_view", "reshape")},
    "aten.t.default": _transpose, "aten.transpose.int": _transpose,
    "aten.permute.default": _transpose, "aten.unsqueeze.default": _unsqueeze,
    "aten.squeeze.dim": _squeeze, "aten.squeeze.dims": _squeeze,
    "aten.squeeze.default": _squeeze, "aten.expand.default": _expand,
    "aten.slice.Tensor": _slice, "aten.select.int": _select, "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split, "aten.cat.default": _cat,
    "aten.stack.default": _stack, "aten.embedding.default": _take,
    "aten.index_select.default": _take, "aten.index.Tensor": _index,
    **{f"aten.{k}.default": _shape_only(v) for k, v in (
        ("new_ones", 1), ("new_zeros", 0), ("new_empty", 0), ("new_full", None),
        ("ones_like", 1), ("zeros_like", 0), ("empty_like", 0), ("full_like", None))},
}
