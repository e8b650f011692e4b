"""Attention over a ragged batch (FlashAttention's varlen API): no padding materialized.

q is (total_q, Hq, D), k and v (total_k, Hkv, D): the rows of every sequence of the batch one
after the other. ``cu_seqlens_q`` and ``cu_seqlens_k`` (B + 1,) int32 are the cumulative
lengths: sequence i is query rows cu_seqlens_q[i] .. cu_seqlens_q[i + 1] and key rows
cu_seqlens_k[i] .. cu_seqlens_k[i + 1]. Each sequence is attention's math on its own (causal
bottom-right aligned within it, window, ALiBi, softcap: gpucg/ops/_attention_math.py); a
sequence may be empty. cu_seqlens must start at 0, never decrease and end at the total rows:
any other value is an InputError naming the entry (checked on the host for NumPy arrays, by
the kernel on the device, which never reads outside a buffer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import DTypeError, require_bool
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import TensorType, var
from ._attention_math import (attend64, check_cu_seqlens, check_slopes, default_scale,
                              head_constraints, need, slopes_attr, window_attr)
from .attention import DTYPES, _opt_float

CU_DTYPES = ("int32",)


@dataclass(frozen=True)
class AttentionVarlenAttrs:
    """causal (bottom-right aligned within each sequence), scale (None: 1/sqrt(D)), softcap
    (None or > 0), window (None or keys i' - window .. i') and alibi_slopes (None or one
    float a query head)."""

    causal: bool = False
    scale: float | None = None
    softcap: float | None = None
    window: int | None = None
    alibi_slopes: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "causal", require_bool("causal", self.causal))
        object.__setattr__(self, "scale", _opt_float("scale", self.scale, False))
        object.__setattr__(self, "softcap", _opt_float("softcap", self.softcap, True))
        object.__setattr__(self, "window", window_attr(self.window))
        object.__setattr__(self, "alibi_slopes", slopes_attr(self.alibi_slopes))


def _type_rel(inputs, attrs):
    q, k, v, cq, ck = inputs
    for name, t in (("q", q), ("k", k), ("v", v)):
        need("attention_varlen", name, t, 3, DTYPES, "(total rows, heads, D)", ("q", q.dtype))
    for name, t in (("cu_seqlens_q", cq), ("cu_seqlens_k", ck)):
        need("attention_varlen", name, t, 1, CU_DTYPES, "(B + 1,) cumulative lengths")
    check_slopes(attrs.alibi_slopes, q.shape[1], "attention_varlen")
    return TensorType(q.shape, q.dtype)


def _constraints(inputs, attrs):
    q, k, v, cq, ck = (t.shape for t in inputs)

    def eq(a, b):
        return sympy.Eq(sympy.sympify(a), sympy.sympify(b))
    out = [Constraint(eq(v[i], k[i]), f"attention_varlen: v has {{}} {what}, but k has {{}}",
                      (v[i], k[i])) for i, what in enumerate(("rows", "heads", "head dims"))]
    out += [Constraint(eq(k[2], q[2]), "attention_varlen: k has head dim {}, but q has {}",
                       (k[2], q[2])),
            *head_constraints("attention_varlen", q[1], k[1], attrs.alibi_slopes),
            Constraint(eq(ck[0], cq[0]), "attention_varlen: cu_seqlens_k has {} entries, but "
                       "cu_seqlens_q has {}", (ck[0], cq[0])),
            Constraint(sympy.Ge(sympy.sympify(cq[0]), 1), "attention_varlen: cu_seqlens_q has "
                       "{} entries; it needs B + 1 >= 1", (cq[0],))]
    return out


def check(q, k, cq, ck) -> None:
    """InputError naming the first bad cu_seqlens entry."""
    check_cu_seqlens(cq, q.shape[0], "cu_seqlens_q", "attention_varlen")
    check_cu_seqlens(ck, k.shape[0], "cu_seqlens_k", "attention_varlen")


def reference(q, k, v, cq, ck, attrs):
    """float64, one sequence at a time: attention's math."""
    check(q, k, cq, ck)
    out = np.zeros(q.shape, np.float64)
    scale = default_scale(attrs.scale, q.shape[2])
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        o, _ = attend64(*(x[s].astype(np.float64).transpose(1, 0, 2)[None]
                          for x, s in ((q, qs), (k, ks), (v, ks))),
                        scale=scale, softcap=attrs.softcap, causal=attrs.causal,
                        window=attrs.window, slopes=attrs.alibi_slopes)
        out[qs] = o[0].transpose(1, 0, 2)
    return out.astype(q.dtype)


def sample_lengths(arrays, attrs, rng):
    """Valid cumulative lengths for made-up inputs: each total cut at random places (some
    sequences empty)."""
    arrays = list(arrays)
    for at, total in ((3, arrays[0].shape[0]), (4, arrays[1].shape[0])):
        b = arrays[at].shape[0] - 1
        cuts = np.sort(rng.integers(0, total + 1, size=max(b - 1, 0)))
        arrays[at] = np.concatenate([[0], cuts, [total]])[:b + 1].astype(np.int32) if b else \
            np.zeros(1, np.int32)
    return arrays


def _cases():
    def c(tq, tk, b, hq, hkv, d, dtype, label, skip=(), **attrs):
        return Case((TensorType((tq, hq, d), dtype), TensorType((tk, hkv, d), dtype),
                     TensorType((tk, hkv, d), dtype), TensorType((b + 1,), "int32"),
                     TensorType((b + 1,), "int32")), attrs,
                    "bench" if tq >= 1024 else "small", label,
                    not_simulated=dict.fromkeys(skip, "the tensor-core twin's emulated warp "
                                                      "operations take the simulator minutes; "
                                                      "the small D=32 case runs it"))
    return [c(8192, 8192, 8, 32, 8, 128, "float16", "prefill of 8 prompts, causal", causal=True),
            c(37, 37, 3, 4, 2, 32, "float32", "3 prompts, causal GQA", causal=True),
            c(29, 45, 2, 2, 1, 80, "float16", "window, ALiBi, softcap", ("varlen_flash",),
              causal=True, window=9, alibi_slopes=(0.5, 0.125), softcap=20.0),
            c(13, 21, 2, 2, 1, 32, "float16", "tensor cores: window, ALiBi", causal=True,
              window=6, alibi_slopes=(0.5, 0.25))]


register_op("attention_varlen", attrs=AttentionVarlenAttrs, num_inputs=5, type_rel=_type_rel,
            constraints=_constraints, pattern=OpPattern.OPAQUE, reference=reference,
            cases=_cases, input_names=("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"),
            doc="attention over a ragged batch (cumulative lengths), no padding.",
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16"),
                                   valid_samples=sample_lengths),
            static_axes=lambda attrs: ({1, 2}, {1, 2}, {1, 2}, set(), set()),
            example=lambda: ((TensorType((var("tq"), 32, 128), "float16"),
                              TensorType((var("tk"), 8, 128), "float16"),
                              TensorType((var("tk"), 8, 128), "float16"),
                              TensorType((var("b"),), "int32"),
                              TensorType((var("b"),), "int32")), {"causal": True}))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None,
                     softcap=None, window=None, alibi_slopes=None, target=None):
    """Attention over a ragged batch: sequence i is query rows cu_seqlens_q[i] ..
    cu_seqlens_q[i + 1] of q (total_q, Hq, D) and key rows cu_seqlens_k[i] ..
    cu_seqlens_k[i + 1] of k, v (total_k, Hkv, D); each as attention(causal=..., scale=...,
    softcap=..., window=..., alibi_slopes=...) alone (causal bottom-right aligned in it).

    cu_seqlens_q and cu_seqlens_k: (B + 1,) int32 (lists are taken too), starting at 0, never
    decreasing, ending at the total rows. Returns (total_q, Hq, D) in q's dtype.
    """
    cus = []
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if isinstance(cu, (list, tuple)):
            cu = np.asarray(cu, np.int32)
        if isinstance(cu, np.ndarray) and cu.dtype != np.int32:
            if cu.dtype.kind not in "iu":
                raise DTypeError(f"attention_varlen: {name} dtype {cu.dtype.name!r} is not "
                                 "supported; allowed: int32")
            cu = cu.astype(np.int32)
        cus.append(cu)
    return call("attention_varlen", (q, k, v, *cus), target=target, causal=causal, scale=scale,
                softcap=softcap, window=window, alibi_slopes=slopes_attr(alibi_slopes))
