"""A dtype's C literals and extremes: the one place that spells them.

Templates call the Jinja globals ``literal(value, dtype)``, ``inf_of(dtype)``,
``nan_of(dtype)``, ``lowest_of(dtype)`` and ``highest_of(dtype)`` (registered in render.py);
generators in Python call the functions here with a Dialect. Floats are keyed by dtype name:
the dtype their values are computed in and the suffix of a literal of that type, so a new
float dtype (bfloat16, computed in float as float16 is) is one more entry of ``FLOATS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import DTypeError


@dataclass(frozen=True)
class FloatKind:
    """How values of a float dtype are computed: in ``compute`` (a dtype name), whose C
    literals end in ``suffix``."""

    compute: str
    suffix: str


#: every float dtype gpucg computes with (the narrow storage formats in float32)
FLOATS = {"float16": FloatKind("float32", "f"), "bfloat16": FloatKind("float32", "f"),
          "float8_e4m3fn": FloatKind("float32", "f"), "float8_e5m2": FloatKind("float32", "f"),
          "float32": FloatKind("float32", "f"),
          "float64": FloatKind("float64", "")}
_INT_MAX = {"bool": "1", "int8": "127", "int16": "32767", "int32": "2147483647",
            "uint8": "255", "uint16": "65535", "uint32": "0xFFFFFFFFu"}


def compute_dtype(dtype: str) -> str:
    """The dtype a value of ``dtype`` is computed in (float16, bfloat16 and FP8 in float32, the
    rest as is)."""
    return FLOATS[dtype].compute if dtype in FLOATS else dtype


#: infinity and a quiet NaN by dialect and compute dtype, as each language names them (not
#: 1.0f / 0.0f, which a reader must fold): OpenCL C's INFINITY, NAN and HUGE_VAL; CUDA's
#: bit-pattern intrinsics, as its math_constants.h (CUDART_INF_F) spells them
SPECIALS = {
    "opencl": {"float32": ("INFINITY", "NAN"), "float64": ("HUGE_VAL", "(double)NAN")},
    "cuda": {"float32": ("__int_as_float(0x7f800000)", "__int_as_float(0x7fffffff)"),
             "float64": ("__longlong_as_double(0x7ff0000000000000LL)",
                         "__longlong_as_double(0x7ff8000000000000LL)")},
}


def _special(v: float, dtype: str, d) -> str:
    try:
        inf, nan = SPECIALS[d.name][FLOATS[dtype].compute]
    except (AttributeError, KeyError):
        raise DTypeError(f"no spelling of {v} in {dtype} for dialect "
                         f"{getattr(d, 'name', d)!r}; allowed: {', '.join(SPECIALS)}") from None
    return nan if math.isnan(v) else ("-" + inf if v < 0 else inf)


def literal(value, dtype: str, d) -> str:
    """``value`` as a C constant of ``dtype``'s compute type in dialect ``d``: ``0.5f``,
    ``1e-05``, infinities and NaN by their names (:data:`SPECIALS`); integers through the
    dialect's unsigned constants, cast to the type."""
    if dtype in FLOATS:
        v = float(value)
        if not math.isfinite(v):
            return _special(v, dtype, d)
        return repr(v) + FLOATS[dtype].suffix
    if dtype == "bool":
        return "1" if value else "0"
    if dtype not in _INT_MAX and dtype not in ("int64", "uint64"):
        raise DTypeError(f"dtype {dtype!r} has no C literal; allowed: "
                         f"{', '.join(list(FLOATS) + list(_INT_MAX) + ['int64', 'uint64'])}")
    return f"(({d.type(dtype)}){d.uconst(int(value), 64)})"


def inf_of(dtype: str, d) -> str:
    """+infinity in ``dtype``'s compute type."""
    return literal(math.inf, dtype, d)


def nan_of(dtype: str, d) -> str:
    """A quiet NaN in ``dtype``'s compute type."""
    return literal(math.nan, dtype, d)


def highest_of(dtype: str, d) -> str:
    """The largest value of ``dtype``: +inf for floats (the identity of min), the largest
    integer otherwise (hex where a decimal would need a suffix or a sum)."""
    if dtype in FLOATS:
        return inf_of(dtype, d)
    if dtype == "int64":
        return "0x7FFFFFFFFFFFFFFF" + d.u64_suffix.removeprefix("U")
    if dtype == "uint64":
        return d.uconst(-1, 64)
    return _INT_MAX[dtype]


def lowest_of(dtype: str, d) -> str:
    """The smallest value of ``dtype``: -inf for floats (the identity of max), the smallest
    integer otherwise."""
    if dtype in FLOATS:
        return literal(-math.inf, dtype, d)
    if dtype == "int32":
        return f"(({d.type('int32')})0x80000000u)"
    if dtype == "int64":
        return f"(({d.type('int64')}){d.uconst(1 << 63, 64)})"
    return {"int8": "(-128)", "int16": "(-32768)"}.get(dtype, "0")


def max_finite(dtype: str) -> float:
    """The largest finite value of ``dtype``'s compute type."""
    return float(np.finfo(compute_dtype(dtype)).max)


def lowest_value(dtype) -> float:
    """The NumPy value ``lowest_of`` spells: -inf, or the integer type's minimum."""
    dtype = np.dtype(dtype)
    if dtype.name in FLOATS:  # ml_dtypes' bfloat16 and e4m3fn are of NumPy kind 'V'
        return -np.inf
    return int(np.iinfo(dtype).min) if dtype.kind in "iu" else 0
