"""The Hopper GEMM (templates/gemm/_wgmma.j2, dense/gemm_wgmma.j2): when it is offered, its
config space, its tensor maps and its launch.

gemm_wgmma runs dense, matmul and batch_matmul on wgmma (float16, bfloat16; float32 as TF32
with allow_tf32, operands rounded as cvt.rna in shared memory): a persistent, warp-specialized
kernel (one producer warpgroup issuing TMA copies into 2-8 mbarrier stages of 128-byte-swizzled
dynamic shared memory, one or two consumer warpgroups of 64 rows issuing wgmma; setmaxnreg 40 /
232), tiles in rasterized order, the epilogue (alpha, bias, activation, residual, beta) through
shared memory and TMA stores. It is offered where the target's capability record has wgmma
(sm_90a: plevel 22, above gemm_mma) and as the OpenCL twin (plevel 1, forced only), under the
condition TMA sets: the operands' rows (their contiguous dimension) whole 16-byte chunks (the
dispatcher checks; elsewhere gemm_mma runs), more than 16 rows (the GEMV takes fewer), at most
three batch dimensions (a map has five).
TF32 reads both operands K-major (the ISA has no transposed TF32 wgmma): A along M or B along N
excludes it with that reason.
"""

from __future__ import annotations

import sympy

from ..codegen.tma import TensorMap
from ..codegen.wgmma_core import wgmma_gemm
from ..space import ConfigSpace
from . import gemm_mma

PLEVEL_CUDA = 22
PLEVEL_TWIN = gemm_mma.PLEVEL_TWIN
FEATURE = "wgmma"
#: the default tiles of a GPU, largest first: (bm, bn); the first whose grid fills a wave
GPU_TILES = ((128, 256), (128, 128), (64, 128), (64, 64))
#: element bytes of each kind
EB = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1}
#: merged batch dimensions a tensor map holds beside its two matrix dimensions
MAX_BATCH_DIMS = 3


def supported(target):
    """(twin, reason): whether ``target`` runs wgmma as the OpenCL twin (True) or as the
    instruction (False), or (None, why it has neither)."""
    return gemm_mma.feature_support(target, FEATURE, "wgmma, sm_90a")


def wgmma_kind(dtype: str, allow_tf32: bool, a_k_major: bool, b_k_major: bool):
    """(kind, element bytes), or (None, the reason gemm_wgmma does not apply)."""
    got, why = gemm_mma.mma_kind(dtype, allow_tf32, True, True)
    if got is None:
        return None, why
    if got[0] == "tf32" and not (a_k_major and b_k_major):
        return None, ("TF32 wgmma reads A and B K-major only (no transpose for 32-bit types): "
                      f"A {'along K' if a_k_major else 'along M'}, B "
                      f"{'along K' if b_k_major else 'along N'}")
    return got, ""


def core_of(kind: str, c, a_k_major: bool, b_k_major: bool, out_bytes: int):
    return wgmma_gemm(kind, c["bm"], c["bn"], c["stages"], "K" if a_k_major else "MN",
                      "K" if b_k_major else "MN", out_bytes)


why_short = gemm_mma.geometry_short


def space(kind: str, a_k_major: bool, b_k_major: bool, out_bytes: int, smem_limit: int,
          small: bool, fill=None, bn_divides: int = 0) -> ConfigSpace:
    """bm (64: one consumer warpgroup, 128: two), bn (the wgmma N), ``stages`` of the TMA ring,
    ``raster`` tile rows a group walks, ``ctas`` work-groups (0: one a multiprocessor, the
    persistent grid; n: at most n, the twin's tests walk several tiles a work-group).
    ``bn_divides``: bn must divide it (a tile's columns in one block of FP8 scales)."""
    def why(c):
        if bn_divides and bn_divides % c["bn"]:
            return f"bn does not divide the scale blocks' {bn_divides} columns"
        return why_short(core_of(kind, c, a_k_major, b_k_major, out_bytes), smem_limit)

    if small:  # the twin: one consumer, a narrow tile (emulated warpgroups are slow); an
        # MN-major B comes in slabs of one 128-byte swizzle row of N
        default = {"bm": 64, "bn": 32 if b_k_major else 128 // EB[kind], "stages": 2,
                   "raster": 1, "ctas": 0}
    else:
        tiles = GPU_TILES
        if fill is not None:
            rows, cols, sms = fill
            tiles = [t for t in tiles if -(-rows // t[0]) * -(-cols // t[1]) >= sms] or tiles[-1:]
        default = None
        for bm, bn in tiles:  # the largest tile that fits, with the deepest ring
            for stages in (5, 4, 3, 2):
                c = {"bm": bm, "bn": bn, "stages": stages, "raster": 8, "ctas": 0}
                default = default or c
                if not why(c):
                    default = c
                    break
            if not why(default):
                break
    knobs = {"bm": (64, 128), "bn": (32, 64, 128, 192, 256), "stages": (2, 3, 4, 5, 6),
             "raster": (1, 4, 8, 16), "ctas": (0, 1, 2, 4)}
    return ConfigSpace(knobs, default, why=why)


def condition(p, eb: int, min_rows: int):
    """What TMA needs of the call's sizes: the operands' rows whole 16-byte chunks (gemm_mma's
    condition, with its more than ``min_rows`` rows). Their base addresses must be 16-byte
    aligned too: :func:`aligned` copies the rare contiguous view that is not."""
    return gemm_mma.condition(p, eb, min_rows)


def aligned(backend, x):
    """``x``, or an aligned copy where its address is not a multiple of 16 bytes (a TMA map's
    global address must be; an array of whole 16-byte rows is unless it is a view that starts
    inside a row, which only a flat view reshaped can be)."""
    if backend.alignment(x) % 16 == 0:
        return x
    return backend.to_device(backend.to_host(x))


def out_bytes_of(p, out_dtype_bytes: int) -> int:
    """The output's element size where its rows are whole 16-byte chunks for every size the
    call admits (TMA stores the epilogue), else 0 (stores from registers)."""
    n = sympy.sympify(p.n)
    rem = sympy.Mod(n * out_dtype_bytes, 16)
    return out_dtype_bytes if rem == 0 else 0


def offer(s, decl, p, dtype: str, out_dtype_bytes: int, allow_tf32: bool, common: dict, info,
          target, min_rows: int, batch_dims: int):
    """Offer gemm_wgmma (``decl``, declared in strategies/dense.py with its launch) on ``s``,
    or exclude it with the reason."""
    twin, why = supported(target)
    got, kind_why = wgmma_kind(dtype, allow_tf32, p.a_k_major, p.b_k_major)
    why = why or kind_why
    if not why and batch_dims > MAX_BATCH_DIMS:
        why = f"{batch_dims} batch dimensions (a tensor map holds {MAX_BATCH_DIMS})"
    if why:
        s.exclude(decl, PLEVEL_CUDA, why)
        return
    kind, eb = got
    ob = out_bytes_of(p, out_dtype_bytes)
    fill = None
    m, n, nb = (sympy.sympify(v) for v in (p.m, p.n, p.nb))
    if all(v.is_Integer for v in (m, n, nb)):
        fill = (int(nb) * int(m), int(n), target.capabilities.sm_count)
    s.add(decl, PLEVEL_TWIN if twin else PLEVEL_CUDA, info=info,
          condition=condition(p, eb, min_rows),
          fixed=dict(common, kind=kind, EB=eb, out_bytes=ob),
          space=space(kind, p.a_k_major, p.b_k_major, ob,
                      gemm_mma.smem_limit(target, twin), twin or target.on_cpu, fill))


def dynamic_bytes(p) -> int:
    """Kernel.dynamic_local of a kernel on the core."""
    return core_of(p["kind"], p, p["a_k_major"], p["b_k_major"], p["out_bytes"]).smem_bytes


def threads(c) -> int:
    return 128 * (1 + c["bm"] // 64)


def grid(tiles: int, c, sms: int) -> int:
    """The persistent grid: a work-group a multiprocessor (at most ``ctas`` where set), never
    more than the tiles."""
    cap = c.get("ctas", 0) or sms
    return max(1, min(tiles, cap))


def matrix_map(dtype: str, core, op_name: str, rows: int, inner: int, ld: int, batch,
               itemsize: int) -> TensorMap:
    """The tensor map of an operand stored as ``rows`` rows of ``inner`` contiguous elements,
    ``ld`` elements apart, with its merged batch axes ((size, stride in elements) each,
    outermost first; stride 0: broadcast, held as one index), innermost first in the map as
    the driver orders them. Its box is the core's tile of ``op_name`` (one slab of an MN-major
    one). An empty operand (K = 0: no tile is loaded) gets a valid map of one element."""
    op, batch = getattr(core, op_name), tuple(batch)
    inner, rows = max(inner, 1), max(rows, 1)
    row = -(-max(ld, inner) * itemsize // 16) * 16
    dims, strides = [inner, rows], [row]
    for size, stride in reversed(batch):
        below = dims[-1] * strides[-1]
        dims.append(size if stride else 1)
        strides.append(stride * itemsize if stride else below)
    box = list(op.box) + [1] * len(batch)
    return TensorMap(dtype, dims, strides[:len(dims) - 1], box, swizzle=128)


def output_map(dtype: str, core, m: int, n: int, nb: int, itemsize: int) -> TensorMap:
    """The map of the output (nb x m x n, packed) the epilogue stores by boxes of 64 rows x
    the staging buffer's columns."""
    return TensorMap(dtype, [n, m, nb], [n * itemsize, m * n * itemsize],
                     [core.epi_cols, 64, 1], swizzle=128)
