"""The onesweep LSD radix sort of sort, argsort and topk (sort_radix), for long rows.

Rows are sorted independently: every tile belongs to one row (per-row passes), so a row's
tiles look back only at tiles of the same row and a row's digit counts are its own; the row
id is not part of the digits. Keys are the order keys of topk/_common.j2 (floats by their
order-preserving bit patterns, every NaN one NaN above +inf, -0.0 as +0.0, signed integers
with the sign bit flipped, all bits flipped when descending), 8 bits a pass from the lowest;
the buffers hold the data's own bits, so the values written are the data's (NaN payloads and
-0.0 kept). Each digit pass is stable and the first takes the elements in index order, so the
sort is stable: equal keys keep their index order.

Kernels (templates/sort/): ``zero`` clears the work words; ``hist`` counts every digit
position of every element in one read of the keys; then one pass per digit (``first`` reads
the data, ``middle`` and ``last`` (key, index) pairs, ``last`` writes values and indices,
``only`` does both for 8-bit keys). A digit pass tile takes a ticket from an atomic counter,
so a tile waits only on tiles with lower tickets, which have started: no deadlock whatever
order the device runs work-groups in (PoCL runs them on threads, Oclgrind one after another).

A call that wants the values alone (sort, topk with ret_type="values") moves keys only: each
pass is stable and the first takes the elements in index order, so equal keys (-0.0 and 0.0,
NaNs) keep their order without indices (36 B a float32 element instead of 60-64).

Traffic, for R rows of n elements, K-byte keys, I-byte indices (the kernel's index type, and
the output index type in the last pass; 0 for keys only), D = K digit passes and T-element
tiles: at most one read and one write of keys and indices per digit pass plus one histogram
read of the keys, R * n * (K + D * 2 * (K + I)) bytes (the first pass reads no indices),
besides the small words
that :func:`traffic_bound` adds: per tile and pass, the row's 256 digit counts read, 256 status
words cleared, published twice and read once per predecessor looked at, and 256 histogram
atomics per chunk of HIST_TILES tiles; each of these status, histogram and ticket words is an
atomic read-modify-write, counted as one load and one store. Oclgrind counts 1,005,224 B for
the (1, 33000) float16 sort (tests/resources/topk.json): the keys and indices bound, 726,000 B,
plus 38% of small words (a row of 17 tiles); tests/test_sort_radix.py holds the figure within
this bound.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..implementation import Kernel, kernel_impl
from ..runtime.base import ceil_div
from ..shape import split_axis
from ..space import ConfigSpace
from ..ops.topk import view
from .topk_select import pair_args

#: rows at least this long are sorted by the radix sort on a GPU (shorter: bitonic + merge)
RADIX_SORT_N_MIN = 1 << 15
#: the look-back status packs a flag and a count below 2^30 in one 32-bit word
RADIX_SORT_N_MAX = (1 << 30) - 1
#: work-items of every radix sort kernel: one per digit value
WG = 256
#: tiles of a digit pass one histogram work-group counts
HIST_TILES = 8
#: on a CPU device the radix sort is taken for at most this many rows (see :func:`add`)
CPU_ROWS_MAX = 64


def _tile(p: dict) -> dict:
    return {"chunk": WG * p["items"] * HIST_TILES}


def _pass(from_data: bool, emit: bool, doc: str) -> Kernel:
    return Kernel("sort/radix_pass.j2", {"from_data": from_data, "emit": emit}, doc=doc)


def _emit(out) -> dict:
    """The emitting passes' outputs by name: values (and indices)."""
    return dict(zip(("values", "indices"), out))


def _run(p, ctx, zero, hist, first, middle, last, only) -> None:
    """Sort problem ``p`` (strategies/topk.py's: rows, n, data, outputs)."""
    if p is None:
        return
    s = ctx.size
    digits = p.ukey.itemsize
    tile = WG * ctx.config["items"]
    per_row = ceil_div(p.n, tile)
    tiles = p.rows * per_row
    chunks = ceil_div(p.n, tile * HIST_TILES)
    words = WG * (1 + p.rows * digits + digits * tiles)
    work = ctx.empty((words,), np.uint32)
    zero(work=work, grid=words // WG, block=WG)
    hist(data=p.data, work=work, inner=s(p.inner), n=s(p.n), chunks=s(chunks),
         grid=p.rows * chunks, block=WG)
    sizes = dict(work=work, inner=s(p.inner), n=s(p.n), kout=s(p.k), tiles_per_row=s(per_row),
                 rows=s(p.rows))
    pairs = ctx.fixed["pairs"]
    out = (p.values, p.indices) if pairs else (p.values,)

    def buffers():  # keys (and indices) of every row between two passes
        keys = ctx.empty((p.rows * p.n,), p.ukey)
        return (keys, ctx.empty((p.rows * p.n,), ctx.idx)) if pairs else (keys,)

    if digits == 1:
        only(data=p.data, **_emit(out), **sizes, pass_=np.int32(0), grid=tiles, block=WG)
        return
    a, b = buffers(), buffers()
    first(data=p.data, **pair_args("out", a), **sizes, pass_=np.int32(0), grid=tiles, block=WG)
    for pass_ in range(1, digits - 1):
        middle(**pair_args("in", a), **pair_args("out", b), **sizes, pass_=np.int32(pass_),
               grid=tiles, block=WG)
        a, b = b, a
    last(**pair_args("in", a), **_emit(out), **sizes, pass_=np.int32(digits - 1), grid=tiles,
         block=WG)


KERNELS = dict(
    zero=Kernel("sort/radix_zero.j2", {"wg": WG}, doc="clear the tickets, digit counts, status"),
    hist=Kernel("sort/radix_hist.j2", {"wg": WG}, _tile,
                doc="count every digit position of every element of each row"),
    first=_pass(True, False, "the lowest digit pass: data to (key, index) pairs"),
    middle=_pass(False, False, "a digit pass: (key, index) pairs to pairs"),
    last=_pass(False, True, "the highest digit pass: pairs to values and indices"),
    only=_pass(True, True, "the one digit pass of 8-bit keys: data to values and indices"))


def _space(kbits: int) -> ConfigSpace:
    # local memory: the tile's keys and indices (64-bit at most), 16 counters a work-item
    return ConfigSpace({"items": (4, 8)}, {"items": 8 if kbits <= 32 else 4},
                       constraint=lambda c: WG * c["items"] * (kbits // 8 + 8) <= 28 * 1024)


def traffic_bound(rows: int, n: int, key_bytes: int, index_bytes: int, out_index_bytes: int,
                  items: int, lookback: int = 1) -> tuple[int, int]:
    """(the keys' and indices' bytes, the small words' bytes) a sort moves at most, as the
    module docstring counts them; ``lookback``: predecessors a tile reads per digit."""
    digits, tile = key_bytes, WG * items
    tiles = rows * ceil_div(n, tile)
    m = rows * n
    pair, out = key_bytes + index_bytes, key_bytes + out_index_bytes
    keys = m * key_bytes  # the histogram pass
    if digits == 1:
        keys += m * (key_bytes + out)
    else:  # first: keys in, pairs out; middle: pairs in and out; last: pairs in, outputs out
        keys += m * (key_bytes + pair) + (digits - 2) * 2 * m * pair + m * (pair + out)
    words = WG * (1 + rows * digits + digits * tiles)  # cleared
    # every status, histogram and ticket access is an atomic read-modify-write, which moves its
    # word twice (Oclgrind's counter charges it as a load and a store)
    words += digits * tiles * WG * (1 + 2 * (2 + lookback))  # counts read; published, looked at
    words += 2 * 2 * digits * WG * rows * ceil_div(n, tile * HIST_TILES)  # histogram atomics
    words += 2 * 2 * digits * tiles  # the tickets
    return keys, 4 * words


def declare(problem):
    """The radix sort's declaration, from topk_select's ``problem(ctx)`` (the call's rows,
    outputs and key type)."""
    def run(ctx, zero, hist, first, middle, last, only):
        _run(problem(ctx), ctx, zero, hist, first, middle, last, only)

    return kernel_impl("sort_radix", run, **KERNELS)


def add(s, decl, n, rows, keyp: dict, on_cpu: bool, pairs: bool = True) -> None:
    """Offer the radix sort to the strategy ``s`` for rows of ``n`` elements (``keyp``: the
    order key's template parameters; ``pairs``: indices carried, else the caller wants the
    values alone and the passes move keys only). On a GPU it ranks above the merge path
    (plevel 5) for RADIX_SORT_N_MIN <= n <= RADIX_SORT_N_MAX. On a CPU device (PoCL) it ranks
    above the merge path only for at most CPU_ROWS_MAX rows: argsort on 2 cores, quiet, radix/merge
    time 0.15-0.29 for one row of 2^15-2^23 and 0.21-0.26 for 16 x 2^18 and 64 x 2^16, but
    1.31 for 256 x 2^15 (many short rows: a work-group a tile, spinning on its predecessors)."""
    cond = sympy.And(n >= RADIX_SORT_N_MIN, n <= RADIX_SORT_N_MAX)
    s.add(decl, 6 if on_cpu else 8, fixed=dict(keyp, wg=WG, digits=keyp["kbits"] // 8,
                                                pairs=pairs),
          space=_space(keyp["kbits"]),
          condition=sympy.And(cond, rows <= CPU_ROWS_MAX) if on_cpu else cond)
