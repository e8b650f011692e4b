"""The fused Winograd kernel's local tiles (strategies/conv2d_fused.py): where the input
region, U and V lie in local memory, the paddings that make a config's requests conflict-free
in the bank model (gpucg.verify.banks), and the requests themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..codegen.tile_layout import phase_wavefronts
from ..runtime.base import ceil_div
from .gemm_tile import LOCAL_BYTES


@dataclass(frozen=True)
class Layout:
    """Where the kernel keeps its local tiles (in 4-byte words). The input region of a channel
    is r rows of q columns; column s of a row lies at slot (s % m) * cq + s // m (the m phases
    of the columns one after another), so the work-items reading the same patch element of
    neighbouring tiles read neighbouring words; rows qs words apart (the slots past m * cq are
    padding), channels xs apart. U rows (a, kk) hold bm words at a stride of us, V rows bn at
    vs. The region is loaded in the order of its words (a warp still reads whole runs of a row
    of x). The paddings are the smallest that make the config's requests conflict-free in the
    bank model (gpucg.verify.banks), or else the fewest extra wavefronts, found by trying; none
    where the padded tiles would not fit the local memory."""

    m: int
    r: int
    q: int
    cq: int
    qs: int
    xs: int
    us: int
    vs: int
    #: channels of the region held (:func:`held`; 0: bk)
    kc: int = 0

    def x_word(self, kk, r, s) -> int:
        return kk * self.xs + r * self.qs + (s % self.m) * self.cq + s // self.m

    def words(self, config) -> int:
        return (self.kc or config["bk"]) * self.xs + self.uv_words(config)

    def uv_words(self, config) -> int:
        return config["bk"] * (self.m + 2) ** 2 * (self.us + self.vs)

    def split(self, config) -> tuple[int, int]:
        """(static, dynamic) local bytes: the region is the dynamic buffer where om > 1."""
        if config.get("om", 1) > 1:
            return 4 * self.uv_words(config), 4 * self.kc * self.xs
        return 4 * self.words(config), 0


def requests(config, m: int, nchw: bool, lay: "Layout | None" = None, which=None) -> list:
    """Per-lane byte addresses of each local-memory request of the kernel, for every warp of
    the work-group's first pass (what gpucg.verify.banks.report takes); ``which``: only the
    requests whose names start with one of these."""
    lay = lay or layout(config, m, nchw)
    bm, bk, tm, tn = config["bm"], config["bk"], config["tm"], config["tn"]
    kc = lay.kc or bk
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
                lambda e: e < kc * rw and slot_ok(e % rw))
        else:
            req("x region store", lambda e: e % kc * lay.xs + e // kc,
                lambda e: e < kc * rw and slot_ok(e // kc))
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


def cost(config, m: int, nchw: bool, lay: Layout, which=None) -> tuple[int, int]:
    """Extra wavefronts of the requests (``which``) a work-group makes every step, and of
    those it makes once: the region's store where om > 1 (it holds every channel)."""
    reqs = requests(config, m, nchw, lay, which)
    once = [r for r in reqs if config.get("om", 1) > 1 and r[0] == "x region store"]
    return _extra([r for r in reqs if r not in once]), _extra(once)


#: each padding, the requests it moves
_PADS = (("qs", ("x region", "patch")), ("xs", ("x region", "patch")), ("us", ("U",)),
         ("vs", ("V",)))


@lru_cache(maxsize=None)
def _layout(m, bth, btw, bk, bm, tm, tn, nchw, om=1, kc=0, limit=LOCAL_BYTES) -> Layout:
    config = dict(bm=bm, bth=bth, btw=btw, bk=bk, tm=tm, tn=tn, om=om)
    r, q = m * bth + 2, m * btw + 2
    cq = -(-q // m)
    lay = Layout(m, r, q, cq, m * cq, r * m * cq, bm, bth * btw, kc)
    if work_group(config) % 32:
        return lay
    for name, which in _PADS:
        best = None
        for pad in range(32):
            base = r * lay.qs if name == "xs" else getattr(Layout(m, r, q, cq, m * cq, 0, bm,
                                                                  bth * btw, kc), name)
            t = replace(lay, **{name: base + pad})
            if name == "qs":
                t = replace(t, xs=r * t.qs)
            extra = cost(config, m, nchw, t, which)
            if best is None or extra < best[0]:
                best = (extra, t)
            if extra == (0, 0):
                break
        lay = best[1]
    plain = Layout(m, r, q, cq, m * cq, r * m * cq, bm, bth * btw, kc)
    for t in (lay, replace(plain, us=lay.us, vs=lay.vs), plain):  # the region's pads first
        static, dynamic = t.split(config)
        if static <= LOCAL_BYTES and static + dynamic <= limit:
            return t
    return plain


def held(config, c: int) -> int:
    """Channels of the input region in local memory: bk a step, or with om > 1 every channel
    (rounded up to bk), held across the passes."""
    bk = config["bk"]
    return ceil_div(c, bk) * bk if config.get("om", 1) > 1 else bk


def layout(config, m: int, nchw: bool, c: int = 0, limit: int = LOCAL_BYTES) -> Layout:
    """The local tiles' layout of a config with ``c`` input channels (cached); paddings only
    where the local memory stays within ``limit`` bytes (static within LOCAL_BYTES)."""
    return _layout(m, config["bth"], config["btw"], config["bk"], config["bm"], config["tm"],
                   config["tn"], nchw, config.get("om", 1), held(config, c), limit)


def work_group(config) -> int:
    """Work-items of a fused config: (bm / tm) * (bth * btw / tn)."""
    return (config["bm"] // config["tm"]) * (config["bth"] * config["btw"] // config["tn"])
