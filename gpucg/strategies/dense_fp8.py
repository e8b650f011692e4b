"""Strategies of dense_fp8: the SIMT GEMM tile on GPUs, NumPy on the host.

GPU implementation:
  fp8_tiled  10  the shared GEMM tile (templates/gemm/_tile.j2) with FP8 loads dequantized in
                 registers: each element converted to float (gpucg/codegen/fp8.py) as it is
                 loaded, times its scale where scales are blockwise (per tensor, row and column
                 the sums are scaled once, in the epilogue); vw FP8 values (4 bytes at vw = 4)
                 a load where the rows allow; float32 sums; bias and the output's rounding in
                 the epilogue. It runs on every OpenCL device and under Oclgrind; the tensor-core
                 path for sm_89 (mma.sync m16n8k32 e4m3/e5m2) is still to come.
  fp8_wgmma  22  (sm_90a) Hopper's FP8 wgmma (QGMMA) on gemm_wgmma's persistent, warp-specialized
                 core (templates/gemm/_wgmma.j2): TMA tiles of 128 FP8 values of K, each
                 k-tile's products promoted to the float32 sums (times the block scales where
                 scales are blockwise); x and w of one format, rows of whole 16-byte chunks
                 (k % 16 == 0), more than 16 rows; blockwise scales with bk = 128.
The NumPy target dequantizes to float32 and runs np.matmul (float32 sums, as the kernels).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..codegen.fp8 import FORMATS
from ..half import half_format, numpy_dtype
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.dense_fp8 import scales
from ..runtime.base import ceil_div
from ..strategy import Strategy, only
from . import gemm_mma, gemm_wgmma
from .gemm_tile import fill_device, gemm_space, sm_count, vector_needs, work_group


def _operands(ctx):
    """(x, w, the scales and bias, y, m, n, k) of a call: x's leading dimensions are rows."""
    x, w, *rest = ctx.inputs
    k, n = int(x.shape[-1]), int(w.shape[0])
    return x, w, rest, ctx.outputs[0], int(np.prod(x.shape[:-1], dtype=np.int64)), n, k


def _run(ctx, gemm) -> None:
    x, w, rest, y, m, n, k = _operands(ctx)
    if not m or not n:
        return
    c, s = ctx.config, ctx.size
    grid = ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    gemm(X=x, W=w, **dict(zip(("xs", "ws", "bias"), rest)), C=y, M=s(m), P=s(n), K=s(k),
         grid=grid, block=work_group(c))


FP8_TILED = kernel_impl("fp8_tiled", _run, gemm=Kernel(
    "dense_fp8/gemm.j2", doc="the SIMT GEMM tile, FP8 dequantized in registers, float32 sums",
    low_occupancy=("a 128 x 128 register tile (8 x 8 float32 sums a thread): one block of 256 "
                   "threads a multiprocessor, as the float32 tile")))


#: fewer rows than this take the SIMT tile (a wgmma tile has 64 a consumer)
MIN_ROWS = 16


def _wgmma_run(ctx, gemm) -> None:
    x, w, rest, y, m, n, k = _operands(ctx)
    if not m or not n:
        return
    c, f, be = ctx.config, ctx.fixed, ctx.backend
    x, w = gemm_wgmma.aligned(be, x), gemm_wgmma.aligned(be, w)
    core = gemm_wgmma.core_of(f["kind"], c, True, True, f["out_bytes"])
    named = {**be.tensor_map_args("tmA", x, gemm_wgmma.matrix_map(
                 np.dtype(x.dtype).name, core, "A", m, k, k, (), 1)),
             **be.tensor_map_args("tmB", w, gemm_wgmma.matrix_map(
                 np.dtype(w.dtype).name, core, "B", n, k, k, (), 1))}
    named.update(zip(("xs", "ws", "bias"), rest))
    if f["out_bytes"]:
        named.update(be.tensor_map_args("tmC", y, gemm_wgmma.output_map(
            np.dtype(y.dtype).name, core, m, n, 1, y.dtype.itemsize)))
    else:
        named["C"] = y
    tiles = ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    s = ctx.size
    gemm(**named, M=s(m), P=s(n), K=s(k), block=gemm_wgmma.threads(c),
         grid=gemm_wgmma.grid(tiles, c, ctx.compiled.target.capabilities.sm_count))


FP8_WGMMA = kernel_impl("fp8_wgmma", _wgmma_run, gemm=Kernel(
    "dense_fp8/gemm_wgmma.j2", doc="Hopper's FP8 tensor cores (wgmma e4m3/e5m2, QGMMA): "
    "gemm_wgmma's persistent warp-specialized core, the sums promoted to float32 every k-tile",
    low_occupancy="one work-group a multiprocessor by design: persistent, warp-specialized, "
                  "most of the shared memory in its TMA ring",
    dynamic_local=gemm_wgmma.dynamic_bytes))


def _offer_wgmma(s, attrs, inputs, outputs, target, sc, fixed) -> None:
    """fp8_wgmma on ``s`` (plevel 22 where the target has wgmma; the twin forced only), or
    its exclusion with the reason."""
    x, w = inputs[0], inputs[1]
    twin, why = gemm_wgmma.supported(target)
    bn_s, bk_s = attrs.block_size or (0, 0)
    core_bk = gemm_wgmma.core_of(FORMATS[x.dtype].tag, {"bm": 64, "bn": 128, "stages": 2},
                                 True, True, 0).bk
    if not why and x.dtype != w.dtype:
        why = f"x {x.dtype} and w {w.dtype}: the wgmma atoms take one FP8 format for both"
    if not why and attrs.block_size and (bk_s != core_bk or bn_s % 64):
        why = (f"block_size=({bn_s}, {bk_s}): the scales are applied a k-tile of {core_bk} at "
               "a time, a tile's columns in one block (bk = 128, bn a multiple of 64)")
    if why:
        s.exclude(FP8_WGMMA, gemm_wgmma.PLEVEL_CUDA, why)
        return
    kind = FORMATS[x.dtype].tag
    ob = numpy_dtype(outputs[0].dtype).itemsize
    n, k = sympy.sympify(sc.n), sympy.sympify(sc.k)
    out_bytes = ob if sympy.Mod(n * ob, 16) == 0 else 0
    m = sympy.sympify(sc.m)
    fill = (int(m), int(n), target.capabilities.sm_count) if m.is_Integer and n.is_Integer \
        else None
    space = gemm_wgmma.space(kind, True, True, out_bytes, gemm_mma.smem_limit(target, twin),
                             twin or target.on_cpu, fill, bn_divides=bn_s)
    s.add(FP8_WGMMA, gemm_wgmma.PLEVEL_TWIN if twin else gemm_wgmma.PLEVEL_CUDA,
          condition=sympy.And(sympy.Eq(sympy.Mod(k, 16), 0), m > MIN_ROWS),
          fixed=dict(fixed, kind=kind, out_bytes=out_bytes), space=space)


def gpu_strategy(attrs, inputs, outputs, target):
    x, w = inputs[0], inputs[1]
    sc = scales(inputs, attrs)
    m = sc.m if isinstance(sc.m, int) else None
    if target.on_cpu:
        default = {"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4,
                   "double_buffer": False, "conflict_free": False}
    else:
        default = {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4,
                   "double_buffer": True, "conflict_free": True}
        if m is not None and isinstance(sc.n, int):
            default = fill_device(default, m, sc.n, sm_count(target))
    # a product of few outputs takes a tile shrunk to them (gemm_space's ``output``)
    small = (m, sc.n) if m is not None and isinstance(sc.n, int) else None
    space = gemm_space(m, target.on_cpu, vector=True, acc_bytes=4, default=default, output=small)
    bn_s, bk_s = attrs.block_size or (0, 0)
    fixed = dict(x_fmt=x.dtype, w_fmt=w.dtype, x_mode=sc.x_mode, w_mode=sc.w_mode,
                 BN_S=bn_s, BK_S=bk_s, has_bias=len(inputs) == 5,
                 bias_half=half_format(inputs[4].dtype) if len(inputs) == 5 else False,
                 out_half=half_format(outputs[0].dtype), acc_t="float", acc_dtype="float32",
                 a_k_major=True, b_k_major=True, x_tag=FORMATS[x.dtype].tag,
                 w_tag=FORMATS[w.dtype].tag)
    s = Strategy(target)
    _offer_wgmma(s, attrs, inputs, outputs, target, sc, fixed)
    s.add(FP8_TILED, 10, space=space, fixed=fixed, needs=vector_needs({0: True, 1: True}, 1))
    return s


def _host_run(ctx):
    x, w, xs, ws, *bias = ctx.inputs
    attrs = ctx.attrs
    k, n = x.shape[-1], w.shape[0]
    m = int(np.prod(x.shape[:-1], dtype=np.int64))
    x32 = x.astype(np.float32).reshape(m, k)
    w32 = w.astype(np.float32)
    with np.errstate(all="ignore"):
        if attrs.block_size is None:
            y = (x32 @ w32.T) * xs.reshape(-1, 1) * ws.reshape(1, -1)
        else:  # dequantized by blocks of k, as the kernels' loads
            bn, bk = attrs.block_size
            kb = xs.shape[-1]
            xs2, ws2 = xs.reshape(m, kb), ws.reshape(-(-n // bn), kb)
            x32 = x32 * np.repeat(xs2, bk, axis=1)[:, :k]
            w32 = w32 * np.repeat(np.repeat(ws2, bn, axis=0)[:n], bk, axis=1)[:, :k]
            y = x32 @ w32.T
        if bias:
            y = y + bias[0].astype(np.float32)
    return y.reshape(tuple(x.shape[:-1]) + (n,)).astype(numpy_dtype(attrs.out_dtype))


HOST = host_impl("numpy_dense_fp8", _host_run)
STRATEGIES = {"dense_fp8": {"gpu": gpu_strategy, "cpu": only(HOST)}}
