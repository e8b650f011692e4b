"""The 16-bit float storage formats: float16 and bfloat16.

Kernels never compute in 16 bits: they load a 16-bit float as a float, compute in float32 and
round to nearest even when they store (gpucg/codegen/dialect.py spells the conversions). The
host keeps the same rule: NumPy references widen to float32 and round the result once.

NumPy has float16; bfloat16 comes from ``ml_dtypes`` (the library JAX and TensorFlow use for
it), an optional dependency: ``pip install 'gpucg[bfloat16]'``. ``import gpucg`` works without
it; naming bfloat16 without it is a DTypeError saying what to install.
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError

#: the 16-bit float storage formats, each loaded as float and stored rounded to nearest even
HALF_DTYPES = ("float16", "bfloat16")

def ml_dtypes():
    """The ml_dtypes module, or a DTypeError saying how to install it."""
    try:
        import ml_dtypes as module
    except ImportError as exc:
        raise DTypeError(f"dtype 'bfloat16' needs the ml_dtypes package ({exc}); "
                         "pip install 'gpucg[bfloat16]'") from None
    return module


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name; "bfloat16" is ml_dtypes' (NumPy alone has no such)."""
    return np.dtype(ml_dtypes().bfloat16 if name == "bfloat16" else name)


def half_format(dtype) -> str | bool:
    """The storage format of ``dtype`` ("float16" or "bfloat16"), or False for other dtypes.

    Templates take it as their ``half`` parameter: falsy for a plain buffer."""
    name = dtype if isinstance(dtype, str) else _name(dtype)
    return name if name in HALF_DTYPES else False


def _name(dtype) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return ""


def is_bfloat16(dtype) -> bool:
    """True for ml_dtypes' bfloat16 (a NumPy dtype, a type or the name)."""
    return (dtype if isinstance(dtype, str) else _name(dtype)) == "bfloat16"


def widen(array):
    """A bfloat16 array as float32 (exact); anything else unchanged. NumPy's own ufuncs on
    ml_dtypes arrays round every step to bfloat16; references widen first, as kernels do."""
    if isinstance(array, np.ndarray) and array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array


def is_float(dtype) -> bool:
    """True for floating dtypes, bfloat16 included (NumPy's kind of bfloat16 is 'V')."""
    name = dtype if isinstance(dtype, str) else _name(dtype)
    return name.startswith("float") or name == "bfloat16"
