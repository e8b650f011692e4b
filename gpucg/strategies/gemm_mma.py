"""The tensor-core GEMM (templates/gemm/_mma.j2, dense/gemm_mma.j2): its config space, when it
is offered, its launch, and the shared-memory requests its swizzle makes.

float16 (m16n8k16 .f16), bfloat16 (m16n8k16 .bf16, once the dtype exists) and float32 with
allow_tf32 (m16n8k8 .tf32, operands rounded as cvt.rna does) run on tensor cores; float32
without allow_tf32 stays exact float32 on the SIMT tile. On CUDA gemm_mma takes the highest
plevel where the operands' contiguous dimensions hold whole 16-byte chunks (so every cp.async
row is aligned) and there are more rows than the GEMV kernel takes; elsewhere the SIMT tile
runs. On OpenCL it is the twin: the same kernel with the warp operations emulated
(gpucg/codegen/warp.py), offered at the lowest plevel, so it runs only when forced (impl=).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..arch import MMA_BF16, MMA_F16, MMA_TF32, PORTABLE_LOCAL_BYTES
from ..codegen.gemm_core import gemm_core
from ..runtime import alignment_of
from ..space import ConfigSpace

PLEVEL_CUDA = 20
#: the twin is never chosen by default: the emulation is for proving, not for speed
PLEVEL_TWIN = 1
#: static shared memory a work-group may use (CUDA's limit without opting in to more)
SMEM_BYTES = PORTABLE_LOCAL_BYTES
#: the tensor-core element kind and its bytes per dtype (float32 only with allow_tf32)
KINDS = {"float16": ("f16", 2), "bfloat16": ("bf16", 2), "float32": ("tf32", 4)}


#: the capability (gpucg.arch) each tensor-core element kind needs
FEATURES = {"f16": MMA_F16, "bf16": MMA_BF16, "tf32": MMA_TF32}


def tensor_cores(target, kind: str):
    """(twin, reason): whether ``target`` runs ``kind``'s mma.sync as the OpenCL twin's
    emulation (True) or as the instruction (False), or (None, why it has neither)."""
    return feature_support(target, FEATURES[kind], "tensor cores")


def feature_support(target, feature: str, what: str):
    """(twin, reason) of a capability ``feature``: native (False, ""), emulated by the OpenCL
    twin (True, ""), or neither (None, the capability record's reason, then ``what``)."""
    caps = target.capabilities
    if caps.native(feature):
        return False, ""
    if caps.supports(feature):
        return True, ""
    return None, f"{caps.why_not(feature)} ({what})"


def mma_kind(dtype: str, allow_tf32: bool, a_k_major: bool, b_k_major: bool):
    """(kind, element bytes), or (None, the reason gemm_mma does not apply)."""
    if dtype not in KINDS:
        return None, f"no tensor-core path for {dtype} (mma here takes {', '.join(KINDS)})"
    kind, eb = KINDS[dtype]
    if kind == "tf32" and not allow_tf32:
        return None, ("float32 stays exact float32 unless allow_tf32=True "
                      "(or GPUCG_ALLOW_TF32=1) lets its operands round to TF32")
    if kind == "tf32" and not a_k_major:
        return None, ("TF32 needs A stored along K: ldmatrix has no 32-bit transpose (a "
                      "transposed A takes the SIMT tile; B along N is read a word a lane)")
    return (kind, eb), ""


#: registers a thread may hold (the rest of a 255 cap: indices, pointers, loop state)
REGS_MAX = 232


def core_of(kind: str, c, a_k_major: bool, b_k_major: bool):
    """The GEMM core (gpucg.codegen.gemm_core) of a config."""
    return gemm_core(kind, c["bm"], c["bn"], c["bk"], c["wm"], c["wn"], c["stages"], a_k_major,
                     b_k_major)


def regs(core) -> int:
    """An estimate of the registers a thread holds: the accumulators, one k-step's fragments,
    the lane's shared addresses and its copies' offsets (64-bit), a margin for the rest."""
    a = core.atom
    frags = core.mi * a.a_regs + core.ni * a.b_regs
    addrs = core.array_len(core.A) + core.array_len(core.B) + 2 * (core.A.copies + core.B.copies)
    return core.mi * core.ni * 4 + frags + addrs + 24


def why_not(core, smem_limit: int) -> str:
    """Why a config cannot run on a target with ``smem_limit`` bytes of shared memory a block
    ("" when it can)."""
    why = core.why_not()
    if why:
        return why
    if core.smem_bytes > smem_limit:
        return f"{core.smem_bytes} B of shared memory (the target allows {smem_limit})"
    if regs(core) > REGS_MAX or regs(core) * core.nt > 64 * 1024:
        return f"about {regs(core)} registers a thread x {core.nt} threads"
    return ""


def geometry_short(core, smem_limit: int) -> str:
    """A core's geometry (``core.why_not()``) or shared memory (``core.smem_bytes``) as the
    reason a space counts configs by ("" when both hold)."""
    if core.why_not():
        return "tile geometry"
    if core.smem_bytes > smem_limit:
        return f"shared memory over {smem_limit // 1024} KiB"
    return ""


def why_short(core, smem_limit: int) -> str:
    """:func:`why_not` as the reason a space counts configs by (the limit, not the figure)."""
    why = geometry_short(core, smem_limit)
    if why:
        return why
    if regs(core) > REGS_MAX or regs(core) * core.nt > 64 * 1024:
        return f"over {REGS_MAX} registers a thread (estimate)"
    return ""


#: the default tiles of a GPU, largest first: (bm, bn, wm, wn); the first whose grid fills a
#: wave of the device's multiprocessors is taken (the last where none does)
GPU_TILES = {2: ((128, 256, 64, 64), (128, 128, 64, 64), (64, 128, 32, 64), (64, 64, 32, 32)),
             4: ((128, 128, 64, 64), (128, 64, 64, 32), (64, 64, 32, 32))}


def mma_space(kind: str, eb: int, a_k_major: bool, b_k_major: bool, smem_limit: int,
              small: bool, fill=None) -> ConfigSpace:
    """Block tile bm x bn x bk, warp tile wm x wn (16 x 8 atoms), ``stages`` pipeline stages of
    dynamic shared memory, ``raster`` tile rows a group of blocks walks together; pruned to the
    configs the core can render within ``smem_limit`` bytes and the registers a thread has.
    The twin's default (``small``) is small: its emulated warps are slow (the CUDA defaults can
    be forced on it). ``fill``: (rows, columns, multiprocessors) of a call whose sizes are
    known: the GPU default shrinks until its grid fills the device."""
    def why(c):
        return why_short(core_of(kind, c, a_k_major, b_k_major), smem_limit)

    def ok(c):
        return not why(c)
    if small:
        default = {"bm": 32, "bn": 32, "bk": 32, "wm": 16, "wn": 16, "stages": 2, "raster": 1}
    else:
        tiles = GPU_TILES[eb]
        if fill is not None:
            rows, cols, sms = fill
            tiles = [t for t in tiles if -(-rows // t[0]) * -(-cols // t[1]) >= sms] or tiles[-1:]
        bm, bn, wm, wn = tiles[0]
        bk = 32
        default = None
        for stages in (4, 3, 2):  # the deepest pipeline that fits
            default = {"bm": bm, "bn": bn, "bk": bk, "wm": wm, "wn": wn, "stages": stages,
                       "raster": 8}
            if ok(default):
                break
    knobs = {"bm": (32, 64, 128, 256), "bn": (32, 64, 128, 256), "bk": (16, 32, 64),
             "wm": (16, 32, 64), "wn": (16, 32, 64), "stages": (2, 3, 4, 5),
             "raster": (1, 4, 8, 16)}
    return ConfigSpace(knobs, default, added={"raster": 1}, why=why)


def smem_limit(target, twin: bool) -> int:
    """Shared memory a block of the core may have on ``target``: its opt-in limit; the twin
    (run only when forced, to prove the CUDA kernel) any CUDA arch's, the device's own
    limit checked at launch."""
    caps = target.capabilities
    if twin:
        from ..arch import ARCHS
        return max(a.smem_per_block_optin for a in ARCHS.values())
    return caps.smem_per_block_optin


def condition(p, eb: int, min_rows: int):
    """What the CUDA kernel's fast path needs of the sizes: the operands' contiguous dimensions
    hold whole 16-byte chunks, and more than ``min_rows`` rows."""
    epc = 16 // eb
    a_row = sympy.sympify(p.k if p.a_k_major else p.m)
    b_row = sympy.sympify(p.k if p.b_k_major else p.n)
    return sympy.And(sympy.Eq(sympy.Mod(a_row, epc), 0), sympy.Eq(sympy.Mod(b_row, epc), 0),
                     sympy.sympify(p.m) > min_rows)


def vector_ok(ctx, arrays, m: int, n: int, k: int, layout) -> bool:
    """Whether this call may copy 16 bytes at a time: both pointers 16-byte aligned (as the
    backend reports them: gpucg.runtime.alignment_of), and every row (the operands' contiguous
    dimensions), its start (first elements, leading dimensions, batch strides: ``layout``) a
    whole number of 16-byte chunks."""
    a, b = arrays[0], arrays[1]
    epc = 16 // a.dtype.itemsize
    oa, lda, sa, ob, ldb, sb = layout
    a_row = k if ctx.fixed["a_k_major"] else m
    b_row = k if ctx.fixed["b_k_major"] else n
    return bool(all(v % epc == 0 for v in (a_row, b_row, oa, lda, ob, ldb, *sa, *sb))
                and alignment_of(a) % 16 == 0 and alignment_of(b) % 16 == 0)


def offer(s, decl, p, dtype: str, allow_tf32: bool, common: dict, info, target, min_rows: int):
    """Offer gemm_mma (``decl``, declared in strategies/dense.py with its launch) on strategy
    ``s``, or exclude it with the reason."""
    got, why = mma_kind(dtype, allow_tf32, p.a_k_major, p.b_k_major)
    if got is None:
        s.exclude(decl, PLEVEL_CUDA, why)
        return
    kind, eb = got
    # the twin has no condition: its kernel takes any size (unaligned rows copy element by
    # element), so a forced run covers both paths; on CUDA the condition keeps the fast path
    twin, why = tensor_cores(target, kind)
    if twin is None:
        s.exclude(decl, PLEVEL_CUDA, why)
        return
    fill = None
    m, n, nb = (sympy.sympify(v) for v in (p.m, p.n, p.nb))
    if all(v.is_Integer for v in (m, n, nb)):
        fill = (int(nb) * int(m), int(n), target.capabilities.sm_count)
    s.add(decl, PLEVEL_TWIN if twin else PLEVEL_CUDA, info=info,
          condition=None if twin else condition(p, eb, min_rows),
          fixed=dict(common, kind=kind, EB=eb),
          space=mma_space(kind, eb, p.a_k_major, p.b_k_major, smem_limit(target, twin),
                          twin or target.on_cpu, fill))


def dynamic_bytes(p) -> int:
    """Kernel.dynamic_local of a kernel on the core: its shared-memory plan's bytes."""
    return core_of(p["kind"], p, p["a_k_major"], p["b_k_major"]).smem_bytes


def kernel_requests(p) -> list:
    """Kernel.smem_requests of a kernel on the core: :func:`smem_requests` of its template
    parameters (which hold the config's knobs)."""
    return smem_requests(p, p)


def low_occupancy(p) -> str:
    """Why a kernel on the core may hold few warps an SM: large warp tiles keep 64 or more
    accumulators a thread (CUTLASS's and cuBLAS's tensor-core tiles run one or two blocks an
    SM the same way), and deep pipelines take most of the shared memory."""
    core = core_of(p["kind"], p, p["a_k_major"], p["b_k_major"])
    if core.mi * core.ni * 4 >= 64 or core.smem_bytes > PORTABLE_LOCAL_BYTES:
        return (f"{core.mi * core.ni * 4} accumulators a thread ({core.wm} x {core.wn} warp "
                f"tiles) and {core.smem_bytes} B of shared memory ({core.stages} stages): "
                "latency hidden by the pipeline, not by more warps")
    return ""


def grid(tiles: int, batches: int):
    """The launch grid of a core kernel: (tiles, batches), or one dimension where the batches
    are more than a grid's y holds (the kernel's block_origin reads either)."""
    return (tiles, batches) if batches <= 65535 else tiles * batches


def pairs_ok(out, n: int) -> bool:
    """Whether the output may be stored two neighbouring elements at a time: rows of even
    length and a base pointer aligned to a pair."""
    return n % 2 == 0 and alignment_of(out) % (2 * out.dtype.itemsize) == 0


# -- shared-memory requests, for the bank-conflict check ----------------------------------------

@dataclass(frozen=True)
class Request:
    """One warp's shared-memory request: what it is, the bytes each lane accesses at once, and
    each lane's byte address (None for a lane that takes no part)."""

    name: str
    width: int
    addresses: tuple
    #: "lds" (an ordinary load or store) or "ldmatrix" (8 rows of 16 bytes a matrix)
    kind: str = "lds"


def smem_requests(params, config) -> list:
    """Per-lane byte addresses of warp 0's first request of each shared-memory access of the
    core: the 16-byte cp.async stores of A and B, the ldmatrix reads (32-bit loads of a TF32 B
    along N), evaluated from the core's own definitions (gpucg.codegen.gemm_core: the tiles'
    swizzles, the atom's fragment maps) with ints."""
    core = core_of(params["kind"], config, params["a_k_major"], params["b_k_major"])
    out = []
    for op in (core.A, core.B):
        at = tuple(core.plan.offset(op.name) + op.tile.chunk_at(*core.copy_chunk(op, q, 0))
                   for q in range(32))
        out.append(Request(f"cp.async {op.name}", 16, at if core.nt >= 32 else ()))
        lanes = tuple(core.lane_address(op, lane, 0, 0) for lane in range(32))
        if op.lds:
            out.append(Request(f"ld.shared.b32 {op.name}", 4, lanes))
        else:
            out.append(Request(f"ldmatrix {op.name}", 16, lanes, "ldmatrix"))
    return out
