"""Small elementwise operators built on the shared schedules: relu (injective) and add
(broadcast). They show how little a simple operator needs."""

from __future__ import annotations

import numpy as np

from ..eager import call
from ..errors import DTypeError
from ..op import Case, KernelInfo, OpPattern, register_op
from ..shape import TensorType, broadcast_shapes

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


register_op("relu", num_inputs=1, type_rel=_relu_rel, pattern=OpPattern.INJECTIVE,
            reference=lambda x, attrs: np.maximum(x, x.dtype.type(0)), input_names=("x",),
            kernel_info=KernelInfo(expr=lambda x, t: f"({x} > ({t})0 ? {x} : ({t})0)"),
            cases=lambda: [Case((TensorType((1 << 24,), "float32"),), {}, "bench"),
                           Case((TensorType((3, 1001), "float32"),), {}, "small")],
            doc="max(x, 0) elementwise.")
register_op("add", num_inputs=2, type_rel=_add_rel, pattern=OpPattern.BROADCAST,
            reference=lambda a, b, attrs: np.add(a, b), input_names=("a", "b"),
            kernel_info=KernelInfo(expr=lambda a, b, t: f"({a} + {b})"),
            cases=lambda: [Case((TensorType((4096, 4096), "float32"),
                                 TensorType((4096,), "float32")), {}, "bench"),
                           Case((TensorType((3, 1, 7), "int32"), TensorType((5, 1), "int32")), {},
                                "small")],
            doc="a + b with NumPy broadcasting.")
def relu(x, *, target=None):
    """max(x, 0) elementwise."""
    return call("relu", (x,), target=target)


def add(a, b, *, target=None):
    """a + b with NumPy broadcasting (same dtype)."""
    return call("add", (a, b), target=target)
