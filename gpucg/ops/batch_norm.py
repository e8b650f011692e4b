"""Batch normalization in its inference form, and folding it into the layer before it.

batch_norm(x, gamma, beta, mean, var, axis=1, eps=1e-5)
    y = (x - mean) / sqrt(var + eps) * gamma + beta, with the per-channel vectors along
    ``axis`` of x (TVM's and ONNX's BatchNormalization at inference). float16 is stored as
    float16 and computed in float32; float64 in float64.
fold_batch_norm(weight, bias, gamma, beta, mean, var, eps=1e-5, axis=0)
    (weight', bias') of the conv2d (OIHW weight: axis 0) or dense ((n, k) weight: axis 0) that
    computes batch_norm(layer(x)) in one pass: the scale gamma / sqrt(var + eps) multiplies
    the weight's output channels, and the shift is folded into the bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe, require_int
from ..op import Case, KernelInfo, OpPattern, register_op
from ..shape import TensorType, normalize_axis
from ._layout import _same

FLOATS = ("float16", "float32", "float64")
VECTORS = ("gamma", "beta", "mean", "var")


def _eps(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value) or value < 0:
        raise AttrError(f"eps={describe(value)} must be a finite number >= 0")
    return float(value)


@dataclass(frozen=True)
class BatchNormAttrs:
    """The channel axis of x, and eps added to the variance."""

    axis: int = 1
    eps: float = 1e-5

    def __post_init__(self):
        object.__setattr__(self, "axis", require_int("axis", self.axis))
        object.__setattr__(self, "eps", _eps(self.eps))


def _rel(inputs, attrs, rules=None):
    rules = [] if rules is None else rules
    x = inputs[0]
    if x.dtype not in FLOATS:
        raise DTypeError(f"batch_norm: x dtype {x.dtype!r} is not supported; allowed: "
                         f"{', '.join(FLOATS)}")
    if x.ndim == 0:
        raise InputError("batch_norm: x is 0-d; allowed: rank >= 1 with channels at axis")
    axis = normalize_axis(attrs.axis, x.ndim, "axis")
    for name, t in zip(VECTORS, inputs[1:]):
        if t.dtype != x.dtype:
            raise DTypeError(f"batch_norm: {name} has dtype {t.dtype} but x has {x.dtype}; "
                             "allowed: x's dtype")
        if t.ndim != 1:
            raise InputError(f"batch_norm: {name} has shape {t.shape}; it must be 1-D (C,) with "
                             f"C = x.shape[{axis}]")
        _same("batch_norm", t.shape[0], x.shape[axis],
              f"{name}.shape[0] (x.shape[{axis}] = {x.shape[axis]}, axis={attrs.axis})", rules)
    return TensorType(x.shape, x.dtype)


def _rules(inputs, attrs):
    out: list = []
    _rel(inputs, attrs, out)
    return out


def channel_view(ndim: int, axis: int) -> tuple:
    """The shape that lays a (C,) vector along ``axis`` of a rank-``ndim`` array."""
    return tuple(-1 if i == axis else 1 for i in range(ndim))


def reference(x, gamma, beta, mean, var, attrs):
    """The definition, in float64."""
    view = channel_view(x.ndim, normalize_axis(attrs.axis, x.ndim))
    f = [np.asarray(v, np.float64).reshape(view) for v in (gamma, beta, mean, var)]
    y = (x.astype(np.float64) - f[2]) / np.sqrt(f[3] + attrs.eps) * f[0] + f[1]
    return y.astype(x.dtype)


def _cases():
    def t(shape, dtype="float32"):
        return TensorType(shape, dtype)
    return [Case((t((32, 256, 56, 56)),) + (t((256,)),) * 4, {}, "bench", "ResNet block"),
            Case((t((3, 7, 5, 2), "float16"),) + (t((5,), "float16"),) * 4, {"axis": -2},
                 "small", "axis -2, float16"),
            Case((t((5, 3), "float64"),) + (t((3,), "float64"),) * 4, {"axis": 1}, "small",
                 "channels last")]


register_op("batch_norm", attrs=BatchNormAttrs, num_inputs=5, type_rel=_rel,
            constraints=_rules, pattern=OpPattern.INJECTIVE, reference=reference,
            input_names=("x",) + VECTORS, kernel_info=KernelInfo(storage_dtypes=("float16",)),
            cases=_cases, doc="Inference batch normalization: (x - mean) / sqrt(var + eps) * "
                              "gamma + beta per channel.",
            example=lambda: (_cases()[0].inputs, {}))


def batch_norm(x, gamma, beta, mean, var, axis=1, eps=1e-5, *, target=None):
    """Inference batch normalization along the channel ``axis`` of x:
    ``(x - mean) / sqrt(var + eps) * gamma + beta``, every vector of shape (C,)."""
    return call("batch_norm", (x, gamma, beta, mean, var), target=target, axis=axis, eps=eps)


def fold_batch_norm(weight, bias, gamma, beta, mean, var, eps=1e-5, axis=0):
    """Fold an inference batch_norm into the conv2d or dense before it.

    Args:
        weight: the layer's weight, output channels at ``axis`` (conv2d OIHW and dense (n, k):
            axis 0; conv2d HWIO: axis 3).
        bias: the layer's bias (C,), or None for none.
        gamma, beta, mean, var, eps: the batch_norm's parameters, each (C,).

    Returns:
        (weight', bias') as NumPy arrays of weight's dtype, computed in float64:
        weight' = weight * s along ``axis`` and bias' = (bias - mean) * s + beta, with
        s = gamma / sqrt(var + eps).
    """
    w = np.asarray(weight)
    if w.dtype.name not in FLOATS:
        raise DTypeError(f"fold_batch_norm: weight dtype {w.dtype.name!r} is not supported; "
                         f"allowed: {', '.join(FLOATS)}")
    if w.ndim == 0:
        raise InputError("fold_batch_norm: weight is 0-d; allowed: a conv2d or dense weight")
    a = normalize_axis(require_int("axis", axis), w.ndim, "axis")
    c = w.shape[a]
    vecs = {}
    for name, v in zip(("bias",) + VECTORS, (bias, gamma, beta, mean, var)):
        if v is None and name == "bias":
            v = np.zeros(c)
        v = np.asarray(v, np.float64)
        if v.shape != (c,):
            raise InputError(f"fold_batch_norm: {name} has shape {v.shape}; it must be ({c},), "
                             f"the weight's output channels (weight.shape[{a}], axis={axis})")
        vecs[name] = v
    scale = vecs["gamma"] / np.sqrt(vecs["var"] + _eps(eps))
    folded = w.astype(np.float64) * scale.reshape(channel_view(w.ndim, a))
    shift = (vecs["bias"] - vecs["mean"]) * scale + vecs["beta"]
    return folded.astype(w.dtype), shift.astype(w.dtype)
