"""The elementwise operators one by one: their NumPy types (NumPy's own loop selection), their
NumPy evaluation and their C.

Types follow NumPy exactly: an operator with a NumPy ufunc asks it (``ufunc.resolve_dtypes``)
which loop runs for the operand dtypes, Python scalars weak as in NumPy 2; the others borrow
a ufunc's rules (sigmoid and gelu compute as exp does) or keep the dtype (relu, clip). The
kernel casts each operand to its loop dtype, computes there (float16 and bfloat16 in float32:
they are only stored), and casts the result to the output dtype. bfloat16 (ml_dtypes) promotes
as float16 does in NumPy 2 (a Python float stays weak; with int8 it stays bfloat16); bfloat16
with float16 gives float32. An FP8 format promotes likewise (as ml_dtypes does where it
defines a promotion: with bool, int8, uint8 and Python scalars it stays FP8, with float32 it
gives float32); where ml_dtypes has none, gpucg takes the smallest float holding both operands
exactly: the 16-bit format beside it, float16 for the two FP8 formats together, float32 with
16-bit integers. Every operand is converted to float32 exactly (an int8 is not rounded to FP8
first) and the result is rounded once, when it is stored.
"""

from __future__ import annotations

import math

import numpy as np

from ..codegen import literals
from ..errors import AttrError, DTypeError
from ..half import FP8_DTYPES, ML_DTYPES
from ..shape import DTYPES
from ._unary import TABLE, Lit, clip_c

UNARY = ("exp", "log", "sqrt", "rsqrt", "abs", "negative", "sigmoid", "tanh", "erf", "gelu",
         "relu", "leaky_relu", "clip", "silu", "hardswish", "hardsigmoid", "softplus", "mish",
         "elu", "selu")
COMPARISONS = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=",
               "greater": ">", "greater_equal": ">="}
BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum") \
    + tuple(COMPARISONS)
ARITY = {**{op: 1 for op in UNARY}, **{op: 2 for op in BINARY}, "where": 3, "identity": 1}
#: what each operator computes, for its documentation
DOCS = {"exp": "e ** x", "log": "the natural logarithm", "sqrt": "the square root",
        "rsqrt": "1 / sqrt(x)", "abs": "|x| (wrapping at the most negative integer)",
        "negative": "-x", "sigmoid": "1 / (1 + exp(-x))", "tanh": "the hyperbolic tangent",
        "erf": "the error function", "gelu": "x * Phi(x), exact (erf) or its tanh approximation",
        "relu": "max(x, 0), NaN kept", "leaky_relu": "x if x > 0 else alpha * x",
        "clip": "x limited to [a_min, a_max] (bounds in x's dtype), NaN kept",
        "silu": "x * sigmoid(x) (swish)", "hardswish": "x * min(max(x + 3, 0), 6) / 6",
        "hardsigmoid": "max(0, min(1, alpha * x + beta)), NaN kept",
        "softplus": "log(1 + exp(x)), without overflow", "mish": "x * tanh(softplus(x))",
        "elu": "x if x > 0 else alpha * (exp(x) - 1)",
        "selu": "gamma * (x if x > 0 else alpha * (exp(x) - 1))",
        "add": "a + b", "subtract": "a - b", "multiply": "a * b", "divide": "a / b (true division)",
        "power": "a ** b (integers wrap; a negative integer exponent truncates toward zero)",
        "maximum": "the larger, NaN if either is", "minimum": "the smaller, NaN if either is",
        "equal": "a == b", "not_equal": "a != b", "less": "a < b", "less_equal": "a <= b",
        "greater": "a > b", "greater_equal": "a >= b",
        "where": "a where condition is nonzero, else b"}
#: attributes (name -> default) of the operators that have some
ATTRS = {"leaky_relu": {"alpha": 0.01}, "clip": {"a_min": None, "a_max": None},
         "gelu": {"approximate": "none"}, "hardsigmoid": {"alpha": 0.2, "beta": 0.5},
         "elu": {"alpha": 1.0},
         # ONNX's defaults (the float32 roundings of SELU's constants)
         "selu": {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}}

_UFUNC = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": np.sqrt, "abs": np.absolute,
          "negative": np.negative, "sigmoid": np.exp, "tanh": np.tanh, "gelu": np.exp,
          "erf": np.exp, **{op: np.exp for op in ("silu", "hardswish", "hardsigmoid",
                                                   "softplus", "mish", "elu", "selu")},
          "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "power": np.power, "maximum": np.maximum, "minimum": np.minimum,
          **{op: getattr(np, op) for op in COMPARISONS}}
_SIGNED = ("int8", "int16", "int32", "int64")
_UNSIGNED = ("bool", "uint8", "uint16", "uint32", "uint64")
_FLOATS = tuple(literals.FLOATS)


def check_attrs(op: str, attrs: dict) -> dict:
    """The operator's attributes with defaults filled in, validated."""
    allowed = ATTRS.get(op, {})
    unknown = [k for k in attrs if k not in allowed]
    if unknown:
        raise AttrError(f"{op}: unknown attribute {unknown[0]!r}; allowed: "
                        f"{', '.join(allowed) or 'none'}")
    out = dict(allowed, **attrs)
    for name in ("alpha", "beta", "gamma", "a_min", "a_max"):
        if name in out and out[name] is not None:
            v = out[name]
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                                     np.floating)):
                raise AttrError(f"{op}: {name}={v!r} must be a number")
            if not math.isfinite(v):
                raise AttrError(f"{op}: {name}={v!r} must be finite")
            out[name] = v.item() if isinstance(v, np.generic) else v
    if op == "gelu" and out["approximate"] not in ("none", "tanh"):
        raise AttrError(f"gelu: approximate={out['approximate']!r} is not allowed; allowed: "
                        "'none' (erf), 'tanh'")
    return out


# -- types ------------------------------------------------------------------------------------

def _np_type(t):
    """A dtype name as NumPy's dtype; Python's int and float stay (weak scalars)."""
    return t if t in (int, float) else np.dtype(t)


def _dummy(t):
    return t(0) if t in (int, float) else np.zeros(1, t)


def resolve(op: str, types: tuple, attrs: dict) -> tuple[tuple, str]:
    """(loop dtype names, output dtype name) of ``op`` on operand types (dtype names, or
    Python's int/float for weak scalars), as NumPy decides them; DTypeError where NumPy has
    no loop or gpucg no dtype."""
    fp8 = sorted({t for t in types if t in FP8_DTYPES})
    if fp8:
        halves = {t for t in types if t in ("float16", "bfloat16")}
        if len(fp8) > 1 or halves:  # no ml_dtypes promotion: the smallest float holding both
            wide = "float16" if len(fp8) > 1 or "float16" in halves else "bfloat16"
            return resolve(op, tuple(wide if t in FP8_DTYPES else t for t in types), attrs)
        loop, out = resolve(op, tuple("float16" if t == fp8[0] else t for t in types), attrs)
        back = lambda t: fp8[0] if t == "float16" else t  # noqa: E731
        return tuple(back(t) for t in loop), back(out)
    if "bfloat16" in types:
        # ml_dtypes' own loops widen bfloat16 with a Python float to float32: promote it as
        # NumPy promotes float16 instead, and name the 16-bit result bfloat16 again
        if "float16" in types:
            types = tuple("float32" if t in ("float16", "bfloat16") else t for t in types)
            return resolve(op, types, attrs)
        loop, out = resolve(op, tuple("float16" if t == "bfloat16" else t for t in types), attrs)
        bf = lambda t: "bfloat16" if t == "float16" else t  # noqa: E731
        return tuple(bf(t) for t in loop), bf(out)
    shown = ", ".join(t.__name__ if t in (int, float) else t for t in types)
    try:
        if op in _UFUNC:
            dts = _UFUNC[op].resolve_dtypes(tuple(_np_type(t) for t in types) + (None,))
            loop, out = tuple(dt.name for dt in dts[:-1]), dts[-1].name
        elif op == "leaky_relu":
            dts = np.multiply.resolve_dtypes((_np_type(types[0]), float, None))
            loop, out = (dts[0].name,), dts[-1].name
        elif op == "where":
            out = np.where(np.ones(1, bool), _dummy(types[1]), _dummy(types[2])).dtype.name
            loop = ("bool", out, out)
        else:  # relu, clip, identity keep the dtype
            t = types[0]
            out = {int: "int64", float: "float64"}.get(t, t)
            loop = (out,)
            if op == "clip" and np.dtype(out).kind in "biu":
                info = np.iinfo(out) if out != "bool" else np.iinfo(np.uint8)
                for name in ("a_min", "a_max"):
                    v = attrs[name]
                    if v is not None and not info.min <= v <= info.max:
                        raise DTypeError(f"clip: {name}={v!r} is out of the range of {out} "
                                         f"({info.min}..{info.max})")
    except TypeError as exc:
        raise DTypeError(f"{op}: no loop for operand dtypes ({shown}); NumPy says: {exc}") from None
    if out not in DTYPES or any(t not in DTYPES for t in loop):
        raise DTypeError(f"{op}: operand dtypes ({shown}) give {out}, which gpucg does not "
                         f"support; allowed: {', '.join(DTYPES)}")
    return loop, out


# -- NumPy ------------------------------------------------------------------------------------

def _int_power(a, b):
    """Integer power with wrap-around; a negative exponent gives 1 / a**|b| truncated toward
    zero (1 for a == 1, +-1 for a == -1, else 0), where NumPy raises."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b))
    if neg.any():
        one = a == 1
        minus = (a == -1) if a.dtype.kind == "i" else np.zeros_like(one)
        odd = (b % 2) != 0
        out = np.where(neg, np.where(one | (minus & ~odd), 1, np.where(minus, -1, 0)), out)
    return out.astype(a.dtype, copy=False)


def evaluate(op: str, args: list, loop: tuple, out: str, attrs: dict):
    """``op`` on NumPy arrays (or Python scalars), in the loop dtypes, as the output dtype."""
    with np.errstate(all="ignore"):
        return step(op, loop, out, attrs)(args)


def step(op: str, loop: tuple, out: str, attrs: dict):
    """:func:`evaluate` of one operator as a function of its operands, its branch and dtypes
    chosen once (a fused expression evaluated block by block calls it per block); the
    caller holds ``np.errstate(all="ignore")``."""
    if any(t in ML_DTYPES for t in loop):  # ml_dtypes rounds every step: float32 as kernels do
        loop = tuple("float32" if t in ML_DTYPES else t for t in loop)
    dt, types = np.dtype(out), tuple(np.dtype(t) for t in loop)
    if op in TABLE and loop[0] in _FLOATS:  # float16 computes in float32
        compute, fn = np.dtype(literals.compute_dtype(loop[0])), TABLE[op].numpy
        y = lambda a: fn(a[0].astype(compute, copy=False), attrs)  # noqa: E731
    elif op == "power" and types[0].kind in "iu":
        y = lambda a: _int_power(*a)  # noqa: E731
    elif op == "relu":
        zero = np.zeros((), types[0])
        y = lambda a: np.maximum(a[0], zero)  # noqa: E731
    elif op == "clip":
        y = lambda a: TABLE["clip"].numpy(a[0], attrs)  # noqa: E731
    elif op == "where":
        y = lambda a: np.where(a[0], a[1], a[2])  # noqa: E731
    elif op == "identity":
        y = lambda a: a[0]  # noqa: E731
    else:
        y = lambda a: _UFUNC[op](*a)  # noqa: E731
    return lambda args: np.asarray(y([np.asarray(a, t) for a, t in zip(args, types)])).astype(
        dt, copy=False)


# -- C ----------------------------------------------------------------------------------------

def ctype(dtype: str, d) -> str:
    """The C type a value of ``dtype`` is computed in (float16 in float)."""
    return d.type(literals.compute_dtype(dtype))


def literal(value, dtype: str, d) -> str:
    """A C constant of ``dtype``'s compute type (gpucg/codegen/literals.py)."""
    return literals.literal(value, dtype, d)


def cast(expr: str, src: str, dst: str, d) -> str:
    """``expr`` (computed as ``src``) as a value of ``dst``'s compute type."""
    if src == dst or ctype(src, d) == ctype(dst, d) and "bool" not in (src, dst):
        return expr
    if dst == "bool":
        return f"({expr} != 0)"
    return f"(({ctype(dst, d)}){expr})"


def _utype(dtype: str, d) -> str:
    return d.type("u" + dtype) if dtype in _SIGNED else d.type(dtype)


def helper(name: str, dtype: str, d) -> str:
    """The C source of a helper function a kernel needs (integer power)."""
    t, u = d.type(dtype), _utype(dtype, d)
    neg = ("    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);\n"
           if dtype in _SIGNED else "")
    return (f"{d.device_fn} {t} {name}({t} a, {t} b) {{\n{neg}"
            f"    {u} r = 1, x = ({u})a;\n"
            f"    while (b) {{ if (b & 1) r *= x; x *= x; b >>= 1; }}\n"
            f"    return ({t})r;\n}}\n")


def _compare(sym: str, a: str, b: str, la: str, lb: str, d) -> str:
    """A comparison, exact when one operand is signed and the other unsigned (NumPy's mixed
    int64/uint64 loops): a negative value is below every unsigned one."""
    if la in _SIGNED and lb in _UNSIGNED[1:]:
        u = d.type(lb)
        if sym in ("<", "<=", "!="):
            return f"({a} < 0 || ({u}){a} {sym} {b})"
        return f"({a} >= 0 && ({u}){a} {sym} {b})"
    if lb in _SIGNED and la in _UNSIGNED[1:]:
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[sym]
        return _compare(flipped, b, a, lb, la, d)
    return f"({a} {sym} {b})"


def code(op: str, args: list, loop: tuple, out: str, attrs: dict, d, helpers: dict) -> str:
    """A C expression of ``op`` on operands already in their loop types (variables), in the
    compute type of ``loop[0]`` (comparisons: a 0/1 int). ``helpers`` collects functions to
    define (name -> source)."""
    t = loop[0]
    c = ctype(t, d)
    x = args[0]
    fl, signed = t in _FLOATS, t in _SIGNED
    if op in TABLE and fl:
        return TABLE[op].c(x, Lit(t, d), attrs)
    zero = literal(0, t, d)
    if op in COMPARISONS:
        return _compare(COMPARISONS[op], args[0], args[1], loop[0], loop[1], d)
    if op in ("add", "subtract", "multiply"):
        sym = {"add": "+", "subtract": "-", "multiply": "*"}[op]
        if t == "bool":
            return f"({x} {'|' if op == 'add' else '&'} {args[1]})"
        if signed:  # wrap-around in unsigned arithmetic: signed overflow is undefined in C
            u = _utype(t, d)
            return f"(({c})(({u}){x} {sym} ({u}){args[1]}))"
        if t in ("uint8", "uint16"):  # C computes these in int: wrap back
            return f"(({c})({x} {sym} {args[1]}))"
        return f"({x} {sym} {args[1]})"
    if op == "divide":
        return f"({x} / {args[1]})"
    if op == "power":
        if fl:
            return f"pow({x}, {args[1]})"
        name = f"gpucg_ipow_{t}"
        helpers[name] = helper(name, t, d)
        return f"{name}({x}, {args[1]})"
    if op in ("maximum", "minimum"):
        sym = ">" if op == "maximum" else "<"
        if t == "bool":
            return f"({x} {'|' if op == 'maximum' else '&'} {args[1]})"
        nan = f" || {x} != {x}" if fl else ""
        return f"(({x} {sym} {args[1]}{nan}) ? {x} : {args[1]})"
    if op == "where":
        return f"({x} ? {args[1]} : {args[2]})"
    if op == "identity":
        return x
    if op == "abs":  # integers (floats are in the table)
        if signed:
            u = _utype(t, d)
            return f"(({c})({x} < 0 ? ({u})0 - ({u}){x} : ({u}){x}))"
        return x
    if op == "negative":
        return f"(({c})(({_utype(t, d)})0 - ({_utype(t, d)}){x}))"
    if op == "relu":
        return x if t in _UNSIGNED else f"({x} > {zero} ? {x} : {zero})"
    if op == "clip":
        return clip_c(x, Lit(t, d), attrs, nan=False)
    raise AttrError(f"elementwise operator {op!r} is unknown")
