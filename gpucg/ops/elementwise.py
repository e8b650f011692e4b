"""Small operators built on the shared schedules: relu (injective), add (broadcast),
sum (reduce). They show how little a simple operator needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import DTypeError, require_int
from ..op import KernelInfo, OpPattern, register_op
from ..shape import TensorType, broadcast_shapes, normalize_axis, simplify_dim
from .scan import default_out_dtype

NUMERIC = ("int32", "int64", "float32", "float64")


def _numeric(op: str, name: str, t: TensorType) -> None:
    if t.dtype not in NUMERIC:
        raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: {', '.join(NUMERIC)}")


def _relu_rel(inputs, attrs):
    _numeric("relu", "x", inputs[0])
    return inputs[0]


def _add_rel(inputs, attrs):
    a, b = inputs
    _numeric("add", "a", a)
    _numeric("add", "b", b)
    if a.dtype != b.dtype:
        raise DTypeError(f"add: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    return TensorType(broadcast_shapes("add", a, b), a.dtype)


@dataclass(frozen=True)
class ReduceAttrs:
    """Attributes of a one-axis reduction: the axis (negative counts from the end)."""

    axis: int = -1

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))


def _sum_rel(inputs, attrs: ReduceAttrs):
    (x,) = inputs
    _numeric("sum", "x", x)
    axis = normalize_axis(attrs.axis, x.ndim)
    return TensorType(tuple(simplify_dim(d) for i, d in enumerate(x.shape) if i != axis),
                      default_out_dtype(x.dtype))


register_op("relu", num_inputs=1, type_rel=_relu_rel, pattern=OpPattern.INJECTIVE,
            reference=lambda x, attrs: np.maximum(x, x.dtype.type(0)), input_names=("x",),
            kernel_info=KernelInfo(expr=lambda x, t: f"({x} > ({t})0 ? {x} : ({t})0)"),
            doc="max(x, 0) elementwise.")
register_op("add", num_inputs=2, type_rel=_add_rel, pattern=OpPattern.BROADCAST,
            reference=lambda a, b, attrs: np.add(a, b), input_names=("a", "b"),
            kernel_info=KernelInfo(expr=lambda a, b, t: f"({a} + {b})"),
            doc="a + b with NumPy broadcasting.")
register_op("sum", attrs=ReduceAttrs, num_inputs=1, type_rel=_sum_rel, pattern=OpPattern.REDUCE,
            reference=lambda x, attrs: np.sum(x, axis=attrs.axis,
                                              dtype=default_out_dtype(x.dtype.name)),
            input_names=("x",),
            kernel_info=KernelInfo(combine=lambda a, b: f"({a} + {b})", identity="0"),
            doc="Sum over one axis.")


def relu(x, *, target=None):
    """max(x, 0) elementwise."""
    return call("relu", (x,), target=target)


def add(a, b, *, target=None):
    """a + b with NumPy broadcasting (same dtype)."""
    return call("add", (a, b), target=target)


def sum(x, axis=-1, *, target=None):  # noqa: A001
    """Sum over one axis (bool/int32 accumulate in int64, as NumPy)."""
    return call("sum", (x,), target=target, axis=axis)
