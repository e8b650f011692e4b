"""Strategies of the paged KV cache operators.

paged_attention, GPU implementations (one template, templates/attention/decode.j2, with the
dense cache's decode; strategies/attention_decode.py):
  paged_decode   Sq <= 16 (plevel 20): a (batch, KV head, split of the keys) a work-group with
                 every query head of the group packed, so each cached byte is read once;
                 the keys split until the grid fills two waves, combined by log-sum-exps.
  paged_prefill  any Sq (plevel 10, multi-query: chunked prefill, speculative decoding): the
                 same kernel with larger tiles of query rows (256 work-items, up to four rows
                 a thread), a tile of rows a work-group; the keys past a tile's last query and
                 before its window are never loaded.
Both read each sequence's block ids a tile at a time into shared memory and count a bad entry
(or a bad seq_lens) into a word the host reads back after the launch: then the host check names
it (an InputError) and the output is not returned.
kv_cache_write, GPU: kv_write (a check pass counting bad slots, then a copy of 16-byte chunks
that writes nothing when the check counted any; the host raises after both).
The numpy target gathers each sequence's tokens and runs attention's host implementation.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import StrategyError
from ..implementation import Kernel, host_impl, kernel_impl
from ..op import get_op
from ..ops._attention_math import check_slots, check_tables
from ..ops.paged_attention import gather
from ..runtime import alignment_of
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from ..strategy import Strategy
from . import attention_decode as dec
from .attention import host_only, numpy_attention


def _paged_run(ctx, main, combine):
    q, kc, vc, bt, sl = ctx.inputs
    b, sq, hq, d = (int(x) for x in q.shape)
    nb, bs, hkv, _ = (int(x) for x in kc.shape)
    mb = int(bt.shape[1])
    if b * hq * sq == 0:
        return
    keys = mb * bs
    if ctx.info.window >= 0:  # a tile of rows reads its queries' windows
        rows = ctx.config["nt"] // ctx.config["lk"] * ctx.config["rpt"]
        keys = min(keys, ctx.info.window + ceil_div(rows, hq // hkv) + 1)
    bad = ctx.counter()
    dec.launch(ctx, main, combine, q, kc, vc, (b, hq, hkv, sq, 0), keys, block_table=bt,
               seq_lens=sl, bad=bad, nblocks=np.int32(nb), bs=np.int32(bs), maxb=np.int32(mb))
    if ctx.count(bad):
        host = ctx.backend.to_host
        check_tables(host(bt), host(sl), nb, bs, "paged_attention")
        raise StrategyError(f"{ctx.impl.name}: the kernel counted {ctx.count(bad)} bad block "
                            "table or seq_lens entries that the host check does not find")


PAGED_DECODE = kernel_impl("paged_decode", _paged_run, **dec.decode_kernels(
    "a (batch, KV head, split) a work-group, its query heads packed; block ids in shared memory"))
PAGED_PREFILL = kernel_impl("paged_prefill", _paged_run, **dec.decode_kernels(
    "a (batch, KV head, tile of query rows, split) a work-group; block ids in shared memory"))


def paged_gpu(attrs, inputs, outputs, target):
    q, kc = inputs[0], inputs[1]
    _, sq, hq, d = q.shape
    hkv, d = kc.shape[2], int(d)
    s = Strategy(target)
    if d > dec.D_MAX:
        why = f"head dim D={d} is over {dec.D_MAX}, the most the kernel keeps in registers"
        s.exclude(PAGED_DECODE, 20, why)
        s.exclude(PAGED_PREFILL, 10, why)
        return s
    eb = 4 if q.dtype == "float32" else 2
    scale = attrs.scale if attrs.scale is not None else 1.0 / float(np.sqrt(d))
    params = dec.fixed_params(q.dtype, d, eb, "paged", "BSHD", True, scale, attrs.softcap,
                              attrs.window, attrs.alibi_slopes is not None, False)
    caps = target.capabilities
    info = dec.DecodeInfo("paged", "BSHD", False, attrs.alibi_slopes, params["window"], d, eb,
                          caps)
    group = int(hq) // int(hkv) if sympy.sympify(hq).is_Integer and \
        sympy.sympify(hkv).is_Integer and int(hkv) else None
    smem = caps.smem_static_max
    s.add(PAGED_DECODE, 20, condition=sympy.Le(sq, dec.DECODE_SQ_MAX), info=info, fixed=params,
          space=dec.space_for(d, eb, group, smem))
    s.add(PAGED_PREFILL, 10, info=info, fixed=params,
          space=dec.space_for(d, eb, group, smem, prefill=True))
    return s


def _paged_host(ctx):
    q, kc, vc, bt, sl = ctx.inputs
    a = ctx.attrs
    check_tables(bt, sl, kc.shape[0], kc.shape[1], "paged_attention")
    attrs = get_op("attention").make_attrs(causal=True, scale=a.scale, layout="BSHD",
                                           softcap=a.softcap, window=a.window,
                                           alibi_slopes=a.alibi_slopes)
    out = np.zeros(q.shape, q.dtype)
    for b in range(q.shape[0]):
        n = int(sl[b])
        k, v = (gather(c, bt, b, n)[None] for c in (kc, vc))
        out[b:b + 1] = numpy_attention(q[b:b + 1], k, v, None, attrs)
    return out


NUMPY_PAGED = host_impl("numpy_paged", _paged_host)


# -- kv_cache_write ---------------------------------------------------------------------------

def _write_run(ctx, check, write):
    k, v, kc, vc, sm = ctx.inputs
    t, hkv, d = (int(x) for x in k.shape)
    if t == 0:
        return
    s, wg = ctx.size, ctx.config["wg"]
    nslots = int(kc.shape[0]) * int(kc.shape[1])
    bad = ctx.counter()
    check(slot_mapping=sm, bad=bad, tokens=s(t), nslots=np.int64(nslots), grid=ceil_div(t, wg),
          block=wg)
    per = 16 // ctx.fixed["EB"]
    vec = int(ctx.fixed["vec_ok"] and all(alignment_of(a) % 16 == 0 for a in (k, v, kc, vc)))
    per_token = hkv * d // per if vec else hkv * d
    write(k=k, v=v, k_cache=kc, v_cache=vc, slot_mapping=sm, bad=bad, total=s(t * per_token),
          per_token=s(per_token), vec=np.int32(vec), grid=ceil_div(t * per_token, wg), block=wg)
    if ctx.count(bad):
        check_slots(ctx.backend.to_host(sm), nslots, "kv_cache_write")
        raise StrategyError(f"{ctx.impl.name}: the kernel counted {ctx.count(bad)} bad slots "
                            "that the host check does not find")


KV_WRITE = kernel_impl(
    "kv_write", _write_run,
    check=Kernel("paged_attention/kv_cache_write.j2", {"mode": "check"},
                 doc="counts the slots out of range"),
    write=Kernel("paged_attention/kv_cache_write.j2", {"mode": "write"},
                 doc="copies each token's rows to its slot, 16 bytes a work-item"))


def write_gpu(attrs, inputs, outputs, target):
    k, sm = inputs[0], inputs[4]
    eb = 4 if k.dtype == "float32" else 2
    d = int(k.shape[2])
    s = Strategy(target)
    s.add(KV_WRITE, 10, space=ConfigSpace({"wg": (64, 128, 256)}, {"wg": 256}),
          fixed=dict(D=d, EB=eb, vec_ok=d * eb % 16 == 0, slot64=sm.dtype == "int64"))
    return s


def _write_host(ctx):
    k, v, kc, vc, sm = ctx.inputs
    check_slots(sm, kc.shape[0] * kc.shape[1], "kv_cache_write")
    keep = sm >= 0
    slots = sm[keep].astype(np.int64)
    for cache, x in ((kc, k), (vc, v)):  # the caches are the caller's (or their copies)
        cache.reshape(-1, *cache.shape[2:])[slots] = x[keep]
    return kc, vc


NUMPY_WRITE = host_impl("numpy_kv_write", _write_host)


STRATEGIES = {"paged_attention": {"gpu": paged_gpu, "cpu": host_only(NUMPY_PAGED)},
              "kv_cache_write": {"gpu": write_gpu, "cpu": host_only(NUMPY_WRITE)}}
