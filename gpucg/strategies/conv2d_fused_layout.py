"""The fused Winograd kernel's local tiles (strategies/conv2d_fused.py): where the input
region, U and V lie in local memory, the paddings that make a config's requests conflict-free
in the bank model (gpucg.verify.banks), and the requests themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..codegen.tile_layout import BANKS
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


def _request_words(config, m: int, nchw: bool, lay: "Layout", which=None) -> list:
    """(name, words, ok) of each local-memory request kind of the work-group's first pass,
    every warp at once: ``words`` the 4-byte word each lane touches, ``ok`` whether it makes
    the access, both (warps, 32) arrays (the last warp's lanes past the work-group included);
    ``which``: only the kinds whose names start with one of these."""
    bm, bk, tm, tn = config["bm"], config["bk"], config["tm"], config["tn"]
    kc = lay.kc or bk
    bth, btw = config["bth"], config["btw"]
    bn, alpha, rw = bth * btw, m + 2, lay.r * lay.qs
    ty_n, tx_n, wg = bm // tm, bn // tn, work_group(config)
    e = np.arange(ceil_div(wg, 32) * 32, dtype=np.int64).reshape(-1, 32)
    out = []

    def want(name):
        return which is None or name.startswith(which)

    def req(name, words, ok):
        out.append((name, words, ok if isinstance(ok, np.ndarray) else np.full(e.shape, ok)))
    if want("x region store"):
        w = e % rw if nchw else e // kc
        slot = w % lay.qs
        ok = (e < kc * rw) & (slot < m * lay.cq) & ((slot % lay.cq) * m + slot // lay.cq < lay.q)
        req("x region store", e // rw * lay.xs + e % rw if nchw else e % kc * lay.xs + e // kc, ok)
    if want("U store"):
        req("U store", (e % bk) * lay.us + e // bk, e < bm * bk)
    if want("patch read"):
        kk, row, col, ok = e // bn, e % bn // btw * m, e % bn % btw * m, e < bk * bn
        # x_word is a sum of a (channel, row) part and a column part: each computed alpha times
        rows = [lay.x_word(kk, row + i, 0) for i in range(alpha)]
        cols = [lay.x_word(0, 0, col + j) for j in range(alpha)]
        for i in range(alpha):
            for j in range(alpha):
                req("patch read", rows[i] + cols[j], ok)
    if want("V store"):
        req("V store", (e // bn) * lay.vs + e % bn, e < bk * bn)
    if want("U fragment read"):
        for i in range(tm):
            req("U fragment read", e // tx_n + i * ty_n, True)
    if want("V fragment read"):
        for j in range(tn):
            req("V fragment read", e % tx_n + j * tx_n, True)
    return out


def requests(config, m: int, nchw: bool, lay: "Layout | None" = None, which=None) -> list:
    """Per-lane byte addresses of each local-memory request of the kernel, for every warp of
    the work-group's first pass (what gpucg.verify.banks.report takes); ``which``: only the
    requests whose names start with one of these."""
    kinds = _request_words(config, m, nchw, lay or layout(config, m, nchw), which)
    warps = len(kinds[0][1]) if kinds else 0
    return [(name, tuple(4 * int(x) if k else None for x, k in zip(words[w], ok[w])), 4)
            for w in range(warps) for name, words, ok in kinds]


def _extra(kinds) -> int:
    """Wavefronts over the ideal (one), summed over the requests (4-byte accesses of 32
    lanes: one phase each) of every warp that makes one: per bank, the distinct words."""
    if not kinds:
        return 0
    words = np.concatenate([np.where(ok, w, -1) for _, w, ok in kinds])
    words = words[(words >= 0).any(axis=1)]
    words.sort(axis=1)
    new = np.ones(words.shape, bool)
    new[:, 1:] = words[:, 1:] != words[:, :-1]
    rows, lanes = np.nonzero(new & (words >= 0))
    per_bank = np.zeros((len(words), BANKS), np.int64)
    np.add.at(per_bank, (rows, words[rows, lanes] % BANKS), 1)
    return int((per_bank.max(axis=1, initial=0) - 1).sum())


def cost(config, m: int, nchw: bool, lay: Layout, which=None) -> tuple[int, int]:
    """Extra wavefronts of the requests (``which``) a work-group makes every step, and of
    those it makes once: the region's store where om > 1 (it holds every channel)."""
    held = config.get("om", 1) > 1
    kinds = _request_words(config, m, nchw, lay, which)
    once = [k for k in kinds if held and k[0] == "x region store"]
    return _extra([k for k in kinds if not (held and k[0] == "x region store")]), _extra(once)


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
