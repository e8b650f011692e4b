"""Strategies for topk, sort and argsort: which selection or sort runs for which sizes.

A row is the selected axis of the (outer, n, inner) view; rows = outer * inner, and k is the
number kept (an attribute, so known when compiling; for sort and argsort it is n). Every
kernel orders elements by (order key, index), which is unique, so all implementations give the
same, stable result.

GPU implementations, by plevel:
  topk_warp     k <= 16 (static), any n: as topk_group, the lists in registers, merged by
                warp shuffles (gpucg/strategies/topk_select.py).
  topk_group    k <= 128 (static) and n >= 2K (K: k rounded up to a power of two): each
                work-item keeps its best K in private memory, the work-group merges them in
                local memory; rows are split over several work-groups when there are few,
                and the candidates are merged by the same kernel. CPU devices only: on a GPU
                the lists spill to local memory, so it is forced only there (plevel 1).
  topk_radix    k > 128 (GPUs: k > 16), n >= max(2048, 2k) and (n >= 8192 or rows <= 32):
                radix select, 8 bits a
                pass over (key, index), several work-groups per row, every decision on the
                device; passes 0 and 1 read the data, later ones only the survivors the pass
                before kept; winners are filtered into a buffer as their bucket is passed over,
                and only they are sorted. Reads: about twice the data.
  sort_bitonic  n <= one block (4096 pairs; 2048 for 64-bit keys): one work-group sorts a row
                in local memory.
  sort_radix    2^15 <= n < 2^30 (on a CPU device also rows <= 64): the onesweep LSD radix
                sort, 8 bits a pass (gpucg/strategies/sort_radix.py).
  sort_merge    always: blocks sorted by bitonic sort, then merge passes (merge by rank).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..half import widen
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.topk import kept, stable_order, view
from ..runtime import alignment_of
from ..runtime.base import ceil_div
from ..shape import normalize_axis, split_axis
from ..strategy import Strategy, only
from . import sort_radix
from .topk_select import GROUP_K_MAX, WARP_K_MAX, Problem, add_small_k, pair_args, problem

RADIX_N_MIN = 8192
RADIX_FEW_ROWS = 32
RADIX_FEW_ROWS_N_MIN = 2048

_INF = {"float16": 0x7C00, "bfloat16": 0x7F80, "float32": 0x7F800000,
        "float64": 0x7FF0000000000000}
_NAN = {"float16": 0x7E00, "bfloat16": 0x7FC0, "float32": 0x7FC00000,
        "float64": 0x7FF8000000000000}


def key_params(dtype: str, ascend: bool, index_dtype: str) -> dict:
    """Template parameters of the order key for a data dtype and direction."""
    bits = np.dtype(dtype).itemsize * 8
    is_float = dtype in _INF
    return dict(kbits=bits, is_float=is_float, is_signed=not dtype.startswith("uint"),
                ascend=bool(ascend), oidx=index_dtype, abs_mask=(1 << (bits - 1)) - 1,
                inf_bits=_INF.get(dtype, 0), nan_bits=_NAN.get(dtype, 0))


def block_size(kbits: int) -> int:
    """Pairs one work-group sorts in local memory: 4096 (2048 for 64-bit keys)."""
    return 4096 if kbits <= 32 else 2048


# -- running --------------------------------------------------------------------------------

def _sort_rows(ctx, p: Problem, pairs, n_row: int, sort, blocks, merge, merge_emit) -> None:
    """Sort every row (of the data, or of n_row candidate pairs) and emit the first k.

    ``pairs`` is None to sort the data itself, else (keys, indices) buffers of rows x n_row.
    ``sort`` sorts a row that fits one block and emits; longer rows are sorted in blocks, then
    merged pass by pass, the last pass emitting.
    """
    s = ctx.size
    wg = ctx.config["wg"]
    block = wg * ctx.config["items"]
    src = dict(data=p.data, **({} if pairs is None else pair_args("in", pairs)))
    common = dict(inner=s(p.inner), n=s(n_row), n_data=s(p.n), kout=s(p.k))
    emit = dict(values=p.values, indices=p.indices)
    if n_row <= block:
        sort(**src, **emit, **common, nblocks=s(1), grid=p.rows, block=wg)
        return
    nblocks = ceil_div(n_row, block)
    a = (ctx.empty((p.rows * n_row,), p.ukey), ctx.empty((p.rows * n_row,), ctx.idx))
    b = (ctx.empty((p.rows * n_row,), p.ukey), ctx.empty((p.rows * n_row,), ctx.idx))
    blocks(**src, **pair_args("out", a), **common, nblocks=s(nblocks), grid=p.rows * nblocks,
           block=wg)
    width = block
    mwg = ctx.config["merge_wg"]
    grid = ceil_div(p.rows * n_row, mwg)
    while True:
        last = 2 * width >= n_row
        out = emit if last else pair_args("out", b)
        (merge_emit if last else merge)(data=p.data, **pair_args("in", a), **out, **common,
                                        width=s(width), rows=s(p.rows), grid=grid, block=mwg)
        if last:
            return
        a, b = b, a
        width *= 2


def _bitonic_run(ctx, sort) -> None:
    p = problem(ctx)
    if p is not None:
        _sort_rows(ctx, p, None, p.n, sort, None, None, None)


def _merge_run(ctx, sort, blocks, merge, merge_emit) -> None:
    p = problem(ctx)
    if p is not None:
        _sort_rows(ctx, p, None, p.n, sort, blocks, merge, merge_emit)


def _radix_run(ctx, init, hist, scan, cand_sort, cand_blocks, merge, merge_emit) -> None:
    p = problem(ctx)
    if p is None:
        return
    s = ctx.size
    wg = ctx.config["wg"]
    chunk = wg * ctx.config["chunk_items"]
    chunks = ceil_div(p.n, chunk)
    kbits = np.dtype(p.ukey).itemsize * 8
    passes = (kbits + (64 if ctx.wide else 32)) // 8
    cap = ceil_div(p.n, RADIX_KEEP)
    st_key = ctx.empty((4 * p.rows,), p.ukey)
    st_lo = ctx.empty((8 * p.rows,), np.uint64 if ctx.wide else np.uint32)
    counts = ctx.empty((RADIX_HS * p.rows,), np.uint32)
    survivors = (ctx.empty((2 * p.rows * cap,), p.ukey), ctx.empty((2 * p.rows * cap,), ctx.idx))
    cand = (ctx.empty((p.rows * p.k,), p.ukey), ctx.empty((p.rows * p.k,), ctx.idx))
    # the data's passes read 128 bits at a time where rows are contiguous and 16-byte aligned
    vec = p.inner == 1 and alignment_of(p.data) % 16 == 0 and (p.rows == 1 or p.n * kbits % 128 == 0)
    state = dict(st_key=st_key, st_lo=st_lo, hist=counts)
    init(**state, k=s(p.k), grid=p.rows, block=RADIX_WG)
    # every pass launches: a row decided early (most are, by the key bits) skips the rest on
    # the device, so nothing is read back; the pass after the last collects the last winners
    for pass_ in range(passes + 1):
        hist(data=p.data, **state, **pair_args("sv", survivors), **pair_args("cand", cand),
             inner=s(p.inner), n=s(p.n), k=s(p.k), chunks=s(chunks), cap=s(cap),
             pass_=np.int32(pass_), vec=np.int32(vec), grid=p.rows * chunks, block=wg)
        if pass_ < passes:
            scan(**state, pass_=np.int32(pass_), grid=p.rows, block=RADIX_WG)
    _sort_rows(ctx, p, cand, p.k, cand_sort, cand_blocks, merge, merge_emit)


# -- kernels --------------------------------------------------------------------------------

#: the radix select's per-row kernels run one work-group of 256, one work-item per digit
RADIX_WG = 256
#: words of counts a row: 256 digits, the candidates' fill, the two survivor buffers' fills,
#: the survivors of the next two passes
RADIX_HS = 262
#: a survivor buffer holds n / RADIX_KEEP pairs a row; a pass whose survivors do not fit reads
#: the data again (the first byte of float keys is skewed: over 1/256 of a row may share it)
RADIX_KEEP = 16


def _bitonic(from_pairs: bool, emit: bool, doc: str) -> Kernel:
    return Kernel("topk/bitonic.j2", {"from_pairs": from_pairs, "emit": emit}, doc=doc)


def _merge(emit: bool, doc: str) -> Kernel:
    return Kernel("topk/merge.j2", {"emit": emit}, lambda p: {"wg": p["merge_wg"]}, doc)


def _chunk(p: dict) -> dict:
    return {"chunk": p["wg"] * p["chunk_items"]}


_MERGE_KERNELS = dict(
    merge=_merge(False, "one merge pass: runs 2i and 2i+1 merge, each element placed by rank"),
    merge_emit=_merge(True, "the last merge pass, writing the first k as values and indices"))

SORT_BITONIC = kernel_impl("sort_bitonic", _bitonic_run, sort=_bitonic(
    False, True, "one work-group sorts a row in local memory and writes the first k"))
SORT_MERGE = kernel_impl(
    "sort_merge", _merge_run,
    sort=_bitonic(False, True, "one work-group sorts a row that fits one block"),
    blocks=_bitonic(False, False, "each work-group sorts one block of a row into a sorted run"),
    **_MERGE_KERNELS)
TOPK_RADIX = kernel_impl(
    "topk_radix", _radix_run,
    init=Kernel("topk/radix_init.j2", {"wg": RADIX_WG}, doc="start every row's search"),
    hist=Kernel("topk/radix_hist.j2", derive=_chunk,
                doc="one pass over a row's survivors: winners out, the next digit counted"),
    scan=Kernel("topk/radix_scan.j2", {"wg": RADIX_WG},
                doc="find the digit whose bucket holds the k-th element"),
    cand_sort=_bitonic(True, True, "sort the k candidates of a row in one block"),
    cand_blocks=_bitonic(True, False, "sort one block of the candidates of a row"),
    **_MERGE_KERNELS)


def _sort_space(block: int, on_cpu: bool) -> ConfigSpace:
    wgs = (128, 256, 512, 1024)
    return ConfigSpace(
        {"wg": wgs, "items": (1, 2, 4, 8, 16, 32), "merge_wg": (64, 128, 256)},
        {"wg": 256 if on_cpu else 512, "items": block // (256 if on_cpu else 512),
         "merge_wg": 64 if on_cpu else 256},
        constraint=lambda c: c["wg"] * c["items"] == block)


SORT_RADIX = sort_radix.declare(problem)


def gpu_strategy(attrs, inputs, outputs, target):
    """topk_warp or topk_group for small k, topk_radix for large k on long rows, else a sort."""
    (data,) = inputs
    v = view(attrs)
    outer, n, inner = split_axis(data.shape, v.axis)
    rows = outer * inner
    on_cpu = target.on_cpu
    keyp = key_params(data.dtype, v.ascend, v.index_dtype)
    block = block_size(keyp["kbits"])
    sort_space = _sort_space(block, on_cpu)
    s = Strategy(target)
    if v.k >= 1:
        add_small_k(s, v.k, n, inner, rows, keyp, block, on_cpu)
    # GPUs: the radix select from k > 16 (topk_group's lists would spill); CPUs from k > 128
    if v.k > (GROUP_K_MAX if on_cpu else WARP_K_MAX):
        # CPU: 64 items a work-item per histogram chunk; on PoCL, quiet, 256 took 1.27-1.52x
        # the time of 64 ((1, 2^24) k=1000: 125 against 92 ms; (256, 2^18) k=256: 519 against 343)
        space = ConfigSpace({**sort_space.knobs, "chunk_items": (4, 16, 64, 256)},
                            dict(sort_space.default, chunk_items=64 if on_cpu else 16),
                            constraint=sort_space.constraint)
        # long rows, or few rows of moderate length; and k well below n (else sort)
        s.add(TOPK_RADIX, 10, fixed=keyp, space=space,
              condition=sympy.And(n >= max(RADIX_FEW_ROWS_N_MIN, 2 * v.k),
                                  sympy.Or(n >= RADIX_N_MIN, rows <= RADIX_FEW_ROWS)))
    elif v.k >= 1:
        s.exclude(TOPK_RADIX, 10, f"needs k > {GROUP_K_MAX if on_cpu else WARP_K_MAX} "
                  f"(k is {v.k})")
    s.add(SORT_BITONIC, 9, condition=n <= block, space=sort_space, fixed=keyp)
    sort_radix.add(s, SORT_RADIX, n, rows, keyp, on_cpu, pairs=v.ret_type != "values")
    s.add(SORT_MERGE, 5, space=sort_space, fixed=keyp)
    return s


# -- the NumPy fallback ---------------------------------------------------------------------

def _take_rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``take_along_axis(a, idx, -1)`` for 2-D C-contiguous ``a``, by one flat np.take."""
    rows, m = a.shape
    flat = idx + (np.arange(rows, dtype=np.intp) * m)[:, None]
    return np.take(a.reshape(-1), flat)


def numpy_select(data: np.ndarray, attrs):
    """topk/sort/argsort on the host: argpartition, then a sort of only the k kept.

    argpartition keeps the best k+1, which are sorted by value. Rows with equal values among
    them are redone: ties inside the kept k by a stable sort of those, a tie between the k-th
    and (k+1)-th (a tie across the cut, whose members argpartition picks arbitrarily) by a
    stable sort of the row. The result is exact and, for distinct values, costs little more
    than argpartition itself.
    """
    v = view(attrs)
    axis = normalize_axis(v.axis, data.ndim)
    xs = np.moveaxis(data, axis, -1)
    lead, n = xs.shape[:-1], xs.shape[-1]
    k = kept(n, v)
    x = np.ascontiguousarray(xs.reshape(int(np.prod(lead, dtype=np.int64)), n))
    # bfloat16 is ordered as the float32 it widens to; its values are taken from x at the end
    bits, x = x, widen(x)
    values = None
    if k == 0 or x.shape[0] == 0:
        order = np.empty((x.shape[0], k), np.intp)
    elif 2 * k >= n:
        order = stable_order(x, v.ascend)[:, :k]
    else:
        # partition at the (k+1)-th place: the k+1 kept are the best k+1, whatever the ties
        if v.ascend:
            sel = np.argpartition(x, k, axis=-1)[:, :k + 1]
        else:
            sel = np.argpartition(x, n - k - 1, axis=-1)[:, n - k - 1:]
        vals = _take_rows(x, sel)
        # by value alone (fast, not stable); rows with equal neighbours are redone below
        by_value = np.argsort(vals, axis=-1) if v.ascend else \
            (k - np.argsort(vals[:, ::-1], axis=-1))[:, ::-1]
        ranked = _take_rows(vals, by_value)
        eq = ranked[:, 1:] == ranked[:, :-1]
        if x.dtype.kind == "f":
            eq |= np.isnan(ranked[:, 1:]) & np.isnan(ranked[:, :-1])
        order = _take_rows(sel, by_value)[:, :k]
        values = ranked[:, :k]
        inner = eq[:, :k - 1].any(-1)
        cut = eq[:, k - 1]  # the (k+1)-th ties with the k-th: which ones are kept is arbitrary
        if inner.any() or cut.any():
            values = values.copy()
            fix = np.flatnonzero(inner & ~cut)
            if fix.size:  # ties inside the kept: a stable sort of them in index order
                by_index = np.argsort(sel[fix], axis=-1)
                s_idx = _take_rows(np.ascontiguousarray(sel[fix]), by_index)
                s_val = _take_rows(vals[fix], by_index)
                stable = stable_order(s_val, v.ascend)[:, :k]
                order[fix] = _take_rows(s_idx, stable)
                values[fix] = _take_rows(s_val, stable)
            fix = np.flatnonzero(cut)
            if fix.size:  # ties across the cut: a stable sort of the whole row (rare)
                rows = x[fix]
                order[fix] = stable_order(rows, v.ascend)[:, :k]
                values[fix] = _take_rows(rows, order[fix])
    out = {}
    if v.ret_type in ("both", "values"):
        if values is None or bits is not x:
            values = _take_rows(bits, order)
        out["values"] = np.moveaxis(values.reshape(lead + (k,)), -1, axis)
    if v.ret_type in ("both", "indices"):
        out["indices"] = np.moveaxis(order.astype(v.index_dtype, copy=False).reshape(lead + (k,)),
                                     -1, axis)
    return tuple(out.values())


def _host_run(ctx):
    return numpy_select(ctx.inputs[0], ctx.attrs)


TOPK_PARTITION = host_impl("topk_partition", _host_run)


host_strategy = only(TOPK_PARTITION)


STRATEGIES = {op: {"gpu": gpu_strategy, "cpu": host_strategy}
              for op in ("topk", "sort", "argsort")}
