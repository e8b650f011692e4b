"""Strategies for cumsum/cumprod: which scan kernel runs for which shape, on which target.

The scanned input is viewed as (outer, n, inner): ``n`` is the scanned length, ``inner`` the
product of the dimensions after the axis (1 when the axis is the last one).

GPU implementations, by plevel:
  scan_rows    inner == 1 and n <= 4096: one work-group scans one row (1 read, 1 write).
  scan_lookback inner == 1: single pass by decoupled look-back (1 read, 1 write, and a tile's
               status: one 64-bit word of flag and value for 32-bit values, 4 + 2 * itemsize
               bytes for 64-bit ones, its look-back's reads): a tile a work-group
               in the order of an atomic counter, 16-byte vector loads and stores where the
               dispatcher finds x aligned and every row starts on a vector.
  scan_device  inner == 1: device-wide reduce-then-scan over tiles (3 passes: 1.5x the
               traffic). Kept forceable: it spins on nothing (a device that may starve a
               running work-group), and it is the look-back's before in benchmarks.
  scan_cols_lookback inner > 1: single pass by decoupled look-back over chunks of 64 rows of
               the columns, one column a work-item (1 read, 1 write, and about 28 bytes of
               status a column's chunk), where the columns are too few for scan_cols;
               columns of one chunk (n <= items) are scanned one a work-item, no status.
  scan_cols    columns (outer*inner) >= 32768: one work-item scans one column; reads coalesced
               across the inner dimension, no transpose.
  scan_chunked always: chunks of each column are reduced, the chunk totals scanned, the chunks
               re-scanned with their carry.
On an OpenCL CPU device (PoCL) the sequential column kernels win: each work-item streams its
own row or chunk, which is what a CPU core does best. The host target runs NumPy's own scan.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..half import numpy_dtype
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..runtime.base import ceil_div
from ..ops.scan import acc_dtype, scan_numpy
from ..shape import alignment, normalize_axis, split_axis
from ..strategy import Strategy

ROWS_MAX = 4096
GPU_COLUMNS_MIN = 32768
CPU_COLUMNS_MIN = 16

#: one tile (wg * items elements) plus wg partials must fit in 32 KiB of local memory at 8 B
_TILE_SPACE = ConfigSpace(
    {"wg": (64, 128, 256, 512), "items": (1, 2, 4, 8, 16)},
    {"wg": 256, "items": 8},
    constraint=lambda c: (c["wg"] * c["items"] + c["wg"]) * 8 <= 32768,
)


#: 4- and 8-byte types: the look-back tile reads and writes them 16 bytes at a time
_VECTOR_DTYPES = ("int32", "uint32", "float32", "int64", "uint64", "float64")


def _vector_width(in_dtype: str, out_dtype: str) -> int:
    """Elements a 16-byte vector access of the wider of the two types holds (1: none)."""
    if in_dtype not in _VECTOR_DTYPES or out_dtype not in _VECTOR_DTYPES:
        return 1
    return 16 // max(np.dtype(in_dtype).itemsize, np.dtype(out_dtype).itemsize)


def _lookback_space(vw: int) -> ConfigSpace:
    """wg, items (a multiple of vw) and vw (1 or the dtypes' vector width)."""
    return ConfigSpace({"wg": (64, 128, 256, 512), "items": (1, 2, 4, 8, 16),
                        "vw": tuple(sorted({1, vw}))},
                       {"wg": 256, "items": 8, "vw": vw},
                       constraint=lambda c: c["items"] % c["vw"] == 0)


def _lookback_needs(outer, n, in_dtype: str, reverse: bool):
    """vw > 1 reads x a vector at a time: x's address aligned to one, and each row's start
    (and, scanning from the end, its end) on a vector; else the same kernel with vw = 1."""
    size = numpy_dtype(in_dtype).itemsize

    def needs(config):
        vw = config["vw"]
        if vw == 1:
            return None
        rows = sympy.Eq(n % vw, 0) if reverse else sympy.Or(sympy.Eq(outer, 1), sympy.Eq(n % vw, 0))
        return sympy.And(alignment(0) >= vw * size, rows), {"vw": 1, "items": config["items"]}
    return needs


def _cols_space(wg: int, chunk: int) -> ConfigSpace:
    return ConfigSpace({"wg": (32, 64, 128, 256), "chunk": (64, 256, 1024, 4096, 16384)},
                       {"wg": wg, "chunk": chunk})


def _dims(ctx):
    return split_axis(ctx.inputs[0].shape, ctx.attrs.axis)


def _rows_run(ctx, scan) -> None:
    outer, n, _ = _dims(ctx)
    scan(x=ctx.inputs[0], y=ctx.outputs[0], n=ctx.size(n), grid=outer * (n > 0),
         block=ctx.config["wg"])


def _device_run(ctx, scan, tile_reduce, scan_partials, tile_apply) -> None:
    outer, n, _ = _dims(ctx)
    wg, tile = ctx.config["wg"], ctx.config["wg"] * ctx.config["items"]
    tiles = ceil_div(n, tile)
    x, y = ctx.inputs[0], ctx.outputs[0]
    if tiles <= 1:
        scan(x=x, y=y, n=ctx.size(n), grid=outer * (n > 0), block=wg)
        return
    partial = ctx.empty((outer * tiles,), _acc(ctx))
    carries = ctx.empty((outer * tiles,), _acc(ctx))
    sizes = dict(n=ctx.size(n), tiles=ctx.size(tiles))
    tile_reduce(x=x, partial=partial, **sizes, grid=outer * tiles, block=wg)
    scan_partials(x=partial, y=carries, n=ctx.size(tiles), grid=outer, block=wg)
    tile_apply(x=x, y=y, carries=carries, **sizes, grid=outer * tiles, block=wg)


def _acc(ctx) -> np.dtype:
    """The dtype the scan accumulates in (its partial totals and status values)."""
    return np.dtype(ctx.fixed["acc_dtype"])


def _status(ctx, init, count: int):
    """The look-back's status of ``count`` tiles, cleared, and the tile counter after it:
    values of 32 bits share a 64-bit word with their flag (two 32-bit words a tile; no second
    array), 64-bit ones have a flag word and their aggregate and inclusive prefix apart."""
    if _acc(ctx).itemsize <= 4:
        flags = ctx.empty((2 * count + 1,), np.uint32)
        init(flags=flags, count=ctx.size(2 * count), grid=ceil_div(2 * count + 1, INIT_WG),
             block=INIT_WG)
        return (flags,)
    flags = ctx.empty((count + 1,), np.uint32)
    words = ctx.empty((2 * count * _acc(ctx).itemsize // 4,), np.uint32)
    init(flags=flags, count=ctx.size(count), grid=ceil_div(count + 1, INIT_WG), block=INIT_WG)
    return flags, words


def _status_args(ctx, init, count: int) -> dict:
    """:func:`_status`'s arrays by the look-back kernels' parameter names."""
    return dict(zip(("flags", "words"), _status(ctx, init, count)))


def _lookback_run(ctx, init, scan) -> None:
    outer, n, _ = _dims(ctx)
    wg = ctx.config["wg"]
    tiles = ceil_div(n, wg * ctx.config["items"])
    count = outer * tiles
    if count:
        scan(x=ctx.inputs[0], y=ctx.outputs[0], **_status_args(ctx, init, count),
             n=ctx.size(n), tiles=ctx.size(tiles), count=ctx.size(count), grid=count, block=wg)


def _cols_lookback_run(ctx, init, scan, cols) -> None:
    outer, n, inner = _dims(ctx)
    wg, s = ctx.config["wg"], ctx.size
    columns, chunks = outer * inner, ceil_div(n, ctx.config["items"])
    if chunks <= 1:  # a column in one chunk has nothing to look back at: no status at all
        _cols_run(ctx, cols)
        return
    count = chunks * columns
    if count:
        scan(x=ctx.inputs[0], y=ctx.outputs[0], **_status_args(ctx, init, count), n=s(n),
             inner=s(inner), columns=s(columns), chunks=s(chunks), count=s(count),
             grid=ceil_div(columns, wg) * chunks, block=wg)


def _cols_run(ctx, scan) -> None:
    outer, n, inner = _dims(ctx)
    wg, s = ctx.config["wg"], ctx.size
    scan(x=ctx.inputs[0], y=ctx.outputs[0], outer=s(outer), n=s(n), inner=s(inner), chunk=s(n),
         chunks=s(1), grid=ceil_div(outer * inner * (n > 0), wg), block=wg)


def _chunked_run(ctx, scan, chunk_reduce, scan_partials, chunk_scan) -> None:
    outer, n, inner = _dims(ctx)
    chunk = min(ctx.config["chunk"], n) if n else 1
    chunks = ceil_div(n, chunk) if n else 0
    if chunks <= 1:
        _cols_run(ctx, scan)
        return
    wg, s = ctx.config["wg"], ctx.size
    x, y = ctx.inputs[0], ctx.outputs[0]
    work = outer * chunks * inner
    partial = ctx.empty((work,), _acc(ctx))
    carries = ctx.empty((work,), _acc(ctx))
    grid = ceil_div(work, wg)
    cols = dict(outer=s(outer), n=s(n), inner=s(inner), chunk=s(chunk), chunks=s(chunks))
    chunk_reduce(x=x, partial=partial, **cols, grid=grid, block=wg)
    scan_partials(x=partial, y=carries, outer=s(outer), n=s(chunks), inner=s(inner),
                  chunk=s(chunks), chunks=s(1), grid=ceil_div(outer * inner, wg), block=wg)
    chunk_scan(x=x, y=y, carries=carries, **cols, grid=grid, block=wg)


def _partials(p: dict) -> dict:
    """The scan of partial totals reads and writes them in the accumulation dtype and shifts
    by one; they are in scan order already (a reverse scan's partials too)."""
    return {"in_dtype": p["acc_dtype"], "out_dtype": p["acc_dtype"], "exclusive": True,
            "reverse": False}


_ROW_SCAN = Kernel("scan/scan_rows.j2", doc="one work-group scans one row, tile by tile")
_COL_SCAN = Kernel("scan/scan_cols.j2", {"has_carry": False},
                   doc="one work-item scans one column (or one chunk of it)")

SCAN_ROWS = kernel_impl("scan_rows", _rows_run, scan=_ROW_SCAN)
SCAN_DEVICE = kernel_impl(
    "scan_device", _device_run, scan=_ROW_SCAN,
    tile_reduce=Kernel("scan/scan_tile_reduce.j2", doc="pass 1: the total of each tile"),
    scan_partials=Kernel("scan/scan_rows.j2", derive=_partials,
                         doc="pass 2: the exclusive scan of the tile totals of each row"),
    tile_apply=Kernel("scan/scan_tile_apply.j2", doc="pass 3: each tile scanned from its carry"))
#: work-items of a group of the look-back's status clearing
INIT_WG = 256
_INIT = Kernel("scan/lookback_init.j2", derive=lambda p: {"wg": INIT_WG},
               doc="the tile counter and the tiles' flags set to 0")
SCAN_LOOKBACK = kernel_impl(
    "scan_lookback", _lookback_run, init=_INIT,
    scan=Kernel("scan/scan_lookback.j2", doc="one pass: a tile a work-group, decoupled look-back"))
SCAN_COLS_LOOKBACK = kernel_impl(
    "scan_cols_lookback", _cols_lookback_run, init=_INIT,
    scan=Kernel("scan/scan_cols_lookback.j2",
                doc="one pass: chunks of columns, a work-item's column looks back on its own"),
    cols=_COL_SCAN)
SCAN_COLS = kernel_impl("scan_cols", _cols_run, scan=_COL_SCAN)
SCAN_CHUNKED = kernel_impl(
    "scan_chunked", _chunked_run, scan=_COL_SCAN,
    chunk_reduce=Kernel("scan/scan_cols_reduce.j2", doc="pass 1: the total of each chunk"),
    scan_partials=Kernel("scan/scan_cols.j2", {"has_carry": False}, derive=_partials,
                         doc="pass 2: the exclusive scan of the chunk totals of each column"),
    chunk_scan=Kernel("scan/scan_cols.j2", {"has_carry": True},
                      doc="pass 3: each chunk scanned from its carry"))


def _numpy_scan_run(ctx):
    """The operator's own NumPy scan (np.cumsum/np.cumprod, float32 sums of 16-bit floats)."""
    return scan_numpy(ctx.inputs[0], *ctx.info)


NUMPY_SCAN = host_impl("numpy_scan", _numpy_scan_run)


def gpu_strategy(combine: str):
    """The GPU strategy of a scan whose combine is "sum" or "prod"."""
    def strategy(attrs, inputs, outputs, target):
        (data,), (out,) = inputs, outputs
        outer, n, inner = split_axis(data.shape, attrs.axis)
        params = dict(in_dtype=data.dtype, out_dtype=out.dtype, acc_dtype=acc_dtype(out.dtype),
                      combine=combine, exclusive=attrs.exclusive, reverse=attrs.reverse)
        on_cpu = target.on_cpu
        row_major = sympy.Eq(inner, 1)
        # plevels: GPUs prefer work-group scans on rows, and the look-back's single pass for
        # long ones; CPUs prefer sequential streams (on PoCL the look-back's tiles, 256
        # work-items looping over barriers, spinning on a predecessor, took 2.6 s against
        # scan_chunked's 0.22 s for 2^24 floats: benchmarks/results/, 2026-11-25)
        p_rows, p_look, p_device, p_cols, p_cols_look, p_chunked = \
            (4, 2, 3, 12, 1, 5) if on_cpu else (12, 11, 3, 8, 7, 5)
        s = Strategy(target)
        s.add(SCAN_ROWS, p_rows, condition=sympy.And(row_major, n <= ROWS_MAX),
              space=_TILE_SPACE, fixed=params)
        s.add(SCAN_LOOKBACK, p_look, condition=row_major,
              fixed=dict(params, sm_threads=target.capabilities.max_threads_per_sm),
              space=_lookback_space(_vector_width(data.dtype, out.dtype)),
              needs=_lookback_needs(outer, n, data.dtype, attrs.reverse))
        s.add(SCAN_DEVICE, p_device, condition=row_major, space=_TILE_SPACE, fixed=params)
        s.add(SCAN_COLS, p_cols,
              condition=outer * inner >= (CPU_COLUMNS_MIN if on_cpu else GPU_COLUMNS_MIN),
              space=ConfigSpace({"wg": (8, 16, 32, 64, 128, 256, 512, 1024)},
                                {"wg": 64 if on_cpu else 256}),
              fixed=params)
        s.add(SCAN_COLS_LOOKBACK, p_cols_look, condition=sympy.Ne(inner, 1), fixed=params,
              space=ConfigSpace({"wg": (32, 64, 128, 256), "items": (8, 16, 32, 64)},
                                {"wg": 64 if on_cpu else 128, "items": 64}))
        s.add(SCAN_CHUNKED, p_chunked, fixed=params,
              space=_cols_space(64 if on_cpu else 256, 4096 if on_cpu else 256))
        return s
    return strategy


def host_strategy(combine: str):
    """np.cumsum/np.cumprod are the best host scans."""
    def strategy(attrs, inputs, outputs, target):
        axis = None if attrs.axis is None else normalize_axis(attrs.axis, inputs[0].ndim)
        s = Strategy(target)
        s.add(NUMPY_SCAN, 10, info=(combine, axis, outputs[0].dtype, attrs.exclusive,
                                    attrs.reverse))
        return s
    return strategy


STRATEGIES = {op: {"gpu": gpu_strategy(combine), "cpu": host_strategy(combine)}
              for op, combine in (("cumsum", "sum"), ("cumprod", "prod"))}
