"""Scan operators: cumsum and cumprod (inclusive or exclusive, any axis).

float16 and bfloat16 accumulate in float32, as torch.cumsum does (NumPy would accumulate in
float16): each output is the float32 running sum or product rounded once to the output dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import AttrError, DTypeError, describe, require_bool
from ..half import numpy_dtype
from ..op import Case, KernelInfo, OpPattern, register_op
from ..shape import TensorType, dtype_name, normalize_axis, split_axis
from ._axes import flat_axis

#: input dtypes scan accepts, and the dtypes it can produce
OUT_DTYPES = ("int32", "int64", "float32", "float64", "int8", "int16", "uint8", "uint16",
              "uint32", "uint64", "float16", "bfloat16")
IN_DTYPES = ("bool",) + OUT_DTYPES
#: stored in 16 bits, accumulated in float32
HALF_DTYPES = ("float16", "bfloat16")


def acc_dtype(out_dtype: str) -> str:
    """The dtype a scan producing ``out_dtype`` accumulates in (float32 for 16-bit floats)."""
    return "float32" if out_dtype in HALF_DTYPES else out_dtype


@dataclass(frozen=True)
class ScanAttrs:
    """Attributes of cumsum/cumprod.

    Attributes:
        axis: the axis to scan (negative counts from the end); None scans the flattened input.
        dtype: the output (and accumulation) dtype; None chooses as NumPy does.
        exclusive: if True, element i holds the scan of elements before i (identity first).
        reverse: if True, scan from the end: element i holds the scan of elements i.. (with
            exclusive, of the elements after i, as ONNX's CumSum defines it).
    """

    axis: int | None = None
    dtype: str | None = None
    exclusive: bool = False
    reverse: bool = False

    def __post_init__(self):
        if self.axis is not None and (isinstance(self.axis, (bool, np.bool_))
                                      or not isinstance(self.axis, (int, np.integer))):
            raise AttrError(f"axis={describe(self.axis)} must be an int or None")
        if self.axis is not None:
            object.__setattr__(self, "axis", int(self.axis))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_name(self.dtype, "dtype", OUT_DTYPES))
        object.__setattr__(self, "exclusive", require_bool("exclusive", self.exclusive))
        object.__setattr__(self, "reverse", require_bool("reverse", self.reverse))


def default_out_dtype(in_dtype: str) -> str:
    """NumPy's choice (64-bit platform): bool and signed integers accumulate in int64, unsigned
    ones in uint64."""
    if in_dtype in ("bool", "int8", "int16", "int32"):
        return "int64"
    return "uint64" if in_dtype in ("uint8", "uint16", "uint32") else in_dtype


def _type_rel(op: str):
    def rel(inputs, attrs: ScanAttrs):
        (data,) = inputs
        if data.dtype not in IN_DTYPES:
            raise DTypeError(f"{op}: data dtype {data.dtype!r} is not supported; "
                             f"allowed: {', '.join(IN_DTYPES)}")
        out_dtype = attrs.dtype or default_out_dtype(data.dtype)
        if attrs.axis is None:
            _, n, _ = split_axis(data.shape, None)
            return TensorType((n,), out_dtype)
        normalize_axis(attrs.axis, data.ndim)
        return TensorType(data.shape, out_dtype)
    return rel


def scan_numpy(data: np.ndarray, kind: str, axis, out_dtype: str, exclusive: bool,
               reverse: bool) -> np.ndarray:
    """np.cumsum or np.cumprod (``kind`` "sum" or "prod") along ``axis`` (None: of the
    flattened data) in the accumulation dtype, from the end where ``reverse``, shifted by one
    (the identity first) where ``exclusive``; as ``out_dtype``."""
    acc = np.dtype(acc_dtype(out_dtype))
    if axis is None:
        data, axis = np.ravel(data), 0
    if data.dtype.name in HALF_DTYPES:
        data = data.astype(np.float32)  # exact; ml_dtypes' bfloat16 has no accumulating ufunc
    if reverse:  # scan the reversed axis, then reverse back
        data = np.flip(data, axis)
    out = (np.cumsum if kind == "sum" else np.cumprod)(data, axis=axis, dtype=acc)
    if exclusive and out.shape[axis]:
        out = np.concatenate([np.full_like(out.take([0], axis=axis), 0 if kind == "sum" else 1),
                              out.take(np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        out = np.flip(out, axis)
    if out.dtype == numpy_dtype(out_dtype):
        return out
    with np.errstate(over="ignore"):  # a float32 sum past float16's range stores inf
        return out.astype(numpy_dtype(out_dtype))


def reference(kind: str):
    """The NumPy reference of a scan whose combine is "sum" or "prod": ``ref(data, attrs)``."""
    def ref(data: np.ndarray, attrs: ScanAttrs) -> np.ndarray:
        dtype = attrs.dtype or default_out_dtype(dtype_name(data.dtype, "data"))
        axis = None if attrs.axis is None else normalize_axis(attrs.axis, data.ndim)
        return scan_numpy(data, kind, axis, dtype, attrs.exclusive, attrs.reverse)
    return ref


def _cases():
    """The scan benchmark's calls, and small awkward ones (1, primes, a tile and a bit)."""
    t = TensorType
    bench = [Case((t((1 << 24,), "float32"),), {"axis": 0}, "bench", "1-D 2^24"),
             Case((t((4096, 1024), "float32"),), {"axis": 1}, "bench", "(4096, 1024) axis=1"),
             Case((t((1024, 4096), "float32"),), {"axis": 0}, "bench", "(1024, 4096) axis=0"),
             Case((t((65536, 1024), "float32"),), {"axis": -1}, "bench", "(65536, 1024) axis=-1")]
    small = [Case((t((1,), "float32"),), {"axis": 0}, "small"),
             Case((t((2053,), "float32"),), {"axis": 0}, "small", "1-D, just over a tile"),
             Case((t((3, 257), "int32"),), {"axis": 1, "exclusive": True}, "small"),
             Case((t((37, 5), "float64"),), {"axis": 0}, "small"),
             Case((t((2, 7, 3), "float32"),), {"axis": 1}, "small"),
             Case((t((3, 2053), "uint8"),), {"axis": 1, "reverse": True, "exclusive": True},
                  "small", "reverse, exclusive, unsigned"),
             Case((t((9001,), "float32"),), {"axis": 0}, "small", "1-D, several tiles"),
             Case((t((2, 8200), "float64"),), {"axis": 1, "reverse": True}, "small",
                  "long rows, reverse"),
             Case((t((600, 2, 9), "float32"),), {"axis": 0}, "small", "long columns"),
             Case((t((3, 2053), "float16"),), {"axis": 1, "exclusive": True}, "small",
                  "float16 rows, float32 sums")]
    return bench + small


for _name, _kind in (("cumsum", "sum"), ("cumprod", "prod")):
    register_op(
        _name, attrs=ScanAttrs, num_inputs=1, type_rel=_type_rel(_name),
        pattern=OpPattern.OPAQUE, reference=reference(_kind), input_names=("data",),
        cases=_cases, kernel_info=KernelInfo(storage_dtypes=HALF_DTYPES),
        doc=f"{'Cumulative sum' if _kind == 'sum' else 'Cumulative product'} along an axis.",
    )


def cumsum(data, axis=None, dtype=None, exclusive=False, reverse=False, *, target=None):
    """Cumulative sum along ``axis`` (None: of the flattened input), as ``np.cumsum``.

    Args:
        data: a NumPy, CuPy or PyOpenCL array. NumPy in gives NumPy out; device arrays stay on
            their device.
        axis: the axis to scan; negative counts from the end; None flattens first.
        dtype: output and accumulation dtype; default as NumPy (bool and signed integers ->
            int64, unsigned ones -> uint64); float16 and bfloat16 accumulate in float32.
        exclusive: if True, the first element is 0 and element i sums the elements before i.
        reverse: if True, scan from the end (element i sums elements i..; with exclusive,
            the elements after i, as ONNX's CumSum).
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    return call("cumsum", (data,), target=target, axis=flat_axis(data, axis), dtype=dtype,
                exclusive=exclusive, reverse=reverse)


def cumprod(data, axis=None, dtype=None, exclusive=False, reverse=False, *, target=None):
    """Cumulative product along ``axis``, as ``np.cumprod``; see :func:`cumsum`."""
    return call("cumprod", (data,), target=target, axis=flat_axis(data, axis), dtype=dtype,
                exclusive=exclusive, reverse=reverse)


# -- gradients: reverse cumulative sums, written with registered operators (gpucg/ops/_grads.py)
from ..op import register_gradient  # noqa: E402
from ._grads import cumprod_gradient, cumsum_gradient  # noqa: E402

register_gradient("cumsum", cumsum_gradient)
register_gradient("cumprod", cumprod_gradient)
