"""topk's selections for small k: per-work-item best-K lists, merged in local memory
(topk_group) or kept in registers and merged by warp shuffles (topk_warp); and the view of a
call that every topk/sort/argsort implementation runs on (:func:`problem`).

On GPUs topk_group is forced only (its lists spill to local memory): k > 16 goes to the radix
select (gpucg/strategies/topk.py) on long rows and to the sorts on the others.

topk_warp is topk_group without local memory, for k <= 16 and any n: each work-item keeps its best K (k
rounded up to a power of two) in registers, inserting by an unrolled network whose every list index
is a constant (ptxas: a 0-byte stack frame, no LDL/STL, where topk_group's run-time indexed list
lives in local memory), and the lists of a unit of ``lanes`` work-items (a warp on the GPU
configs) meet by xor shuffles and a bitonic merge in registers: no block barrier on CUDA. A row
is split over several units when there are few rows; their candidates are merged by the same
kernel. Traffic: the data once, the k winners' values gathered once, the outputs once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen.vector import WORD
from ..implementation import Kernel, kernel_impl
from ..ops.topk import kept, view
from ..runtime.base import ceil_div
from ..shape import alignment, normalize_axis, split_axis
from ..space import ConfigSpace

GROUP_K_MAX = 128
#: topk_group's plevel on GPUs: below sort_merge (5, always), so the dispatcher never picks it
GROUP_GPU_PLEVEL = 1
#: the longest list topk_warp keeps in registers (two lists of 16 64-bit pairs: 128 registers)
WARP_K_MAX = 16


def group_k(k: int) -> int:
    """k rounded up to a power of two: the length of each work-item's private list."""
    return 1 << max(0, int(k) - 1).bit_length()


@dataclass
class Problem:
    data: object
    n: int
    inner: int
    rows: int
    k: int
    values: object
    indices: object
    ukey: np.dtype  # the unsigned dtype of the data's width: order keys are stored in it


def problem(ctx) -> Problem | None:
    """The (outer, n, inner) view of a topk/sort/argsort call and its outputs (made when the
    call returns only one of them); None when there is nothing to do."""
    data = ctx.inputs[0]
    v = view(ctx.attrs)
    axis = normalize_axis(v.axis, data.ndim)
    outer, n, inner = split_axis(tuple(int(d) for d in data.shape), axis)
    k = kept(n, v)
    names = {"both": ("values", "indices"), "values": ("values",), "indices": ("indices",)}[v.ret_type]
    outs = dict(zip(names, ctx.outputs))
    if k == 0 or outer * inner == 0:
        return None
    shape = list(data.shape)
    shape[axis] = k
    values = outs.get("values")
    if values is None:
        values = ctx.empty(tuple(shape), data.dtype)
    indices = outs.get("indices")
    if indices is None:
        indices = ctx.empty(tuple(shape), np.dtype(v.index_dtype))
    return Problem(data, n, inner, outer * inner, k, values, indices,
                   np.dtype(f"u{np.dtype(data.dtype).itemsize}"))


def pair_args(side: str, buffers) -> dict:
    """(key, index) pair buffers as the kernels' ``<side>_key``, ``<side>_idx`` arguments."""
    return dict(zip((f"{side}_key", f"{side}_idx"), buffers))


def _rounds(ctx, kernels, lanes: int, per: int, units: int, with_units: bool) -> None:
    """Split each row over up to ``units`` segments of ``lanes`` work-items' lists (``per``
    segments a work-group), keep the best K of each as candidates, and again on the
    candidates until one segment a row remains, which writes the top k."""
    p = problem(ctx)
    if p is None:
        return
    s = ctx.size
    kk = ctx.fixed["K"]  # the list length the kernels were compiled for
    wg, chunk_items = ctx.config["wg"], ctx.config["chunk_items"]
    emit, split, emit_pairs, split_pairs = kernels
    n_cur, pairs, last, part = p.n, (), emit, split
    while True:
        splits = max(1, min(ceil_div(units, p.rows), ceil_div(n_cur, lanes * chunk_items)))
        more = {"units": s(p.rows * splits)} if with_units else {}
        grid = ceil_div(p.rows * splits, per)
        src = dict(data=p.data, **pair_args("in", pairs), inner=s(p.inner), n=s(n_cur),
                   n_data=s(p.n), **more)
        if splits == 1:
            last(**src, values=p.values, indices=p.indices, kout=s(p.k), splits=s(1), grid=grid,
                 block=wg)
            return
        m = splits * kk
        out = (ctx.empty((p.rows * m,), p.ukey), ctx.empty((p.rows * m,), ctx.idx))
        part(**src, **pair_args("out", out), kout=s(kk), splits=s(splits), grid=grid, block=wg)
        n_cur, pairs, last, part = m, out, emit_pairs, split_pairs


def _group_run(ctx, emit, split, emit_pairs, split_pairs) -> None:
    wg = ctx.config["wg"]
    _rounds(ctx, (emit, split, emit_pairs, split_pairs), wg, 1, ctx.config["groups"], False)


def _warp_run(ctx, emit, split, emit_pairs, split_pairs) -> None:
    wg, lanes = ctx.config["wg"], ctx.config["lanes"]
    _rounds(ctx, (emit, split, emit_pairs, split_pairs), lanes, wg // lanes, ctx.config["units"],
            True)


def _select_spills(p: dict) -> str:
    return ("each work-item's private best-K list (K keys and K indices, K=128) outgrows the "
            "255 registers a thread may have" if p["K"] >= 128 else "")


def _select_occupancy(p: dict) -> str:
    return (f"the private lists of K={p['K']} take most registers and the wg*K pairs of the "
            "merge fill the shared memory of a block of few threads" if p["K"] >= 64 else "")


def _select(from_pairs: bool, emit: bool, doc: str) -> Kernel:
    return Kernel("topk/select.j2", {"from_pairs": from_pairs, "emit": emit}, doc=doc,
                  spills=_select_spills, low_occupancy=_select_occupancy)


def _warp(from_pairs: bool, emit: bool, doc: str) -> Kernel:
    return Kernel("topk/warp.j2", {"from_pairs": from_pairs, "emit": emit}, doc=doc)


def _rounds_kernels(make, emit_doc: str) -> dict:
    """The four kernels of a selection by rounds (_rounds): from the data or from candidate
    pairs, writing the top k or the best K of a segment."""
    return dict(emit=make(False, True, emit_doc),
                split=make(False, False, "the best K of one segment of a row, as candidate pairs"),
                emit_pairs=make(True, True, "the top k of the candidates of each row"),
                split_pairs=make(True, False, "the best K of one segment of the candidates"))


TOPK_GROUP = kernel_impl("topk_group", _group_run, **_rounds_kernels(
    _select, "private best-K lists merged in local memory; writes the top k"))
TOPK_WARP = kernel_impl("topk_warp", _warp_run, **_rounds_kernels(
    _warp, "best-K lists in registers merged by warp shuffles; writes the top k"))


def _warp_needs(n, inner, rows):
    """vw > 1 reads the data 128 bits at a time: its address 16-byte aligned, rows contiguous
    (inner == 1), each starting on a vector (n a multiple of vw, or one row); else vw = 1."""
    def needs(config):
        vw = config["vw"]
        if vw == 1:
            return None
        rows_ok = sympy.Or(sympy.Eq(rows, 1), sympy.Eq(sympy.Mod(n, vw), 0))
        return sympy.And(alignment(0) >= WORD, sympy.Eq(inner, 1), rows_ok), {"vw": 1}
    return needs


def add_small_k(s, k: int, n, inner, rows, keyp: dict, block: int, on_cpu: bool) -> None:
    """Offer topk_warp (k <= 16) and topk_group (k <= 128) for k >= 1, or say why not."""
    kk = group_k(k)
    if k > WARP_K_MAX:
        s.exclude(TOPK_WARP, 13, f"needs k <= {WARP_K_MAX} (k is {k})")
    else:
        # a CPU core runs a work-item of one list over its own stretch of a row (no merge);
        # a GPU unit is a warp whose lists meet by shuffles. Any n >= k: a short row costs a
        # warp a few shuffles, where a sort would take a work-group and its barriers. GPUs
        # read 128 bits a load, two loads in flight a lane (vw, unroll)
        vw = WORD * 8 // keyp["kbits"]
        s.add(TOPK_WARP, 13, fixed=dict(keyp, K=kk), needs=_warp_needs(n, inner, rows),
              space=ConfigSpace({"wg": (1, 32, 64, 128, 256), "lanes": (1, 2, 4, 8, 16, 32),
                                 "chunk_items": (4, 16, 64, 256, 1024),
                                 "units": (4, 16, 64, 256, 1024, 4096, 16384),
                                 "vw": (1, vw), "unroll": (1, 2, 4)},
                                {"wg": 1 if on_cpu else 128, "lanes": 1 if on_cpu else 32,
                                 "chunk_items": 1024 if on_cpu else 16,
                                 "units": 4 if on_cpu else 4096,
                                 "vw": 1 if on_cpu else vw, "unroll": 1 if on_cpu else 2},
                                # whole warps for the shuffles; a segment well above K (progress)
                                constraint=lambda c: c["wg"] % c["lanes"] == 0 and (
                                    c["lanes"] == 1 or c["wg"] % 32 == 0)
                                and c["lanes"] * c["chunk_items"] >= 4 * kk))
    if k > GROUP_K_MAX:
        s.exclude(TOPK_GROUP, 12, f"needs k <= {GROUP_K_MAX} (k is {k})")
        return
    wg_max = max(16, min(256, block // kk))  # wg * K pairs fit one sort block
    wgs = tuple(w for w in (1, 4, 16, 32, 64, 128, 256) if w <= wg_max)
    # a CPU core runs a work-item of one best scanning its own stretch of a row
    # (measured on PoCL: 2x faster than 16-32 work-items merging in local memory). On a GPU
    # the run-time indexed lists live in local memory (sm_90, float32: a 256-1072 B stack,
    # 916 LDL/STL at K=128): forced only, below every sort; topk_warp and topk_radix select
    s.add(TOPK_GROUP, 12 if on_cpu else GROUP_GPU_PLEVEL, condition=n >= 2 * kk,
          fixed=dict(keyp, K=kk),
          space=ConfigSpace({"wg": wgs, "chunk_items": (16, 64, 256, 1024),
                             "groups": (2, 4, 16, 64, 256, 1024)},
                            {"wg": 1 if on_cpu else wg_max, "chunk_items": 1024 if on_cpu else 16,
                             "groups": 4 if on_cpu else 1024}))
