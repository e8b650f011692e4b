"""Elementwise expressions: the trees that ``gpucg.ops.fused`` renders as one kernel.

An expression is built with the elementwise operators on placeholders (``x * y + z``,
``gpucg.ops.relu(x)``) or written as text (``"relu(add(multiply(x0, x1), x2))"``); its canonical
text is the attribute of the ``fused`` operator. Typing a tree applies NumPy's rules node by
node; the NumPy evaluation and the C of a tree follow from each operator's (gpucg/ops/_ewspec.py).
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, describe
from ..half import ML_DTYPES
from . import _ewspec as spec
from . import _unary

#: inputs a fused expression may have
MAX_INPUTS = 8


class Expr:
    """A lazy elementwise expression: an input placeholder, a constant, or an operator node.

    Arithmetic and comparison operators (+ - * / ** unary -, abs(), < <= > >=) and the
    elementwise functions of gpucg.ops build bigger expressions; ``gpucg.ops.fused`` compiles
    one into a single kernel. ``str(expr)`` is its canonical text.
    """

    __slots__ = ("op", "args", "attrs")

    def __init__(self, op: str, args: tuple = (), attrs: tuple = ()):
        self.op, self.args, self.attrs = op, tuple(args), tuple(attrs)

    def __str__(self) -> str:
        if self.op == "input":
            return f"x{self.args[0]}"
        if self.op == "const":
            return repr(self.args[0])
        defaults = spec.ATTRS.get(self.op, {})
        kw = [f"{k}={v!r}" for k, v in self.attrs if defaults.get(k, object()) != v]
        return f"{self.op}({', '.join([str(a) for a in self.args] + kw)})"

    def __repr__(self) -> str:
        return f"<gpucg elementwise expression {self}>"

    def __bool__(self):
        raise AttrError("an elementwise expression has no truth value; use gpucg.ops.where")

    def _bin(self, op, other, swap=False):
        a, b = (lift(other), self) if swap else (self, lift(other))
        return Expr(op, (a, b))

    __add__ = lambda s, o: s._bin("add", o)  # noqa: E731
    __radd__ = lambda s, o: s._bin("add", o, True)  # noqa: E731
    __sub__ = lambda s, o: s._bin("subtract", o)  # noqa: E731
    __rsub__ = lambda s, o: s._bin("subtract", o, True)  # noqa: E731
    __mul__ = lambda s, o: s._bin("multiply", o)  # noqa: E731
    __rmul__ = lambda s, o: s._bin("multiply", o, True)  # noqa: E731
    __truediv__ = lambda s, o: s._bin("divide", o)  # noqa: E731
    __rtruediv__ = lambda s, o: s._bin("divide", o, True)  # noqa: E731
    __pow__ = lambda s, o: s._bin("power", o)  # noqa: E731
    __rpow__ = lambda s, o: s._bin("power", o, True)  # noqa: E731
    __lt__ = lambda s, o: s._bin("less", o)  # noqa: E731
    __le__ = lambda s, o: s._bin("less_equal", o)  # noqa: E731
    __gt__ = lambda s, o: s._bin("greater", o)  # noqa: E731
    __ge__ = lambda s, o: s._bin("greater_equal", o)  # noqa: E731
    __neg__ = lambda s: Expr("negative", (s,))  # noqa: E731
    __abs__ = lambda s: Expr("abs", (s,))  # noqa: E731
    __hash__ = object.__hash__


def placeholders(n: int) -> tuple:
    """``n`` input placeholders x0 .. x{n-1} to build a fused expression from."""
    if not isinstance(n, int) or not 1 <= n <= MAX_INPUTS:
        raise AttrError(f"placeholders: n={describe(n)} must be an int from 1 to {MAX_INPUTS}")
    return tuple(Expr("input", (i,)) for i in range(n))


def lift(value) -> Expr:
    """An Expr, or a Python/NumPy number as a constant (weak, as NumPy 2 treats scalars)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = value.item()
    if isinstance(value, (bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise AttrError(f"constant {value!r} in an elementwise expression must be finite")
        return Expr("const", (value,))
    raise AttrError(f"{describe(value)} cannot be part of an elementwise expression; use "
                    "placeholders (gpucg.ops.placeholders) for arrays")


def node(op: str, args, attrs: dict) -> Expr:
    """An operator node over expressions or constants, its attributes checked."""
    attrs = spec.check_attrs(op, attrs)
    return Expr(op, tuple(lift(a) for a in args), tuple(sorted(attrs.items())))


# -- text -------------------------------------------------------------------------------------

def _from_ast(n) -> Expr:
    if isinstance(n, ast.Name) and n.id.startswith("x") and n.id[1:].isdigit():
        index = int(n.id[1:])
        if index >= MAX_INPUTS:
            raise AttrError(f"input {n.id} is out of range; at most {MAX_INPUTS} inputs")
        return Expr("input", (index,))
    if isinstance(n, ast.Constant) and isinstance(n.value, (bool, int, float)):
        return lift(n.value)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) \
            and isinstance(n.operand, ast.Constant):
        return lift(-n.operand.value)
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in spec.ARITY \
            and n.func.id != "identity":
        op = n.func.id
        if len(n.args) != spec.ARITY[op]:
            raise AttrError(f"{op} takes {spec.ARITY[op]} operand(s), got {len(n.args)}")
        kw = {}
        for k in n.keywords:
            try:
                kw[k.arg] = ast.literal_eval(k.value)
            except ValueError:
                raise AttrError(f"{op}: attribute {k.arg} must be a literal") from None
        return node(op, [_from_ast(a) for a in n.args], kw)
    raise AttrError(f"{ast.unparse(n)!r} is not an elementwise expression: use x0..x"
                    f"{MAX_INPUTS - 1}, numbers and the operators "
                    f"{', '.join(op for op in spec.ARITY if op != 'identity')}")


@functools.lru_cache(maxsize=512)
def parse(text: str) -> Expr:
    """The expression of a text such as ``"relu(add(multiply(x0, x1), x2))"``."""
    if not isinstance(text, str):
        raise AttrError(f"expr={describe(text)} must be an expression's text")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise AttrError(f"expr={text!r} is not an expression: {exc.msg}") from None
    return _from_ast(tree)


def inputs_of(e: Expr) -> int:
    """How many inputs the expression reads (its largest index + 1)."""
    if e.op == "input":
        return e.args[0] + 1
    return max((inputs_of(a) for a in e.args if isinstance(a, Expr)), default=0)


# -- types, NumPy and C -------------------------------------------------------------------------

@dataclass(frozen=True)
class Typed:
    """A node with its types: ``out`` (dtype name, or int/float for a constant), ``loop``."""

    expr: Expr
    out: object
    loop: tuple = ()
    args: tuple = ()


def typecheck(e: Expr, dtypes: tuple) -> Typed:
    """The tree typed by NumPy's rules for input dtypes ``dtypes``."""
    if e.op == "input":
        return Typed(e, dtypes[e.args[0]])
    if e.op == "const":
        v = e.args[0]
        return Typed(e, "bool" if isinstance(v, bool) else type(v))
    args = tuple(typecheck(a, dtypes) for a in e.args)
    loop, out = spec.resolve(e.op, tuple(a.out for a in args), dict(e.attrs))
    return Typed(e, out, loop, args)


def evaluate(t: Typed, arrays):
    """The tree on NumPy arrays, each node as NumPy computes it; a bfloat16 or FP8 value between
    two nodes stays float32, as in the kernel (ml_dtypes' arrays would round it)."""
    return numpy_function(t)(arrays)


def numpy_function(t: Typed):
    """:func:`evaluate` of the tree as a function of its input arrays, each node's operation
    and dtypes chosen once: block-by-block evaluation calls it many times."""
    def build(n: Typed, root: bool):
        if n.expr.op == "input":
            k = n.expr.args[0]
            return lambda arrays: arrays[k]
        if n.expr.op == "const":
            v = n.expr.args[0]
            return lambda arrays: v
        parts = [build(a, False) for a in n.args]
        out = "float32" if n.out in ML_DTYPES and not root else n.out
        f = spec.step(n.expr.op, n.loop, out, dict(n.expr.attrs))
        return lambda arrays: f([p(arrays) for p in parts])

    fn = build(t, True)

    def run(arrays):
        with np.errstate(all="ignore"):
            return fn(arrays)
    return run


def to_c(t: Typed, d, inputs: tuple = (), temp: str = "t") -> tuple[list, str, dict]:
    """(statements, result variable, helper functions) computing the tree from variables
    x0, x1, ... (the inputs in their compute types; ``inputs`` renames them); one temporary
    per node, named ``temp`` and a number."""
    lines: list = []
    helpers: dict = {}

    def walk(n: Typed) -> str:
        if n.expr.op == "input":
            k = n.expr.args[0]
            return inputs[k] if k < len(inputs) else f"x{k}"
        operands = []
        for a, lt in zip(n.args, n.loop):
            if a.expr.op == "const":
                operands.append(spec.literal(a.expr.args[0], lt, d))
            else:
                operands.append(spec.cast(walk(a), a.out, lt, d))
        value = spec.code(n.expr.op, operands, n.loop, n.out, dict(n.expr.attrs), d, helpers)
        # the type the value is computed in: 0/1 for comparisons, the operands' for where
        src = "bool" if n.expr.op in spec.COMPARISONS else n.loop[-1]
        name = f"{temp}{len(lines)}"
        lines.append(f"const {spec.ctype(n.out, d)} {name} = {spec.cast(value, src, n.out, d)};")
        return name

    return lines, walk(t), helpers


def activation_tree(activation, dtype: str):
    """The activation of a fused epilogue (gpucg/ops/_epilogue.py) as a typed elementwise
    expression of one input (x0) of ``dtype`` (gpucg/ops/_unary.py holds its math), or None."""
    if activation is None:
        return None
    if activation not in _unary.ACTIVATIONS:
        raise AttrError(f"activation={activation!r} is unknown")
    op, attrs = _unary.ACTIVATIONS[activation]
    return typecheck(node(op, placeholders(1), attrs), (dtype,))
