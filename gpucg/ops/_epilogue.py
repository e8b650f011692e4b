"""The fused epilogue that conv2d and the GEMM family share: what it computes, its attribute
checks, its NumPy form, and the template parameters of its C form (templates/gemm/_epilogue.j2).

For an accumulated value ``acc`` of output element (.., channel c, ..)::

    z = alpha * acc + bias[c]
    y = act(z) + beta * residual          residual_position "after" (the default)
    y = act(z + beta * residual)          residual_position "before"

computed in float32 (float64 for float64 data), in registers, before the single store.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from ..errors import AttrError, DTypeError, InputError, describe
from ..op import Constraint

#: the fused activations: "gelu" is the exact (erf) form, "gelu_tanh" the tanh approximation
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "sigmoid", "tanh")
RESIDUAL_POSITIONS = ("after", "before")


def check_scale(name: str, value) -> float:
    """``value`` as a finite float, or AttrError naming the attribute."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise AttrError(f"{name}={describe(value)} must be a number")
    value = float(value)
    if not math.isfinite(value):
        raise AttrError(f"{name}={value!r} must be finite")
    return value


def check_epilogue(attrs) -> None:
    """Validate and normalize ``activation``, ``alpha``, ``beta`` and ``residual_position`` of a
    frozen attrs dataclass (called from its ``__post_init__``)."""
    if attrs.activation not in ACTIVATIONS:
        raise AttrError(f"activation={attrs.activation!r} is not allowed; allowed: "
                        f"{', '.join(map(repr, ACTIVATIONS))}")
    if attrs.residual_position not in RESIDUAL_POSITIONS:
        raise AttrError(f"residual_position={attrs.residual_position!r} is not allowed; allowed: "
                        f"{', '.join(map(repr, RESIDUAL_POSITIONS))}")
    object.__setattr__(attrs, "alpha", check_scale("alpha", attrs.alpha))
    object.__setattr__(attrs, "beta", check_scale("beta", attrs.beta))


def residual_rules(op: str, residual, out) -> list:
    """The residual must have the output's rank, dtype and sizes: errors for what the types
    decide, :class:`gpucg.op.Constraint` rules (checked by the dispatcher) for symbolic sizes."""
    if residual.ndim != out.ndim:
        raise InputError(f"{op}: residual must have the output's shape {tuple(out.shape)}, "
                         f"got {residual}")
    if residual.dtype != out.dtype:
        raise DTypeError(f"{op}: residual dtype {residual.dtype} must equal the output dtype "
                         f"{out.dtype}")
    rules = []
    for axis, (got, want) in enumerate(zip(residual.shape, out.shape)):
        same = sympy.Eq(sympy.sympify(got), sympy.sympify(want))
        if same is sympy.false:
            raise InputError(f"{op}: residual must have the output's shape {tuple(out.shape)}, "
                             f"got {residual}")
        if same is not sympy.true:
            rules.append(Constraint(same, f"{op}: residual.shape[{axis}] is {{}} but the output's "
                                          f"is {{}}", (got, want)))
    return rules


def with_residual(arrays: tuple, bias, residual, n: int, dtype) -> tuple:
    """The inputs of a call: ``arrays`` then the bias and the residual that are given (a
    residual without a bias gets a zero bias of length ``n``)."""
    if residual is not None and bias is None:
        bias = np.zeros(n, dtype)
    return arrays + tuple(a for a in (bias, residual) if a is not None)


# -- NumPy ------------------------------------------------------------------------------------

# W. J. Cody's rational approximations of erf and erfc (Math. Comp. 23, 1969), as in most libms:
# accurate to float64 rounding, so the host epilogue and the references need no SciPy.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)


def erf(x) -> np.ndarray:
    """The error function, elementwise, in float64 (vectorized NumPy; no SciPy needed)."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    out = np.empty_like(x)
    small = ax <= 0.46875
    if small.any():
        y = ax[small]
        z = y * y
        num, den = _A[4] * z, z
        for a, b in zip(_A[:3], _B[:3]):
            num, den = (num + a) * z, (den + b) * z
        out[small] = x[small] * (num + _A[3]) / (den + _B[3])
    mid = ~small & (ax <= 4.0)
    if mid.any():
        y = ax[mid]
        num, den = _C[8] * y, y
        for c, d in zip(_C[:7], _D[:7]):
            num, den = (num + c) * y, (den + d) * y
        erfc = (num + _C[7]) / (den + _D[7]) * np.exp(-y * y)
        out[mid] = np.copysign(1.0 - erfc, x[mid])
    big = ~small & ~mid & ~np.isnan(x)
    if big.any():
        y = ax[big]
        z = 1.0 / (y * y)
        num, den = _P[5] * z, z
        for p, q in zip(_P[:4], _Q[:4]):
            num, den = (num + p) * z, (den + q) * z
        r = z * (num + _P[4]) / (den + _Q[4])
        erfc = ((1 / math.sqrt(math.pi)) - r) / y * np.exp(-y * y)
        out[big] = np.copysign(1.0 - erfc, x[big])
    out[np.isnan(x)] = np.nan
    return out


def activate(y: np.ndarray, activation) -> np.ndarray:
    """The activation on a float array (in place where NumPy allows)."""
    if activation is None:
        return y
    if activation == "relu":
        return np.maximum(y, 0, out=y)
    if activation == "sigmoid":
        return 1 / (1 + np.exp(-y))
    if activation == "tanh":
        return np.tanh(y, out=y)
    if activation == "gelu":
        return (0.5 * y * (1 + erf(y * (1 / math.sqrt(2))))).astype(y.dtype, copy=False)
    if activation == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y * y * y)))
    raise AttrError(f"activation={activation!r} is unknown")


def apply(y: np.ndarray, bias, residual, attrs) -> np.ndarray:
    """The epilogue on a float result ``y`` (modified in place where possible); ``bias``
    already broadcasts against ``y``, as does ``residual``."""
    if attrs.alpha != 1.0:
        y *= y.dtype.type(attrs.alpha)
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)
    scaled = None
    if residual is not None:
        scaled = residual.astype(y.dtype, copy=False)
        if attrs.beta != 1.0:
            scaled = scaled * y.dtype.type(attrs.beta)
    if scaled is not None and attrs.residual_position == "before":
        y += scaled
    y = activate(y, attrs.activation)
    if scaled is not None and attrs.residual_position == "after":
        y += scaled
    return y


# -- C ----------------------------------------------------------------------------------------

def template_params(attrs, has_bias: bool, has_residual: bool) -> dict:
    """The parameters of templates/gemm/_epilogue.j2 for a call."""
    return dict(has_bias=has_bias, has_residual=has_residual, activation=attrs.activation or "none",
                ep_alpha=attrs.alpha, ep_beta=attrs.beta,
                residual_before=attrs.residual_position == "before")
