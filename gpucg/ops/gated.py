"""Gated activations, the MLP of LLaMA-style layers (SwiGLU, GeGLU), in one pass:

silu_and_mul(x)                       y = silu(x[..., :d]) * x[..., d:]
gelu_and_mul(x, approximate="none")   y = gelu(x[..., :d]) * x[..., d:]  ("tanh": its tanh form)

x (..., 2d) -> y (..., d), as vLLM's ``silu_and_mul`` / ``gelu_and_mul`` and FlashInfer's. The
last dimension must be even. The activations are the elementwise family's own (gpucg/ops/_unary.py):
the same values at NaN, the infinities and large magnitudes. float16 and bfloat16 are stored in
16 bits and computed in float32 (act and product rounded once, at the store).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen import literals
from ..eager import call
from ..errors import AttrError, DTypeError, InputError
from ..op import Case, Constraint, KernelInfo, NoAttrs, OpPattern, register_op
from ..shape import TensorType, var
from ._unary import TABLE

DTYPES = ("float16", "bfloat16", "float32", "float64")
#: operator -> the activation of its gate (an entry of gpucg/ops/_unary.py's TABLE)
ACTIVATION = {"silu_and_mul": "silu", "gelu_and_mul": "gelu"}


@dataclass(frozen=True)
class GeluAndMulAttrs:
    """gelu_and_mul's gelu: "none" (exact, with erf) or "tanh" (its tanh approximation)."""

    approximate: str = "none"

    def __post_init__(self):
        if self.approximate not in ("none", "tanh"):
            raise AttrError(f"gelu_and_mul: approximate={self.approximate!r} is not allowed; "
                            "allowed: 'none' (erf), 'tanh'")


def act_attrs(op: str, attrs) -> dict:
    """The attributes of the gate's activation (gelu's approximate)."""
    return {"approximate": attrs.approximate} if op == "gelu_and_mul" else {}


def _rel(op: str):
    def rel(inputs, attrs):
        (x,) = inputs
        if x.dtype not in DTYPES:
            raise DTypeError(f"{op}: x dtype {x.dtype!r} is not supported; allowed: "
                             f"{', '.join(DTYPES)}")
        if x.ndim == 0:
            raise InputError(f"{op}: x is 0-d; it needs a last dimension of even length 2d "
                             "(gate, then up)")
        return TensorType(tuple(x.shape[:-1]) + (sympy.floor(sympy.sympify(x.shape[-1]) / 2),),
                          x.dtype)
    return rel


def _constraints(op: str):
    def constraints(inputs, attrs):
        last = sympy.sympify(inputs[0].shape[-1])
        return [Constraint(sympy.Eq(sympy.Mod(last, 2), 0),
                           f"{op}: x has last dimension {{}}, which must be even (2d: the gate "
                           "x[..., :d], then x[..., d:])", (last,))]
    return constraints


def _reference(op: str):
    def ref(x: np.ndarray, attrs):
        ct = literals.compute_dtype(x.dtype.name)
        d = x.shape[-1] // 2
        with np.errstate(all="ignore"):
            gate = x[..., :d].astype(ct)
            y = TABLE[ACTIVATION[op]].numpy(gate, act_attrs(op, attrs)) * x[..., d:].astype(ct)
            return y.astype(x.dtype)
    return ref


def _cases():
    t = TensorType
    return [Case((t((16, 2 * 11008), "float16"),), {}, "bench", "decode batch 16, LLaMA-7B"),
            Case((t((4096, 2 * 4096), "float16"),), {}, "bench", "prefill 4096 tokens"),
            Case((t((3, 2 * 1000), "float16"),), {}, "small", "rows of whole vectors"),
            Case((t((2, 3, 2 * 37), "float32"),), {}, "small", "odd d: scalar accesses"),
            Case((t((5, 2 * 520), "float64"),), {}, "small", "a tail past the chunk")]


for _op in ACTIVATION:
    register_op(_op, attrs=GeluAndMulAttrs if _op == "gelu_and_mul" else NoAttrs, num_inputs=1,
                type_rel=_rel(_op), constraints=_constraints(_op), reference=_reference(_op),
                pattern=OpPattern.INJECTIVE, input_names=("x",), cases=_cases,
                kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
                example=lambda: ((TensorType((var("n"), 2 * 11008), "float16"),), {}),
                doc=f"{ACTIVATION[_op]}(x[..., :d]) * x[..., d:] for x (..., 2d), in one pass.")


def silu_and_mul(x, *, target=None):
    """silu(x[..., :d]) * x[..., d:] for x of shape (..., 2d): SwiGLU's gate in one pass.

    Args:
        x: float16, bfloat16, float32 or float64, its last dimension even (gate, then up).
        target: "cuda", "opencl", "numpy" or None for the default target.

    Returns:
        An array of shape (..., d) and x's dtype.
    """
    return call("silu_and_mul", (x,), target=target)


def gelu_and_mul(x, approximate="none", *, target=None):
    """gelu(x[..., :d]) * x[..., d:] for x of shape (..., 2d) (GeGLU), in one pass;
    ``approximate`` "none" (erf) or "tanh". See :func:`silu_and_mul`."""
    return call("gelu_and_mul", (x,), target=target, approximate=approximate)
