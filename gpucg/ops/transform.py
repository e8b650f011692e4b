"""The transform family: data movement a model graph needs between its compute operators,
with NumPy's and TVM's argument names and orders.

concatenate(arrays, axis=0)                       np.concatenate (one dtype for all)
split(x, indices_or_sections, axis=0)             np.split: a list of arrays
strided_slice(x, begin, end, strides=None, axes=None)
                                                  ONNX Slice / NumPy slicing: negative indices
                                                  and steps, begin and end clamped to the axis
take(x, indices, axis=None, mode="raise")         np.take: axis None flattens x; negative
                                                  indices count from the end; an embedding
                                                  lookup is take(table, ids, axis=0)
flatten(x, axis=1)                                ONNX Flatten: 2-D at axis
squeeze(x, axis=None) / expand_dims(x, axis)      np.squeeze / np.expand_dims
cast(x, dtype)                                    x.astype(dtype)

take's out-of-range indices follow its mode on every target, as np.take's: "raise" (the
default) is an InputError naming the first bad index and the axis length, "clip" clamps to
the axis (negative indices become 0), "wrap" takes them modulo its length. The kernels check
the indices where they live (on the device) and never read outside x: under "raise" a kernel
counts the bad indices into one word that is read back after it (a synchronization), and the
message is made from the indices then.

cast on the numpy target is NumPy's astype (float to int truncates toward zero; NaN and
out-of-range values give what NumPy gives, which depends on the platform). The kernels define
both: NaN becomes 0 and out-of-range values saturate to the integer type's minimum or maximum
(as OpenCL's convert_T_sat_rtz and PTX's cvt.rzi); integer to integer wraps as NumPy does;
float64 to float16 rounds through float32 (in rare ties one float16 ulp from NumPy).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..eager import call
from ..errors import DTypeError, InputError
from ..half import STORAGE_DTYPES
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import DTYPES, TensorType, normalize_axis, product, simplify_dim
from . import _slicing as sl
from ._layout import _same

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: concatenate takes up to this many arrays in one call
MAX_ARRAYS = 32
_HALF = KernelInfo(storage_dtypes=STORAGE_DTYPES)
_STATIC = (set(range(64)),)


def _dtype(op: str, name: str, t: TensorType) -> None:
    if t.dtype not in DTYPES:
        raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: "
                         f"{', '.join(DTYPES)}")


def _concat_rel(inputs, attrs, rules=None):
    rules = [] if rules is None else rules
    first = inputs[0]
    for i, t in enumerate(inputs):
        _dtype("concatenate", f"arrays[{i}]", t)
        if t.dtype != first.dtype:
            raise DTypeError(f"concatenate: arrays[{i}] has dtype {t.dtype} but arrays[0] has "
                             f"{first.dtype}; allowed: one dtype for every array (cast first)")
        if t.ndim != first.ndim:
            raise InputError(f"concatenate: arrays[{i}] has shape {t.shape} (rank {t.ndim}) but "
                             f"arrays[0] has shape {first.shape} (rank {first.ndim}); every "
                             "array must have the same rank")
    if first.ndim == 0:
        raise InputError("concatenate: arrays[0] is 0-d; allowed: arrays of rank >= 1")
    axis = normalize_axis(attrs.axis, first.ndim, "axis")
    for i, t in enumerate(inputs[1:], 1):
        for a in range(first.ndim):
            if a != axis:
                _same("concatenate", t.shape[a], first.shape[a],
                      f"arrays[{i}].shape[{a}] (arrays[0].shape[{a}] = {first.shape[a]}, "
                      f"axis={attrs.axis})", rules)
    shape = list(first.shape)
    shape[axis] = simplify_dim(sum(sympy.sympify(t.shape[axis]) for t in inputs))
    return TensorType(tuple(shape), first.dtype)


def _concat_rules(inputs, attrs):
    out: list = []
    _concat_rel(inputs, attrs, out)
    return out


def _split_rel(inputs, attrs):
    (x,) = inputs
    _dtype("split", "x", x)
    if x.ndim == 0:
        raise InputError("split: x is 0-d; allowed: arrays of rank >= 1")
    axis = normalize_axis(attrs.axis, x.ndim, "axis")
    n = sl.constant("split", x.shape, axis, "split")
    out = []
    for _, length in sl.split_points(attrs, n):
        shape = list(x.shape)
        shape[axis] = length
        out.append(TensorType(tuple(shape), x.dtype))
    return tuple(out)


def _slice_rel(inputs, attrs):
    (x,) = inputs
    _dtype("strided_slice", "x", x)
    return TensorType(tuple(length for _, _, length in sl.slices(attrs, x.shape)), x.dtype)


def _take_rel(inputs, attrs):
    x, ind = inputs
    _dtype("take", "x", x)
    if ind.dtype not in INTS:
        raise DTypeError(f"take: indices dtype {ind.dtype!r} is not an integer dtype; allowed: "
                         f"{', '.join(INTS)}")
    if attrs.axis is None:
        return TensorType(ind.shape, x.dtype)
    axis = normalize_axis(attrs.axis, x.ndim, "axis")
    return TensorType(x.shape[:axis] + ind.shape + x.shape[axis + 1:], x.dtype)


def _take_rules(inputs, attrs):
    x, ind = inputs
    n = product(x.shape) if attrs.axis is None else x.shape[normalize_axis(attrs.axis, x.ndim)]
    ok = sympy.Or(sympy.sympify(n) > 0, sympy.Eq(sympy.sympify(product(ind.shape)), 0))
    if ok is sympy.false:
        raise InputError(f"take: x has shape {x.shape}, nothing to take along axis={attrs.axis}, "
                         f"but indices has shape {ind.shape}; allowed: empty indices")
    if ok is sympy.true:
        return []
    return [Constraint(ok, "take: the axis has size {} but indices holds {} element(s); an "
                           "empty axis allows only empty indices", (n, product(ind.shape)))]


def flatten_axis(attrs, ndim: int) -> int:
    """flatten's axis in 0..ndim (ONNX allows -ndim..ndim)."""
    if not -ndim <= attrs.axis <= ndim:
        raise InputError(f"flatten: axis={attrs.axis} is out of range for an input of rank "
                         f"{ndim}; allowed: {-ndim}..{ndim}")
    return attrs.axis % ndim if attrs.axis < 0 else attrs.axis


def _reshaped_rel(op: str):
    def rel(inputs, attrs):
        (x,) = inputs
        _dtype(op, "x", x)
        if op == "flatten":
            a = flatten_axis(attrs, x.ndim)
            shape = (product(x.shape[:a]), product(x.shape[a:]))
        elif op == "squeeze":
            axes = sl.squeeze_axes(op, x.shape, attrs.axis)
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        else:
            shape = sl.expanded_shape(op, x.shape, attrs.axis)
        return TensorType(shape, x.dtype)
    return rel


def _cast_rel(inputs, attrs):
    (x,) = inputs
    _dtype("cast", "x", x)
    return TensorType(x.shape, attrs.dtype)


# -- NumPy references -------------------------------------------------------------------------

def take_axis_length(shape, attrs) -> int:
    """The length of the axis take indexes (the whole size where axis is None)."""
    return (int(np.prod(shape, dtype=np.int64)) if attrs.axis is None
            else int(shape[normalize_axis(attrs.axis, len(shape))]))


def check_take_indices(indices, n: int, attrs) -> None:
    """An InputError naming the first index out of range of an axis of length ``n``."""
    bad = (indices < -n) | (indices >= n) if indices.dtype.kind == "i" else indices >= n
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"take: indices{list(where)} = {int(indices[where])} is out of range "
                         f"for axis={attrs.axis} of length {n}; allowed: {-n}..{n - 1} "
                         "(mode='clip' clamps to the axis, mode='wrap' wraps around it)")


def take_positions(indices, n: int, attrs):
    """The int64 positions along the axis that take reads, by its mode (NumPy's rules)."""
    if attrs.mode == "raise" or n == 0:
        check_take_indices(indices, n, attrs)
        return indices.astype(np.int64)
    if indices.dtype.kind == "u":  # no negative values: compared as unsigned
        u = indices.astype(np.uint64)
        return (u % np.uint64(n) if attrs.mode == "wrap" else np.minimum(u, np.uint64(n - 1))
                ).astype(np.int64)
    q = indices.astype(np.int64)
    return q % n if attrs.mode == "wrap" else np.clip(q, 0, n - 1)


def take_reference(x, indices, attrs):
    """np.take(x, indices, axis, mode): out-of-range indices an InputError naming the first
    one under mode="raise"."""
    positions = take_positions(indices, take_axis_length(x.shape, attrs), attrs)
    if attrs.axis is None:
        return np.take(x, positions)
    # indexing, not np.take: np.take copies a strided x whole first (a qkv split's transposed
    # view: three whole copies for its three parts)
    out = x[(slice(None),) * normalize_axis(attrs.axis, x.ndim) + (positions,)]
    return out.copy() if np.may_share_memory(out, x) else out


def cast_reference(x, attrs):
    """x.astype(dtype); NaN and out-of-range floats give NumPy's (platform's) values."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(attrs.dtype)


def _slice_reference(x, attrs):
    """Python's slicing itself: x[..., begin:end:step, ...] on each axis of ``axes``."""
    sl.slices(attrs, x.shape)  # the checks
    index = [slice(None)] * x.ndim
    axes = attrs.axes if attrs.axes is not None else range(len(attrs.begin))
    for a, b, e, s in zip(axes, attrs.begin, attrs.end, attrs.strides):
        index[a] = slice(b, e, s)
    return x[tuple(index)].copy()


_REFS = {
    "concatenate": lambda *a: np.concatenate(a[:-1], axis=a[-1].axis),
    "split": lambda x, a: tuple(p.copy() for p in np.split(x, a.indices_or_sections,
                                                           axis=a.axis)),
    "strided_slice": _slice_reference,
    "take": take_reference,
    "flatten": lambda x, a: x.reshape(_reshaped_rel("flatten")(
        (TensorType(x.shape, x.dtype.name),), a).shape).copy(),
    "squeeze": lambda x, a: np.squeeze(x, axis=a.axis).copy(),
    "expand_dims": lambda x, a: np.expand_dims(x, a.axis).copy(),
    "cast": cast_reference,
}


def _cases(op: str):
    def t(shape, dtype="float32"):
        return TensorType(shape, dtype)
    big, small = {
        "concatenate": (((t((4096, 2048)), t((4096, 2048))), {"axis": 1}),
                        ((t((3, 5, 7), "int16"), t((3, 2, 7), "int16"), t((3, 1, 7), "int16")),
                         {"axis": -2})),
        "split": (((t((4096, 4096)),), {"indices_or_sections": 4, "axis": 1}),
                  ((t((7, 12, 3), "float16"),), {"indices_or_sections": (2, 9), "axis": 1})),
        "strided_slice": (((t((4096, 4096)),), {"begin": (0, 1), "end": (4096, 4096),
                                                "strides": (2, 2)}),
                          ((t((7, 9, 5), "uint8"),), {"begin": (-1, 1), "end": (-8, 100),
                                                      "strides": (-2, 3), "axes": (0, 2)})),
        "take": (((t((30522, 768)), t((32, 128), "int32")), {"axis": 0}),
                 ((t((7, 5, 3), "float16"), t((4, 2), "int64")), {"axis": 1})),
        "flatten": (((t((256, 64, 16, 16)),), {}), ((t((3, 5, 7), "int8"),), {"axis": 2})),
        "squeeze": (((t((4096, 1, 4096)),), {}), ((t((3, 1, 7), "int64"),), {"axis": -2})),
        "expand_dims": (((t((4096, 4096)),), {"axis": 0}),
                        ((t((3, 7), "bool"),), {"axis": (0, -1)})),
        "cast": (((t((4096, 4096)),), {"dtype": "float16"}),
                 ((t((7, 13), "float64"),), {"dtype": "int8"})),
    }[op]
    return [Case(big[0], big[1], "bench"), Case(small[0], small[1], "small")]


_DOCS = {"concatenate": "Arrays joined along an axis (np.concatenate).",
         "split": "An array cut along an axis into pieces (np.split).",
         "strided_slice": "A slice with begin, end and step per axis (ONNX Slice).",
         "take": "Elements or slices picked by integer indices (np.take; a gather).",
         "flatten": "x as 2-D: the axes before axis, and the rest (ONNX Flatten).",
         "squeeze": "x without axes of size 1 (np.squeeze).",
         "expand_dims": "x with new axes of size 1 (np.expand_dims).",
         "cast": "x converted to another dtype (astype)."}
_REG = {
    "concatenate": dict(attrs=sl.ConcatAttrs, num_inputs=MAX_ARRAYS,
                        optional_inputs=MAX_ARRAYS - 1, type_rel=_concat_rel,
                        constraints=_concat_rules,
                        input_names=tuple(f"arrays_{i}" for i in range(MAX_ARRAYS))),
    "split": dict(attrs=sl.SplitAttrs, type_rel=_split_rel, static_axes=lambda a: _STATIC),
    "strided_slice": dict(attrs=sl.SliceAttrs, type_rel=_slice_rel,
                          static_axes=lambda a: _STATIC),
    "take": dict(attrs=sl.TakeAttrs, num_inputs=2, type_rel=_take_rel,
                 constraints=_take_rules, input_names=("x", "indices")),
    "flatten": dict(attrs=sl.FlattenAttrs, type_rel=_reshaped_rel("flatten")),
    "squeeze": dict(attrs=sl.AxesAttrs, type_rel=_reshaped_rel("squeeze")),
    "expand_dims": dict(attrs=sl.AxesAttrs, type_rel=_reshaped_rel("expand_dims")),
    "cast": dict(attrs=sl.CastAttrs, type_rel=_cast_rel),
}
for _op, _kw in _REG.items():
    register_op(_op, **{"num_inputs": 1, "input_names": ("x",), **_kw},
                pattern=OpPattern.INJECTIVE, reference=_REFS[_op], kernel_info=_HALF,
                cases=(lambda op: lambda: _cases(op))(_op), doc=_DOCS[_op],
                example=(lambda op: lambda: (_cases(op)[1].inputs, _cases(op)[1].attrs))(_op))


# -- eager functions --------------------------------------------------------------------------

def concatenate(arrays, axis=0, *, target=None):
    """The arrays joined along ``axis`` (np.concatenate); every array has one dtype and the
    same sizes on the other axes."""
    arrays = tuple(arrays)
    return call("concatenate", arrays, target=target, axis=axis)


def split(x, indices_or_sections, axis=0, *, target=None):
    """x cut along ``axis`` (np.split): an int N gives N equal pieces (N must divide the
    axis), a tuple of indices the pieces between them. Returns a list."""
    out = call("split", (x,), target=target, indices_or_sections=indices_or_sections, axis=axis)
    return list(out) if isinstance(out, tuple) else [out]


def strided_slice(x, begin, end, strides=None, axes=None, *, target=None):
    """x[begin:end:strides] on ``axes`` (None: the first len(begin) axes), as ONNX Slice and
    NumPy slicing: negative indices count from the end, negative strides walk backwards, and
    begin and end are clamped to the axis."""
    return call("strided_slice", (x,), target=target, begin=begin, end=end, strides=strides,
                axes=axes)


def take(x, indices, axis=None, mode="raise", *, target=None):
    """np.take(x, indices, axis, mode): axis None indexes the flattened x; negative indices
    count from the end. An index out of range is an InputError naming it and the axis length
    (mode="raise"), clamped to the axis ("clip") or wrapped around it ("wrap"), the same on
    every target."""
    if isinstance(indices, (list, tuple, int, np.integer)):
        indices = np.asarray(indices, np.int64)
    return call("take", (x, indices), target=target, axis=axis, mode=mode)


def flatten(x, axis=1, *, target=None):
    """x as 2-D (prod(x.shape[:axis]), prod(x.shape[axis:])) (ONNX Flatten): a view of x (no
    kernel, no copy) where its strides allow, else a copy made on x's device."""
    return call("flatten", (x,), target=target, axis=axis)


def squeeze(x, axis=None, *, target=None):
    """x without its axes of size 1 (``axis``: only those, each of size 1): a view of x
    where its strides allow, else a copy made on x's device."""
    return call("squeeze", (x,), target=target, axis=axis)


def expand_dims(x, axis, *, target=None):
    """x with a new axis of size 1 at each position of ``axis`` (np.expand_dims): a view of x
    where its strides allow, else a copy made on x's device."""
    return call("expand_dims", (x,), target=target, axis=axis)


def cast(x, dtype, *, target=None):
    """x converted to ``dtype``; see the module docstring for NaN and out-of-range values."""
    return call("cast", (x,), target=target, dtype=dtype)
