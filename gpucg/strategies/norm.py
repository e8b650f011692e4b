"""Strategies of softmax, log_softmax, layer_norm and rms_norm: which kernel maps which rows.

The normalized axis is the n of the (outer, n, inner) view. Every kernel is norm/rows.j2 in
some shape: how many work-items share a row (lanes), whether they keep the row in registers,
and whether a row is split over several work-groups.

GPU implementations, by plevel (conditions on the symbolic sizes, checked at run time):
  norm_warp    inner == 1 and n <= 256: a warp (32 work-items) a row, 8 elements each kept in
               registers: the row is read once.
  norm_split   inner == 1, n >= 16384 and outer < 1024: few long rows; each row is split over
               several work-groups that exchange partial pairs (and sums, for layer_norm).
               On GPUs (online): one pass over x gives each chunk's statistics (layer_norm's
               mean and deviations together), the work-group arriving last at its row's
               counter combines the row's once (softmax's then maps its chunk from
               registers), and the apply pass maps the other chunks, row_loop rows a group so
               that gamma and beta are read once: at most 1.5x the compulsory bytes (1.45x
               softmax, 1.40x rms_norm, 1.33x layer_norm on two rows of 40009).
  norm_group   inner == 1 and n <= 4096: a work-group a row, held in registers (read once).
  norm_blocks  inner == 1: a work-group a row, read again for each pass (in blocks).
  norm_cols    any inner: one work-item a column of a non-last axis (neighbours coalesced);
               on GPUs layer_norm's statistics in one pass (shifted sums) and gamma and beta staged
               in local memory a tile at a time: x read twice, 1.5x the compulsory bytes.
rms_norm with a residual runs on norm_warp, norm_group and norm_blocks: the pass that first
reads a row reads x and the residual, rounds their sum to the storage dtype (as vLLM), stores
it (the second output, h) and normalizes it; a later pass over the row reads h.
On an OpenCL CPU device (PoCL) one work-item takes a row and finds its pairs in two passes
(maximum, then sum), loops a CPU vectorizes; GPUs find them in one pass (an online maximum).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen.vector import WORD, lanes
from ..half import half_format
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.norm import SOFTMAX_OPS, residual_sum
from ..runtime.base import ceil_div, vector_chunks
from ..shape import alignment, normalize_axis, split_axis
from ..strategy import Strategy

WARP_CAPACITY = 256
GROUP_CAPACITY = 4096
SPLIT_N_MIN = 16384
SPLIT_ROWS_MAX = 1024
#: the split kernels keep a chunk in registers where a lane's share is at most this
CACHED_CHUNK_ITEMS = 32
#: work-items of the kernel clearing the split rows' counters
INIT_WG = 256


@dataclass(frozen=True)
class NormInfo:
    """What the run functions need: the operator, the axis, the compute dtype."""

    op: str
    axis: int
    acc: str


def _dims(ctx):
    return split_axis(tuple(int(d) for d in ctx.inputs[0].shape), ctx.info.axis)


def _io(ctx) -> dict:
    """x, the parameters (gamma, beta), the residual, y (and h, the residual sum) by the
    kernels' parameter names (the operator's input names)."""
    return dict(zip(ctx.compiled.op.input_names, ctx.inputs), **dict(zip(("y", "h"),
                                                                        ctx.outputs)))


def _launch(kern, ctx, arrays: dict, rows, n, chunk, chunks, inner, lanes, row_loop=1):
    s, wg = ctx.size, ctx.config["wg"]
    kern(**arrays, rows=s(rows), n=s(n), chunk=s(chunk), chunks=s(chunks), inner=s(inner),
         grid=ceil_div(rows, wg // lanes * row_loop), block=wg)


def _row_run(lanes_key: str):
    """Run one fused kernel over every row; ``lanes_key`` names the config knob of the
    work-items a row takes ("wg": the whole work-group)."""
    def run(ctx, main):
        outer, n, _ = _dims(ctx)
        _launch(main, ctx, _io(ctx), outer, n, n, 1, 1, ctx.config[lanes_key],
                dict(ctx.config).get("row_loop", 1))
    return run


def _cols_run(ctx, main) -> None:
    outer, n, inner = _dims(ctx)
    _launch(main, ctx, _io(ctx), outer * inner, n, n, 1, inner, 1)


def _split(ctx, main, sums, pairs, apply) -> None:
    """Rows split over work-groups: (sums of the chunks, for layer_norm's mean,) the pair of
    each chunk, then the row's pair from its chunks' and each chunk mapped."""
    outer, n, _ = _dims(ctx)
    c, wg = ctx.config, ctx.config["wg"]
    chunk, chunks = vector_chunks(n, outer, wg * c["chunk_items"], c["groups"], c["vw"])
    if chunks == 1:
        _launch(main, ctx, _io(ctx), outer, n, n, 1, 1, wg)
        return
    rows = outer * chunks
    x = ctx.inputs[0]
    acc = np.dtype(ctx.info.acc)
    psum = {"psum": ctx.empty((rows,), acc)} if sums is not None else {}
    ab = dict(pa=ctx.empty((rows,), acc), pb=ctx.empty((rows,), acc))
    if psum:
        _launch(sums, ctx, dict(x=x, **psum), rows, n, chunk, chunks, 1, wg)
    _launch(pairs, ctx, dict(x=x, **psum, **ab), rows, n, chunk, chunks, 1, wg)
    _launch(apply, ctx, dict(_io(ctx), **psum, **ab), rows, n, chunk, chunks, 1, wg)


def _split_items(p) -> int:
    """Elements a lane of the split kernels keeps in registers: a chunk's, where the chunks are
    small (gathered statistics), else 0 (read from memory)."""
    return p["chunk_items"] if p["online"] and p["chunk_items"] <= CACHED_CHUNK_ITEMS else 0


def _gather(ctx, main, init, pairs, apply) -> None:
    """Rows split over work-groups, statistics gathered: each chunk's published, the row's
    combined once by the work-group arriving last (softmax's maps its chunk from registers),
    then the other chunks mapped, row_loop rows a work-group (gamma and beta read once)."""
    outer, n, _ = _dims(ctx)
    c, wg = ctx.config, ctx.config["wg"]
    vw = c["vw"]
    chunk, chunks = vector_chunks(n, outer, wg * c["chunk_items"], c["groups"], vw)
    if _split_items(c) and chunk > wg * c["chunk_items"]:
        # a lane holds chunk_items: more (smaller) chunks than `groups` asks for, each a
        # multiple of vw (a chunk of an aligned row starts aligned)
        chunks = ceil_div(n, wg * c["chunk_items"])
        chunk = ceil_div(ceil_div(n, chunks), vw) * vw
        chunks = ceil_div(n, chunk)
    if chunks == 1:
        _launch(main, ctx, _io(ctx), outer, n, n, 1, 1, wg)
        return
    s, rows, acc = ctx.size, outer * chunks, np.dtype(ctx.info.acc)
    nv = 3 if ctx.info.op == "layer_norm" else 2
    part = ctx.empty((rows * nv * acc.itemsize // 4,), np.uint32)
    counter = ctx.empty((outer + 1,), np.uint32)
    init(flags=counter, count=s(outer), grid=ceil_div(outer + 1, INIT_WG), block=INIT_WG)
    stats = ctx.empty((outer * nv,), acc)
    own = ctx.info.op in SOFTMAX_OPS and _split_items(c) > 0
    last = {"rlast": ctx.empty((outer,), np.int32)} if own else {}
    x, y = ctx.inputs[0], ctx.outputs[0]
    dims = dict(rows=s(rows), n=s(n), chunk=s(chunk), chunks=s(chunks), inner=s(1))
    pairs(x=x, **({"y": y} if own else {}), part=part, counter=counter, stats=stats, **last,
          **dims, grid=rows, block=wg)
    loop = c["row_loop"] if _split_items(c) else 1
    apply(**_io(ctx), stats=stats, **last, **dims, grid=chunks * ceil_div(outer, loop), block=wg)


def _split_run(ctx, main, pairs, apply, init) -> None:
    if ctx.config["online"]:
        _gather(ctx, main, init, pairs, apply)
    else:
        _split(ctx, main, None, pairs, apply)


def _split_mean_run(ctx, main, sums, pairs, apply, init) -> None:
    if ctx.config["online"]:
        _gather(ctx, main, init, pairs, apply)
    else:
        _split(ctx, main, sums, pairs, apply)


NORM_WARP = kernel_impl("norm_warp", _row_run("lanes"), main=Kernel(
    "norm/rows.j2", {"mode": "row", "strided": False},
    doc="a warp a row, the row in registers"))
NORM_GROUP = kernel_impl("norm_group", _row_run("wg"), main=Kernel(
    "norm/rows.j2", {"mode": "row", "strided": False}, lambda p: {"lanes": p["wg"]},
    doc="a work-group a row, the row in registers"))
NORM_BLOCKS = kernel_impl("norm_blocks", _row_run("wg"), main=Kernel(
    "norm/rows.j2", {"mode": "row", "strided": False, "items": 0}, lambda p: {"lanes": p["wg"]},
    doc="a work-group a row, read again for each pass"))
_SPLIT = {"strided": False, "items": 0}
_SPLIT_KERNELS = dict(
    main=Kernel("norm/rows.j2", dict(_SPLIT, mode="row"), lambda p: {"lanes": p["wg"]},
                doc="a row short enough for one work-group"),
    pairs=Kernel("norm/rows.j2", dict(_SPLIT, mode="pair"),
                 lambda p: {"lanes": p["wg"], "items": _split_items(p)},
                 doc="the pair of each chunk of a row (online: gathered into the row's by the "
                     "last group of the row)"),
    apply=Kernel("norm/rows.j2", dict(_SPLIT, mode="apply"),
                 lambda p: {"lanes": p["wg"], "items": _split_items(p)},
                 doc="the row's pair from its chunks' (online: read), then each chunk mapped"),
    init=Kernel("scan/lookback_init.j2", derive=lambda p: {"wg": INIT_WG},
                doc="online: the rows' counters set to 0"))
NORM_SPLIT = kernel_impl("norm_split", _split_run, **_SPLIT_KERNELS)
#: layer_norm's split rows sum their chunks first (the mean the pairs are taken about)
NORM_SPLIT_MEAN = kernel_impl(
    "norm_split", _split_mean_run, **_SPLIT_KERNELS,
    sums=Kernel("norm/rows.j2", dict(_SPLIT, mode="sum"), lambda p: {"lanes": p["wg"]},
                doc="pass 1: the sum of each chunk of a row"))
NORM_COLS = kernel_impl("norm_cols", _cols_run, main=Kernel(
    "norm/rows.j2", {"mode": "row", "strided": True, "items": 0, "lanes": 1},
    doc="one work-item a column of a non-last axis"))


def _spaces(on_cpu: bool, vw: int, gamma: bool) -> dict:
    """Config spaces; a row's capacity in registers is fixed (lanes * items), so the size
    conditions hold whatever a tuning record picks. The cached kernels' vw: elements a 128-bit
    access moves (1: scalar accesses, the CPU's default); row_loop: rows a warp or work-group
    maps in turn (layer_norm and rms_norm on a GPU: 8, so that their gamma and beta are read
    once for 8 rows: 1.125x the compulsory bytes at most on many rows, 1.0x on up to 8). The
    split kernels take vw (chunks a multiple of it) and row_loop where they hold their chunks
    (online, chunk_items 16): the apply pass's rows share gamma and beta. The kernels reading
    rows from memory (blocks, split) take vw too: lanes take runs of vw in turn."""
    online, unroll = (False, True), (1, 2, 4, 8)
    cached = {"vw": tuple(sorted({1, vw})), "row_loop": (1, 2, 4, 8, 16)}
    more = {"vw": 1, "row_loop": 1} if on_cpu else {"vw": vw, "row_loop": 8 if gamma else 1}
    return {
        "warp": ConfigSpace({"wg": (32, 64, 128, 256), "lanes": (8, 16, 32),
                             "items": (8, 16, 32), **cached},
                            {"wg": 256, "lanes": 32, "items": 8, **more},
                            constraint=lambda c: c["lanes"] * c["items"] == WARP_CAPACITY
                            and c["wg"] >= c["lanes"] and c["items"] % c["vw"] == 0),
        "group": ConfigSpace({"wg": (128, 256, 512, 1024), "items": (4, 8, 16, 32), **cached},
                             # gamma and beta held beside the row: half the items a lane
                             # (about 60 registers on sm_90, half occupancy, as before them)
                             {"wg": 512 if gamma and not on_cpu else 256,
                              "items": 8 if gamma and not on_cpu else 16, **more},
                             constraint=lambda c: c["wg"] * c["items"] == GROUP_CAPACITY
                             and c["items"] % c["vw"] == 0),
        "blocks": ConfigSpace({"wg": (1, 64, 128, 256, 512, 1024), "online": online,
                               "unroll": unroll, "vw": cached["vw"]},
                              {"wg": 1, "online": False, "unroll": 8, "vw": 1} if on_cpu else
                              {"wg": 256, "online": True, "unroll": 2, "vw": vw}),
        "split": ConfigSpace({"wg": (1, 64, 128, 256, 512, 1024), "online": online,
                              "unroll": unroll, "chunk_items": (16, 256, 4096),
                              "groups": (8, 256, 1024), "row_loop": (1, 2, 4, 8, 16),
                              "vw": cached["vw"]},
                             {"wg": 1, "online": False, "unroll": 8, "chunk_items": 4096,
                              "groups": 8, "row_loop": 1, "vw": 1} if on_cpu else
                             {"wg": 256, "online": True, "unroll": 2, "chunk_items": 16,
                              "groups": 1024, "row_loop": 8 if gamma else 1, "vw": vw}),
        "cols": ConfigSpace({"wg": (1, 16, 64, 128, 256), "online": online, "unroll": unroll},
                            {"wg": 16, "online": False, "unroll": 1} if on_cpu else
                            {"wg": 128, "online": True, "unroll": 1}),
    }


def _needs(n, arrays: int):
    """Implementation.needs of a cached kernel whose vw > 1 moves 16 bytes an access: x, gamma
    and beta 16-byte aligned and rows of n a multiple of vw, else vw = 1."""
    def needs(config):
        if config["vw"] == 1:
            return None
        return sympy.And(*(alignment(i) >= WORD for i in range(arrays)),
                         sympy.Eq(sympy.Mod(n, config["vw"]), 0)), {"vw": 1}
    return needs


def gpu_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim)
        outer, n, inner = split_axis(x.shape, axis)
        acc = "float64" if x.dtype == "float64" else "float32"
        residual = op == "rms_norm" and len(inputs) == 3
        params = dict(op=op, acc_dtype=acc, half=half_format(x.dtype),
                      eps=float(getattr(attrs, "eps", 0.0)), online=False, items=0, unroll=1,
                      vw=1, row_loop=1, residual=residual)
        info = NormInfo(op, axis, acc)
        spaces = _spaces(target.on_cpu, lanes(x.dtype), len(inputs) > 1)
        needs = _needs(n, len(inputs))
        rows = sympy.Eq(inner, 1)
        s = Strategy(target)

        def add(decl, plevel, space, condition=None):
            # params holds defaults (online, items, unroll) for the kernels whose space has no
            # such knob
            knobs = spaces[space].knobs
            s.add(decl, plevel, condition=condition, space=spaces[space], info=info,
                  fixed={k: v for k, v in params.items() if k not in knobs},
                  needs=needs if "vw" in knobs else None)

        # a CPU core maps a row alone, from memory it keeps in cache; GPUs share rows
        p = (5, 13, 6, 12, 11) if target.on_cpu else (14, 13, 12, 11, 10)
        add(NORM_WARP, p[0], "warp", sympy.And(rows, n <= WARP_CAPACITY))
        split = NORM_SPLIT_MEAN if op == "layer_norm" else NORM_SPLIT
        if residual:  # rows along the last axis, each mapped by one work-group at most
            why = "the residual form: a row's sum is stored by the group that normalizes it"
            s.exclude(split, p[1], why)
        else:
            add(split, p[1], "split", sympy.And(rows, n >= SPLIT_N_MIN, outer < SPLIT_ROWS_MAX))
        add(NORM_GROUP, p[2], "group", sympy.And(rows, n <= GROUP_CAPACITY))
        add(NORM_BLOCKS, p[3], "blocks", rows)
        if residual:
            s.exclude(NORM_COLS, p[4], "the residual form normalizes rows of the last axis")
        else:
            add(NORM_COLS, p[4], "cols")
        return s
    return strategy


# -- the host target --------------------------------------------------------------------------

#: below this, a variance plus eps is computed from scaled squares (as in the kernels): squares
#: that flush to zero (below about 1e-45 in float32) change a larger one by under 1e-10
SQUARES_FLOOR = 1e-25


def _scaled_squares(d: np.ndarray, axis: int):
    """(a, b): the largest |d| along the axis and sum((|d| / a)^2), an element equal to a
    counting 1 (as the kernels do)."""
    k = np.abs(d)
    a = np.max(k, axis=axis, keepdims=True) if d.size else k
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = np.where(a > 0, 1 / np.where(a > 0, a, 1), 0).astype(d.dtype)
        t = np.where(k == a, 1, k * inv)
    return a, np.sum(t * t, axis=axis, keepdims=True)


#: elements of one block of rows the host normalizes at a time (its temporaries stay in cache)
NORM_BLOCK = 1 << 16


def numpy_norm(op: str, x: np.ndarray, params, axis: int, eps: float) -> np.ndarray:
    """``op`` in float32 (float64 for float64) by NumPy, with the kernels' safeguards; rows of
    the last axis a block at a time (each row's values as alone: the same numbers)."""
    n = x.shape[axis] if x.ndim else 1
    if axis != x.ndim - 1 or x.size < 2 * NORM_BLOCK or not x.flags.c_contiguous:
        return _numpy_norm(op, x, params, axis, eps)
    rows = x.reshape(-1, n)
    out = np.empty(rows.shape, x.dtype)
    step = max(1, NORM_BLOCK // n)
    for r in range(0, rows.shape[0], step):
        out[r:r + step] = _numpy_norm(op, rows[r:r + step], params, 1, eps)
    return out.reshape(x.shape)


def _numpy_norm(op: str, x: np.ndarray, params, axis: int, eps: float) -> np.ndarray:
    acc = np.float64 if x.dtype == np.float64 else np.float32
    v = x.astype(acc, copy=False)
    n = x.shape[axis]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if op in SOFTMAX_OPS:
            m = np.max(v, axis=axis, keepdims=True) if x.size else v
            e = np.exp(v - m)
            s = np.sum(e, axis=axis, keepdims=True)
            y = e / s if op == "softmax" else (v - m) - np.log(s)
        else:
            shape = [1] * x.ndim
            shape[axis] = -1
            gamma = params[0].astype(acc, copy=False).reshape(shape)
            mean = (np.sum(v, axis=axis, keepdims=True) / acc(n)) if op == "layer_norm" else 0
            d = v - mean
            ss = np.sum(d * d, axis=axis, keepdims=True)
            # a row where no square overflowed, and squares small enough to flush to zero
            # cannot matter beside the rest: the plain variance is exact enough (two passes)
            var = ss / acc(n) + acc(eps)
            fine = np.isfinite(ss) & (var >= SQUARES_FLOOR)
            rstd = 1 / np.sqrt(var)
            if not fine.all():  # 1e30 rows, or tiny rows with a tinier eps: those rows by
                a, b = _scaled_squares(d, axis)  # the kernels' scaled squares (row by row,
                qn = b / acc(n)  # so that a block of rows gives the rows' own numbers)
                plain = a * a * qn + acc(eps)
                scaled = (a > 1) | ((a > 0) & (plain < SQUARES_FLOOR))
                safe = np.where(scaled, a, 1)
                rstd = np.where(fine, rstd, np.where(
                    scaled, 1 / (safe * np.sqrt(qn + acc(eps) / safe / safe)), 1 / np.sqrt(plain)))
            y = d  # in place: d is this call's own (the same products, in the same order)
            y *= rstd
            y *= gamma
            if op == "layer_norm":
                y += params[1].astype(acc, copy=False).reshape(shape)
    return y.astype(x.dtype, copy=False)


def _host_run(ctx):
    op, axis, eps = ctx.info
    if op == "rms_norm" and len(ctx.inputs) == 3:  # with a residual: (rms_norm(h), h)
        h = residual_sum(ctx.inputs[0], ctx.inputs[2])
        return numpy_norm(op, h, ctx.inputs[1:2], axis, eps), h
    return numpy_norm(op, ctx.inputs[0], ctx.inputs[1:], axis, eps)


NUMPY_NORM = host_impl("numpy_norm", _host_run)


def host_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(NUMPY_NORM, 10, info=(op, normalize_axis(attrs.axis, inputs[0].ndim),
                                    float(getattr(attrs, "eps", 0.0))))
        return s
    return strategy


STRATEGIES = {op: {"gpu": gpu_strategy(op), "cpu": host_strategy(op)}
              for op in ("softmax", "log_softmax", "layer_norm", "rms_norm")}
