"""The narrow float storage formats: float16, bfloat16, float8_e4m3fn and float8_e5m2.

Kernels never compute in them: they load a narrow float as a float, compute in float32 and
round to nearest even when they store (gpucg/codegen/dialect.py spells the conversions;
gpucg/codegen/fp8.py the 8-bit ones). The host keeps the same rule: NumPy references widen to
float32 and round the result once.

NumPy has float16; bfloat16 and the FP8 formats come from ``ml_dtypes`` (the library JAX and
TensorFlow use for them), an optional dependency: ``pip install 'gpucg[bfloat16]'``. ``import
gpucg`` works without it; naming one of them without it is a DTypeError saying what to
install. The FP8 formats are the OCP 8-bit floats as ml_dtypes and torch name them:
float8_e4m3fn (4 exponent bits, bias 7, no infinities, NaN is S.1111.111, largest 448) and
float8_e5m2 (5 exponent bits, bias 15, IEEE-like: infinities and NaNs, largest 57344).
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError

#: the 16-bit float storage formats, each loaded as float and stored rounded to nearest even
HALF_DTYPES = ("float16", "bfloat16")
#: the 8-bit float storage formats (OCP FP8), likewise
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
#: every float kept narrow in memory and computed in float32
STORAGE_DTYPES = HALF_DTYPES + FP8_DTYPES
#: the dtypes NumPy has only through ml_dtypes (its ufuncs round every step in them)
ML_DTYPES = ("bfloat16",) + FP8_DTYPES


def ml_dtypes(name: str = "bfloat16"):
    """The ml_dtypes module, or a DTypeError saying how to install it."""
    try:
        import ml_dtypes as module
    except ImportError as exc:
        raise DTypeError(f"dtype {name!r} needs the ml_dtypes package ({exc}); "
                         "pip install 'gpucg[bfloat16]'") from None
    return module


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name; bfloat16 and the FP8 formats are ml_dtypes' (NumPy
    alone has no such)."""
    return np.dtype(getattr(ml_dtypes(name), name) if name in ML_DTYPES else name)


def half_format(dtype) -> str | bool:
    """The storage format of ``dtype`` (one of STORAGE_DTYPES), or False for other dtypes.

    Templates take it as their ``half`` parameter: falsy for a plain buffer."""
    name = dtype if isinstance(dtype, str) else _name(dtype)
    return name if name in STORAGE_DTYPES else False


def _name(dtype) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return ""


def is_bfloat16(dtype) -> bool:
    """True for ml_dtypes' bfloat16 (a NumPy dtype, a type or the name)."""
    return (dtype if isinstance(dtype, str) else _name(dtype)) == "bfloat16"


def is_ml_dtype(dtype) -> bool:
    """True for the dtypes of ML_DTYPES (a NumPy dtype, a type or the name)."""
    return (dtype if isinstance(dtype, str) else _name(dtype)) in ML_DTYPES


def widen(array):
    """A bfloat16 or FP8 array as float32 (exact); anything else unchanged. NumPy's own ufuncs
    on ml_dtypes arrays round every step; references widen first, as kernels do."""
    if isinstance(array, np.ndarray) and array.dtype.name in ML_DTYPES:
        return array.astype(np.float32)
    return array


def is_float(dtype) -> bool:
    """True for floating dtypes, bfloat16 included (NumPy's kind of bfloat16 is 'V')."""
    name = dtype if isinstance(dtype, str) else _name(dtype)
    return name.startswith("float") or name == "bfloat16"
