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


def _ratio(y, z, num_c, den_c):
    """(num(z) / den(z)) of the two Horner polynomials, in place where possible."""
    num = num_c[-1] * z
    den = z.copy()
    for a, b in zip(num_c[:-2], den_c[:-1]):
        num += a
        num *= z
        den += b
        den *= z
    num += num_c[-2]
    den += den_c[-1]
    num /= den
    return num


# float32: Eigen's rational approximation on [-4, 4] (a few float32 ulp, no branches)
_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
         -7.37332916720468e-03, -1.42647390514189e-02)
_BLOCK = 1 << 15  # elements a block: the temporaries stay in cache


def _erf32(x):
    a = np.clip(x, -4, 4)
    x2 = a * a
    p = np.full_like(a, _ALPHA[0])
    for c in _ALPHA[1:]:
        p *= x2
        p += np.float32(c)
    p *= a
    q = np.full_like(a, _BETA[0])
    for c in _BETA[1:]:
        q *= x2
        q += np.float32(c)
    p /= q
    return p


def erf(x) -> np.ndarray:
    """The error function, elementwise, in blocks: float32 (and float16) in float32 to a few
    ulp, everything else in float64 to float64 rounding (vectorized NumPy; no SciPy)."""
    x = np.asarray(x)
    single = x.dtype in (np.float16, np.float32)
    flat = np.ravel(x.astype(np.float32 if single else np.float64, copy=False))
    out = np.empty_like(flat)
    for i in range(0, flat.size, _BLOCK):
        part = flat[i:i + _BLOCK]
        out[i:i + _BLOCK] = _erf32(part) if single else _erf64(part)
    return out.reshape(x.shape)


def _erf64(x) -> np.ndarray:
    ax = np.abs(x)
    out = np.empty_like(x)
    small = ax <= 0.46875
    if small.any():
        y = ax[small]
        out[small] = x[small] * _ratio(y, y * y, _A[:3] + (_A[3], _A[4]), _B)
    mid = ~small & (ax <= 4.0)
    if mid.any():
        y = ax[mid]
        r = _ratio(y, y, _C[:7] + (_C[7], _C[8]), _D)
        r *= np.exp(-y * y)
        np.subtract(1.0, r, out=r)
        out[mid] = np.copysign(r, x[mid])
    big = ~small & ~mid & ~np.isnan(x)
    if big.any():
        y = ax[big]
        z = 1.0 / (y * y)
        r = z * _ratio(y, z, _P[:4] + (_P[4], _P[5]), _Q)
        r = ((1 / math.sqrt(math.pi)) - r) / y * np.exp(-y * y)
        out[big] = np.copysign(1.0 - r, x[big])
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
