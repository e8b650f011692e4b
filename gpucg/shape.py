"""Symbolic dimensions, tensor types and the dtype whitelist."""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from functools import reduce
from typing import Iterable

import numpy as np
import sympy

from .errors import DTypeError, InputError, describe
from .half import ML_DTYPES, ml_dtypes

#: Every dtype gpucg knows. Operators may accept a subset.
DTYPES: tuple[str, ...] = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                           "uint64", "float16", "float32", "float64", "bfloat16",
                           "float8_e4m3fn", "float8_e5m2")

INT_MAX = 2**31 - 1


def dtype_name(value, arg: str = "dtype", allowed: Iterable[str] = DTYPES) -> str:
    """Normalize a dtype (name, numpy dtype or type) to its whitelisted name."""
    allowed = tuple(allowed)
    if isinstance(value, str) and value in ML_DTYPES:
        if value not in allowed:
            raise DTypeError(f"{arg}={value!r} is not supported; allowed: {', '.join(allowed)}")
        ml_dtypes(value)  # registers the name with NumPy, or says what to install
    try:
        name = np.dtype(value).name
    except TypeError:
        raise DTypeError(
            f"{arg}={describe(value)} is not a dtype; allowed: {', '.join(allowed)}"
        ) from None
    if name not in allowed:
        raise DTypeError(f"{arg}={name!r} is not supported; allowed: {', '.join(allowed)}")
    return name


def var(name: str) -> sympy.Symbol:
    """A symbolic dimension: a positive-integer SymPy symbol."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
            or name.startswith("_"):
        raise InputError(
            f"var name={describe(name)} must be a Python identifier not starting with '_'"
        )
    return sympy.Symbol(name, integer=True, positive=True)


def is_shape_symbol(sym) -> bool:
    """True for symbols made by :func:`var` (positive integers)."""
    return isinstance(sym, sympy.Symbol) and bool(sym.is_integer) and bool(sym.is_positive)


#: the alignment (bytes) an argument's address reports at most, and what a fresh buffer has
MAX_ALIGN = 256


def alignment(index: int) -> sympy.Symbol:
    """The byte alignment of input ``index``'s address, as a symbol conditions may use (the
    largest power of two dividing the address, at most MAX_ALIGN: ``alignment(0) >= 16``).
    The generated dispatcher reads it from the backend at run time (Backend.alignment)."""
    return sympy.Symbol(f"_align{int(index)}", integer=True, positive=True)


def alignment_index(sym) -> int | None:
    """The input index of an :func:`alignment` symbol, else None."""
    name = getattr(sym, "name", "")
    return int(name[6:]) if name.startswith("_align") and name[6:].isdigit() else None


def _dim(value, index: int):
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"shape[{index}]={describe(value)} must be an int >= 0 or a gpucg.var")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise InputError(f"shape[{index}]={value} must be >= 0")
        return int(value)
    if isinstance(value, sympy.Integer):
        return _dim(int(value), index)
    if isinstance(value, sympy.Expr):
        bad = [s for s in value.free_symbols if not is_shape_symbol(s)]
        if bad or not value.free_symbols or not value.is_integer:
            raise InputError(
                f"shape[{index}]={value} must be an integer expression of gpucg.var symbols"
            )
        return value
    raise InputError(f"shape[{index}]={describe(value)} must be an int >= 0 or a gpucg.var")


@dataclass(frozen=True)
class TensorType:
    """A tensor's shape (ints and SymPy expressions) and dtype name."""

    shape: tuple
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def symbols(self) -> set:
        out = set()
        for d in self.shape:
            if not isinstance(d, int):
                out |= d.free_symbols
        return out

    @property
    def numel(self):
        return reduce(lambda a, b: a * b, self.shape, sympy.Integer(1))

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


def tensor(shape, dtype: str = "float32") -> TensorType:
    """A tensor type whose shape mixes ints and symbols from :func:`var`."""
    if isinstance(shape, (int, sympy.Expr, np.integer)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise InputError(f"shape={describe(shape)} must be a tuple of ints and gpucg.var symbols")
    return TensorType(tuple(_dim(d, i) for i, d in enumerate(shape)), dtype_name(dtype))


def simplify_dim(value):
    """An int when the expression is constant, else the SymPy expression."""
    if type(value) is int:
        return value
    value = sympy.sympify(value)
    if value.is_Integer:
        return int(value)
    return value


def normalize_axis(axis: int, ndim: int, arg: str = "axis") -> int:
    """``axis`` in 0..ndim-1, or InputError naming the allowed range."""
    if not -ndim <= axis < ndim:
        allowed = f"{-ndim}..{ndim - 1}" if ndim else "none (the input is 0-d, as in NumPy)"
        raise InputError(f"{arg}={axis} is out of range for an input of rank {ndim}; allowed: {allowed}")
    return axis % ndim


def product(dims):
    """The product of sizes (ints or SymPy expressions), simplified; 1 for none."""
    out = 1
    for d in dims:
        out = out * d
    return out if type(out) is int else simplify_dim(out)


def c_strides(shape, itemsize: int = 1) -> tuple:
    """The strides of a C-ordered array of ``shape`` in units of ``itemsize`` (1: elements),
    an empty dimension counted as 1, as NumPy and pyopencl do."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def split_axis(shape, axis: int | None):
    """(outer, n, inner) of ``shape`` around ``axis``: the sizes before it, its own, after it.

    ``axis`` None views the flattened shape as one axis. Ints stay ints; symbolic sizes give
    SymPy expressions. Every operator that works along one axis uses this view.
    """
    shape = tuple(shape)
    if axis is None:
        return 1, product(shape), 1
    axis = normalize_axis(axis, len(shape))
    return product(shape[:axis]), simplify_dim(shape[axis]), product(shape[axis + 1:])


def broadcast_shapes(op: str, *types) -> tuple:
    """NumPy broadcasting over ints and symbols; a symbol must equal the other size or meet a 1."""
    rank = max((len(t.shape) for t in types), default=0)
    out = []
    for i in range(1, rank + 1):
        size = 1
        for t in types:
            d = t.shape[-i] if i <= len(t.shape) else 1
            if d == 1 or d == size:
                continue
            if size == 1:
                size = d
                continue
            shapes = " and ".join(str(t.shape) for t in types)
            raise InputError(f"{op}: shapes {shapes} do not broadcast "
                             f"(dimension -{i}: {size} vs {d})")
        out.append(size)
    return tuple(out[::-1])


class _PyPrinter:
    """Prints integer SymPy expressions and conditions as exact Python source."""

    def __init__(self, names: dict):
        self.names = names

    def __call__(self, e) -> str:
        e = sympy.sympify(e)
        if e is sympy.true:
            return "True"
        if e is sympy.false:
            return "False"
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            return self.names.get(e, e.name)
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            num, den = e.as_numer_denom()
            if den != 1:
                raise InputError(f"expression {e} is not an integer; use floor() or ceiling()")
            return "(" + " * ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0:
            return f"({self(e.base)} ** {int(e.exp)})"
        if isinstance(e, sympy.floor):
            num, den = e.args[0].as_numer_denom()
            return f"({self(num)} // {self(den)})"
        if isinstance(e, sympy.ceiling):
            num, den = e.args[0].as_numer_denom()
            return f"(-((-{self(num)}) // {self(den)}))"
        if isinstance(e, sympy.Mod):  # a size may be 0 at run time: x mod 0 is x (no error)
            a, b = self(e.args[0]), self(e.args[1])
            return f"({a} % {b} if {b} else {a})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            fn = "max" if isinstance(e, sympy.Max) else "min"
            return f"{fn}(" + ", ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.core.relational.Relational):
            lhs, rhs = e.lhs, e.rhs
            if not (lhs.is_integer and rhs.is_integer):  # SymPy's floor(h/2) <= 16 is h/2 < 17
                num, den = sympy.fraction(sympy.together(lhs - rhs))
                if not den.is_positive:
                    raise InputError(f"condition {e} compares fractions over {den}, whose sign "
                                     "is not known")
                const, lhs = sympy.expand(num).as_coeff_Add()
                rhs = -const  # times the positive denominator: h < 34
            return f"({self(lhs)} {e.rel_op} {self(rhs)})"
        if isinstance(e, sympy.And):
            return "(" + " and ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " or ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(not {self(e.args[0])})"
        raise InputError(f"cannot print {e} ({type(e).__name__}) as Python")


def pyexpr(expr, names: dict | None = None) -> str:
    """Exact Python source for an integer expression or condition over shape symbols: floor
    and ceiling of a quotient by floor division (``//``, exact for negative numerators and
    divisors and for sizes of any magnitude, where a float division would round)."""
    return _PyPrinter(names or {})(expr)


def evaluate(expr, bindings: dict) -> int:
    """The integer value of a shape expression for concrete sizes."""
    if isinstance(expr, int):
        return expr
    src = pyexpr(expr)
    env = {s.name: int(v) for s, v in bindings.items()}
    return eval(src, {"__builtins__": {"max": max, "min": min}}, env)  # noqa: S307 - our printer
