"""Strategies of attention: which kernels compute softmax(q k^T * scale [+ mask]) v.

GPU implementations, by plevel (conditions on the symbolic sizes, checked at run time by the
generated dispatcher, so one compiled attention serves prefill and decode):
  attention_decode Sq <= 16 without a mask (plevel 25; 5 on CPU devices, where its emulated
                   shuffles are slow): a (batch, KV head, split of the keys) a work-group with
                   every query head of the group packed, 16-byte cp.async stages, D split
                   across lanes (strategies/attention_decode.py).
  attention_split  Sq <= 16 and Skv >= 1024 (decoding with a long KV cache): the keys are split
                   across work-groups (flash-decoding), each writing a normalized partial output
                   and its log-sum-exp, and a second kernel combines them by their
                   log-sum-exps; the number of splits fills the GPU's multiprocessors twice.
  flash_wgmma      (sm_90a, float16/bfloat16, D 64/128) Hopper's wgmma, TMA and mbarriers,
                   warp-specialized, plevel 18 (strategies/attention_wgmma.py); OpenCL twin: 1.
  flash_mma        (CUDA, float16/bfloat16, float32 with allow_tf32) tensor cores, plevel 15
                   (strategies/attention_mma.py); on OpenCL its emulated twin at plevel 1.
  attention_simt   any sizes: one work-group a tile of query rows, keys and values streamed
                   through local memory, an online softmax in registers, causal tiles above the
                   diagonal never loaded.
The host target computes in blocks of queries and keys with the same online softmax, so a
long sequence never materializes Sq x Skv scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..half import half_format
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.attention import dims, softmax_scale
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from ..strategy import Strategy
from . import attention_decode, attention_mma, attention_wgmma
from .attention_args import common_args, heads, named, outputs
from .gemm_tile import sm_count

#: queries at most, keys at least, for which split-KV decoding is chosen
DECODE_SQ_MAX = 16
DECODE_SKV_MIN = 1024
#: head dims the SIMT kernels keep in registers
SIMT_D_MAX = 256
#: local memory of a K and a V tile (float32), at most
TILE_BYTES = 32768


@dataclass(frozen=True)
class AttnInfo:
    """What the run functions need: the layout, the mask's kind, the multiprocessors."""

    layout: str
    has_mask: bool
    lse: bool
    sms: int
    slopes: tuple | None = None


def _simt_run(ctx, main):
    (b, hq, hkv, sq, skv), arrays, mstr = common_args(ctx)
    if b * hq * sq == 0:
        return
    s, wg = ctx.size, ctx.config["wg"]
    qtiles = ceil_div(sq, wg)
    main(**named(arrays, mstr), **attention_decode.slopes_arg(ctx, ctx.info.slopes), **outputs(ctx), **heads(ctx, hq, hkv, sq, skv),
         qtiles=s(qtiles), grid=b * hq * qtiles, block=wg)


def splits_for(work: int, skv: int, bk: int, sms: int) -> tuple[int, int]:
    """(splits, chunk): the keys in chunks of whole tiles, enough work-groups for two waves of
    ``sms`` multiprocessors when ``work`` (B * Hq * query tiles) alone does not fill them."""
    want = max(1, min(ceil_div(2 * sms, max(work, 1)), ceil_div(skv, bk)))
    chunk = ceil_div(ceil_div(max(skv, 1), want), bk) * bk
    return ceil_div(max(skv, 1), chunk), chunk


def _split_run(ctx, part, combine):
    (b, hq, hkv, sq, skv), arrays, mstr = common_args(ctx)
    if b * hq * sq == 0:
        return
    s, wg, d = ctx.size, ctx.config["wg"], int(ctx.inputs[0].shape[3])
    qtiles = ceil_div(sq, wg)
    splits, chunk = splits_for(b * hq * qtiles, skv, ctx.config["bk"], ctx.info.sms)
    rows = b * hq * sq
    po, pl = ctx.empty((rows * splits * d,), np.float32), ctx.empty((rows * splits,), np.float32)
    part(**named(arrays, mstr), **attention_decode.slopes_arg(ctx, ctx.info.slopes), po=po, pl=pl, splits=s(splits), chunk=s(chunk),
         **heads(ctx, hq, hkv, sq, skv), qtiles=s(qtiles), grid=b * hq * qtiles * splits, block=wg)
    cwg = ctx.config["combine_wg"]
    combine(po=po, pl=pl, **outputs(ctx), splits=s(splits), hq=s(hq), sq=s(sq), total=s(rows * d),
            grid=ceil_div(rows * d, cwg), block=cwg)


def _spills(p) -> str:
    return ("the q row and the accumulator of D={} floats a work-item outgrow the registers"
            .format(p["D"]) if p["D"] > 64 else "")


def _low_occupancy(p) -> str:
    return ("a work-item keeps its q row and accumulator (2 * D={} floats) in registers"
            .format(p["D"]) if p["D"] >= 64 else "")


ATTENTION_SIMT = kernel_impl("attention_simt", _simt_run, main=Kernel(
    "attention/simt.j2", {"split": False}, spills=_spills, low_occupancy=_low_occupancy,
    doc="a tile of query rows a work-group, keys and values streamed, online softmax"))
ATTENTION_SPLIT = kernel_impl(
    "attention_split", _split_run,
    part=Kernel("attention/simt.j2", {"split": True}, spills=_spills, low_occupancy=_low_occupancy,
                doc="pass 1: a part of the keys a work-group, a partial output and its lse"),
    combine=Kernel("attention/combine.j2", derive=lambda p: {"wg": p["combine_wg"]},
                   doc="pass 2: the partial outputs combined by their log-sum-exps"))


def _bk(d: int) -> int:
    return max(4, min(64, TILE_BYTES // (8 * d)))


def _space(d: int, on_cpu: bool) -> ConfigSpace:
    bk = _bk(d)
    return ConfigSpace({"wg": (16, 32, 64, 128), "bk": tuple(sorted({4, 8, 16, 32, 64, bk})),
                        "combine_wg": (64, 256)},
                       {"wg": 16 if on_cpu else 64, "bk": bk, "combine_wg": 256},
                       constraint=lambda c: 8 * c["bk"] * d <= 2 * TILE_BYTES)


def gpu_strategy(attrs, inputs, outputs, target):
    q, k = inputs[0], inputs[1]
    b, hq, sq, d = dims(q, attrs.layout)
    _, hkv, skv, _ = dims(k, attrs.layout)
    d = int(d)
    mask = inputs[3] if len(inputs) == 4 else None
    scale = softmax_scale(attrs, d)
    params = dict(D=d, layout=attrs.layout, causal=attrs.causal, softcap=attrs.softcap or 0,
                  scale=float(scale),
                  qscale=scale / attrs.softcap if attrs.softcap else scale,
                  half=half_format(q.dtype), lse=attrs.return_lse,
                  mask=("bool" if mask.dtype == "bool" else "add") if mask is not None else False,
                  mask_half=half_format(mask.dtype) if mask is not None else False,
                  window=-1 if attrs.window is None else attrs.window,
                  alibi=attrs.alibi_slopes is not None, varlen=False)
    info = AttnInfo(attrs.layout, mask is not None, attrs.return_lse, sm_count(target),
                    attrs.alibi_slopes)
    s = Strategy(target)
    attention_decode.offer(s, attrs, q, k, target, mask is not None)
    if d > SIMT_D_MAX:
        why = f"head dim D={d} is over {SIMT_D_MAX}, the most the kernels keep in registers"
        s.exclude(ATTENTION_SPLIT, 20, why)
        s.exclude(ATTENTION_SIMT, 10, why)
        return s
    space = _space(d, target.on_cpu)
    s.add(ATTENTION_SPLIT, 20, condition=sympy.And(sympy.Le(sq, DECODE_SQ_MAX),
                                                   sympy.Ge(skv, DECODE_SKV_MIN)),
          space=space, fixed=params, info=info)
    attention_wgmma.offer(s, q.dtype, d, params, info, target)
    attention_mma.offer(s, q.dtype, attrs.allow_tf32, d, params, info, target)
    s.add(ATTENTION_SIMT, 10, space=space, fixed=params, info=info)
    return s


# -- the host target --------------------------------------------------------------------------

#: scores held at once by the host implementation (query block x key block x heads)
HOST_BLOCK = 1 << 20


#: scores of a batch chunk: a batch of short sequences runs a few batch rows at a time, their
#: scores in cache and the keys in one block (BERT at batch 8, seq 128: 1.2x)
BATCH_BLOCK = 1 << 18


def numpy_attention(q, k, v, mask, attrs):
    """Attention in float32 by NumPy, in blocks of queries and keys with an online softmax."""
    layout = attrs.layout
    qh, kh, vh = (x if layout == "BHSD" else x.transpose(0, 2, 1, 3) for x in (q, k, v))
    b, hq, sq, d = qh.shape
    hkv, skv = kh.shape[1], kh.shape[2]
    scores = hq * sq * skv  # of one batch row
    rows = max(1, BATCH_BLOCK // max(1, scores))
    if b > rows and (rows > 1 or 2 * scores <= HOST_BLOCK):  # (longer rows: key blocks)
        return _batch_chunks(q, k, v, mask, attrs, rows)
    gsz = hq // hkv if hkv else 1
    scale = softmax_scale(attrs, d)
    o = np.zeros((b, hq, sq, d), np.float32)
    lse = np.full((b, hq, sq), -np.inf, np.float32)
    full = (b, hq, sq, skv)
    m_all = np.broadcast_to(mask, full) if mask is not None else None
    per = max(1, b * hq)
    qb = max(1, min(sq, int(math.sqrt(HOST_BLOCK / per)) or 1, 512))
    kb = max(1, min(skv, max(16, HOST_BLOCK // (per * qb))))
    if attrs.alibi_slopes is not None:
        slopes = np.asarray(attrs.alibi_slopes, np.float32).reshape(hkv, gsz, 1, 1)
    kf = kh.astype(np.float32).reshape(b, hkv, 1, skv, d)
    vf = vh.astype(np.float32).reshape(b, hkv, 1, skv, d)
    for q0 in range(0, sq, qb):
        q1 = min(sq, q0 + qb)
        qf = qh[:, :, q0:q1].astype(np.float32).reshape(b, hkv, gsz, q1 - q0, d) * np.float32(scale)
        m = np.full((b, hkv, gsz, q1 - q0, 1), -np.inf, np.float32)
        l = np.zeros_like(m)  # noqa: E741
        acc = np.zeros((b, hkv, gsz, q1 - q0, d), np.float32)
        # causal: the block's last query sees keys up to q1 - 1 + skv - sq; a window: its
        # first query keys from q0 + skv - sq - window on
        bounded = attrs.causal or attrs.window is not None
        kend = min(skv, q1 + skv - sq) if bounded else skv
        kbeg = max(0, q0 + skv - sq - attrs.window) if attrs.window is not None else 0
        for k0 in range(kbeg, max(kend, 0), kb):
            k1 = min(kend, k0 + kb)
            s = qf @ kf[:, :, :, k0:k1].swapaxes(-1, -2)
            if attrs.softcap is not None:
                s = np.float32(attrs.softcap) * np.tanh(s / np.float32(attrs.softcap))
            if m_all is not None:
                mb = m_all[:, :, q0:q1, k0:k1].reshape(b, hkv, gsz, q1 - q0, k1 - k0)
                if mb.dtype == np.bool_:
                    s = np.where(mb, s, -np.inf)
                else:  # in place: s is this block's own (astype would copy the broadcast)
                    s += mb.astype(np.float32, copy=False)
            pos, j = np.arange(q0, q1)[:, None] + (skv - sq), np.arange(k0, k1)[None, :]
            if attrs.alibi_slopes is not None:
                s -= slopes * np.abs(pos - j).astype(np.float32)
            if bounded:
                ok = (j <= pos) & (j >= pos - attrs.window if attrs.window is not None else True)
                s = np.where(ok, s, -np.inf)
            mt = np.maximum(m, s.max(axis=-1, keepdims=True))
            seen = mt > -np.inf
            mt_safe = np.where(seen, mt, 0).astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                s -= mt_safe
                p = np.exp(s, out=s)
                if k0 > kbeg:  # the first key block starts from nothing: no correction
                    corr = np.where(seen, np.exp(m - mt_safe), 1).astype(np.float32)
                    l = l * corr + p.sum(axis=-1, keepdims=True)  # noqa: E741
                    acc = acc * corr + p @ vf[:, :, :, k0:k1]
                else:
                    l, acc = p.sum(axis=-1, keepdims=True), p @ vf[:, :, :, k0:k1]  # noqa: E741
            m = mt
        with np.errstate(invalid="ignore", divide="ignore"):
            if (l > 0).all():  # every row saw a key: the plain quotient, in place
                ob, lb = np.divide(acc, l, out=acc), m + np.log(l)
            else:  # a row that saw no key: its 0 * v sums (NaN where v is not finite)
                seen = l != 0  # NaN rows stay NaN
                ob = np.where(seen, acc / np.where(seen, l, 1), acc)
                lb = np.where(seen, m + np.log(np.where(seen, l, 1)), -np.inf)
        o[:, :, q0:q1] = ob.reshape(b, hq, q1 - q0, d)
        if attrs.return_lse:
            lse[:, :, q0:q1] = lb.reshape(b, hq, q1 - q0)
    o = (o if layout == "BHSD" else o.transpose(0, 2, 1, 3)).astype(q.dtype)
    return (o, lse) if attrs.return_lse else o


def _batch_chunks(q, k, v, mask, attrs, rows: int):
    """numpy_attention a few batch rows at a time (the mask sliced where it has the batch)."""
    b = q.shape[0]
    batched = mask is not None and mask.ndim == 4 and mask.shape[0] == b > 1
    parts = [numpy_attention(q[i:i + rows], k[i:i + rows], v[i:i + rows],
                             mask[i:i + rows] if batched else mask, attrs)
             for i in range(0, b, rows)]
    if attrs.return_lse:
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return np.concatenate(parts)


def _host_run(ctx):
    mask = ctx.inputs[3] if len(ctx.inputs) == 4 else None
    return numpy_attention(*ctx.inputs[:3], mask, ctx.attrs)


NUMPY_ATTENTION = host_impl("numpy_attention", _host_run)


def host_only(impl):
    """The host target's strategy of the attention operators: their one NumPy implementation."""
    def strategy(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(impl, 10)
        return s
    return strategy


STRATEGIES = {"attention": {"gpu": gpu_strategy, "cpu": host_only(NUMPY_ATTENTION)}}
