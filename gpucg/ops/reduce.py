"""Reductions: sum over one axis, on the shared reduce schedule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import DTypeError, require_int
from ..op import Case, KernelInfo, OpPattern, register_op
from ..shape import TensorType, normalize_axis, simplify_dim
from .scan import default_out_dtype

NUMERIC = ("int32", "int64", "float32", "float64")


@dataclass(frozen=True)
class ReduceAttrs:
    """Attributes of a one-axis reduction: the axis (negative counts from the end)."""

    axis: int = -1

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))


def _sum_rel(inputs, attrs: ReduceAttrs):
    (x,) = inputs
    if x.dtype not in NUMERIC:
        raise DTypeError(f"sum: x dtype {x.dtype!r} is not supported; allowed: {', '.join(NUMERIC)}")
    axis = normalize_axis(attrs.axis, x.ndim)
    return TensorType(tuple(simplify_dim(d) for i, d in enumerate(x.shape) if i != axis),
                      default_out_dtype(x.dtype))


register_op("sum", attrs=ReduceAttrs, num_inputs=1, type_rel=_sum_rel, pattern=OpPattern.REDUCE,
            reference=lambda x, attrs: np.sum(x, axis=attrs.axis,
                                              dtype=default_out_dtype(x.dtype.name)),
            input_names=("x",),
            kernel_info=KernelInfo(combine=lambda a, b: f"({a} + {b})", identity="0"),
            cases=lambda: [Case((TensorType((4096, 4096), "float32"),), {"axis": -1}, "bench"),
                           Case((TensorType((3, 257, 5), "int32"),), {"axis": 1}, "small")],
            doc="Sum over one axis.")


def sum(x, axis=-1, *, target=None):  # noqa: A001
    """Sum over one axis (bool/int32 accumulate in int64, as NumPy)."""
    return call("sum", (x,), target=target, axis=axis)


# -- gradient of sum: the output gradient broadcast back (gpucg/ops/_grads.py) ------------------
from ..op import register_gradient  # noqa: E402
from ._grads import sum_gradient  # noqa: E402

register_gradient("sum", sum_gradient)
