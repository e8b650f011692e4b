"""Scan operators: cumsum and cumprod (inclusive or exclusive, any axis)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import AttrError, DTypeError, describe, require_bool
from ..op import Case, OpPattern, register_op
from ..shape import TensorType, dtype_name, normalize_axis, split_axis
from ._axes import flat_axis

#: input dtypes scan accepts, and the dtypes it can produce
OUT_DTYPES = ("int32", "int64", "float32", "float64", "int8", "int16", "uint8", "uint16",
              "uint32", "uint64")
IN_DTYPES = ("bool",) + OUT_DTYPES


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


def reference(kind: str):
    """The NumPy reference of a scan whose combine is "sum" or "prod": ``ref(data, attrs)``."""
    def ref(data: np.ndarray, attrs: ScanAttrs) -> np.ndarray:
        dtype = attrs.dtype or default_out_dtype(np.dtype(data.dtype).name)
        fn = np.cumsum if kind == "sum" else np.cumprod
        if attrs.axis is None:
            data = np.ravel(data)
            axis = 0
        else:
            axis = normalize_axis(attrs.axis, data.ndim)
        if attrs.reverse:  # scan the reversed axis, then reverse back
            data = np.flip(data, axis)
        out = fn(data, axis=axis, dtype=dtype)
        if attrs.exclusive and out.shape[axis] > 0:
            shifted = np.empty_like(out)
            head = [slice(None)] * out.ndim
            head[axis] = slice(0, 1)
            rest = [slice(None)] * out.ndim
            rest[axis] = slice(1, None)
            body = [slice(None)] * out.ndim
            body[axis] = slice(0, -1)
            shifted[tuple(head)] = 0 if kind == "sum" else 1
            shifted[tuple(rest)] = out[tuple(body)]
            out = shifted
        return np.flip(out, axis) if attrs.reverse else out
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
             Case((t((600, 2, 9), "float32"),), {"axis": 0}, "small", "long columns")]
    return bench + small


for _name, _kind in (("cumsum", "sum"), ("cumprod", "prod")):
    register_op(
        _name, attrs=ScanAttrs, num_inputs=1, type_rel=_type_rel(_name),
        pattern=OpPattern.OPAQUE, reference=reference(_kind), input_names=("data",),
        cases=_cases,
        doc=f"{'Cumulative sum' if _kind == 'sum' else 'Cumulative product'} along an axis.",
    )


def cumsum(data, axis=None, dtype=None, exclusive=False, reverse=False, *, target=None):
    """Cumulative sum along ``axis`` (None: of the flattened input), as ``np.cumsum``.

    Args:
        data: a NumPy, CuPy or PyOpenCL array. NumPy in gives NumPy out; device arrays stay on
            their device.
        axis: the axis to scan; negative counts from the end; None flattens first.
        dtype: output and accumulation dtype; default as NumPy (bool and signed integers ->
            int64, unsigned ones -> uint64).
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
