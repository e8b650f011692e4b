"""Winograd F(m x m, 3 x 3) in one kernel (templates/conv2d/winograd_fused.j2): conv2d's
winograd_fused_2x2 / winograd_fused_4x4 and the pre-transformed operator's.

A work-group takes bm output channels of a bth x btw block of neighbouring output tiles of one
image. For each step of bk input channels it loads the input region the block covers once
(local memory, zero outside x), transforms every tile's patch there (V = B^T d B), transforms
the bm x bk filters (U = G g G^T; the pre-transformed operator loads U) and adds the alpha^2
products; each work-item keeps all alpha^2 sums of its tm x tn (output channel, tile) pairs in
registers, so the output transform and the shared epilogue run there too. Neither V nor the
products M reach global memory: x is read about (m * bth + 2)(m * btw + 2) / (m^2 bth btw)
times per block of output channels (1.27x for 2x2 tiles in 4 x 8 blocks), the filters once per
block of tiles, y written once.

The unfused kernels (winograd_2x2 / winograd_4x4: transforms and products through global
memory) stay: below the fused ones on a GPU (forceable with impl=), above them on a CPU device,
where their GEMM tile is faster (PoCL: 1.3-1.8x the time for the fused kernel at batch 8).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..implementation import Kernel, kernel_impl
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from ..codegen.tile_layout import phase_wavefronts
from .conv2d_call import ConvCall
from .gemm_tile import LOCAL_BYTES

#: most sums a work-item keeps (alpha^2 * tm * tn) before the registers spill
MAX_SUMS = 144

#: defaults by tile size m: 2x2 tiles in 4 x 8 blocks of 32 output channels, 2 x 2 (o, tile)
#: pairs a work-item (64 sums); 4x4 tiles in 2 x 8 blocks, 2 x 1 pairs (72 sums), 4 channels a
#: step (36 KiB of local memory at 8 would leave no room for two blocks a multiprocessor)
DEFAULTS = {2: {"bm": 32, "bth": 4, "btw": 8, "bk": 8, "tm": 2, "tn": 2},
            4: {"bm": 32, "bth": 2, "btw": 8, "bk": 4, "tm": 2, "tn": 1}}


@dataclass(frozen=True)
class Layout:
    """Where the kernel keeps its local tiles (in 4-byte words). The input region of a channel
    is r rows of q columns; column s of a row lies at slot (s % m) * cq + s // m (the m phases
    of the columns one after another), so the work-items reading the same patch element of
    neighbouring tiles read neighbouring words; rows qs words apart (the slots past m * cq are
    padding), channels xs apart. U rows (a, kk) hold bm words at a stride of us, V rows bn at
    vs. The region is loaded in the order of its words (a warp still reads whole runs of a row
    of x). The paddings are the smallest that make the config's requests conflict-free in the
    bank model (gpucg.verify.banks), or else the fewest extra wavefronts, found by trying."""

    m: int
    r: int
    q: int
    cq: int
    qs: int
    xs: int
    us: int
    vs: int

    def x_word(self, kk, r, s) -> int:
        return kk * self.xs + r * self.qs + (s % self.m) * self.cq + s // self.m

    def words(self, config) -> int:
        return config["bk"] * (self.xs + (self.m + 2) ** 2 * (self.us + self.vs))


def requests(config, m: int, nchw: bool, lay: "Layout | None" = None, which=None) -> list:
    """Per-lane byte addresses of each local-memory request of the kernel, for every warp of
    the work-group's first pass (what gpucg.verify.banks.report takes); ``which``: only the
    requests whose names start with one of these."""
    lay = lay or layout(config, m, nchw)
    bm, bk, tm, tn = config["bm"], config["bk"], config["tm"], config["tn"]
    bth, btw = config["bth"], config["btw"]
    bn, alpha, rw = bth * btw, m + 2, lay.r * lay.qs
    ty_n, tx_n, wg = bm // tm, bn // tn, work_group(config)
    out = []

    def slot_ok(w):
        slot = w % lay.qs
        return slot < m * lay.cq and (slot % lay.cq) * m + slot // lay.cq < lay.q
    for w0 in range(0, wg, 32):
        lanes = range(w0, w0 + 32)

        def req(name, fn, ok):
            if which is None or name.startswith(which):
                out.append((name, tuple(4 * fn(e) if ok(e) else None for e in lanes), 4))
        if nchw:
            req("x region store", lambda e: e // rw * lay.xs + e % rw,
                lambda e: e < bk * rw and slot_ok(e % rw))
        else:
            req("x region store", lambda e: e % bk * lay.xs + e // bk,
                lambda e: e < bk * rw and slot_ok(e // bk))
        req("U store", lambda e: (e % bk) * lay.us + e // bk, lambda e: e < bm * bk)
        for i in range(alpha):
            for j in range(alpha):
                req("patch read", lambda e: lay.x_word(e // bn, e % bn // btw * m + i,
                                                       e % bn % btw * m + j),
                    lambda e: e < bk * bn)
        req("V store", lambda e: (e // bn) * lay.vs + e % bn, lambda e: e < bk * bn)
        for i in range(tm):
            req("U fragment read", lambda e: e // tx_n + i * ty_n, lambda e: True)
        for j in range(tn):
            req("V fragment read", lambda e: e % tx_n + j * tx_n, lambda e: True)
    return out


def _extra(reqs) -> int:
    """Wavefronts over the ideal (one), summed over the requests (4-byte accesses of 32
    lanes: one phase each)."""
    return sum(phase_wavefronts([a // 4 for a in addresses if a is not None]) - 1
               for _, addresses, _ in reqs if any(a is not None for a in addresses))


#: each padding, the requests it moves
_PADS = (("qs", ("x region", "patch")), ("xs", ("x region", "patch")), ("us", ("U",)),
         ("vs", ("V",)))


@lru_cache(maxsize=None)
def _layout(m, bth, btw, bk, bm, tm, tn, nchw) -> Layout:
    config = dict(bm=bm, bth=bth, btw=btw, bk=bk, tm=tm, tn=tn)
    r, q = m * bth + 2, m * btw + 2
    cq = -(-q // m)
    lay = Layout(m, r, q, cq, m * cq, r * m * cq, bm, bth * btw)
    if work_group(config) % 32:
        return lay
    for name, which in _PADS:
        best = None
        for pad in range(32):
            base = r * lay.qs if name == "xs" else getattr(Layout(m, r, q, cq, m * cq, 0, bm,
                                                                  bth * btw), name)
            t = replace(lay, **{name: base + pad})
            if name == "qs":
                t = replace(t, xs=r * t.qs)
            cost = _extra(requests(config, m, nchw, t, which))
            if best is None or cost < best[0]:
                best = (cost, t)
            if cost == 0:
                break
        lay = best[1]
    return lay


def layout(config, m: int, nchw: bool) -> Layout:
    """The local tiles' layout of a config (cached)."""
    return _layout(m, config["bth"], config["btw"], config["bk"], config["bm"], config["tm"],
                   config["tn"], nchw)


def work_group(config) -> int:
    """Work-items of a fused config: (bm / tm) * (bth * btw / tn)."""
    return (config["bm"] // config["tm"]) * (config["bth"] * config["btw"] // config["tn"])


def local_bytes(config, m: int) -> int:
    """Local memory: the input region of bk channels, U and V of one step (unpadded)."""
    a2 = (m + 2) ** 2
    region = (m * config["bth"] + 2) * (m * config["btw"] + 2)
    return 4 * config["bk"] * (region + a2 * (config["bm"] + config["bth"] * config["btw"]))


def space(m: int, nchw: bool) -> ConfigSpace:
    """The fused kernel's tiles for F(m x m, 3 x 3) (its padded layout depends on the data
    layout, ``nchw``)."""
    a2 = (m + 2) ** 2

    def ok(c):
        bn = c["bth"] * c["btw"]
        return (c["bm"] % c["tm"] == 0 and bn % c["tn"] == 0 and 32 <= work_group(c) <= 256
                and a2 * c["tm"] * c["tn"] <= MAX_SUMS and local_bytes(c, m) <= LOCAL_BYTES
                and 4 * layout(c, m, nchw).words(c) <= LOCAL_BYTES)
    knobs = {"bm": (8, 16, 32, 64), "bth": (1, 2, 4, 8), "btw": (2, 4, 8, 16),
             "bk": (2, 4, 8, 16), "tm": (1, 2, 4), "tn": (1, 2, 4)}
    return ConfigSpace(knobs, DEFAULTS[m], constraint=ok)


def _run(ctx, fused) -> None:
    k = ConvCall(ctx)
    if k.empty:
        return
    m, c = ctx.fixed["m"], ctx.config
    th, tw = ceil_div(k.oh, m), ceil_div(k.ow, m)
    grid = ceil_div(ctx.info.geo.o, c["bm"]) * k.n * ceil_div(th, c["bth"]) * ceil_div(tw, c["btw"])
    fused(k.data, k.weight, *k.epilogue_args, k.y, *k.sizes, ctx.size(th), ctx.size(tw),
          grid=grid, block=work_group(c))


def _strides(p) -> dict:
    """The template's layout parameters (:class:`Layout`)."""
    lay = layout(p, p["m"], p["nchw"])
    return dict(cq=lay.cq, qs=lay.qs, xs=lay.xs, us=lay.us, vs=lay.vs)


def decl(m: int, pre: bool):
    """winograd_fused_{m}x{m}: filters transformed in the kernel, or U given (``pre``)."""
    what = "U loaded" if pre else "the filters transformed there"
    return kernel_impl(f"winograd_fused_{m}x{m}", _run, fused=Kernel(
        "conv2d/winograd_fused.j2", {"pre": pre}, derive=_strides,
        doc=f"the input region in local memory, V = B^T d B there, {what}, the alpha^2 "
            "products in registers, A^T M A and the epilogue",
        low_occupancy=lambda p: LOW_4X4 if p["m"] == 4 else ""))


#: why F(4x4)'s default may run one block a multiprocessor
LOW_4X4 = ("F(4x4): 36 sums of 2 (o, tile) pairs a work-item, about 170 registers on sm_80 "
           "(capped at 128 for two blocks it spills)")


#: (tile, U given) -> declaration
FUSED = {(m, pre): decl(m, pre) for m in (2, 4) for pre in (False, True)}

