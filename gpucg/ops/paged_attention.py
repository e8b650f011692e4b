"""A paged KV cache (vLLM's and FlashInfer's layout): attention over it, and writing to it.

The caches are (num_blocks, block_size, Hkv, D): a pool of blocks of ``block_size`` tokens.
Sequence b's tokens are listed by its row of ``block_table`` (B, max_blocks) int32: token j
sits in block ``block_table[b, j // block_size]`` at offset ``j % block_size``; ``seq_lens``
(B,) int32 counts its tokens, the Sq new ones included. A block table entry that a sequence's
tokens use must lie in 0..num_blocks - 1, and seq_lens in 0..max_blocks * block_size: any
other value is an InputError naming the entry (checked where the arrays live: on the host for
NumPy arrays, by the kernel on the device, which never reads outside a buffer).
- paged_attention: q (B, Sq, Hq, D) attends to its sequence's tokens, causal and
  bottom-right aligned (query i sits at token seq_lens[b] - Sq + i), with a window and ALiBi
  as attention's (gpucg/ops/_attention_math.py).
- kv_cache_write: token t's k and v (T, Hkv, D) go to slot slot_mapping[t] (block
  slot // block_size, offset slot % block_size; -1 skips the token), in place: the caches
  passed are the ones written (NumPy arrays too, on every target); an out-of-range slot is an
  InputError and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import DTypeError
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..shape import TensorType, var
from ._attention_math import (attend64, check_slopes, check_slots, check_tables,
                              default_scale, head_constraints, need, slopes_attr, window_attr)
from .attention import DTYPES, _opt_float

INDEX_DTYPES = ("int32",)
SLOT_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class PagedAttentionAttrs:
    """scale (None: 1/sqrt(D)), softcap (None or > 0), window (None or keys i' - window ..
    i') and alibi_slopes (None or one float a query head)."""

    scale: float | None = None
    softcap: float | None = None
    window: int | None = None
    alibi_slopes: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "scale", _opt_float("scale", self.scale, False))
        object.__setattr__(self, "softcap", _opt_float("softcap", self.softcap, True))
        object.__setattr__(self, "window", window_attr(self.window))
        object.__setattr__(self, "alibi_slopes", slopes_attr(self.alibi_slopes))


def _caches(op, like, kc, vc):
    for name, t in (("k_cache", kc), ("v_cache", vc)):
        need(op, name, t, 4, DTYPES, "(num_blocks, block_size, Hkv, D)", like)


def _paged_rel(inputs, attrs):
    q, kc, vc, bt, sl = inputs
    need("paged_attention", "q", q, 4, DTYPES, "(B, Sq, Hq, D)")
    _caches("paged_attention", ("q", q.dtype), kc, vc)
    need("paged_attention", "block_table", bt, 2, INDEX_DTYPES, "(B, max_blocks)")
    need("paged_attention", "seq_lens", sl, 1, INDEX_DTYPES, "(B,)")
    check_slopes(attrs.alibi_slopes, q.shape[2], "paged_attention")
    return TensorType(q.shape, q.dtype)


def _eq(a, b):
    return sympy.Eq(sympy.sympify(a), sympy.sympify(b))


def _same_caches(op, kc, vc):
    return [Constraint(_eq(vc[i], kc[i]), f"{op}: v_cache has {{}} {what}, but k_cache has {{}}",
                       (vc[i], kc[i]))
            for i, what in enumerate(("blocks", "tokens a block", "heads", "head dims"))]


def _paged_constraints(inputs, attrs):
    q, kc, vc, bt, sl = (t.shape for t in inputs)
    out = _same_caches("paged_attention", kc, vc) + [
        Constraint(_eq(kc[3], q[3]), "paged_attention: the caches have head dim {}, but q has {}",
                   (kc[3], q[3])),
        *head_constraints("paged_attention", q[2], kc[2], attrs.alibi_slopes, "the caches'"),
        Constraint(_eq(bt[0], q[0]), "paged_attention: block_table has {} rows, but q has "
                   "batch {}", (bt[0], q[0])),
        Constraint(_eq(sl[0], q[0]), "paged_attention: seq_lens has {} entries, but q has "
                   "batch {}", (sl[0], q[0])),
        Constraint(sympy.Le(sympy.sympify(kc[0]) * kc[1], 2**31 - 1),
                   "paged_attention: the caches hold {} x {} tokens; at most 2**31 - 1 are "
                   "addressed", (kc[0], kc[1]))]
    return out


def gather(cache, block_table, b: int, n: int):
    """Sequence b's first n tokens of a cache, (n, Hkv, D)."""
    bs = cache.shape[1]
    j = np.arange(n)
    return cache[block_table[b, j // bs], j % bs]


def paged_reference(q, kc, vc, bt, sl, attrs):
    """float64: each sequence's tokens gathered from the cache, then attention's math."""
    check_tables(bt, sl, kc.shape[0], kc.shape[1], "paged_attention")
    b, sq, hq, d = q.shape
    out = np.zeros(q.shape, np.float64)
    for i in range(b):
        n = int(sl[i])
        k, v = (gather(c, bt, i, n).astype(np.float64).transpose(1, 0, 2)[None]
                for c in (kc, vc))
        o, _ = attend64(q[i:i + 1].astype(np.float64).transpose(0, 2, 1, 3), k, v,
                        scale=default_scale(attrs.scale, d), softcap=attrs.softcap,
                        causal=True, window=attrs.window, slopes=attrs.alibi_slopes)
        out[i] = o[0].transpose(1, 0, 2)
    return out.astype(q.dtype)


def sample_tables(arrays, attrs, rng):
    """Valid block tables and lengths for made-up inputs (each sequence's blocks distinct,
    lengths from 0 to the table's capacity, ending mid-block), or slot mappings (distinct
    slots, some -1)."""
    arrays = list(arrays)
    if len(arrays) == 5 and arrays[3].ndim == 2:  # paged_attention
        kc, bt = arrays[1], arrays[3]
        nb, bs = kc.shape[:2]
        for b in range(bt.shape[0]):
            bt[b] = rng.permutation(max(nb, bt.shape[1]))[:bt.shape[1]] % max(nb, 1)
        cap = bt.shape[1] * bs
        arrays[4] = np.asarray(rng.integers(0, cap + 1, size=arrays[4].shape), np.int32)
        if arrays[4].size:
            arrays[4][0] = cap - (bs > 1)
    else:  # kv_cache_write
        kc, sm = arrays[2], arrays[4]
        slots = kc.shape[0] * kc.shape[1]
        pick = rng.permutation(slots)[:sm.size] if slots else np.zeros(0, np.int64)
        full = np.full(sm.shape, -1, np.int64)
        full[:pick.size] = pick
        full[rng.random(sm.shape) < 0.1] = -1
        arrays[4] = full.astype(sm.dtype)
    return arrays


def paged_traffic(arrays, outputs) -> int:
    """The least a call moves: q, the tables and the output once, and each sequence's tokens
    of both caches once (not the whole pool of blocks)."""
    q, kc, vc, bt, sl = arrays
    row = kc.shape[2] * kc.shape[3] * kc.itemsize
    tokens = int(np.clip(np.asarray(sl), 0, bt.shape[1] * kc.shape[1]).sum())
    return q.nbytes + bt.nbytes + sl.nbytes + 2 * tokens * row + sum(o.nbytes for o in outputs)


def _paged_cases():
    only_decode = {"paged_prefill": "the multi-query case runs it (each impl once keeps the "
                                    "simulator's minutes down); here the decode kernel"}

    def c(q, kv, mb, dtype, label, skip=None, **attrs):
        return Case((TensorType(q, dtype), TensorType(kv, dtype), TensorType(kv, dtype),
                     TensorType((q[0], mb), "int32"), TensorType((q[0],), "int32")),
                    attrs, "bench" if q[0] >= 8 else "small", label, not_simulated=skip or {})
    return [c((8, 1, 32, 128), (2048, 16, 8, 128), 256, "float16", "decode GQA 32/8, 4096 tokens"),
            c((2, 1, 8, 64), (12, 16, 2, 64), 6, "float16", "decode GQA 8/2, block 16",
              only_decode),
            c((2, 1, 8, 64), (120, 1, 1, 64), 100, "float32", "decode MQA, block 1", only_decode),
            c((2, 4, 4, 80), (6, 32, 2, 80), 3, "float16", "Sq 4, block 32, window, ALiBi",
              only_decode, window=40, alibi_slopes=(0.5, 0.25, 0.125, 0.0625)),
            c((1, 17, 1, 32), (3, 16, 1, 32), 3, "float32", "multi-query Sq 17, softcap",
              softcap=30.0)]


register_op("paged_attention", attrs=PagedAttentionAttrs, num_inputs=5,
            type_rel=_paged_rel, constraints=_paged_constraints, pattern=OpPattern.OPAQUE,
            reference=paged_reference, cases=_paged_cases, compulsory=paged_traffic,
            input_names=("q", "k_cache", "v_cache", "block_table", "seq_lens"),
            doc="attention of new tokens over a paged KV cache (block table, causal, GQA).",
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16"),
                                   valid_samples=sample_tables),
            # heads and head dims are a model's constants: the kernels pack a KV head's group
            static_axes=lambda attrs: ({2, 3}, {2, 3}, {2, 3}, set(), set()),
            example=lambda: ((TensorType((var("b"), var("sq"), 32, 128), "float16"),
                              TensorType((var("nb"), 16, 8, 128), "float16"),
                              TensorType((var("nb"), 16, 8, 128), "float16"),
                              TensorType((var("b"), var("mb")), "int32"),
                              TensorType((var("b"),), "int32")), {}))


def _write_rel(inputs, attrs):
    k, v, kc, vc, sm = inputs
    for name, t in (("k", k), ("v", v)):
        need("kv_cache_write", name, t, 3, DTYPES, "(T, Hkv, D)", ("k", k.dtype))
    _caches("kv_cache_write", ("k", k.dtype), kc, vc)
    need("kv_cache_write", "slot_mapping", sm, 1, SLOT_DTYPES, "(T,)")
    return TensorType(kc.shape, kc.dtype), TensorType(vc.shape, vc.dtype)


def _write_constraints(inputs, attrs):
    k, v, kc, vc, sm = (t.shape for t in inputs)
    out = _same_caches("kv_cache_write", kc, vc)
    for name, t in (("k", k), ("v", v)):
        out += [Constraint(_eq(t[0], sm[0]), f"kv_cache_write: {name} has {{}} tokens, but "
                           "slot_mapping has {} entries", (t[0], sm[0])),
                Constraint(_eq(t[1], kc[2]), f"kv_cache_write: {name} has {{}} heads, but the "
                           "caches have {}", (t[1], kc[2])),
                Constraint(_eq(t[2], kc[3]), f"kv_cache_write: {name} has head dim {{}}, but "
                           "the caches have {}", (t[2], kc[3]))]
    return out


def write_reference(k, v, kc, vc, sm, attrs):
    """New caches: copies of the old with token t at slot slot_mapping[t] (-1 skipped)."""
    check_slots(sm, kc.shape[0] * kc.shape[1], "kv_cache_write")
    kc, vc = kc.copy(), vc.copy()
    keep = np.asarray(sm) >= 0
    slots = np.asarray(sm)[keep].astype(np.int64)
    for cache, x in ((kc, k), (vc, v)):
        cache.reshape(-1, *cache.shape[2:])[slots] = x[keep]
    return kc, vc


def write_traffic(arrays, outputs) -> int:
    """The least a call moves: k, v and the slots read once, the rows of the tokens that have
    a slot written once (not the whole caches)."""
    k, v, kc, vc, sm = arrays
    return k.nbytes + v.nbytes + sm.nbytes + int((np.asarray(sm) >= 0).sum()) * 2 * \
        k.shape[1] * k.shape[2] * k.itemsize


def _write_cases():
    def c(t, cache, dtype, sm, label):
        return Case((TensorType((t,) + cache[2:], dtype), TensorType((t,) + cache[2:], dtype),
                     TensorType(cache, dtype), TensorType(cache, dtype), TensorType((t,), sm)),
                    {}, "bench" if t >= 64 else "small", label)
    return [c(256, (2048, 16, 8, 128), "float16", "int32", "prefill of 256 tokens"),
            c(5, (7, 16, 2, 64), "float16", "int64", "5 tokens, block 16"),
            c(3, (4, 3, 1, 36), "float32", "int32", "odd block and D")]


register_op("kv_cache_write", num_inputs=5, type_rel=_write_rel,
            constraints=_write_constraints, pattern=OpPattern.OPAQUE, reference=write_reference,
            cases=_write_cases, inplace={0: 2, 1: 3},
            compulsory=write_traffic,
            input_names=("k", "v", "k_cache", "v_cache", "slot_mapping"),
            doc="write new tokens' keys and values into a paged KV cache, in place.",
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16"),
                                   valid_samples=sample_tables),
            static_axes=lambda attrs: ({1, 2}, {1, 2}, {2, 3}, {2, 3}, set()),
            example=lambda: ((TensorType((var("t"), 8, 128), "float16"),
                              TensorType((var("t"), 8, 128), "float16"),
                              TensorType((var("nb"), 16, 8, 128), "float16"),
                              TensorType((var("nb"), 16, 8, 128), "float16"),
                              TensorType((var("t"),), "int32")), {}))


def _host_indices(x, name: str, dtypes, op: str):
    """NumPy index arrays checked here (where they live); device arrays as they are."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if isinstance(x, np.ndarray) and x.dtype.name not in dtypes:
        if x.dtype.kind not in "iu":
            raise DTypeError(f"{op}: {name} dtype {x.dtype.name!r} is not supported; allowed: "
                             f"{', '.join(dtypes)}")
        x = x.astype(dtypes[0])
    return x


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, softcap=None,
                    window=None, alibi_slopes=None, target=None):
    """Attention of new tokens q over a paged KV cache (vLLM's layout).

    Args:
        q: (B, Sq, Hq, D) float16, bfloat16 or float32: the Sq newest tokens of each sequence.
        k_cache, v_cache: (num_blocks, block_size, Hkv, D), q's dtype; Hq a multiple of Hkv.
        block_table: (B, max_blocks) int32: sequence b's token j is in block
            block_table[b, j // block_size] at offset j % block_size.
        seq_lens: (B,) int32: each sequence's tokens in the cache, its Sq new ones included
            (already written, kv_cache_write); query i sits at token seq_lens[b] - Sq + i and
            sees the tokens up to it (causal).
        scale: the scores' factor; None is 1/sqrt(D).
        softcap: None, or s -> softcap * tanh(s / softcap).
        window: None, or query i sees tokens i' - window .. i' only.
        alibi_slopes: None, or one slope a query head: scores gain -slope * |i' - j|.
        target: "cuda", "opencl", "numpy" or None for the default target.

    Returns (B, Sq, Hq, D) in q's dtype; a query that sees no token gives zeros.
    """
    block_table = _host_indices(block_table, "block_table", INDEX_DTYPES, "paged_attention")
    seq_lens = _host_indices(seq_lens, "seq_lens", INDEX_DTYPES, "paged_attention")
    return call("paged_attention", (q, k_cache, v_cache, block_table, seq_lens),
                target=target, scale=scale, softcap=softcap, window=window,
                alibi_slopes=slopes_attr(alibi_slopes))


def kv_cache_write(k, v, k_cache, v_cache, slot_mapping, *, target=None):
    """Write token t's k[t] and v[t] (T, Hkv, D) at slot slot_mapping[t] of the caches
    (num_blocks, block_size, Hkv, D), in place: block slot // block_size, offset
    slot % block_size; -1 skips the token. Returns (k_cache, v_cache), the arrays passed.

    An out-of-range slot is an InputError naming it, and nothing is written. The caches must
    be contiguous (a view that is not cannot be written in place).
    """
    slot_mapping = _host_indices(slot_mapping, "slot_mapping", SLOT_DTYPES, "kv_cache_write")
    return call("kv_cache_write", (k, v, k_cache, v_cache, slot_mapping), target=target)
