"""Small operators built on the shared schedules: relu (injective), add (broadcast),
sum (reduce). They show how little a simple operator needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DTypeError, InputError, require_int
from ..op import (OpPattern, register_broadcast_schedule, register_injective_schedule,
                  register_op, register_reduce_schedule)
from ..shape import TensorType, simplify_dim
from .scan import default_out_dtype, normalize_axis

NUMERIC = ("int32", "int64", "float32", "float64")


def _numeric(op: str, name: str, t: TensorType) -> None:
    if t.dtype not in NUMERIC:
        raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: {', '.join(NUMERIC)}")


def _relu_rel(inputs, attrs):
    _numeric("relu", "x", inputs[0])
    return inputs[0]


def broadcast_shapes(op: str, a: TensorType, b: TensorType) -> tuple:
    """NumPy broadcasting over ints and symbols; symbols must match exactly or meet a 1."""
    ra, rb = a.shape[::-1], b.shape[::-1]
    out = []
    for i in range(max(len(ra), len(rb))):
        da = ra[i] if i < len(ra) else 1
        db = rb[i] if i < len(rb) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise InputError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast "
                             f"(dimension -{i + 1}: {da} vs {db})")
    return tuple(out[::-1])


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
            kernel_info={"expr": lambda x, t: f"({x} > ({t})0 ? {x} : ({t})0)"},
            doc="max(x, 0) elementwise.")
register_op("add", num_inputs=2, type_rel=_add_rel, pattern=OpPattern.BROADCAST,
            reference=lambda a, b, attrs: np.add(a, b), input_names=("a", "b"),
            kernel_info={"expr": lambda a, b, t: f"({a} + {b})"},
            doc="a + b with NumPy broadcasting.")
register_op("sum", attrs=ReduceAttrs, num_inputs=1, type_rel=_sum_rel, pattern=OpPattern.REDUCE,
            reference=lambda x, attrs: np.sum(x, axis=attrs.axis,
                                              dtype=default_out_dtype(x.dtype.name)),
            input_names=("x",), kernel_info={"combine": lambda a, b: f"({a} + {b})", "identity": "0"},
            doc="Sum over one axis.")
register_injective_schedule("relu")
register_broadcast_schedule("add")
register_reduce_schedule("sum")


def relu(x, *, target=None):
    """max(x, 0) elementwise."""
    from ..api import call

    return call("relu", (x,), target=target)


def add(a, b, *, target=None):
    """a + b with NumPy broadcasting (same dtype)."""
    from ..api import call

    return call("add", (a, b), target=target)


def sum(x, axis=-1, *, target=None):  # noqa: A001
    """Sum over one axis (bool/int32 accumulate in int64, as NumPy)."""
    from ..api import call

    return call("sum", (x,), target=target, axis=axis)
