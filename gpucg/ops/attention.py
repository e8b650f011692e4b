"""Scaled dot-product attention: softmax(q k^T * scale [+ mask]) v, fused.

q is (B, Hq, Sq, D), k and v (B, Hkv, Skv, D) in layout "BHSD", or (B, S, H, D) in "BSHD";
Hq is a multiple of Hkv (query head h reads key/value head h // (Hq / Hkv): grouped-query and
multi-query attention). The semantics are those of torch's scaled_dot_product_attention, with:
- causal aligned to the bottom-right corner when Sq != Skv (FlashAttention 2, decoding with a
  KV cache): query i sees key j when j <= i + Skv - Sq;
- softcap: scores become softcap * tanh(scores / softcap) (after the scale, before the mask);
- window w: query i sees keys j with i' - w <= j <= i' (i' = i + Skv - Sq; a window bounds
  both sides, causal or not); alibi_slopes: the scores gain -slope_h * |i' - j| (one slope a
  query head, FlashAttention's convention);
- a row that sees no key (fully masked, or Skv = 0) gives zeros, and its log-sum-exp is -inf;
- special values as torch's math backend (softmax, then the weights times v): a NaN or +inf
  score (from q, k, the mask) makes its row NaN, a -inf one weighs 0, and a key's weight of
  0 still multiplies its v (an infinity or NaN in v reaches every row of the columns it is
  in, a row that sees no key too), on every target and implementation alike. One exception:
  with causal (or a window), the keys outside a row's band are not read by the kernels'
  skipped tiles, so an infinity or NaN in their v reaches that row or not depending on the
  tiling (torch's math backend: NaN);
- zero heads give empty outputs; k and v without heads where q has some, or D = 0, are an
  InputError.
The mask, broadcastable to (B, Hq, Sq, Skv) (always in that order), is boolean (True: the key
takes part, as torch's) or additive (any float dtype). float16 and bfloat16 are computed with
float32 accumulation and softmax. ``return_lse`` adds the float32 (B, Hq, Sq) log-sum-exp of
the scaled, capped and masked scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe, require_bool
from ..op import (Case, Constraint, KernelInfo, OpPattern, added_attr, register_gradient,
                  register_op)
from ..shape import TensorType, var
from ._attention_grad import attention_gradient
from ._attention_math import (attend64, check_slopes, head_constraints, slopes_attr,
                              window_attr)
from .dense import tf32_attr

DTYPES = ("float16", "bfloat16", "float32")
MASK_DTYPES = ("bool",) + DTYPES
LAYOUTS = ("BHSD", "BSHD")


def _opt_float(name: str, value, positive: bool):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise AttrError(f"{name}={describe(value)} must be a number or None")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0) or value == 0:
        raise AttrError(f"{name}={value!r} is not allowed; it must be a finite number "
                        f"{'> 0' if positive else '!= 0'} or None")
    return value


@dataclass(frozen=True)
class AttentionAttrs:
    """causal (bottom-right aligned), scale (None: 1/sqrt(D)), layout ("BHSD" or "BSHD"),
    softcap (None or > 0), return_lse (also return the row log-sum-exp), allow_tf32
    (float32 products on TF32 tensor cores; None: the GPUCG_ALLOW_TF32 knob, off unless set),
    window (None or keys i' - window .. i') and alibi_slopes (None or one float a query head)."""

    causal: bool = False
    scale: float | None = None
    layout: str = "BHSD"
    softcap: float | None = None
    return_lse: bool = False
    allow_tf32: bool | None = added_attr(None, before=False)
    window: int | None = added_attr(None, before=None)
    alibi_slopes: tuple | None = added_attr(None, before=None)

    def __post_init__(self):
        object.__setattr__(self, "window", window_attr(self.window))
        object.__setattr__(self, "alibi_slopes", slopes_attr(self.alibi_slopes))
        object.__setattr__(self, "allow_tf32", tf32_attr(self.allow_tf32))
        object.__setattr__(self, "causal", require_bool("causal", self.causal))
        object.__setattr__(self, "return_lse", require_bool("return_lse", self.return_lse))
        object.__setattr__(self, "scale", _opt_float("scale", self.scale, False))
        object.__setattr__(self, "softcap", _opt_float("softcap", self.softcap, True))
        if self.layout not in LAYOUTS:
            raise AttrError(f"layout={describe(self.layout)} is not allowed; allowed: "
                            f"{', '.join(LAYOUTS)}")


def dims(t, layout: str):
    """(B, H, S, D) of a q, k or v shape in ``layout``."""
    b, x, y, d = t.shape if hasattr(t, "shape") else t
    return (b, x, y, d) if layout == "BHSD" else (b, y, x, d)


def softmax_scale(attrs, d) -> float:
    return attrs.scale if attrs.scale is not None else 1.0 / math.sqrt(int(d))


def _type_rel(inputs, attrs):
    names = ("q", "k", "v", "mask")
    q = inputs[0]
    for name, t in zip(names[:3], inputs[:3]):
        if t.ndim != 4:
            raise InputError(f"attention: {name} has rank {t.ndim} (shape {t.shape}); it must "
                             f"be 4-D, (B, H, S, D) in layout {attrs.layout!r}"
                             if attrs.layout == "BHSD" else
                             f"attention: {name} has rank {t.ndim} (shape {t.shape}); it must "
                             f"be 4-D, (B, S, H, D) in layout {attrs.layout!r}")
        if t.dtype not in DTYPES:
            raise DTypeError(f"attention: {name} dtype {t.dtype!r} is not supported; allowed: "
                             f"{', '.join(DTYPES)}")
        if t.dtype != q.dtype:
            raise DTypeError(f"attention: {name} dtype {t.dtype} must equal q's ({q.dtype})")
    b, hq, sq, d = dims(q, attrs.layout)
    for name, t in zip(names[1:3], inputs[1:3]):
        if dims(t, attrs.layout)[3] != d:
            raise InputError(f"attention: {name} has head dim {dims(t, attrs.layout)[3]}, but "
                             f"it must equal q's ({d})")
    if len(inputs) == 4:
        m = inputs[3]
        if m.dtype not in MASK_DTYPES:
            raise DTypeError(f"attention: mask dtype {m.dtype!r} is not supported; allowed: "
                             f"{', '.join(MASK_DTYPES)} (bool: True takes part; floats: added)")
        if m.ndim > 4:
            raise InputError(f"attention: mask has rank {m.ndim}; it must broadcast to "
                             f"(B, Hq, Sq, Skv), rank 4 at most")
    check_slopes(attrs.alibi_slopes, hq, "attention")
    out = TensorType(q.shape, q.dtype)
    if attrs.return_lse:
        return out, TensorType((b, hq, sq), "float32")
    return out


def _constraints(inputs, attrs):
    q, k, v = (dims(t, attrs.layout) for t in inputs[:3])
    eq = lambda a, b: sympy.Eq(sympy.sympify(a), sympy.sympify(b))  # noqa: E731
    out = [Constraint(eq(k[0], q[0]), "attention: k has batch {}, but q has {}", (k[0], q[0])),
           Constraint(eq(v[0], q[0]), "attention: v has batch {}, but q has {}", (v[0], q[0])),
           Constraint(eq(v[1], k[1]), "attention: v has {} heads, but k has {}", (v[1], k[1])),
           Constraint(eq(v[2], k[2]), "attention: v has sequence length {}, but k has {}",
                      (v[2], k[2])),
           Constraint(sympy.Or(sympy.sympify(k[1]) >= 1, eq(q[1], 0)),
                      "attention: k and v have {} heads but q has {}; allowed: at least one "
                      "k and v head where q has heads (q's without heads give empty outputs)",
                      (k[1], q[1])),
           Constraint(sympy.sympify(q[3]) >= 1, "attention: the head dim D is {}; allowed: "
                      "D >= 1 (q, k and v rows of at least one element)", (q[3],)),
           *head_constraints("attention", q[1], k[1], attrs.alibi_slopes)]
    if len(inputs) == 4:
        full = (q[0], q[1], q[2], k[2])
        mshape = inputs[3].shape
        for i, m in enumerate(mshape):
            want = full[4 - len(mshape) + i]
            out.append(Constraint(sympy.Or(eq(m, 1), eq(m, want)),
                                  f"attention: mask dimension {i} of shape {tuple(mshape)} is "
                                  "{}, but it must be 1 or {} to broadcast to "
                                  "(B, Hq, Sq, Skv)", (m, want)))
    return out


def _bhsd(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "BHSD" else x.transpose(0, 2, 1, 3)


def reference(q, k, v, *rest):
    """The float64 reference, written the obvious way (the whole score matrix)."""
    *mask, attrs = rest
    q64, k64, v64 = (_bhsd(t, attrs.layout).astype(np.float64) for t in (q, k, v))
    o, lse = attend64(q64, k64, v64, scale=softmax_scale(attrs, q64.shape[3]),
                      softcap=attrs.softcap, causal=attrs.causal, window=attrs.window,
                      slopes=attrs.alibi_slopes, mask=mask[0] if mask else None)
    o = _bhsd(o, attrs.layout).astype(q.dtype)
    return (o, lse.astype(np.float32)) if attrs.return_lse else o


def _cases():
    def c(q, kv, dtype, kind, label, mask=None, **attrs):
        types = (TensorType(q, dtype), TensorType(kv, dtype), TensorType(kv, dtype))
        if mask is not None:
            types += (TensorType(mask[0], mask[1]),)
        return Case(types, attrs, kind, label)
    return [c((8, 16, 1024, 64), (8, 16, 1024, 64), "float16", "bench", "prefill S=1024 D=64"),
            c((8, 16, 1024, 128), (8, 16, 1024, 128), "float16", "bench",
              "prefill causal D=128", causal=True),
            c((4, 32, 1, 128), (4, 8, 8192, 128), "float16", "bench", "decode GQA 32/8"),
            c((1, 2, 37, 64), (1, 2, 53, 64), "float32", "small", "odd lengths, causal",
              causal=True),
            c((2, 4, 1, 32), (2, 1, 70, 32), "float16", "small", "MQA, one query"),
            c((1, 2, 3, 32), (1, 1, 1024, 32), "float32", "small", "split-KV decode, causal",
              causal=True, return_lse=True),
            c((1, 2, 19, 80), (1, 2, 19, 80), "float16", "small", "mask and softcap",
              mask=((1, 1, 19, 19), "bool"), softcap=20.0),
            c((1, 2, 5, 32), (1, 1, 21, 32), "float32", "small", "TF32 allowed, GQA",
              mask=((21,), "float32"), allow_tf32=True),
            # the decode kernel's traffic: each key and value byte read once (GQA packed)
            Case(c((1, 8, 1, 64), (1, 2, 400, 64), "float16", "small", "").inputs, {}, "small",
                 "decode GQA 8/2", not_simulated=dict(dict.fromkeys(
                     ("attention_simt", "attention_split", "flash_mma"),
                     "the other cases cover it; here the decode kernel's traffic"),
                     flash_wgmma="the next case covers it (400 keys through the emulated "
                                 "wgmma take minutes under Oclgrind)")),
            # Hopper's twin (float16, D = 64): one key tile, masked (causal, past the keys)
            Case(c((1, 2, 3, 64), (1, 1, 13, 64), "float16", "small", "").inputs,
                 {"causal": True}, "small", "flash_wgmma, one key tile",
                 not_simulated=dict.fromkeys(
                     ("attention_simt", "attention_split", "attention_decode", "flash_mma"),
                     "the other cases cover it; here Hopper's twin"))]


register_op("attention", attrs=AttentionAttrs, num_inputs=4, optional_inputs=1,
            type_rel=_type_rel, constraints=_constraints, pattern=OpPattern.OPAQUE,
            reference=reference, input_names=("q", "k", "v", "mask"), cases=_cases,
            doc="softmax(q k^T * scale [+ mask]) v, fused (grouped heads, causal, softcap).",
            # float16 and bfloat16 are loaded and stored; scores and softmax are float32
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
            # the kernels keep a row of D in registers: the head dim is a constant
            static_axes=lambda attrs: ({3}, {3}, {3}, set()),
            example=lambda: ((TensorType((var("b"), 32, var("sq"), 128), "float16"),
                              TensorType((var("b"), 8, var("skv"), 128), "float16"),
                              TensorType((var("b"), 8, var("skv"), 128), "float16")), {}))


def attention(q, k, v, *, causal=False, mask=None, scale=None, layout="BHSD", softcap=None,
              return_lse=False, target=None, allow_tf32=None, window=None, alibi_slopes=None):
    """Scaled dot-product attention, fused: softmax(q k^T * scale [+ mask]) v.

    Args:
        q: (B, Hq, Sq, D) (layout "BHSD") or (B, Sq, Hq, D) ("BSHD"); float16, bfloat16 or
            float32.
        k, v: (B, Hkv, Skv, D) (or (B, Skv, Hkv, D)), q's dtype; Hq a multiple of Hkv.
        causal: query i sees key j when j <= i + Skv - Sq (bottom-right aligned).
        mask: boolean (True takes part) or additive, broadcastable to (B, Hq, Sq, Skv).
        scale: the scores' factor; None is 1/sqrt(D).
        layout: "BHSD" or "BSHD".
        softcap: None, or s -> softcap * tanh(s / softcap) on the scaled scores.
        return_lse: also return the float32 (B, Hq, Sq) log-sum-exp of the scores.
        target: "cuda", "opencl", "numpy" or None for the default target.
        allow_tf32: float32 scores and products may round their operands to TF32 on tensor
            cores (None: the GPUCG_ALLOW_TF32 knob, off by default); else exact float32.
        window: None, or query i sees keys i' - window .. i' only (i' = i + Skv - Sq).
        alibi_slopes: None, or one slope a query head: scores gain -slope * |i' - j|.

    Rows that see no key give zeros (and a log-sum-exp of -inf).
    """
    inputs = (q, k, v) if mask is None else (q, k, v, mask)
    extra = {k: val for k, val in (("allow_tf32", allow_tf32), ("window", window),
                                   ("alibi_slopes", slopes_attr(alibi_slopes))) if val is not None}
    return call("attention", inputs, target=target, causal=causal, scale=scale, layout=layout,
                softcap=softcap, return_lse=return_lse, **extra)


# -- the gradient, written with registered operators (gpucg/ops/_attention_grad.py) -------------
register_gradient("attention", attention_gradient)
