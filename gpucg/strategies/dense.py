"""Strategies for dense, matmul and batch_matmul: which GEMM runs for which shape.

Every call is a batched GEMM (gpucg.ops.dense.problem): B products of (m x k) by (k x n). GPU
implementations, by plevel, with conditions over the symbolic sizes:
  gemm_wgmma   22  (sm_90a) Hopper's wgmma, TMA and mbarriers, persistent and warp-specialized
                   (strategies/gemm_wgmma.py): float16, bfloat16, TF32, rows whole 16-byte
                   chunks, aligned operands; on OpenCL the twin at plevel 1 (forced only)
  gemm_mma     20  (CUDA) tensor cores (strategies/gemm_mma.py): float16, and float32 with
                   allow_tf32, when rows hold whole 16-byte chunks and m > 16; on OpenCL the
                   twin at plevel 1 (forced only)
  gemv         15  m <= 16: one work-group per few output columns, K split over its work-items
                   and added by warp shuffles then one exchange of the warps' sums (CUDA), or
                   in local memory (OpenCL's default: its shuffles are emulated) (a GEMV at m 1)
  gemm_splitk  14  B * m * n <= 2**18 and k >= 2048: too few output tiles to fill the device,
                   so slices of K run in parallel and a second kernel adds them (no atomics,
                   the same result every run)
  gemm_tiled   10  always: the shared GEMM tile (templates/gemm/_tile.j2), register blocking,
                   vector loads, double-buffered local tiles
The NumPy target runs np.matmul (BLAS) with the epilogue in NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ..arch import PORTABLE_LOCAL_BYTES
from ..codegen import dialect_for
from ..half import half_format, numpy_dtype
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl, reads_strides
from ..ops import _epilogue
from ..ops.dense import DenseAttrs, problem
from ..runtime.base import ceil_div
from ..strategy import Strategy
from .gemm_tile import fill_device, gemm_space, sm_count, vector_needs, work_group
from . import gemm_layout, gemm_mma, gemm_wgmma

GEMV_MAX_M = 16
SPLITK_MAX_MN = 2 ** 18
SPLITK_MIN_K = 2048
#: the work-group size of the split-K reduce kernel (a kernel-level fixed parameter)
SPLITK_REDUCE_WG = 256
#: work-groups split-K aims for: a few per multiprocessor, or per core on a CPU device
SPLITK_GROUPS = {"gpu": 512, "cpu": 16}


@dataclass(frozen=True)
class GemmInfo:
    """What the launches read: the operator, the merged batch dimensions (each a tuple of
    the output's batch axes with, per operand, whether it has them), split-K's group goal."""

    op: str
    groups: tuple
    splitk_groups: int


def merge_batch(p) -> tuple:
    """The output's batch axes the kernels walk: every axis of size other than 1, each with,
    per operand, whether it has it (else it is broadcast: stride 0). Axes are not merged, so
    each operand's stride along each comes from the array itself (a strided view)."""
    return tuple(((axis,), (a != 1, b != 1))
                 for axis, (size, a, b) in enumerate(zip(p.batch, p.a_batch, p.b_batch))
                 if size != 1)


def _operands(ctx, p):
    """The arrays the kernels read and the layout arguments: per batch axis its size and the
    operands' strides, then each operand's first element and leading dimension. An operand the
    kernels cannot read in place is made contiguous on its device first; the bias and the
    residual always are (the epilogue reads them packed)."""
    axes = tuple(g[0][0] for g in ctx.info.groups)
    a, b, *extra = ctx.inputs
    fold = ctx.info.op == "dense"
    lay = []
    for x, folds in ((a, fold), (b, False)):
        got = gemm_layout.operand(x, len(p.batch), axes, folds)
        if got is None:  # a layout the kernels cannot walk: packed on its device first
            x = ctx.backend.contiguous(x)
            got = gemm_layout.operand(x, len(p.batch), axes, folds)
        lay.append((x, got))
    (a, (oa, lda, sa)), (b, (ob, ldb, sb)) = lay
    s = ctx.size
    args = [v for i, axis in enumerate(axes) for v in (s(p.batch[axis]), s(sa[i]), s(sb[i]))]
    args += [s(oa), s(lda), s(ob), s(ldb)]
    arrays = (a, b) + tuple(ctx.backend.contiguous(e) for e in extra)
    return arrays, args, (oa, lda, sa, ob, ldb, sb)


def _sizes(ctx):
    """(m, n, k, batch size, the arrays, the layout arguments, the layouts) of the call."""
    a, b = ctx.inputs[0], ctx.inputs[1]
    p = problem(ctx.info.op, a.shape, b.shape, ctx.attrs)
    nb = int(np.prod(p.batch, dtype=np.int64))
    arrays, args, lay = _operands(ctx, p)
    return int(p.m), int(p.n), int(p.k), nb, arrays, args, lay


def _tiled_run(ctx, gemm) -> None:
    m, n, k, nb, arrays, args, _ = _sizes(ctx)
    c, s = ctx.config, ctx.size
    grid = nb * ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    gemm(**named_operands(ctx, arrays, args), C=ctx.outputs[0], M=s(m), P=s(n), K=s(k),
         grid=grid, block=work_group(c))


def _gemv_run(ctx, gemv) -> None:
    m, n, k, nb, arrays, args, _ = _sizes(ctx)
    c, s = ctx.config, ctx.size
    cols = c["wg"] // c["k_slices"] * c["cols"]
    gemv(**named_operands(ctx, arrays, args), C=ctx.outputs[0], M=s(m), P=s(n), K=s(k),
         grid=nb * ceil_div(n, cols), block=c["wg"])


def _splitk_run(ctx, partial, reduce) -> None:
    m, n, k, nb, arrays, args, _ = _sizes(ctx)
    c, s = ctx.config, ctx.size
    tiles = nb * ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    slices = max(1, min(ceil_div(k, 4 * c["bk"]), ceil_div(ctx.info.splitk_groups, max(tiles, 1)),
                        64))
    kc = ceil_div(ceil_div(k, slices), c["bk"]) * c["bk"]  # whole tiles, so loads stay aligned
    slices = ceil_div(k, kc) if k else 1
    total = nb * m * n
    part = ctx.empty((slices * total,), np.float64 if ctx.fixed["acc_t"] == "double"
                     else np.float32)
    named = named_operands(ctx, arrays, args)
    epilogue = {e: named.pop(e) for e in ("bias", "residual") if e in named}
    partial(**named, C=part, M=s(m), P=s(n), K=s(k), NB=s(nb), KC=np.int32(kc),
            grid=slices * tiles, block=work_group(c))
    wg = SPLITK_REDUCE_WG
    reduce(part=part, **epilogue, C=ctx.outputs[0], total=s(total), P=s(n), S=np.int32(slices),
           grid=ceil_div(total, wg), block=wg)


def named_operands(ctx, arrays, args) -> dict:
    """The operands, the epilogue's inputs and the layout arguments of dense/_common.j2's
    kernels by their parameter names (A, B, bias, residual; bs{r}, sa{r}, sb{r} per batch
    dimension; oa, lda, ob, ldb)."""
    names = ["A", "B", "bias", "residual"][:len(arrays)]
    sizes = [f"{x}{r}" for r in range(len(ctx.info.groups)) for x in ("bs", "sa", "sb")]
    return dict(zip(names, arrays), **dict(zip(sizes + ["oa", "lda", "ob", "ldb"], args)))


def _mma_run(ctx, gemm) -> None:
    m, n, k, nb, arrays, args, lay = _sizes(ctx)
    c, s = ctx.config, ctx.size
    tiles = ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    threads = (c["bm"] // c["wm"]) * (c["bn"] // c["wn"]) * 32
    out = ctx.outputs[0]
    flags = gemm_mma.vector_ok(ctx, arrays, m, n, k, lay) | gemm_mma.pairs_ok(out, n) << 1
    gemm(**named_operands(ctx, arrays, args), C=out, M=s(m), P=s(n), K=s(k),
         vec=np.int32(flags), grid=gemm_mma.grid(tiles, nb), block=threads)


GEMM_MMA = reads_strides(kernel_impl("gemm_mma", _mma_run, gemm=Kernel(
    "dense/gemm_mma.j2", doc="tensor-core tiles (mma.sync, ldmatrix, cp.async stages of "
    "dynamic shared memory), the fused epilogue",
    low_occupancy=gemm_mma.low_occupancy, dynamic_local=gemm_mma.dynamic_bytes,
    smem_requests=gemm_mma.kernel_requests)))
def _wgmma_run(ctx, gemm) -> None:
    m, n, k, nb, arrays, args, (oa, lda, sa, ob, ldb, sb) = _sizes(ctx)
    if not (m and n and nb):
        return
    c, f, be = ctx.config, ctx.fixed, ctx.backend
    a, b, *extra = arrays
    a, b = gemm_wgmma.aligned(be, a), gemm_wgmma.aligned(be, b)
    core = gemm_wgmma.core_of(f["kind"], c, f["a_k_major"], f["b_k_major"], f["out_bytes"])
    sizes = [int(v) for v in args[0:3 * len(ctx.info.groups):3]]
    eb, dt = a.dtype.itemsize, np.dtype(a.dtype).name
    ma = gemm_wgmma.matrix_map(dt, core, "A", *((m, k) if f["a_k_major"] else (k, m)), lda,
                               zip(sizes, sa), eb)
    mb = gemm_wgmma.matrix_map(dt, core, "B", *((n, k) if f["b_k_major"] else (k, n)), ldb,
                               zip(sizes, sb), eb)
    named = {**be.tensor_map_args("tmA", a, ma, oa * eb), **be.tensor_map_args("tmB", b, mb, ob * eb)}
    named.update(zip(["bias", "residual"], extra))
    out = ctx.outputs[0]
    if f["out_bytes"]:
        mc = gemm_wgmma.output_map(np.dtype(out.dtype).name, core, m, n, nb, out.dtype.itemsize)
        named.update(be.tensor_map_args("tmC", out, mc))
    else:
        named["C"] = out
    named.update({f"bs{r}": ctx.size(v) for r, v in enumerate(sizes)})
    tiles = nb * ceil_div(m, c["bm"]) * ceil_div(n, c["bn"])
    s = ctx.size
    gemm(**named, M=s(m), P=s(n), K=s(k), block=gemm_wgmma.threads(c),
         grid=gemm_wgmma.grid(tiles, c, ctx.compiled.target.capabilities.sm_count))


GEMM_WGMMA = kernel_impl("gemm_wgmma", _wgmma_run, gemm=Kernel(
    "dense/gemm_wgmma.j2", doc="Hopper's tensor cores: persistent and warp-specialized (a TMA "
    "producer warpgroup, wgmma consumer warpgroups, mbarrier stages of dynamic shared memory), "
    "the epilogue stored by TMA",
    low_occupancy="one work-group a multiprocessor by design: persistent, warp-specialized, "
                  "most of the shared memory in its TMA ring",
    dynamic_local=gemm_wgmma.dynamic_bytes))
GEMM_TILED = reads_strides(kernel_impl("gemm_tiled", _tiled_run, gemm=Kernel(
    "dense/gemm.j2", {"splitk": False}, doc="the tiled GEMM with the fused epilogue",
    low_occupancy=("a 128 x 128 register tile (8 x 8 accumulators a thread, double-buffered vector "
                   "fragments) with each operand's offset and batch strides: over 200 registers, "
                   "one block of 256 threads a multiprocessor, as cuBLAS's SIMT tiles"))))
GEMV = reads_strides(kernel_impl("gemv", _gemv_run, gemv=Kernel(
    "dense/gemv.j2", doc="a few output columns a work-group, K split over its work-items")))
GEMM_SPLITK = reads_strides(kernel_impl(
    "gemm_splitk", _splitk_run,
    partial=Kernel("dense/gemm.j2", {"splitk": True, "has_bias": False, "has_residual": False},
                   doc="one slice of K of one output tile"),
    reduce=Kernel("dense/splitk_reduce.j2", {"wg": SPLITK_REDUCE_WG},
                  doc="the slices added, the epilogue, the store")))


#: products of at most this many rows run as one BLAS GEMV a row (OpenBLAS's GEMM at 2 and 3
#: rows: 2.1-3.3x the GEMVs' time on (k, n) from (256, 256) to (768, 3072), a classifier's
#: (1024, 1000) included; at 4 rows and up GEMM is as fast or faster)
GEMV_ROWS = 3


def _rows_matmul(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """x (..., k) @ wt (k, n) as one 2-D BLAS call: the leading dimensions folded into the rows
    where x's strides allow it without a copy (np.matmul on a 3-D x runs one GEMM per leading
    index instead: 1.5-10x slower on a BERT layer's (8, 128, 768) inputs); a few rows (a
    classifier's batch, a decode step's tokens) as one GEMV a row."""
    if x.ndim > 2:
        try:
            rows = x.reshape((math.prod(x.shape[:-1]), x.shape[-1]), copy=False)
        except ValueError:  # the leading strides do not fold: one GEMM per leading index
            return np.asarray(np.matmul(x, wt))
        return _rows_matmul(rows, wt).reshape(*x.shape[:-1], wt.shape[1])
    if 2 <= x.shape[0] <= GEMV_ROWS and x.ndim == 2:
        y = np.empty((x.shape[0], wt.shape[1]), np.result_type(x, wt))
        for i in range(x.shape[0]):
            np.matmul(x[i], wt, out=y[i])
        return y
    return np.asarray(np.matmul(x, wt))


def _host_run(ctx):
    a, b, *extra = ctx.inputs
    acc = np.float64 if a.dtype == np.float64 else np.float32
    x, w = a.astype(acc, copy=False), b.astype(acc, copy=False)
    attrs = ctx.attrs
    if ctx.info.op == "dense":
        y = _rows_matmul(x, w.T)
        y = _epilogue.apply(y, extra[0] if extra else None, extra[1] if extra[1:] else None,
                            attrs)
        return y.astype(attrs.out_dtype or a.dtype, copy=False)
    y = np.asarray(np.matmul(np.swapaxes(x, -1, -2) if attrs.transpose_a else x,
                             np.swapaxes(w, -1, -2) if attrs.transpose_b else w))
    if attrs.alpha != 1.0:
        y *= y.dtype.type(attrs.alpha)
    return y.astype(a.dtype, copy=False)


NUMPY_MATMUL = host_impl("numpy_matmul", _host_run, strided=True)  # np.matmul reads views


def params(op, attrs, inputs, outputs, d) -> dict:
    """Template parameters every kernel of a call shares: storage types, the sums' type, the
    operands' layouts, the batch dimensions, the epilogue (in dialect ``d``)."""
    p = problem(op, inputs[0].shape, inputs[1].shape, attrs)
    dtype, out = inputs[0].dtype, outputs[0].dtype
    wide = "float64" in (dtype, out)
    acc = "float64" if wide else "float32"
    # matmul and batch_matmul: z = alpha * acc, nothing else
    ep = _epilogue.template_params(attrs if op == "dense" else DenseAttrs(alpha=attrs.alpha),
                                   len(inputs) >= 3, len(inputs) >= 4, acc, d)
    return dict(half=half_format(dtype), out_half=half_format(out), f64=dtype == "float64",
                out_f64=out == "float64", acc_t="double" if wide else "float",
                acc_dtype=acc, a_k_major=p.a_k_major,
                b_k_major=p.b_k_major, R=len(merge_batch(p)), mma_ld=True, **ep)


def gemv_space(m_rows: int, b_k_major: bool, acc_bytes: int, vector: bool,
               on_cpu: bool = False, cuda: bool = False, half: bool = False,
               local_bytes: int = PORTABLE_LOCAL_BYTES) -> ConfigSpace:
    """The small-M kernel: wg work-items as k_slices slices of K times wg/k_slices column threads, cols
    columns each, vw elements of K a step; the slices' sums must fit the local memory.
    16-bit data (``half``) loads 8 elements (128 bits) an access where vw = 8: the GPU default
    (an H100 ran the 16-bit loads of vw = 1 at 0.88 TFLOP/s, torch 7.8); CPU devices keep vw = 1.
    ``shuffle``: a warp's slices added by xor shuffles (CUDA's default; OpenCL emulates them
    through local memory, two barriers a round, so its default adds them in local memory).
    The slices' sums live in static local memory: at most ``local_bytes``."""
    def ok(c):
        return (c["k_slices"] <= c["wg"] and c["wg"] * m_rows * c["cols"] * acc_bytes <= local_bytes)
    widths = ((8,) if half else (2, 4)) if vector else ()
    if b_k_major and on_cpu:
        default = {"wg": 64, "k_slices": 64, "cols": 8 if acc_bytes == 4 or m_rows < 16 else 4,
                   "vw": 4 if vector and not half else 1}
    elif b_k_major:  # 16 KiB of partial sums at most: fits any OpenCL GPU's local memory
        default = {"wg": 128, "k_slices": 128, "cols": 2 if acc_bytes == 4 or m_rows < 16 else 1,
                   "vw": widths[-1] if vector else 1}
    else:
        default = {"wg": 128, "k_slices": 8, "cols": 2, "vw": 1}
    return ConfigSpace({"wg": (64, 128, 256), "k_slices": (1, 2, 4, 8, 16, 32, 64, 128, 256),
                        "cols": (1, 2, 4, 8), "vw": (1, *widths),
                        "shuffle": (False, True)},
                       dict(default, shuffle=cuda), constraint=ok, added={"shuffle": False})


def gpu_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        p = problem(op, inputs[0].shape, inputs[1].shape, attrs)
        common = params(op, attrs, inputs, outputs, dialect_for(target.backend))
        acc_bytes = 8 if common["acc_t"] == "double" else 4
        half = bool(common["half"])
        vector = not half
        info = GemmInfo(op, merge_batch(p), SPLITK_GROUPS["cpu" if target.on_cpu else "gpu"])
        m, n, k, nb = (sympy.sympify(v) for v in (p.m, p.n, p.k, p.nb))
        mr = max(int(m), 1) if m.is_Integer and m <= GEMV_MAX_M else GEMV_MAX_M
        s = Strategy(target)
        tf32 = getattr(attrs, "allow_tf32", False)
        groups = merge_batch(p)
        gemm_wgmma.offer(s, GEMM_WGMMA, p, inputs[0].dtype, numpy_dtype(outputs[0].dtype).itemsize,
                         tf32, dict(common, a_axes=tuple(g[1][0] for g in groups),
                                    b_axes=tuple(g[1][1] for g in groups)),
                         info, target, GEMV_MAX_M, len(groups))
        gemm_mma.offer(s, GEMM_MMA, p, inputs[0].dtype, tf32, common, info, target, GEMV_MAX_M)
        gemv_vector = p.a_k_major and p.b_k_major
        s.add(GEMV, 15, condition=m <= GEMV_MAX_M, info=info, fixed=dict(common, MR=mr),
              space=gemv_space(mr, p.b_k_major, acc_bytes, gemv_vector, target.on_cpu,
                               target.capabilities.native("shfl"), half,
                               target.capabilities.smem_static_max),
              needs=vector_needs({0: True, 1: True}, 2 if half else acc_bytes)
              if gemv_vector else None)
        default = _default_tile(target.on_cpu, vector, acc_bytes)
        if not target.on_cpu and all(v.is_Integer for v in (m, n, nb)):
            default = fill_device(default, int(nb) * int(m), int(n), sm_count(target))
        tile = gemm_space(int(m) if m.is_Integer else None, target.on_cpu, vector, acc_bytes,
                          default=default)
        # vw > 1 loads both operands vw at a time (where their rows allow: the kernel checks
        # the lengths), so both addresses must be aligned to a vector (the dispatcher checks)
        needs = vector_needs({0: True, 1: True}, acc_bytes) if vector else None
        # split-K runs where the outputs are few: its tile shrinks to them (GPUs; a 3 x 9
        # product ran a 64 x 64 tile in each of its K slices)
        small = (int(m), int(n)) if not target.on_cpu and m.is_Integer and n.is_Integer else None
        split_tile = tile if small is None else gemm_space(
            int(m), target.on_cpu, vector, acc_bytes, default=default, output=small)
        s.add(GEMM_SPLITK, 14, info=info, fixed=common, space=split_tile, needs=needs,
              condition=sympy.And(nb * m * n <= SPLITK_MAX_MN, k >= SPLITK_MIN_K))
        s.add(GEMM_TILED, 10, info=info, fixed=common, space=tile, needs=needs)
        return s
    return strategy


def _default_tile(on_cpu: bool, vector: bool, acc_bytes: int) -> dict:
    if on_cpu:  # PoCL, 1024^3 float32: vector loads 1.7x faster, double buffering no gain;
        # the conflict-free layouts (conflict_free) were not shown faster there (1.09-1.10x the time, within
        # the 1.06-1.08x that identical kernels measured on the shared VM, 2026-11-23): kept off
        return {"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4 if vector else 1,
                "double_buffer": False, "conflict_free": False}
    if acc_bytes == 8:  # 16 KiB of local tiles, as float32's
        return {"bm": 64, "bn": 64, "bk": 8, "tm": 4, "tn": 4, "vw": 2 if vector else 1,
                "double_buffer": True, "conflict_free": True}
    return {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4 if vector else 1,
            "double_buffer": True, "conflict_free": True}


def host_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(NUMPY_MATMUL, 10, info=GemmInfo(op, (), 0))
        return s
    return strategy


STRATEGIES = {op: {"gpu": gpu_strategy(op), "cpu": host_strategy(op)}
              for op in ("dense", "matmul", "batch_matmul")}
