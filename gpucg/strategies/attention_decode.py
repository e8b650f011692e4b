"""Decode attention (templates/attention/decode.j2) for the dense (B, H, S, D) cache and the
paged one: its config space, how it splits the keys, and its launch.

One work-group of ``nt`` work-items takes a (batch, KV head, tile of query rows, split of the
keys). Its rows are every query head of the KV head's group at each query position (GQA and MQA
packed, as FlashInfer and FlashAttention-3's pack_gqa do), so each key and value byte is read
once a work-group; key tiles stream through cp.async stages of shared memory, 16 bytes a copy;
a row's D is split across ``lk`` lanes (their parts added by xor shuffles) and the lane groups
split at run time between rows and keys. The keys are split across work-groups (flash-decoding)
until the grid fills two waves of the GPU's multiprocessors at the kernel's occupancy, never
below :data:`MIN_CHUNK` keys a split (below it the partial outputs cost more traffic than the
keys they save), and the combine kernel (templates/attention/combine.j2) merges the splits by
their log-sum-exps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..implementation import Kernel, kernel_impl
from ..runtime import alignment_of
from ..runtime.base import ceil_div
from ..space import ConfigSpace

#: query rows at most (Sq) for which the decode kernel is chosen
DECODE_SQ_MAX = 16
#: head dims the kernel keeps a row of in registers, at most
D_MAX = 256
#: keys a split reads at least: a split's partial output (rows x D float32, written and read
#: again) stays a few percent of its keys' bytes
MIN_CHUNK = 512
#: 32-bit registers a thread's q rows and accumulators (2 * rpt * D / lk) may take
REGS_MAX = 96
#: registers a thread holds beside them (addresses, the softmax state, a chunk in flight):
#: ptxas gives the default configs 72 to 96 in all (tests/resources/attention.json)
REGS_BASE = 80


def chunk_elems(eb: int) -> int:
    """Elements of a 16-byte chunk."""
    return 16 // eb


def _lanes(d: int, eb: int) -> int:
    """Lanes a row's D is split across by default: one 16-byte chunk each, 32 at most."""
    nch = ceil_div(d, chunk_elems(eb))
    return min(32, 1 << (nch - 1).bit_length())


def smem_bytes(c, d: int, eb: int) -> int:
    """The K and V stages, or the key groups' states where they meet (the same memory)."""
    v = chunk_elems(eb)
    nch = ceil_div(d, v)
    slots = c["nt"] // c["lk"]
    stages = c["stages"] * slots * c["kps"] * nch * 16 * 2
    cpl = ceil_div(nch, c["lk"])
    merge = slots * c["rpt"] * (cpl * c["lk"] * v + 2) * 4
    return max(stages, merge)


def regs(c, d: int, eb: int) -> int:
    """A thread's q rows and accumulators."""
    nch = ceil_div(d, chunk_elems(eb))
    return 2 * c["rpt"] * ceil_div(nch, c["lk"]) * chunk_elems(eb)


def space_for(d: int, eb: int, group, smem_max: int, prefill: bool = False) -> ConfigSpace:
    """The knobs: threads, lanes a row, rows a thread, keys a step, stages. The default packs
    a KV head's whole group (``group`` query heads, when known) into one tile of rows."""
    def ok(c):
        return (c["nt"] % c["lk"] == 0 and c["nt"] // c["lk"] >= 1
                and regs(c, d, eb) <= REGS_MAX and smem_bytes(c, d, eb) <= smem_max)
    knobs = {"nt": (64, 128, 256), "lk": (1, 2, 4, 8, 16, 32), "rpt": (1, 2, 4), "kps": (1, 2, 4),
             "stages": (2, 3), "combine_wg": (64, 256)}
    lk = _lanes(d, eb)
    nt = 256 if prefill else 128
    # multi-query: two rows a thread (four keep 160 registers on sm_90, 1 block an SM)
    want = 2 * nt // lk if prefill else (int(group) if group is not None else 1)
    default = None
    for rpt in (1, 2, 4):
        c = {"nt": nt, "lk": lk, "rpt": rpt, "kps": 2, "stages": 2, "combine_wg": 256}
        if ok(c):
            default = c
            if nt // lk * rpt >= want:
                break
    if default is None:  # a large D in float32: fewer lanes groups, more chunks a lane
        default = {"nt": 128, "lk": 32, "rpt": 1, "kps": 1, "stages": 2, "combine_wg": 256}
    return ConfigSpace(knobs, default, constraint=ok)


@dataclass(frozen=True)
class DecodeInfo:
    """What the launch needs: the cache's layout ("BHSD", "BSHD" or "paged") and q's, the
    log-sum-exp output, the ALiBi slopes, the window, the head dim and element bytes, and the
    target's capability record (its SMs and their limits: the splits fill two waves)."""

    kvlayout: str
    layout: str
    lse: bool
    slopes: tuple | None
    window: int
    d: int
    eb: int
    caps: object
    #: (the attention kernels' shared launch arguments read it: the decode kernel takes none)
    has_mask: bool = False


def plan(info: DecodeInfo, config, work: int, rows: int, keys: int):
    """(rowtiles, log2 of the row groups, splits, chunk) for ``work`` (batch x KV heads)
    problems of ``rows`` packed query rows reading at most ``keys`` keys each."""
    slots = config["nt"] // config["lk"]
    tile = slots * config["rpt"]
    rowtiles = max(1, ceil_div(rows, tile))
    ryn = 1 << (ceil_div(min(rows, tile), config["rpt"]) - 1).bit_length() if rows else 1
    caps = info.caps
    regs_block = config["nt"] * (regs(config, info.d, info.eb) + REGS_BASE)
    per_sm = min(caps.max_threads_per_sm // config["nt"], caps.max_blocks_per_sm,
                 caps.smem_per_sm // max(1, smem_bytes(config, info.d, info.eb)),
                 caps.regs_per_sm // regs_block)
    groups = max(1, work * rowtiles)
    bk = slots * config["kps"]
    want = ceil_div(2 * caps.sm_count * max(1, per_sm), groups)
    splits = max(1, min(want, keys // MIN_CHUNK))
    chunk = ceil_div(ceil_div(max(keys, 1), splits), bk) * bk
    splits = max(1, ceil_div(keys, chunk))
    return rowtiles, int(math.log2(ryn)), splits, chunk


_SLOPES: dict = {}


def slopes_arg(ctx, slopes: tuple | None) -> dict:
    """The launch's ALiBi ``slopes`` argument, if the call has slopes (else nothing)."""
    return {} if slopes is None else {"slopes": slopes_on(ctx, slopes)}


def slopes_on(ctx, slopes: tuple):
    """The ALiBi slopes as a float32 array on the call's backend (uploaded once a backend)."""
    key = (id(ctx.backend), slopes)
    got = _SLOPES.get(key)
    if got is None:
        if len(_SLOPES) > 64:
            _SLOPES.clear()
        got = _SLOPES[key] = ctx.backend.to_device(np.asarray(slopes, np.float32))
    return got


def launch(ctx, main, combine, q, k, v, sizes, keys, **paged):
    """Launch the decode kernel and, with splits, the combine kernel. ``paged``: the paged
    cache's arguments by name (block_table, seq_lens, the bad index counter bad, nblocks, bs,
    maxb); ``sizes``: (B, Hq, Hkv, Sq, Skv); ``keys``: the keys a tile of rows reads at most."""
    info, s = ctx.info, ctx.size
    b, hq, hkv, sq, skv = sizes
    group = hq // hkv
    rows = group * sq
    rowtiles, rys, splits, chunk = plan(info, ctx.config, b * hkv, rows, keys)
    eb, v_ = info.eb, chunk_elems(info.eb)
    o = ctx.outputs[0]
    vec = int(info.d % v_ == 0 and all(alignment_of(a) % 16 == 0 for a in (k, v, o)))
    lse = {"lse": ctx.outputs[1]} if info.lse else {}
    total = b * hq * sq
    if splits > 1:
        po = ctx.empty((total * splits * info.d,), np.float32)
        pl = ctx.empty((total * splits,), np.float32)
    else:
        po = pl = ctx.empty((1,), np.float32)
    main(q=q, k=k, v=v, **paged, **slopes_arg(ctx, info.slopes), o=o, **lse, po=po, pl=pl,
         hq=s(hq), hkv=s(hkv),
         group=s(group), sq=s(sq), skv=s(skv), rows=s(rows), rowtiles=s(rowtiles),
         splits=s(splits), chunk=s(chunk), rys=np.int32(rys), vec=np.int32(vec),
         grid=b * hkv * rowtiles * splits, block=ctx.config["nt"])
    if splits > 1:
        cwg = ctx.config["combine_wg"]
        combine(po=po, pl=pl, o=o, **lse, splits=s(splits), hq=s(hq), sq=s(sq),
                total=s(total * info.d), grid=ceil_div(total * info.d, cwg), block=cwg)
    return splits


def decode_kernels(doc: str) -> dict:
    """The kernels of a decode implementation: the decode kernel and the split combine."""
    return {"main": Kernel("attention/decode.j2", doc=doc),
            "combine": Kernel("attention/combine.j2", derive=lambda p: {"wg": p["combine_wg"]},
                              doc="the splits' partial outputs combined by their log-sum-exps")}


def fixed_params(dtype: str, d: int, eb: int, kvlayout: str, layout: str, causal: bool,
                 scale: float, softcap, window, alibi: bool, lse: bool) -> dict:
    from ..half import half_format

    return dict(D=d, EB=eb, dtype=dtype, half=half_format(dtype), kvlayout=kvlayout,
                layout=layout, causal=causal, scale=float(scale),
                softcap=softcap or 0, qscale=scale / softcap if softcap else scale,
                window=-1 if window is None else int(window), alibi=alibi, lse=lse)


def dense_run(ctx, main, combine):
    """attention's decode: the dense cache in layout BHSD or BSHD."""
    from .attention_args import common_args

    (b, hq, hkv, sq, skv), arrays, _ = common_args(ctx)  # (no mask: it is excluded)
    if b * hq * sq == 0:
        return
    q, k, v = arrays[:3]
    keys = skv
    if ctx.info.window >= 0:  # a tile of rows reads its queries' windows
        slots = ctx.config["nt"] // ctx.config["lk"] * ctx.config["rpt"]
        keys = min(skv, ctx.info.window + ceil_div(slots, max(1, hq // hkv)) + 1)
    launch(ctx, main, combine, q, k, v, (b, hq, hkv, sq, skv), keys)


ATTENTION_DECODE = kernel_impl("attention_decode", dense_run, **decode_kernels(
    "a (batch, KV head, split) a work-group, its query heads packed; 16-byte cp.async stages"))


def offer(s, attrs, q, k, target, has_mask: bool) -> None:
    """Offer attention_decode (Sq <= 16) on strategy ``s``, or exclude it with the reason."""
    import sympy

    from ..ops.attention import dims, softmax_scale

    _, hq, sq, d = dims(q, attrs.layout)
    hkv = dims(k, attrs.layout)[1]
    d = int(d)
    plevel = 25 if not target.on_cpu else 5
    if has_mask:
        s.exclude(ATTENTION_DECODE, plevel, "a mask (attention_split reads masks)")
        return
    if d > D_MAX:
        s.exclude(ATTENTION_DECODE, plevel, f"head dim D={d} is over {D_MAX}")
        return
    eb = 4 if q.dtype == "float32" else 2
    hq, hkv = sympy.sympify(hq), sympy.sympify(hkv)
    group = int(hq) // int(hkv) if hq.is_Integer and hkv.is_Integer and int(hkv) else None
    window, slopes = getattr(attrs, "window", None), getattr(attrs, "alibi_slopes", None)
    params = fixed_params(q.dtype, d, eb, attrs.layout, attrs.layout, attrs.causal,
                          softmax_scale(attrs, d), attrs.softcap, window, slopes is not None,
                          attrs.return_lse)
    caps = target.capabilities
    info = DecodeInfo(attrs.layout, attrs.layout, attrs.return_lse, slopes, params["window"], d, eb,
                      caps)
    s.add(ATTENTION_DECODE, plevel, condition=sympy.Le(sq, DECODE_SQ_MAX), info=info,
          space=space_for(d, eb, group, caps.smem_static_max), fixed=params)
