"""The elementwise family: unary and binary math with NumPy's broadcasting and NumPy's type
promotion on every gpucg dtype, ``where``, ``fused`` (a chain of them as one kernel), and the
data movement gradients need (reshape, transpose, flip, pad, broadcast_to, sum_to).

Every elementwise operator is an expression tree of one node (gpucg/ops/_expr.py): the same
kernel template runs a single operator and a fused chain. Called on placeholders
(``gpucg.ops.placeholders``) the functions build expressions instead of computing; called with
a Python number among the operands they compute a one-node expression with that constant.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import AttrError, DTypeError, InputError
from ..op import Case, KernelInfo, OpPattern, register_gradient, register_op
from ..shape import DTYPES, TensorType, broadcast_shapes
from . import _ewspec as spec, _layout as layout, _unary
from ._expr import MAX_INPUTS, Expr, inputs_of, node, parse, placeholders, typecheck
from ._expr import evaluate as _evaluate

_HALF = KernelInfo(storage_dtypes=("float16", "bfloat16"))  # only loaded and stored


def _attrs_of(op: str):
    """A frozen attrs class with exactly the fields of ``op``, validated."""
    fields = spec.ATTRS.get(op, {})

    def post_init(self):
        checked = spec.check_attrs(op, {k: getattr(self, k) for k in fields})
        for k, v in checked.items():
            object.__setattr__(self, k, v)

    ns = {"__annotations__": {k: object for k in fields}, **fields, "__post_init__": post_init,
          "__doc__": f"Attributes of {op}: {', '.join(fields) or 'none'}."}
    return dataclass(frozen=True)(type(f"{op.title().replace('_', '')}Attrs", (), ns))


@dataclass(frozen=True)
class FusedAttrs:
    """The expression, as text ("relu(add(multiply(x0, x1), x2))"); kept canonical."""

    expr: str = "identity(x0)"

    def __post_init__(self):
        object.__setattr__(self, "expr", str(parse(self.expr)))


def expression(op: str, attrs) -> Expr:
    """The expression tree an elementwise operator call computes."""
    if op == "fused":
        return parse(attrs.expr)
    fields = {k: getattr(attrs, k) for k in spec.ATTRS.get(op, {})}
    return node(op, placeholders(spec.ARITY[op]), fields)


def _type_rel(op: str):
    def rel(inputs, attrs):
        tree = expression(op, attrs)
        if op == "fused" and inputs_of(tree) != len(inputs):
            raise InputError(f"fused: the expression {attrs.expr} reads {inputs_of(tree)} "
                             f"input(s), got {len(inputs)}")
        for i, t in enumerate(inputs):
            if t.dtype not in DTYPES:
                raise DTypeError(f"{op}: input {i} dtype {t.dtype!r} is not supported")
        out = typecheck(tree, tuple(t.dtype for t in inputs)).out
        return TensorType(broadcast_shapes(op, *inputs), out)
    return rel


def _reference(op: str):
    def ref(*arrays):
        *arrays, attrs = arrays
        tree = expression(op, attrs)
        return _evaluate(typecheck(tree, tuple(a.dtype.name for a in arrays)), arrays)
    return ref


def _cases(arity: int, dtype: str = "float32"):
    t = TensorType
    return lambda: [Case(tuple(t((4096, 4096), dtype) for _ in range(arity)), {}, "bench"),
                    Case((t((3, 1, 1001), dtype),) + tuple(t((5, 1), dtype)
                                                            for _ in range(arity - 1)), {},
                         "small", "broadcast, odd sizes")]


for _op, _arity in spec.ARITY.items():
    if _op == "identity":
        continue
    register_op(_op, attrs=_attrs_of(_op), num_inputs=_arity, type_rel=_type_rel(_op),
                pattern=OpPattern.INJECTIVE if _arity == 1 else OpPattern.BROADCAST,
                reference=_reference(_op), kernel_info=_HALF,
                input_names=(("x",) if _arity == 1 else ("a", "b") if _arity == 2
                             else ("condition", "a", "b")),
                cases=_cases(_arity), doc=f"{spec.DOCS[_op]}, elementwise (NumPy's broadcasting "
                                          "and types).")

register_op("fused", attrs=FusedAttrs, num_inputs=MAX_INPUTS, optional_inputs=MAX_INPUTS - 1,
            type_rel=_type_rel("fused"), pattern=OpPattern.BROADCAST,
            reference=_reference("fused"), kernel_info=_HALF,
            input_names=tuple(f"x{i}" for i in range(MAX_INPUTS)),
            cases=lambda: [Case(tuple(TensorType((4096, 4096), "float32") for _ in range(3)),
                                {"expr": "relu(add(multiply(x0, x1), x2))"}, "bench"),
                           Case((TensorType((7, 1), "int8"), TensorType((1, 9), "float32")),
                                {"expr": "where(greater(x0, 0), sigmoid(x1), multiply(x0, 2))"},
                                "small")],
            example=lambda: ((TensorType((4096, 4096), "float32"),) * 3,
                             {"expr": "relu(add(multiply(x0, x1), x2))"}),
            doc="A chain of elementwise operators as one kernel (one pass over memory).")


# -- data movement --------------------------------------------------------------------------

def _layout_rel(op: str):
    def rel(inputs, attrs, rules=None):
        (x,) = inputs
        rules = [] if rules is None else rules
        if op == "reshape":
            shape = layout.reshape_rel(x, attrs, rules)
        elif op == "transpose":
            shape = tuple(x.shape[a] for a in layout.permutation(x.ndim, attrs.axes))
        elif op == "flip":
            layout.flip_axes(x.ndim, attrs.axes)
            shape = x.shape
        elif op == "pad":
            shape = layout.pad_rel(x, attrs, rules)
        else:
            if op == "sum_to" and x.dtype == "bool":
                raise DTypeError("sum_to: x dtype bool is not supported (sum a numeric dtype)")
            shape = layout.broadcast_rel(op, x, attrs, rules)
        return TensorType(shape, x.dtype)
    return rel


def _layout_rules(op):
    def rules(inputs, attrs):
        out: list = []
        _layout_rel(op)(inputs, attrs, out)
        return out
    return rules


_LAYOUT = {
    "reshape": (layout.ShapeAttrs, lambda x, a: x.reshape(
        _layout_rel("reshape")((TensorType(x.shape, x.dtype.name),), a).shape).copy()),
    "transpose": (layout.AxesAttrs, lambda x, a: x.transpose(
        layout.permutation(x.ndim, a.axes)).copy()),
    "flip": (layout.AxesAttrs, lambda x, a: x[tuple(
        slice(None, None, -1) if i in layout.flip_axes(x.ndim, a.axes) else slice(None)
        for i in range(x.ndim))].copy()),
    "pad": (layout.PadAttrs, layout.pad_reference),
    "broadcast_to": (layout.ShapeAttrs, lambda x, a: np.broadcast_to(x, a.shape).copy()),
    "sum_to": (layout.ShapeAttrs, lambda x, a: layout.sum_to_reference(x, a.shape)),
}
for _op, (_cls, _ref) in _LAYOUT.items():
    _shaped = _op in ("reshape", "broadcast_to", "sum_to", "pad")
    register_op(_op, attrs=_cls, num_inputs=1, type_rel=_layout_rel(_op),
                constraints=_layout_rules(_op), pattern=OpPattern.INJECTIVE, reference=_ref,
                input_names=("x",), kernel_info=_HALF,
                static_axes=(lambda attrs: (set(range(64)),)) if _shaped else None,
                cases=(lambda op: lambda: _layout_cases(op))(_op), doc=f"{_op}, as NumPy's.",
                example=(lambda op: lambda: (_layout_cases(op)[1].inputs,
                                             _layout_cases(op)[1].attrs))(_op))


def _layout_cases(op: str):
    t = TensorType
    big = {"reshape": {"shape": (-1,)}, "transpose": {}, "flip": {"axes": (0,)},
           "pad": {"pad_width": ((1, 1), (1, 1))}, "broadcast_to": {"shape": (4096, 4096)},
           "sum_to": {"shape": (4096,)}}[op]
    small = {"reshape": {"shape": (7, -1)}, "transpose": {"axes": (2, 0, 1)},
             "flip": {"axes": (-1, 0)}, "pad": {"pad_width": ((1, -1, 2), (0, 2), (-1, 0))},
             "broadcast_to": {"shape": (2, 7, 3, 5)}, "sum_to": {"shape": (3, 1)}}[op]
    big_in = (1, 4096) if op == "broadcast_to" else (4096, 4096)
    small_in = {"broadcast_to": (3, 1), "sum_to": (2, 7, 3, 5)}.get(op, (7, 3, 5))
    return [Case((t(big_in, "float32"),), big, "bench"), Case((t(small_in, "int16"),), small,
                                                                "small")]


# -- eager functions ------------------------------------------------------------------------

def _eager(op: str):
    arity, names = spec.ARITY[op], tuple(spec.ATTRS.get(op, {}))

    def fn(*args, target=None, **attrs):
        if len(args) != arity:
            raise AttrError(f"{op} takes {arity} operand(s), got {len(args)}")
        args = tuple(np.asarray(a) if isinstance(a, np.generic) else a for a in args)
        if any(isinstance(a, Expr) for a in args):
            return node(op, args, attrs)
        if any(isinstance(a, (bool, int, float)) for a in args):
            arrays = [a for a in args if not isinstance(a, (bool, int, float))]
            ph = iter(placeholders(max(len(arrays), 1)))
            tree = node(op, [a if isinstance(a, (bool, int, float)) else next(ph) for a in args],
                        attrs)
            return call("fused", tuple(arrays), target=target, expr=str(tree))
        return call(op, args, target=target, **attrs)

    fn.__name__ = fn.__qualname__ = op
    operands = ", ".join(("x",) if arity == 1 else ("a", "b") if arity == 2
                         else ("condition", "a", "b"))
    extra = "".join(f", {k}={v!r}" for k, v in spec.ATTRS.get(op, {}).items())
    fn.__doc__ = (f"{op}({operands}{extra}, *, target=None): {spec.DOCS[op]}, elementwise, "
                  f"with NumPy's broadcasting and type promotion.\n\n"
                  f"Operands are arrays, Python numbers, or expressions (then the result is an "
                  f"expression for gpucg.ops.fused). Attributes: {', '.join(names) or 'none'}.")
    return fn


for _op in spec.ARITY:
    if _op != "identity":
        globals()[_op] = _eager(_op)
neg = negative = globals()["negative"]  # noqa: F821


class Fused:
    """An elementwise expression compiled as one kernel: call it on the arrays x0, x1, ..."""

    def __init__(self, expr: Expr):
        self.expr = str(expr)
        self.inputs = inputs_of(expr)

    def __call__(self, *arrays, target=None):
        return call("fused", arrays, target=target, expr=self.expr)

    def __repr__(self) -> str:
        return f"gpucg.ops.fused({self.expr!r})"


def fused(expr) -> Fused:
    """One kernel for a chain of elementwise operators: ``relu(a * b + c)`` is one pass.

    Args:
        expr: an expression built from placeholders (``x, y, z = gpucg.ops.placeholders(3)``;
            ``gpucg.ops.relu(x * y + z)``), a function of placeholders
            (``lambda a, b, c: gpucg.ops.relu(a * b + c)``) or its text
            (``"relu(add(multiply(x0, x1), x2))"``).

    Types are NumPy's, operator by operator; a float16 value between two operators stays in
    float32 (the kernel computes float16 in float32 and rounds only what it stores).

    Example:
        >>> f = gpucg.ops.fused(lambda a, b, c: gpucg.ops.relu(a * b + c))
        >>> y = f(a, b, c)          # one kernel launch
    """
    if callable(expr) and not isinstance(expr, Expr):
        expr = expr(*placeholders(len(inspect.signature(expr).parameters)))
    if isinstance(expr, str):
        expr = parse(expr)
    if not isinstance(expr, Expr):
        raise AttrError(f"fused: {expr!r} is not an elementwise expression")
    return Fused(expr)


def reshape(x, shape, *, target=None):
    """x with a new shape (one entry may be -1): a view of x (no kernel, no copy: a NumPy view,
    a pyopencl array over the same buffer) where its strides allow, else a copy made on x's
    device. impl="ew_contiguous" forces the copy kernel."""
    return call("reshape", (x,), target=target, shape=tuple(shape))


def transpose(x, axes=None, *, target=None):
    """x with its axes permuted (None reverses them), as a strided view of x (no kernel, no
    copy). Operators that read strides take it in place; the others get it made contiguous on
    its device. impl="ew_strided" forces the contiguous copy kernel."""
    return call("transpose", (x,), target=target, axes=axes)


def flip(x, axes=None, *, target=None):
    """x reversed along ``axes`` (an int, a tuple, or None for every axis)."""
    return call("flip", (x,), target=target, axes=axes)


def pad(x, pad_width, value=0.0, *, target=None):
    """x padded per axis by (low, high) or (low, high, interior) elements of ``value``;
    negative low or high crop (XLA's pad)."""
    return call("pad", (x,), target=target, pad_width=tuple(map(tuple, pad_width)), value=value)


def broadcast_to(x, shape, *, target=None):
    """x broadcast to ``shape`` (NumPy's rules), as a contiguous array."""
    return call("broadcast_to", (x,), target=target, shape=tuple(shape))


def sum_to(x, shape, *, target=None):
    """x summed to ``shape`` (the inverse of broadcasting): over its extra leading axes and
    the axes where ``shape`` has 1."""
    return call("sum_to", (x,), target=target, shape=tuple(shape))


# -- gradients ------------------------------------------------------------------------------

def _to_shape(ctx, g, x):
    """The output gradient ``g`` summed to the shape of input ``x`` (undoing broadcasting)."""
    return g if tuple(g.shape) == tuple(x.shape) else ctx.call("sum_to", g, shape=tuple(x.shape))


@register_gradient("add")
def _add_grad(ctx):
    return tuple(_to_shape(ctx, ctx.out_grad, x) for x in ctx.inputs)


@register_gradient("multiply")
def _multiply_grad(ctx):
    a, b = ctx.inputs
    g = ctx.out_grad
    return (_to_shape(ctx, ctx.call("multiply", g, b), a),
            _to_shape(ctx, ctx.call("multiply", g, a), b))


def _unary_gradient(op: str):
    def gradient(ctx):  # the table's derivative (gpucg/ops/_unary.py) at the input
        attrs = {k: getattr(ctx.attrs, k) for k in spec.ATTRS.get(op, {})}
        text = _unary.derivative(op, attrs)
        operands = (ctx.out_grad, ctx.inputs[0])[:inputs_of(parse(text))]
        return (ctx.call("fused", *operands, expr=text),)
    return gradient


for _op in _unary.TABLE:
    register_gradient(_op)(_unary_gradient(_op))
