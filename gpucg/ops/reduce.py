"""Reductions: sum, mean, prod, max, min, argmax, argmin, all and any, as NumPy has them.

``axis`` is None (every axis), an int or a tuple of ints (argmax/argmin: None or an int), and
``keepdims`` keeps reduced axes as length 1. Result dtypes are NumPy's on a 64-bit platform:
sum and prod of bool and signed integers narrower than 64 bits are int64, of unsigned ones
uint64; mean of bool and integers is float64; max/min keep the dtype; argmax/argmin give
int64; all/any give bool. NaN wins max/min and argmax/argmin (the first NaN); ties give the
first index. Empty reductions give NumPy's identities (sum 0, prod 1, all True, any False,
mean NaN); max, min, argmax and argmin of an empty axis are errors, as in NumPy. float16 and
bfloat16 are stored in 16 bits and reduced in float32.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import DTypeError, require_bool
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..codegen.literals import compute_dtype
from ..half import FP8_DTYPES, is_float
from ..shape import DTYPES, TensorType, var
from ._axes import axis_attr, flat_axis, normalize_axes, reduced_count, reduced_shape

#: every dtype the reductions accept (FP8 is for matrix products: dense_fp8; widen it first)
IN_DTYPES = tuple(d for d in DTYPES if d not in FP8_DTYPES)
#: reductions whose kernels write the index of the chosen element
ARG_OPS = ("argmax", "argmin")
#: reductions with no identity: an empty reduction is an error
NO_IDENTITY = ("max", "min", "argmax", "argmin")
OPS = ("sum", "mean", "prod", "max", "min", "argmax", "argmin", "all", "any")

_SIGNED = ("bool", "int8", "int16", "int32")
_UNSIGNED = ("uint8", "uint16", "uint32")


@dataclass(frozen=True)
class ReduceAttrs:
    """Attributes of sum, mean, prod, max, min, all and any.

    Attributes:
        axis: None (every axis), an int or a tuple of ints; negative counts from the end.
        keepdims: keep the reduced axes as length 1.
    """

    axis: object = None
    keepdims: bool = False

    def __post_init__(self):
        object.__setattr__(self, "axis", axis_attr(self.axis))
        object.__setattr__(self, "keepdims", require_bool("keepdims", self.keepdims))


@dataclass(frozen=True)
class ArgReduceAttrs:
    """Attributes of argmax and argmin: ``axis`` None (the flattened input) or an int."""

    axis: int | None = None
    keepdims: bool = False

    def __post_init__(self):
        object.__setattr__(self, "axis", axis_attr(self.axis, allow_tuple=False))
        object.__setattr__(self, "keepdims", require_bool("keepdims", self.keepdims))


def out_dtype(op: str, dtype: str) -> str:
    """NumPy's result dtype of reduction ``op`` over ``dtype`` (64-bit platform)."""
    if op in ("sum", "prod"):
        return "int64" if dtype in _SIGNED else "uint64" if dtype in _UNSIGNED else dtype
    if op == "mean":
        return dtype if is_float(dtype) else "float64"
    if op in ARG_OPS:
        return "int64"
    if op in ("all", "any"):
        return "bool"
    return dtype


def acc_dtype(op: str, dtype: str) -> str:
    """The dtype the kernels accumulate in: the result's, float16 and bfloat16 widened to
    float32."""
    if op in ("all", "any"):
        return "bool"
    acc = dtype if op in ("max", "min") + ARG_OPS else out_dtype(op, dtype)
    return compute_dtype(acc)


def reduced_axes(op: str, x: TensorType, attrs) -> tuple[int, ...]:
    """The axes ``attrs`` reduce for input type ``x``, normalized and sorted."""
    return normalize_axes(attrs.axis, x.ndim, op)


def _type_rel(op: str):
    def rel(inputs, attrs):
        (x,) = inputs
        if x.dtype not in IN_DTYPES:
            raise DTypeError(f"{op}: x dtype {x.dtype!r} is not supported; "
                             f"allowed: {', '.join(IN_DTYPES)}")
        axes = reduced_axes(op, x, attrs)
        return TensorType(reduced_shape(x.shape, axes, attrs.keepdims), out_dtype(op, x.dtype))
    return rel


def _constraints(op: str):
    def constraints(inputs, attrs):
        if op not in NO_IDENTITY:
            return []
        (x,) = inputs
        count = sympy.sympify(reduced_count(x.shape, reduced_axes(op, x, attrs)))
        return [Constraint(count >= 1, f"{op}: axis={attrs.axis!r} reduces {{}} elements: a "
                                       f"zero-size reduction has no {op} (as in NumPy); reduce "
                                       "a non-empty axis", (count,))]
    return constraints


def _reference(op: str):
    def ref(x: np.ndarray, attrs):
        axes = normalize_axes(attrs.axis, x.ndim, op)
        if op in ARG_OPS:
            fn = np.argmax if op == "argmax" else np.argmin
            out = fn(x, axis=attrs.axis, keepdims=attrs.keepdims)
        elif op == "mean":
            acc = acc_dtype(op, np.dtype(x.dtype).name)
            with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is NaN
                out = np.mean(x, axis=axes, keepdims=attrs.keepdims, dtype=acc)
        else:
            fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
                  "all": np.all, "any": np.any}[op]
            kw = {"dtype": out_dtype(op, np.dtype(x.dtype).name)} if op in ("sum", "prod") else {}
            out = fn(x, axis=axes, keepdims=attrs.keepdims, **kw)
        return np.asarray(out).astype(out_dtype(op, np.dtype(x.dtype).name), copy=False)
    return ref


#: reduce_cols on rows splits them down their one column: the (3, 257) and (5, 2053) cases run
#: that (3 and 17 chunks a row); here 1024 work-groups with one of 128 columns in use would
#: take the simulator 11-16 s a call
_COLS_SPLIT = "its split down a column runs on the (3, 257) and (5, 2053) rows"


def _cases(op: str):
    """The reduce benchmark's calls, and small awkward ones (1, primes, just over a
    work-group, a column reduction, two separate runs of axes)."""
    def cases():
        t = TensorType
        arg = op in ARG_OPS
        bench = [Case((t((4096, 4096), "float32"),), {"axis": -1}, "bench", "(4096, 4096) rows"),
                 Case((t((4, 1 << 24), "float32"),), {"axis": -1}, "bench", "(4, 2^24) rows"),
                 Case((t((4096, 4096), "float32"),), {"axis": 0}, "bench", "(4096, 4096) axis 0"),
                 Case((t((4096, 32000), "float32"),), {"axis": -1}, "bench",
                      "(4096, 32000) a vocabulary")]
        small = [Case((t((1,), "float32"),), {"axis": 0}, "small"),
                 Case((t((3, 257), "int32"),), {"axis": 1}, "small", "just over a work-group"),
                 Case((t((5, 2053), "float64"),), {"axis": -1, "keepdims": True}, "small"),
                 Case((t((37, 5), "int8"),), {"axis": 0}, "small", "a column reduction"),
                 Case((t((2, 70001), "float32"),), {"axis": 1}, "small", "split rows",
                      not_simulated={"reduce_cols": _COLS_SPLIT}),
                 Case((t((7, 3, 11), "uint16"),), {"axis": None}, "small")]
        if not arg:
            small.append(Case((t((6, 5, 7), "float32"),), {"axis": (0, 2)}, "small",
                              "two separate runs of axes"))
        small.append(Case((t((6, 96), "float16"),), {"axis": 1}, "small",
                          "rows of whole 128-bit vectors"))
        return bench + small
    return cases


for _op in OPS:
    register_op(
        _op, attrs=ArgReduceAttrs if _op in ARG_OPS else ReduceAttrs, num_inputs=1,
        type_rel=_type_rel(_op), pattern=OpPattern.REDUCE, reference=_reference(_op),
        input_names=("x",), constraints=_constraints(_op), cases=_cases(_op),
        example=lambda: ((TensorType((var("m"), var("n")), "float32"),), {"axis": -1}),
        # float16 is loaded and stored only; the kernels reduce in float32
        kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
        doc=f"np.{_op} over axis (None, an int{'' if _op in ARG_OPS else ' or a tuple'}), "
            "with keepdims.")


def sum(x, axis=None, keepdims=False, *, target=None):  # noqa: A001
    """Sum over ``axis`` (None: every axis; an int or a tuple), as ``np.sum``.

    Args:
        x: a NumPy, CuPy or PyOpenCL array (any gpucg dtype).
        axis: None, an int or a tuple of ints; negative counts from the end.
        keepdims: keep the reduced axes as length 1.
        target: "cuda", "opencl", "numpy" or None for the default target.

    bool and signed integers sum in int64, unsigned ones in uint64, as NumPy.
    """
    return call("sum", (x,), target=target, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False, *, target=None):
    """Mean over ``axis``, as ``np.mean`` (integers give float64; empty gives NaN)."""
    return call("mean", (x,), target=target, axis=axis, keepdims=keepdims)


def prod(x, axis=None, keepdims=False, *, target=None):
    """Product over ``axis``, as ``np.prod`` (integers multiply in 64 bits, wrapping)."""
    return call("prod", (x,), target=target, axis=axis, keepdims=keepdims)


def max(x, axis=None, keepdims=False, *, target=None):  # noqa: A001
    """Maximum over ``axis``, as ``np.max``: NaN wins; an empty axis is an InputError."""
    return call("max", (x,), target=target, axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims=False, *, target=None):  # noqa: A001
    """Minimum over ``axis``, as ``np.min``: NaN wins; an empty axis is an InputError."""
    return call("min", (x,), target=target, axis=axis, keepdims=keepdims)


def argmax(x, axis=None, keepdims=False, *, target=None):
    """Index (int64) of the maximum along ``axis`` (None: of the flattened input), as
    ``np.argmax``: the first index on ties, the first NaN if any."""
    return call("argmax", (x,), target=target, axis=flat_axis(x, axis), keepdims=keepdims)


def argmin(x, axis=None, keepdims=False, *, target=None):
    """Index (int64) of the minimum along ``axis``, as ``np.argmin``; see :func:`argmax`."""
    return call("argmin", (x,), target=target, axis=flat_axis(x, axis), keepdims=keepdims)


def all(x, axis=None, keepdims=False, *, target=None):  # noqa: A001
    """True where every element along ``axis`` is nonzero (NaN counts), as ``np.all``."""
    return call("all", (x,), target=target, axis=axis, keepdims=keepdims)


def any(x, axis=None, keepdims=False, *, target=None):  # noqa: A001
    """True where some element along ``axis`` is nonzero (NaN counts), as ``np.any``."""
    return call("any", (x,), target=target, axis=axis, keepdims=keepdims)


# -- gradient of sum: the output gradient broadcast back (gpucg/ops/_grads.py) ------------------
from ..op import register_gradient  # noqa: E402
from ._grads import sum_gradient  # noqa: E402

register_gradient("sum", sum_gradient)
