"""The math of every float unary operator and activation, written once: its NumPy function,
its C expression and its derivative. The elementwise operators (gpucg/ops/_ewspec.py), the
fused expressions (gpucg/ops/_expr.py), the GEMM and conv2d epilogues (gpucg/ops/_epilogue.py)
and the gradients (gpucg/ops/_grads.py, gpucg/ops/elementwise.py) all read this table, so an
epilogue and the operator of the same name cannot differ.

Special values follow NumPy and PyTorch: NaN in, NaN out (relu and clip keep NaN, unlike
C's fmax); signed zeros where the function has them (gelu(-0.0) is -0.0, relu(-0.0) is
+0.0 as np.maximum gives); infinities as PyTorch has them (gelu(-inf) is -inf * 0 = NaN, as
torch.nn.functional.gelu gives for both forms; gelu(inf) is inf).
The gelus are written without cancellation: x * Phi(x) as x * erfc(-x / sqrt 2) / 2, the tanh
form as x * sigmoid(2u) (not x (1 + tanh u) / 2, which loses everything for large negative x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..codegen.literals import literal
from ._erf import erf, half_erfc_times
from ._gelu32 import gelu_float32

_SQRT_HALF = 1 / math.sqrt(2)
#: elements of a block of the in-place activations (theirs and their temporaries stay in cache)
BLOCK_ELEMENTS = 1 << 16
_TANH_2U = 2 * math.sqrt(2 / math.pi)  # 2u = _TANH_2U * (x + 0.044715 x^3)


class Lit:
    """C literals of one compute dtype for one dialect: ``lit(0.5)`` is ``0.5f``."""

    def __init__(self, dtype: str, d):
        self.dtype, self.d = dtype, d

    def __call__(self, value) -> str:
        return literal(value, self.dtype, self.d)


@dataclass(frozen=True)
class Unary:
    """One operator: ``numpy(x, attrs)`` on a float array in its compute dtype;
    ``c(x, lit, attrs)`` a C expression of the variable ``x`` (x may appear several times);
    ``grad(attrs)`` the gradient's expression text: the output gradient x0 times the
    derivative at the input x1."""

    numpy: Callable
    c: Callable
    grad: Callable


def _gelu_np(x, attrs):
    if attrs.get("approximate", "none") == "tanh":
        return x / (1 + np.exp(x.dtype.type(-_TANH_2U) * (x + x.dtype.type(0.044715) * x * x * x)))
    if x.dtype == np.float32:
        return gelu_in_place(np.array(x, order="C"))
    return half_erfc_times(x * -_SQRT_HALF, x)


def gelu_in_place(x: np.ndarray) -> np.ndarray:
    """The exact gelu of a contiguous float32 array, written over it (the epilogue's own
    GEMM result; :func:`_gelu_np` of float32 data), a block at a time in float32's table
    (gpucg/ops/_gelu32.py), so that no array of x's size is allocated (at BERT's batch 8,
    12.6 MB fresh pages a call: 3000 page faults)."""
    return in_blocks(x, gelu_block)


def silu_block(xb: np.ndarray, t: np.ndarray, bias=None) -> None:
    """silu(xb + bias) of a contiguous float block written over it (``bias``: None, or an
    array broadcasting against xb), ``t`` a scratch array of xb's shape: z / (1 + exp(-z)),
    the operator's roundings (NaN's sign included), in passes that stay in cache."""
    if bias is not None:
        xb += bias
    np.negative(xb, out=t)
    np.exp(t, out=t)
    t += xb.dtype.type(1)
    np.divide(xb, t, out=xb)  # exp overflows to inf: z / inf is -0.0 for z < 0


def hardswish_block(xb: np.ndarray, t: np.ndarray, bias=None) -> None:
    """hardswish(xb + bias) of a contiguous float block written over it, as the operator
    computes it (z * clip(z + 3, 0, 6) / 6, the same roundings), ``t`` a scratch array of
    xb's shape."""
    three, zero, six = (xb.dtype.type(v) for v in (3, 0, 6))
    if bias is not None:
        xb += bias
    np.add(xb, three, out=t)
    np.clip(t, zero, six, out=t)  # one pass (a maximum and a minimum take 4x its time)
    np.multiply(xb, t, out=t)  # -inf * 0 is NaN, as the operator says
    np.divide(t, six, out=xb)


def gelu_block(xb: np.ndarray, t: np.ndarray, bias=None) -> None:
    """The exact gelu of (xb + bias), a contiguous float32 block written over it."""
    if bias is not None:
        xb += bias
    flat = xb.reshape(-1)
    gelu_float32(flat, flat)


def in_blocks(x: np.ndarray, block_fn) -> np.ndarray:
    """``block_fn(xb, t)`` over a contiguous float array a block at a time, through one
    scratch block: no temporaries of x's size and no copy back."""
    flat = x.reshape(-1)
    scratch = np.empty(min(flat.size, BLOCK_ELEMENTS), flat.dtype)
    with np.errstate(all="ignore"):  # overflows and -inf * 0 give what the operator says
        for i in range(0, flat.size, BLOCK_ELEMENTS):
            xb = flat[i:i + BLOCK_ELEMENTS]
            block_fn(xb, scratch[:xb.size])
    return x


def silu_in_place(x: np.ndarray) -> np.ndarray:
    """silu of a contiguous float array written over it, as the operator computes it (x / (1
    + exp(-x)), the same roundings), a block at a time (the epilogue's SiLU)."""
    return in_blocks(x, silu_block)


def hardswish_in_place(x: np.ndarray) -> np.ndarray:
    """hardswish of a contiguous float array written over it, as the operator computes it
    (x * clip(x + 3, 0, 6) / 6, the same roundings), a block at a time."""
    return in_blocks(x, hardswish_block)


#: activations with an in-place NumPy form on a contiguous float32 array (the epilogue's)
IN_PLACE = {"gelu": gelu_in_place, "silu": silu_in_place, "hardswish": hardswish_in_place}
#: the same activations a block at a time with the bias added first (the epilogue adds a bias
#: and activates each block of a float32 result while it is in cache): ``fn(block, scratch,
#: bias)``. relu is not among them: its two whole-array passes cost less than blocks
BLOCKS = {"gelu": gelu_block, "silu": silu_block, "hardswish": hardswish_block}


def _gelu_c(x, lit, attrs):
    if attrs.get("approximate", "none") == "tanh":
        cubic = f"{lit(0.044715)} * {x} * {x} * {x}"
        return f"({x} / ({lit(1)} + exp({lit(-_TANH_2U)} * ({x} + {cubic}))))"
    return f"({x} * ({lit(0.5)} * erfc({x} * {lit(-_SQRT_HALF)})))"


_GELU_T = ("tanh(multiply(0.7978845608028654, add(x1, multiply(0.044715, "
           "multiply(x1, multiply(x1, x1))))))")


def _gelu_grad(attrs):
    if attrs.get("approximate", "none") == "tanh":
        return (f"multiply(x0, add(multiply(0.5, add(1, {_GELU_T})), multiply(multiply("
                f"multiply(0.5, x1), subtract(1, multiply({_GELU_T}, {_GELU_T}))), multiply("
                "0.7978845608028654, add(1, multiply(0.134145, multiply(x1, x1)))))))")
    return ("multiply(x0, add(multiply(0.5, add(1, erf(multiply(x1, 0.7071067811865476)))), "
            "multiply(multiply(x1, 0.3989422804014327), exp(multiply(-0.5, multiply(x1, x1))))))")


def _clip_np(x, attrs):
    if attrs.get("a_min") is not None:
        x = np.maximum(x, x.dtype.type(attrs["a_min"]))
    if attrs.get("a_max") is not None:
        x = np.minimum(x, x.dtype.type(attrs["a_max"]))
    return x


def clip_c(x, lit, attrs, nan=True) -> str:
    """x limited to [a_min, a_max] as np.maximum and np.minimum do (NaN kept where ``nan``)."""
    for name, sym in (("a_min", ">"), ("a_max", "<")):
        if attrs.get(name) is not None:
            bound = lit(attrs[name])
            keep = f" || {x} != {x}" if nan else ""
            x = f"(({x} {sym} {bound}{keep}) ? {x} : {bound})"
    return x


def _clip_grad(attrs):
    g = "x0"
    for name, cmp in (("a_min", "greater_equal"), ("a_max", "less_equal")):
        if attrs.get(name) is not None:
            g = f"multiply({g}, {cmp}(x1, {float(attrs[name])!r}))"
    return g


TABLE = {
    "exp": Unary(lambda x, a: np.exp(x), lambda x, lit, a: f"exp({x})",
                 lambda a: "multiply(x0, exp(x1))"),
    "log": Unary(lambda x, a: np.log(x), lambda x, lit, a: f"log({x})",
                 lambda a: "divide(x0, x1)"),
    "sqrt": Unary(lambda x, a: np.sqrt(x), lambda x, lit, a: f"sqrt({x})",
                  lambda a: "divide(x0, multiply(2, sqrt(x1)))"),
    "rsqrt": Unary(lambda x, a: np.reciprocal(np.sqrt(x)),
                   lambda x, lit, a: f"({lit(1)} / sqrt({x}))",
                   lambda a: "multiply(x0, multiply(-0.5, divide(rsqrt(x1), x1)))"),
    "abs": Unary(lambda x, a: np.absolute(x), lambda x, lit, a: f"fabs({x})",
                 lambda a: "where(less(x1, 0), negative(x0), multiply(x0, greater(x1, 0)))"),
    "negative": Unary(lambda x, a: np.negative(x), lambda x, lit, a: f"(-{x})",
                      lambda a: "negative(x0)"),
    "sigmoid": Unary(lambda x, a: 1 / (1 + np.exp(-x)),
                     lambda x, lit, a: f"({lit(1)} / ({lit(1)} + exp(-{x})))",
                     lambda a: "multiply(x0, multiply(sigmoid(x1), subtract(1, sigmoid(x1))))"),
    "tanh": Unary(lambda x, a: np.tanh(x), lambda x, lit, a: f"tanh({x})",
                  lambda a: "multiply(x0, subtract(1, multiply(tanh(x1), tanh(x1))))"),
    "erf": Unary(lambda x, a: erf(x), lambda x, lit, a: f"erf({x})",
                 lambda a: "multiply(x0, multiply(1.1283791670955126, exp(negative(multiply("
                           "x1, x1)))))"),
    "gelu": Unary(_gelu_np, _gelu_c, _gelu_grad),
    # np.maximum keeps NaN and gives +0.0 for -0.0, as the select does
    "relu": Unary(lambda x, a: np.maximum(x, x.dtype.type(0)),
                  lambda x, lit, a: f"(({x} > {lit(0)} || {x} != {x}) ? {x} : {lit(0)})",
                  lambda a: "multiply(x0, greater(x1, 0))"),
    "leaky_relu": Unary(lambda x, a: np.where(x > 0, x, x * x.dtype.type(a["alpha"])),
                        lambda x, lit, a: f"({x} > {lit(0)} ? {x} : {lit(a['alpha'])} * {x})",
                        lambda a: f"where(greater(x1, 0), x0, multiply(x0, {a['alpha']!r}))"),
    "clip": Unary(_clip_np, clip_c, _clip_grad),
}

def _softplus_np(x, attrs):
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|) (NaN: e^NaN is NaN)
    return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.absolute(x)))


def _softplus_c(x, lit):
    return f"(fmax({x}, {lit(0)}) + log1p(exp(-fabs({x}))))"


def _elu_np(x, alpha):
    return np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(x))


def _elu_c(x, lit, alpha):
    return f"({x} > {lit(0)} ? {x} : {lit(alpha)} * expm1({x}))"


def _hardsigmoid_c(x, lit, a):
    return clip_c(f"({lit(a['alpha'])} * {x} + {lit(a['beta'])})", lit,
                  {"a_min": 0.0, "a_max": 1.0})


def _hardsigmoid_grad(a):
    t = f"add(multiply(x1, {a['alpha']!r}), {a['beta']!r})"
    return f"multiply(x0, multiply(multiply(greater({t}, 0), less({t}, 1)), {a['alpha']!r}))"


_SOFTPLUS_T = "tanh(softplus(x1))"
#: the activations ONNX names (Silu as PyTorch's), with PyTorch's values at the special
#: points: the same formulas, so silu(-inf), mish(-inf) and hardswish(-inf) are NaN
#: (-inf * 0) as in torch and onnxruntime; softplus and mish never overflow (e^-|x| only)
TABLE.update({
    "silu": Unary(lambda x, a: x / (1 + np.exp(-x)),
                  lambda x, lit, a: f"({x} / ({lit(1)} + exp(-{x})))",
                  lambda a: "multiply(x0, multiply(sigmoid(x1), add(1, multiply(x1, "
                            "subtract(1, sigmoid(x1))))))"),
    # torch's x * relu6(x + 3) / 6 (ONNX's x * max(0, min(1, x / 6 + 1 / 2))); np.clip is
    # np.minimum(np.maximum()) in one pass (x + 3 is never -0.0, where the two would differ)
    "hardswish": Unary(
        lambda x, a: x * np.clip(x + x.dtype.type(3), x.dtype.type(0), x.dtype.type(6))
        / x.dtype.type(6),
        lambda x, lit, a: f"({x} * fmin(fmax({x} + {lit(3)}, {lit(0)}), {lit(6)}) / {lit(6)})",
        lambda a: "multiply(x0, where(less(x1, -3), 0, where(less_equal(x1, 3), "
                  "add(divide(x1, 3), 0.5), 1)))"),
    "hardsigmoid": Unary(
        lambda x, a: _clip_np(x.dtype.type(a["alpha"]) * x + x.dtype.type(a["beta"]),
                              {"a_min": 0.0, "a_max": 1.0}),
        _hardsigmoid_c, _hardsigmoid_grad),
    "softplus": Unary(_softplus_np, lambda x, lit, a: _softplus_c(x, lit),
                      lambda a: "multiply(x0, sigmoid(x1))"),
    "mish": Unary(lambda x, a: x * np.tanh(_softplus_np(x, a)),
                  lambda x, lit, a: f"({x} * tanh({_softplus_c(x, lit)}))",
                  lambda a: f"multiply(x0, add({_SOFTPLUS_T}, multiply(multiply(x1, sigmoid(x1)), "
                            f"subtract(1, multiply({_SOFTPLUS_T}, {_SOFTPLUS_T})))))"),
    "elu": Unary(lambda x, a: _elu_np(x, a["alpha"]), lambda x, lit, a: _elu_c(x, lit, a["alpha"]),
                 lambda a: f"multiply(x0, where(greater(x1, 0), 1, multiply({a['alpha']!r}, "
                           "exp(x1))))"),
    "selu": Unary(lambda x, a: x.dtype.type(a["gamma"]) * _elu_np(x, a["alpha"]),
                  lambda x, lit, a: f"({lit(a['gamma'])} * {_elu_c(x, lit, a['alpha'])})",
                  lambda a: f"multiply(x0, multiply({a['gamma']!r}, where(greater(x1, 0), 1, "
                            f"multiply({a['alpha']!r}, exp(x1)))))"),
})

#: the epilogue activations of conv2d and the GEMM family: name -> (operator, attributes)
ACTIVATIONS = {"relu": ("relu", {}), "gelu": ("gelu", {"approximate": "none"}),
               "gelu_tanh": ("gelu", {"approximate": "tanh"}), "sigmoid": ("sigmoid", {}),
               "tanh": ("tanh", {}), "silu": ("silu", {}), "hardswish": ("hardswish", {})}


def derivative(op: str, attrs: dict) -> str:
    """The gradient expression of ``op``: x0 (the output gradient) times op'(x1)."""
    return TABLE[op].grad(attrs)
