"""Attributes and geometry of the transform family (gpucg/ops/transform.py): concatenate,
split, strided_slice, take, flatten, squeeze, expand_dims and cast.

Slicing is Python's and NumPy's (``slice(begin, end, step).indices(size)``), which is ONNX
Slice's clamping: a positive step clamps begin and end to [0, size], a negative one to
[-1, size - 1] after adding ``size`` to negative values once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AttrError, InputError, describe, require_int
from ..op import added_attr
from ..shape import DTYPES, dtype_name, normalize_axis
from ._axes import axis_attr


def _int_tuple(name: str, value, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return (int(value),)
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (tuple, list)):
        allowed = "None, an int or a tuple of ints" if allow_none else "an int or a tuple of ints"
        raise AttrError(f"{name}={describe(value)} must be {allowed}")
    return tuple(require_int(f"{name}[{i}]", v) for i, v in enumerate(value))


#: take's modes for an index out of range, as NumPy's
TAKE_MODES = ("raise", "clip", "wrap")


@dataclass(frozen=True)
class TakeAttrs:
    """take's axis (None flattens the input first) and mode: "raise" (an out-of-range index
    is an InputError), "clip" (clamped to the axis; negative indices become 0) or "wrap"
    (taken modulo the axis length), as np.take's."""

    axis: int | None = None
    mode: str = added_attr("raise", before="raise")

    def __post_init__(self):
        object.__setattr__(self, "axis", axis_attr(self.axis, allow_tuple=False))
        if self.mode not in TAKE_MODES:
            raise AttrError(f"take: mode={describe(self.mode)} is not allowed; allowed: "
                            f"{', '.join(map(repr, TAKE_MODES))}")


@dataclass(frozen=True)
class ConcatAttrs:
    """concatenate's axis (an int)."""

    axis: int = 0

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))


@dataclass(frozen=True)
class SplitAttrs:
    """split: ``indices_or_sections`` an int N >= 1 (N equal pieces) or a tuple of split
    points along ``axis`` (NumPy's np.split)."""

    indices_or_sections: object = 1
    axis: int = 0

    def __post_init__(self):
        v = self.indices_or_sections
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            if v < 1:
                raise AttrError(f"indices_or_sections={v} must be >= 1 (a number of equal "
                                "pieces) or a tuple of split points")
            v = int(v)
        else:
            v = _int_tuple("indices_or_sections", v)
        object.__setattr__(self, "indices_or_sections", v)
        object.__setattr__(self, "axis", require_int("axis", self.axis))


@dataclass(frozen=True)
class SliceAttrs:
    """strided_slice: ``begin``/``end``/``strides`` per axis of ``axes`` (None: the first
    len(begin) axes); ``strides`` None is all 1."""

    begin: tuple = ()
    end: tuple = ()
    strides: tuple | None = None
    axes: tuple | None = None

    def __post_init__(self):
        begin, end = _int_tuple("begin", self.begin), _int_tuple("end", self.end)
        strides = _int_tuple("strides", self.strides, allow_none=True) or (1,) * len(begin)
        axes = _int_tuple("axes", self.axes, allow_none=True)
        for name, v in (("end", end), ("strides", strides)) + ((("axes", axes),) if axes else ()):
            if len(v) != len(begin):
                raise AttrError(f"{name}={v} has {len(v)} entries but begin={begin} has "
                                f"{len(begin)}; they must match")
        if 0 in strides:
            raise AttrError(f"strides={strides}: a step of 0 is not allowed; allowed: nonzero ints "
                            "(negative steps walk backwards)")
        for k, v in (("begin", begin), ("end", end), ("strides", strides), ("axes", axes)):
            object.__setattr__(self, k, v)


@dataclass(frozen=True)
class FlattenAttrs:
    """flatten's axis: the output is (prod(shape[:axis]), prod(shape[axis:])), ONNX's
    Flatten; axis in -rank..rank."""

    axis: int = 1

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))


@dataclass(frozen=True)
class AxesAttrs:
    """squeeze (None: every axis of size 1) and expand_dims (required): an int or a tuple."""

    axis: object = None

    def __post_init__(self):
        object.__setattr__(self, "axis", axis_attr(self.axis))


@dataclass(frozen=True)
class CastAttrs:
    """cast's output dtype (any whitelisted dtype)."""

    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtype_name(self.dtype, "dtype", DTYPES))


# -- geometry ---------------------------------------------------------------------------------

def constant(op: str, shape, axis: int, what: str) -> int:
    """shape[axis] as an int, or InputError: ``what`` needs a constant size there."""
    d = shape[axis]
    if not isinstance(d, (int, np.integer)):
        raise InputError(f"{op}: x.shape[{axis}] is {d}, but {what} needs a constant size "
                         "along that axis")
    return int(d)


def slices(attrs: SliceAttrs, shape, op: str = "strided_slice") -> list:
    """One (start, step, length) per axis of ``shape`` (unsliced axes: (0, 1, size))."""
    ndim = len(shape)
    axes = attrs.axes if attrs.axes is not None else tuple(range(len(attrs.begin)))
    if attrs.axes is None and len(axes) > ndim:
        raise InputError(f"{op}: begin={attrs.begin} has {len(axes)} entries but x has rank "
                         f"{ndim}; allowed: at most {ndim}")
    norm = [normalize_axis(a, ndim, "axes") for a in axes]
    if len(set(norm)) != len(norm):
        raise InputError(f"{op}: axes={attrs.axes} names an axis twice; each axis may be sliced "
                         "once")
    out = [(0, 1, d) for d in shape]
    for a, b, e, s in zip(norm, attrs.begin, attrs.end, attrs.strides):
        size = constant(op, shape, a, "slicing")
        start, stop, step = slice(b, e, s).indices(size)
        out[a] = (start, step, len(range(start, stop, step)))
    return out


def split_points(attrs: SplitAttrs, n: int) -> list[tuple[int, int]]:
    """(start, length) of each piece of an axis of size ``n``, as np.split cuts it."""
    v = attrs.indices_or_sections
    if isinstance(v, int):
        if n % v:
            raise InputError(f"split: indices_or_sections={v} does not divide the axis "
                             f"(size {n}) into equal pieces; allowed: a divisor of {n}, or "
                             "a tuple of split points")
        return [(i * (n // v), n // v) for i in range(v)]
    cuts = (0,) + v + (n,)
    out = []
    for a, b in zip(cuts, cuts[1:]):
        start, stop, _ = slice(a, b).indices(n)
        out.append((start, max(0, stop - start)))
    return out


def squeeze_axes(op: str, shape, axis) -> tuple[int, ...]:
    """squeeze's axes, normalized; each must have size 1 (None: those that do)."""
    if axis is None:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    given = (axis,) if isinstance(axis, int) else axis
    out = [normalize_axis(a, len(shape), "axis") for a in given]
    if len(set(out)) != len(out):
        raise InputError(f"{op}: axis={axis} names an axis twice")
    for a in out:
        if shape[a] != 1:
            raise InputError(f"{op}: axis={axis} names axis {a} of size {shape[a]}; only axes "
                             "of size 1 can be squeezed")
    return tuple(sorted(out))


def expanded_shape(op: str, shape, axis) -> tuple:
    """expand_dims: ``shape`` with new axes of size 1 at ``axis`` (positions in the output)."""
    if axis is None:
        raise AttrError(f"{op}: axis=None: the position(s) of the new axes are required")
    given = (axis,) if isinstance(axis, int) else axis
    ndim = len(shape) + len(given)
    out = [normalize_axis(a, ndim, "axis") for a in given]
    if len(set(out)) != len(out):
        raise InputError(f"{op}: axis={axis} names a position twice")
    rest = iter(shape)
    return tuple(1 if i in out else next(rest) for i in range(ndim))
