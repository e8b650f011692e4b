"""Selection and sorting: topk, sort and argsort along one axis.

One order rules all three: elements compare by value in the requested direction, NaN counts
as larger than every number (first when descending, last when ascending), -0.0 equals 0.0, and
equal values keep their index order (the lower index first). This is a stable sort, and what
``torch.topk`` does with NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import AttrError, DTypeError, describe, require_bool, require_int
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..half import widen
from ..shape import TensorType, dtype_name, normalize_axis
from ._axes import flat_axis

#: input dtypes topk/sort/argsort accept
IN_DTYPES = ("float16", "float32", "float64", "int32", "int64", "int8", "int16", "uint8", "uint16",
             "uint32", "uint64", "bfloat16")
INDEX_DTYPES = ("int32", "int64")
RET_TYPES = ("both", "values", "indices")


@dataclass(frozen=True)
class TopkAttrs:
    """Attributes of topk (as TVM's).

    Attributes:
        k: how many to keep; k < 1 keeps the whole axis (a sort).
        axis: the axis to select along; negative counts from the end.
        ret_type: "both" (values, indices), "values" or "indices".
        is_ascend: False keeps the largest (descending order), True the smallest (ascending).
        dtype: the index dtype, "int32" or "int64".
    """

    k: int = 1
    axis: int = -1
    ret_type: str = "both"
    is_ascend: bool = False
    dtype: str = "int32"

    def __post_init__(self):
        object.__setattr__(self, "k", require_int("k", self.k))
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        if self.ret_type not in RET_TYPES:
            raise AttrError(f"ret_type={describe(self.ret_type)} is not allowed; allowed: "
                            f"{', '.join(map(repr, RET_TYPES))}")
        object.__setattr__(self, "is_ascend", require_bool("is_ascend", self.is_ascend))
        object.__setattr__(self, "dtype", dtype_name(self.dtype, "dtype", INDEX_DTYPES))


@dataclass(frozen=True)
class SortAttrs:
    """Attributes of sort: the axis, and the direction (ascending by default)."""

    axis: int = -1
    is_ascend: bool = True

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        object.__setattr__(self, "is_ascend", require_bool("is_ascend", self.is_ascend))


@dataclass(frozen=True)
class ArgsortAttrs:
    """Attributes of argsort: axis, direction and the index dtype."""

    axis: int = -1
    is_ascend: bool = True
    dtype: str = "int32"

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        object.__setattr__(self, "is_ascend", require_bool("is_ascend", self.is_ascend))
        object.__setattr__(self, "dtype", dtype_name(self.dtype, "dtype", INDEX_DTYPES))


@dataclass(frozen=True)
class SelectView:
    """topk, sort and argsort seen as one problem: keep ``k`` (0: all) of each row, in order."""

    k: int
    axis: int
    ret_type: str
    ascend: bool
    index_dtype: str


def view(attrs) -> SelectView:
    """The common view of any of the three operators' attributes."""
    if isinstance(attrs, TopkAttrs):
        return SelectView(attrs.k, attrs.axis, attrs.ret_type, attrs.is_ascend, attrs.dtype)
    if isinstance(attrs, ArgsortAttrs):
        return SelectView(0, attrs.axis, "indices", attrs.is_ascend, attrs.dtype)
    return SelectView(0, attrs.axis, "values", attrs.is_ascend, "int32")


def kept(n, v: SelectView):
    """How many elements of a row of length ``n`` the result keeps."""
    return n if v.k < 1 else v.k


def _type_rel(op: str):
    def rel(inputs, attrs):
        (data,) = inputs
        if data.dtype not in IN_DTYPES:
            raise DTypeError(f"{op}: data dtype {data.dtype!r} is not supported; "
                             f"allowed: {', '.join(IN_DTYPES)}")
        v = view(attrs)
        axis = normalize_axis(v.axis, data.ndim)
        shape = list(data.shape)
        shape[axis] = kept(shape[axis], v)
        values = TensorType(tuple(shape), data.dtype)
        indices = TensorType(tuple(shape), v.index_dtype)
        return {"both": (values, indices), "values": values, "indices": indices}[v.ret_type]
    return rel


def _constraints(inputs, attrs):
    v = view(attrs)
    if v.k < 1:
        return []
    (data,) = inputs
    axis = normalize_axis(v.axis, data.ndim)
    n = data.shape[axis]
    return [Constraint(n >= v.k,
                       f"topk: k={v.k} is larger than the length {{}} of axis {v.axis} "
                       f"(data.shape[{axis}]); k must be at most that length, or < 1 for all",
                       (n,))]


def stable_order(x: np.ndarray, ascend: bool) -> np.ndarray:
    """Indices that sort ``x`` along its last axis by the rule above (a stable sort).

    Descending is the ascending stable sort of the reversed row, reversed: equal values then
    come in index order, and NaN (last when ascending) comes first.
    """
    n = x.shape[-1]
    x = widen(x)  # bfloat16 sorts as the float32 it widens to (exactly, NaN last)
    if ascend:
        return np.argsort(x, axis=-1, kind="stable")
    return (n - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1]


def _reference(op: str):
    def ref(data: np.ndarray, attrs):
        """Stable argsort (NumPy sorts NaN last), then take the first k: slow, obviously right."""
        v = view(attrs)
        axis = normalize_axis(v.axis, data.ndim)
        x = np.moveaxis(data, axis, -1)
        order = stable_order(x, v.ascend)[..., :kept(x.shape[-1], v)]
        values = np.moveaxis(np.take_along_axis(x, order, -1), -1, axis)
        indices = np.moveaxis(order, -1, axis).astype(v.index_dtype)
        return {"both": (values, indices), "values": values, "indices": indices}[v.ret_type]
    return ref


def _cases(op: str):
    """The topk benchmark's calls (as sorts for sort/argsort), and small awkward ones."""
    def cases():
        t = TensorType
        k = (lambda v: {"k": v}) if op == "topk" else (lambda v: {})
        bench = [Case((t((4096, 1024), "float32"),), k(8), "bench", "(4096, 1024) k=8"),
                 Case((t((1, 1 << 22), "float32"),), k(100), "bench", "(1, 2^22) k=100"),
                 Case((t((1, 1 << 24), "float32"),), k(1000), "bench", "(1, 2^24) k=1000"),
                 Case((t((256, 262144), "float32"),), k(256), "bench", "(256, 262144) k=256"),
                 Case((t((64, 4096), "float32"),), k(0), "bench", "(64, 4096) full sort")]
        small = [Case((t((3, 40), "float32"),), k(5), "small"),
                 Case((t((2, 3001), "float64"),), k(200), "small", "k > 128 (radix)"),
                 Case((t((1, 9001), "float16"),), k(300), "small"),
                 Case((t((5, 1000), "int64"),), k(0), "small", "a sort"),
                 Case((t((7, 1), "int32"),), k(1), "small")]
        if op == "sort":  # one op of the three: the simulator takes a minute a call
            small.append(Case((t((1, 33000), "float16"),), {}, "small",
                              "a long row: onesweep radix sort", not_simulated={
                                  "sort_merge": "simulated on the (2, 3001) and (1, 9001) rows"}))
        return bench + small
    return cases


for _name, _attrs, _doc in (
        ("topk", TopkAttrs, "The k largest (or smallest) elements along an axis, in order."),
        ("sort", SortAttrs, "Stable sort along an axis."),
        ("argsort", ArgsortAttrs, "Indices of a stable sort along an axis.")):
    register_op(_name, attrs=_attrs, num_inputs=1, type_rel=_type_rel(_name),
                pattern=OpPattern.OPAQUE, reference=_reference(_name), input_names=("data",),
                doc=_doc, constraints=_constraints, cases=_cases(_name),
                # the kernels compare and move bit patterns only: no float16/bfloat16/float64 arithmetic
                kernel_info=KernelInfo(storage_dtypes=IN_DTYPES))


def topk(data, k=1, axis=-1, ret_type="both", is_ascend=False, dtype="int32", *, target=None):
    """The ``k`` largest (``is_ascend=True``: smallest) elements along ``axis``, in order.

    Args:
        data: a NumPy, CuPy or PyOpenCL array (float16/32/64, bfloat16, signed or unsigned integers of
            8 to 64 bits).
        k: how many to keep; k < 1 keeps the whole axis.
        axis: the axis; negative counts from the end.
        ret_type: "both" returns (values, indices); "values" or "indices" returns one array.
        is_ascend: sort order of the result (and which end is kept).
        dtype: index dtype, "int32" or "int64".
        target: "cuda", "opencl", "numpy" or None for the default target.

    Ties keep index order; NaN is larger than every number.
    """
    return call("topk", (data,), target=target, k=k, axis=axis, ret_type=ret_type,
                is_ascend=is_ascend, dtype=dtype)


def sort(data, axis=-1, is_ascend=True, *, target=None):
    """Stable sort along ``axis`` (NaN last when ascending, first when descending)."""
    return call("sort", (data,), target=target, axis=axis, is_ascend=is_ascend)


def argsort(data, axis=-1, is_ascend=True, dtype="int32", *, target=None):
    """Indices of a stable sort along ``axis``; equal values keep index order (a 0-d array
    with axis 0 or -1 is sorted as its one-element view, as ``np.argsort`` does)."""
    if flat_axis(data, axis) is None:
        data = data.reshape((1,))
    return call("argsort", (data,), target=target, axis=axis, is_ascend=is_ascend, dtype=dtype)
