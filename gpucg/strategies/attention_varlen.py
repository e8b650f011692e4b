"""Strategies of attention_varlen (a ragged batch, cumulative lengths).

GPU implementations:
  varlen_flash (CUDA, float16/bfloat16, float32 with allow_tf32; plevel 15; the OpenCL twin
               forced only) attention's tensor-core forward (templates/attention/flash_mma.j2,
               ``varlen``): a work-group a (sequence, head, tile of query rows), the sequence's
               rows and keys at its offsets in the packed arrays, cp.async stages of K and V.
  varlen_simt  attention's SIMT kernel (templates/attention/simt.j2, ``varlen``): a work-group
               a (sequence, head, tile of query rows), the sequence's rows found from the
               cumulative lengths, keys and values streamed, causal and window tiles outside
               the rows' range never loaded; tiles past a sequence's end return at once (the
               grid is sized by the total rows, so no lengths are read back before the launch).
               The first work-group of each sequence counts a bad cumulative length into a
               word the host reads back after the launch; then the host check names it.
The numpy target runs attention's host implementation a sequence at a time.
"""

from __future__ import annotations

import numpy as np

from ..errors import StrategyError
from ..implementation import Kernel, host_impl, kernel_impl
from ..op import get_op
from ..ops.attention import softmax_scale
from ..ops.attention_varlen import check
from ..runtime.base import ceil_div
from ..strategy import Strategy
from ..half import half_format
from .attention import (SIMT_D_MAX, _low_occupancy, _space, _spills, host_only,
                        numpy_attention)
from . import attention_mma
from .attention_decode import slopes_arg


def _launch(ctx, main, rows: int, block: int, **extra):
    """Launch a varlen kernel: a work-group a (sequence, head, tile of ``rows`` query rows),
    the grid sized by the total rows (no lengths read back first); the bad entries it counts
    are named by the host check after the launch."""
    q, k, v, cq, ck = ctx.inputs
    tq, hq, _ = (int(x) for x in q.shape)
    tk, hkv, _ = (int(x) for x in k.shape)
    b = int(cq.shape[0]) - 1
    host = ctx.backend.to_host
    if tq == 0 or b == 0 or hq == 0:
        check(np.empty((tq,)), np.empty((tk,)), host(cq), host(ck))
        return
    s, qtiles = ctx.size, ceil_div(tq, rows)
    bad = ctx.counter()
    main(q=q, k=k, v=v, cu_q=cq, cu_k=ck, **slopes_arg(ctx, ctx.attrs.alibi_slopes), o=ctx.outputs[0], bad=bad,
         hq=s(hq), hkv=s(hkv), group=s(hq // hkv), tq=s(tq), tk=s(tk), batch=s(b),
         qtiles=s(qtiles), **extra, grid=b * hq * qtiles, block=block)
    if ctx.count(bad):
        check(np.empty((tq,)), np.empty((tk,)), host(cq), host(ck))
        raise StrategyError(f"{ctx.impl.name}: the kernel counted {ctx.count(bad)} bad "
                            "cumulative lengths that the host check does not find")


def _simt_run(ctx, main):
    _launch(ctx, main, ctx.config["wg"], ctx.config["wg"])


def _flash_run(ctx, main):
    q, k, v = ctx.inputs[:3]
    geo = attention_mma.config_geometry(ctx.fixed | dict(ctx.config))
    _launch(ctx, main, geo.bq, geo.nt,
            vec=np.int32(attention_mma.vec_bits((q, k, v), ctx.outputs[0], int(q.shape[2]))))


VARLEN_SIMT = kernel_impl("varlen_simt", _simt_run, main=Kernel(
    "attention/simt.j2", {"split": False}, spills=_spills, low_occupancy=_low_occupancy,
    doc="a (sequence, head, tile of query rows) a work-group, keys and values streamed"))
VARLEN_FLASH = kernel_impl("varlen_flash", _flash_run, main=attention_mma.flash_kernel(
    "FlashAttention-2 forward on tensor cores a (sequence, head, query tile): cp.async stages"))


def gpu_strategy(attrs, inputs, outputs, target):
    q = inputs[0]
    d = int(q.shape[2])
    s = Strategy(target)
    if d > SIMT_D_MAX:
        s.exclude(VARLEN_SIMT, 10, f"head dim D={d} is over {SIMT_D_MAX}, the most the "
                  "kernel keeps in registers")
        return s
    scale = softmax_scale(attrs, d)
    params = dict(D=d, layout="varlen", causal=attrs.causal, softcap=attrs.softcap or 0,
                  scale=float(scale), qscale=scale / attrs.softcap if attrs.softcap else scale,
                  half=half_format(q.dtype), lse=False, mask=False, mask_half=False,
                  window=-1 if attrs.window is None else attrs.window,
                  alibi=attrs.alibi_slopes is not None, varlen=True)
    attention_mma.offer(s, q.dtype, False, d, params, None, target, VARLEN_FLASH)
    s.add(VARLEN_SIMT, 10, space=_space(d, target.on_cpu), fixed=params)
    return s


def _host_run(ctx):
    q, k, v, cq, ck = ctx.inputs
    check(q, k, cq, ck)
    a = ctx.attrs
    attrs = get_op("attention").make_attrs(causal=a.causal, scale=a.scale, layout="BSHD",
                                           softcap=a.softcap, window=a.window,
                                           alibi_slopes=a.alibi_slopes)
    out = np.zeros(q.shape, q.dtype)
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        out[qs] = numpy_attention(q[None, qs], k[None, ks], v[None, ks], None, attrs)[0]
    return out


NUMPY_VARLEN = host_impl("numpy_varlen", _host_run)


STRATEGIES = {"attention_varlen": {"gpu": gpu_strategy, "cpu": host_only(NUMPY_VARLEN)}}
