"""Strategies for cumsum/cumprod: which scan kernel runs for which shape, on which target.

The scanned input is viewed as (outer, n, inner): ``n`` is the scanned length, ``inner`` the
product of the dimensions after the axis (1 when the axis is the last one).

GPU implementations, by plevel:
  scan_rows    inner == 1 and n <= 4096: one work-group scans one row (1 read, 1 write).
  scan_device  inner == 1: device-wide reduce-then-scan over tiles, for long rows.
  scan_cols    columns (outer*inner) >= 32768: one work-item scans one column; reads coalesced
               across the inner dimension, no transpose.
  scan_chunked always: chunks of each column are reduced, the chunk totals scanned, the chunks
               re-scanned with their carry.
On an OpenCL CPU device (PoCL) the sequential column kernels win: each work-item streams its
own row or chunk, which is what a CPU core does best.
"""

from __future__ import annotations

import sympy

from ..autotune.space import ConfigSpace
from ..codegen import KernelSpec
from ..ops.scan import default_out_dtype, split_axis
from ..op import get_op
from ..runtime.base import ceil_div
from ..strategy import Implementation, Strategy

ROWS_MAX = 4096
GPU_COLUMNS_MIN = 32768
CPU_COLUMNS_MIN = 16

#: one tile (wg * items elements) plus wg partials must fit in 32 KiB of local memory at 8 B
_TILE_SPACE = ConfigSpace(
    {"wg": (64, 128, 256, 512), "items": (1, 2, 4, 8, 16)},
    {"wg": 256, "items": 8},
    constraint=lambda c: (c["wg"] * c["items"] + c["wg"]) * 8 <= 32768,
)


def _cols_space(wg: int, chunk: int) -> ConfigSpace:
    return ConfigSpace({"wg": (32, 64, 128, 256), "chunk": (64, 256, 1024, 4096, 16384)},
                       {"wg": wg, "chunk": chunk})


def _dims(ctx):
    return split_axis(tuple(ctx.inputs[0].shape), ctx.attrs)


def _scan_rows_run(ctx) -> None:
    outer, n, _ = _dims(ctx)
    ctx.kernel("scan")(ctx.inputs[0], ctx.outputs[0], ctx.size(n), grid=outer * (n > 0),
                       block=ctx.config["wg"])


def _scan_device_run(ctx) -> None:
    outer, n, _ = _dims(ctx)
    wg, tile = ctx.config["wg"], ctx.config["wg"] * ctx.config["items"]
    tiles = ceil_div(n, tile)
    x, y = ctx.inputs[0], ctx.outputs[0]
    if tiles <= 1:
        ctx.kernel("scan")(x, y, ctx.size(n), grid=outer * (n > 0), block=wg)
        return
    partial = ctx.empty((outer * tiles,), y.dtype)
    carries = ctx.empty((outer * tiles,), y.dtype)
    ctx.kernel("tile_reduce")(x, partial, ctx.size(n), ctx.size(tiles), grid=outer * tiles, block=wg)
    ctx.kernel("scan_partials")(partial, carries, ctx.size(tiles), grid=outer, block=wg)
    ctx.kernel("tile_apply")(x, y, carries, ctx.size(n), ctx.size(tiles), grid=outer * tiles, block=wg)


def _scan_cols_run(ctx) -> None:
    outer, n, inner = _dims(ctx)
    wg = ctx.config["wg"]
    chunk = min(ctx.config.get("chunk", n), n) if n else 1
    chunks = ceil_div(n, chunk) if n else 0
    x, y = ctx.inputs[0], ctx.outputs[0]
    s = ctx.size
    if chunks <= 1:
        work = outer * inner * (n > 0)
        ctx.kernel("scan")(x, y, s(outer), s(n), s(inner), s(n), s(1),
                           grid=ceil_div(work, wg), block=wg)
        return
    work = outer * chunks * inner
    partial = ctx.empty((work,), y.dtype)
    carries = ctx.empty((work,), y.dtype)
    grid = ceil_div(work, wg)
    ctx.kernel("chunk_reduce")(x, partial, s(outer), s(n), s(inner), s(chunk), s(chunks),
                               grid=grid, block=wg)
    ctx.kernel("scan_partials")(partial, carries, s(outer), s(chunks), s(inner), s(chunks), s(1),
                                grid=ceil_div(outer * inner, wg), block=wg)
    ctx.kernel("chunk_scan")(x, y, carries, s(outer), s(n), s(inner), s(chunk), s(chunks),
                             grid=grid, block=wg)


def _kernels(op: str, combine: str, in_dtype: str, out_dtype: str, exclusive: bool, parts):
    """Kernel specs builder: ``parts`` maps key -> (template, overrides)."""
    def build(config):
        out = {}
        for key, (template, extra) in parts.items():
            params = dict(in_dtype=in_dtype, out_dtype=out_dtype, combine=combine,
                          exclusive=exclusive, wg=config["wg"], items=config.get("items", 1))
            params.update(extra)
            out[key] = KernelSpec.make(template, f"gpucg_{op}_{key}", **params)
        return out
    return build


def make_gpu_strategy(op_name: str, combine: str):
    def strategy(attrs, inputs, outputs, target):
        (data,), (out,) = inputs, outputs
        outer, n, inner = split_axis(data.shape, attrs)
        in_dt, out_dt = data.dtype, out.dtype
        excl = attrs.exclusive
        kind = target.kind
        on_cpu = target.attrs.get("device") == "cpu"
        k = lambda parts: _kernels(op_name, combine, in_dt, out_dt, excl, parts)  # noqa: E731
        rows_parts = {"scan": ("scan/scan_rows.j2", {})}
        device_parts = {
            "scan": ("scan/scan_rows.j2", {}),
            "tile_reduce": ("scan/scan_tile_reduce.j2", {}),
            "scan_partials": ("scan/scan_rows.j2", {"in_dtype": out_dt, "exclusive": True}),
            "tile_apply": ("scan/scan_tile_apply.j2", {}),
        }
        cols_parts = {"scan": ("scan/scan_cols.j2", {"has_carry": False})}
        chunked_parts = {
            "scan": ("scan/scan_cols.j2", {"has_carry": False}),
            "chunk_reduce": ("scan/scan_cols_reduce.j2", {}),
            "scan_partials": ("scan/scan_cols.j2", {"in_dtype": out_dt, "exclusive": True,
                                                    "has_carry": False}),
            "chunk_scan": ("scan/scan_cols.j2", {"has_carry": True}),
        }
        row_major = sympy.Eq(inner, 1)
        columns = outer * inner
        s = Strategy()
        # plevels: GPUs prefer work-group scans on rows; CPUs prefer sequential streams
        p_rows, p_device, p_cols, p_chunked = (4, 3, 12, 5) if on_cpu else (12, 10, 8, 5)
        s.add_implementation(Implementation(
            f"scan_rows.{kind}", p_rows, _scan_rows_run, k(rows_parts),
            condition=sympy.And(row_major, n <= ROWS_MAX), space=_TILE_SPACE))
        s.add_implementation(Implementation(
            f"scan_device.{kind}", p_device, _scan_device_run, k(device_parts),
            condition=row_major, space=_TILE_SPACE))
        s.add_implementation(Implementation(
            f"scan_cols.{kind}", p_cols, _scan_cols_run, k(cols_parts),
            condition=columns >= (CPU_COLUMNS_MIN if on_cpu else GPU_COLUMNS_MIN),
            space=ConfigSpace({"wg": (32, 64, 128, 256)}, {"wg": 64 if on_cpu else 256})))
        s.add_implementation(Implementation(
            f"scan_chunked.{kind}", p_chunked, _scan_cols_run, k(chunked_parts),
            space=_cols_space(64 if on_cpu else 256, 4096 if on_cpu else 256)))
        return s
    return strategy


def make_cpu_strategy(op_name: str):
    def run(ctx):
        ref = get_op(op_name).reference
        ctx.outputs[0][...] = ref(ctx.inputs[0], ctx.attrs).reshape(ctx.outputs[0].shape)

    def strategy(attrs, inputs, outputs, target):
        s = Strategy()
        s.add_implementation(Implementation(f"scan.{target.kind}", 10, run))
        return s
    return strategy


for _op, _combine in (("cumsum", "sum"), ("cumprod", "prod")):
    get_op(_op).strategy.register(["gpu"], make_gpu_strategy(_op, _combine))
    get_op(_op).strategy.register(["cpu"], make_cpu_strategy(_op))

__all__ = ["default_out_dtype", "make_cpu_strategy", "make_gpu_strategy"]
