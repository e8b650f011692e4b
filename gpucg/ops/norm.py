"""Softmax and normalization along one axis: softmax, log_softmax, layer_norm, rms_norm.

All are numerically stable: softmax subtracts the row's maximum (or keeps an online maximum and
sum), and the norms scale the squares by the row's largest magnitude, so inputs of 1e30 in
float32 neither overflow nor turn into NaN. Results equal a float64 NumPy evaluation of the
textbook formulas, NaN where that gives NaN (a row of -inf, or one holding +inf or NaN, is NaN
in softmax as in NumPy). float16 and bfloat16 are stored in 16 bits and computed in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe, require_int
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import TensorType, normalize_axis, var

DTYPES = ("float16", "float32", "float64", "bfloat16")
SOFTMAX_OPS = ("softmax", "log_softmax")


@dataclass(frozen=True)
class SoftmaxAttrs:
    """Attributes of softmax and log_softmax: the axis (negative counts from the end)."""

    axis: int = -1

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))


def _eps(value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise AttrError(f"eps={describe(value)} must be a number >= 0")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise AttrError(f"eps={value!r} is not allowed; it must be a finite number >= 0")
    return value


@dataclass(frozen=True)
class LayerNormAttrs:
    """Attributes of layer_norm: the normalized axis and eps (added to the variance)."""

    axis: int = -1
    eps: float = 1e-5

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        object.__setattr__(self, "eps", _eps(self.eps))


@dataclass(frozen=True)
class RmsNormAttrs:
    """Attributes of rms_norm: the normalized axis and eps (added to the mean square)."""

    axis: int = -1
    eps: float = 1e-6

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        object.__setattr__(self, "eps", _eps(self.eps))


def _rel(op: str, params: tuple):
    def rel(inputs, attrs):
        x = inputs[0]
        if x.dtype not in DTYPES:
            raise DTypeError(f"{op}: x dtype {x.dtype!r} is not supported; allowed: "
                             f"{', '.join(DTYPES)}")
        normalize_axis(attrs.axis, x.ndim, f"{op}: axis")
        for name, t in zip(params, inputs[1:]):
            if t.dtype != x.dtype:
                raise DTypeError(f"{op}: {name} dtype {t.dtype} must equal x's ({x.dtype})")
            if t.ndim != 1:
                raise InputError(f"{op}: {name} has rank {t.ndim}, but it must be 1-D, of the "
                                 f"length of axis {attrs.axis} of x")
        if len(inputs) > 1 + len(params):  # rms_norm's residual: (y, x + residual)
            res = inputs[-1]
            if res.dtype != x.dtype or res.ndim != x.ndim:
                raise DTypeError(f"{op}: residual is {res.dtype} of rank {res.ndim}; it must be "
                                 f"x's dtype ({x.dtype}) and shape {x.shape}")
            if normalize_axis(attrs.axis, x.ndim) != x.ndim - 1:
                raise InputError(f"{op}: with a residual, axis={attrs.axis} must be the last "
                                 f"axis of x (rank {x.ndim}): the fused form normalizes rows")
            return TensorType(x.shape, x.dtype), TensorType(x.shape, x.dtype)
        return TensorType(x.shape, x.dtype)
    return rel


def _constraints(op: str, params: tuple):
    """gamma and beta have the length of the normalized axis (checked when sizes are known)."""
    def constraints(inputs, attrs):
        x = inputs[0]
        n = sympy.sympify(x.shape[normalize_axis(attrs.axis, x.ndim, f"{op}: axis")])
        out = [Constraint(sympy.Eq(sympy.sympify(t.shape[0]), n),
                          f"{op}: {name} has shape ({{}},), but it must be ({{}},), the length "
                          f"of axis {attrs.axis} of x", (t.shape[0], n))
               for name, t in zip(params, inputs[1:]) if t.ndim == 1]
        if len(inputs) > 1 + len(params):
            res = inputs[-1]
            out += [Constraint(sympy.Eq(sympy.sympify(r), sympy.sympify(d)),
                               f"{op}: residual has {{}} at axis {i}, but x has {{}}; the "
                               "shapes must be equal", (r, d))
                    for i, (r, d) in enumerate(zip(res.shape, x.shape))]
        return out
    return constraints


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A 1-D array of the axis length, shaped to broadcast along ``axis`` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def reference(op: str):
    """The float64 NumPy reference of ``op``: ``ref(x, [gamma, [beta]], attrs)``."""
    def ref(x: np.ndarray, *rest):
        *params, attrs = rest
        if op == "rms_norm" and len(params) == 2:  # the residual: normalize the stored sum
            h = residual_sum(x, params[1])
            return ref(h, params[0], attrs), h
        axis = normalize_axis(attrs.axis, x.ndim)
        x64 = x.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if op in SOFTMAX_OPS:
                m = np.max(x64, axis=axis, keepdims=True) if x.size else x64
                e = np.exp(x64 - m)
                s = np.sum(e, axis=axis, keepdims=True)
                y = e / s if op == "softmax" else (x64 - m) - np.log(s)
            elif op == "layer_norm":
                gamma, beta = (_along(p.astype(np.float64), x.ndim, axis) for p in params)
                mean = np.mean(x64, axis=axis, keepdims=True) if x.size else x64
                var = np.mean((x64 - mean) ** 2, axis=axis, keepdims=True) if x.size else x64
                y = (x64 - mean) / np.sqrt(var + attrs.eps) * gamma + beta
            else:
                gamma = _along(params[0].astype(np.float64), x.ndim, axis)
                ms = np.mean(x64 ** 2, axis=axis, keepdims=True) if x.size else x64
                y = x64 / np.sqrt(ms + attrs.eps) * gamma
        return y.astype(x.dtype)
    return ref


def residual_sum(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """x + residual computed in float32 (float64 for float64) and rounded to x's dtype, as
    vLLM's fused_add_rms_norm stores it and normalizes it."""
    acc = np.float64 if x.dtype == np.float64 else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(acc) + residual.astype(acc)).astype(x.dtype)


def _cases(op: str, params: tuple):
    """The softmax benchmark's rows, and small awkward ones."""
    def cases():
        def c(shape, dtype, kind, label="", axis=-1):
            n = shape[axis]
            types = (TensorType(shape, dtype),) + tuple(TensorType((n,), dtype) for _ in params)
            return Case(types, {"axis": axis}, kind, label)
        return [c((4096, 1024), "float32", "bench", "(4096, 1024)"),
                c((256, 32000), "float32", "bench", "(256, 32000)"),
                c((8, 1 << 20), "float32", "bench", "(8, 2^20)"),
                c((1, 1), "float32", "small"),
                c((3, 257), "float32", "small", "just over a work-group"),
                c((5, 33), "float16", "small", "float16 storage"),
                c((2, 40009), "float64", "small", "long rows, split"),
                c((7, 3, 5), "float32", "small", "a non-last axis", axis=1),
                c((16, 128), "float32", "small", "rows of whole 128-bit vectors (a warp)"),
                c((3, 1024), "float32", "small", "rows of whole 128-bit vectors"),
                c((2, 16392), "float32", "small", "long rows of whole 128-bit vectors, split"),
                c((2, 300, 3), "float32", "small", "a non-last axis longer than a work-group",
                  axis=1)] + (_residual_cases() if op == "rms_norm" else [])
    return cases


def _residual_cases():
    """rms_norm with a residual (x + residual normalized, the sum returned too)."""
    def c(shape, dtype, kind, label):
        t = TensorType(shape, dtype)
        return Case((t, TensorType((shape[-1],), dtype), t), {}, kind, label)
    return [c((16, 4096), "float16", "bench", "decode batch 16, residual"),
            c((4096, 8192), "float16", "bench", "prefill, hidden 8192, residual"),
            c((5, 40), "float16", "small", "residual, rows of whole vectors")]


for _op, _attrs, _params, _doc in (
        ("softmax", SoftmaxAttrs, (), "exp(x - max) / sum(exp(x - max)) along an axis."),
        ("log_softmax", SoftmaxAttrs, (), "x - max - log(sum(exp(x - max))) along an axis."),
        ("layer_norm", LayerNormAttrs, ("gamma", "beta"),
         "(x - mean) / sqrt(var + eps) * gamma + beta along an axis."),
        ("rms_norm", RmsNormAttrs, ("gamma",), "x / sqrt(mean(x^2) + eps) * gamma along an axis.")):
    _res = _op == "rms_norm"  # takes a residual, optionally
    register_op(_op, attrs=_attrs, num_inputs=1 + len(_params) + _res, optional_inputs=_res,
                type_rel=_rel(_op, _params), constraints=_constraints(_op, _params),
                pattern=OpPattern.OPAQUE, reference=reference(_op),
                input_names=("x",) + _params + ("residual",) * _res,
                cases=_cases(_op, _params), doc=_doc,
                # float16 and bfloat16 are loaded and stored only; the kernels compute in float32
                kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
                # the kernels are specialized on nothing: every size may be symbolic
                example=lambda p=_params: ((TensorType((var("m"), var("n")), "float32"),)
                                           + tuple(TensorType((var("n"),), "float32")
                                                   for _ in p), {}))


def softmax(x, axis=-1, *, target=None):
    """exp(x - max) / sum(exp(x - max)) along ``axis``, computed stably.

    Args:
        x: a NumPy, CuPy or PyOpenCL array of float16, bfloat16, float32 or float64.
        axis: the axis; negative counts from the end.
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    return call("softmax", (x,), target=target, axis=axis)


def log_softmax(x, axis=-1, *, target=None):
    """(x - max) - log(sum(exp(x - max))) along ``axis``; see :func:`softmax`."""
    return call("log_softmax", (x,), target=target, axis=axis)


def layer_norm(x, gamma, beta, axis=-1, eps=1e-5, *, target=None):
    """(x - mean) / sqrt(var + eps) * gamma + beta along ``axis`` (gamma, beta: shape (n,),
    n the axis length, x's dtype); the variance is the biased one, as PyTorch's."""
    return call("layer_norm", (x, gamma, beta), target=target, axis=axis, eps=eps)


def rms_norm(x, gamma, axis=-1, eps=1e-6, *, residual=None, target=None):
    """x / sqrt(mean(x^2) + eps) * gamma along ``axis`` (gamma: shape (n,), x's dtype).

    With ``residual`` (x's shape and dtype; axis the last): h = x + residual rounded to x's
    dtype, and the pair (rms_norm(h), h) in one pass (FlashInfer's and vLLM's
    fused_add_rmsnorm, which update their arguments in place; here both are new arrays)."""
    if residual is not None:
        return call("rms_norm", (x, gamma, residual), target=target, axis=axis, eps=eps)
    return call("rms_norm", (x, gamma), target=target, axis=axis, eps=eps)
