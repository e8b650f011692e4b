"""Scan operators: cumsum and cumprod (inclusive or exclusive, any axis)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, DTypeError, InputError, describe, require_bool
from ..op import OpPattern, register_op
from ..shape import TensorType, dtype_name, simplify_dim

#: input dtypes scan accepts, and the dtypes it can produce
IN_DTYPES = ("bool", "int32", "int64", "float32", "float64")
OUT_DTYPES = ("int32", "int64", "float32", "float64")


@dataclass(frozen=True)
class ScanAttrs:
    """Attributes of cumsum/cumprod.

    Attributes:
        axis: the axis to scan (negative counts from the end); None scans the flattened input.
        dtype: the output (and accumulation) dtype; None chooses as NumPy does.
        exclusive: if True, element i holds the scan of elements before i (identity first).
    """

    axis: int | None = None
    dtype: str | None = None
    exclusive: bool = False

    def __post_init__(self):
        if self.axis is not None and (isinstance(self.axis, (bool, np.bool_))
                                      or not isinstance(self.axis, (int, np.integer))):
            raise AttrError(f"axis={describe(self.axis)} must be an int or None")
        if self.axis is not None:
            object.__setattr__(self, "axis", int(self.axis))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_name(self.dtype, "dtype", OUT_DTYPES))
        object.__setattr__(self, "exclusive", require_bool("exclusive", self.exclusive))


def normalize_axis(axis: int, ndim: int, arg: str = "axis") -> int:
    """``axis`` in 0..ndim-1, or InputError naming the allowed range."""
    if not -ndim <= axis < ndim:
        allowed = f"{-ndim}..{ndim - 1}" if ndim else "none (the input is 0-d; use axis=None)"
        raise InputError(f"{arg}={axis} is out of range for an input of rank {ndim}; allowed: {allowed}")
    return axis % ndim


def default_out_dtype(in_dtype: str) -> str:
    """NumPy's choice: small integers and bool accumulate in the platform integer (int64)."""
    return "int64" if in_dtype in ("bool", "int32") else in_dtype


def split_axis(shape, attrs: ScanAttrs):
    """(outer, length, inner) of the scanned axis; ints or SymPy expressions."""
    if attrs.axis is None:
        n = 1
        for d in shape:
            n = n * d
        return 1, simplify_dim(n), 1
    axis = normalize_axis(attrs.axis, len(shape))
    outer, inner = 1, 1
    for d in shape[:axis]:
        outer = outer * d
    for d in shape[axis + 1:]:
        inner = inner * d
    return simplify_dim(outer), simplify_dim(shape[axis]), simplify_dim(inner)


def _type_rel(op: str):
    def rel(inputs, attrs: ScanAttrs):
        (data,) = inputs
        if data.dtype not in IN_DTYPES:
            raise DTypeError(f"{op}: data dtype {data.dtype!r} is not supported; "
                             f"allowed: {', '.join(IN_DTYPES)}")
        out_dtype = attrs.dtype or default_out_dtype(data.dtype)
        if attrs.axis is None:
            _, n, _ = split_axis(data.shape, attrs)
            return TensorType((n,), out_dtype)
        normalize_axis(attrs.axis, data.ndim)
        return TensorType(data.shape, out_dtype)
    return rel


def _reference(kind: str):
    def ref(data: np.ndarray, attrs: ScanAttrs) -> np.ndarray:
        dtype = attrs.dtype or default_out_dtype(np.dtype(data.dtype).name)
        fn = np.cumsum if kind == "sum" else np.cumprod
        if attrs.axis is None:
            data = np.ravel(data)
            axis = 0
        else:
            axis = normalize_axis(attrs.axis, data.ndim)
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
        return out
    return ref


for _name, _kind in (("cumsum", "sum"), ("cumprod", "prod")):
    register_op(
        _name, attrs=ScanAttrs, num_inputs=1, type_rel=_type_rel(_name),
        pattern=OpPattern.OPAQUE, reference=_reference(_kind), input_names=("data",),
        kernel_info={"combine": _kind},
        doc=f"{'Cumulative sum' if _kind == 'sum' else 'Cumulative product'} along an axis.",
    )


def _eager(name: str, data, axis, dtype, exclusive, target):
    from ..api import call

    return call(name, (data,), target=target, axis=axis, dtype=dtype, exclusive=exclusive)


def cumsum(data, axis=None, dtype=None, exclusive=False, *, target=None):
    """Cumulative sum along ``axis`` (None: of the flattened input), as ``np.cumsum``.

    Args:
        data: a NumPy, CuPy or PyOpenCL array. NumPy in gives NumPy out; device arrays stay on
            their device.
        axis: the axis to scan; negative counts from the end; None flattens first.
        dtype: output and accumulation dtype; default as NumPy (bool/int32 -> int64).
        exclusive: if True, the first element is 0 and element i sums the elements before i.
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    return _eager("cumsum", data, axis, dtype, exclusive, target)


def cumprod(data, axis=None, dtype=None, exclusive=False, *, target=None):
    """Cumulative product along ``axis``, as ``np.cumprod``; see :func:`cumsum`."""
    return _eager("cumprod", data, axis, dtype, exclusive, target)
