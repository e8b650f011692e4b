"""Strategies of attention_varlen (a ragged batch, cumulative lengths).

GPU implementations:
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
from .attention_decode import slopes_on


def _simt_run(ctx, main):
    q, k, v, cq, ck = ctx.inputs
    tq, hq, _ = (int(x) for x in q.shape)
    tk, hkv, _ = (int(x) for x in k.shape)
    b = int(cq.shape[0]) - 1
    if tq == 0 or b == 0 or hq == 0:
        host = ctx.backend.to_host
        check(np.empty((tq,)), np.empty((tk,)), host(cq), host(ck))
        return
    s, wg = ctx.size, ctx.config["wg"]
    qtiles = ceil_div(tq, wg)
    slopes = () if ctx.attrs.alibi_slopes is None else (slopes_on(ctx, ctx.attrs.alibi_slopes),)
    bad = ctx.counter()
    main(q, k, v, cq, ck, *slopes, *ctx.outputs, bad, s(hq), s(hkv), s(hq // hkv), s(tq), s(tk),
         s(b), s(qtiles), grid=b * hq * qtiles, block=wg)
    if ctx.count(bad):
        host = ctx.backend.to_host
        check(np.empty((tq,)), np.empty((tk,)), host(cq), host(ck))
        raise StrategyError(f"{ctx.impl.name}: the kernel counted {ctx.count(bad)} bad "
                            "cumulative lengths that the host check does not find")


VARLEN_SIMT = kernel_impl("varlen_simt", _simt_run, main=Kernel(
    "attention/simt.j2", {"split": False, "varlen": True}, spills=_spills,
    low_occupancy=_low_occupancy,
    doc="a (sequence, head, tile of query rows) a work-group, keys and values streamed"))


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
                  alibi=attrs.alibi_slopes is not None)
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
