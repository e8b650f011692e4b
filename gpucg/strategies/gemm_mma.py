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
from ..codegen.warp import swizzle
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
    caps = target.capabilities
    feature = FEATURES[kind]
    if caps.native(feature):
        return False, ""
    if caps.supports(feature):
        return True, ""
    return None, f"{caps.why_not(feature)} (tensor cores)"


def mma_kind(dtype: str, allow_tf32: bool, a_k_major: bool, b_k_major: bool):
    """(kind, element bytes), or (None, the reason gemm_mma does not apply)."""
    if dtype not in KINDS:
        return None, f"no tensor-core path for {dtype} (mma here takes {', '.join(KINDS)})"
    kind, eb = KINDS[dtype]
    if kind == "tf32" and not allow_tf32:
        return None, ("float32 stays exact float32 unless allow_tf32=True "
                      "(or GPUCG_ALLOW_TF32=1) lets its operands round to TF32")
    if kind == "tf32" and not (a_k_major and b_k_major):
        return None, ("TF32 needs both operands stored along K: ldmatrix has no 32-bit "
                      "transpose (a transposed operand takes the SIMT tile)")
    return (kind, eb), ""


def _ok(eb: int):
    def ok(c):
        nw = (c["bm"] // c["wm"]) * (c["bn"] // c["wn"])
        nt, epc = nw * 32, 16 // eb
        return (c["bm"] % c["wm"] == 0 and c["bn"] % c["wn"] == 0 and c["wn"] % 16 == 0
                and 1 <= nw <= 8 and c["bk"] % 16 == 0
                and (c["bm"] * c["bk"] // epc) % nt == 0 and (c["bn"] * c["bk"] // epc) % nt == 0
                and smem_bytes(c, eb) <= SMEM_BYTES)
    return ok


def smem_bytes(config, eb: int) -> int:
    """Shared memory of the stages: stages x bk x (bm + bn) elements."""
    return config["stages"] * config["bk"] * (config["bm"] + config["bn"]) * eb


def mma_space(eb: int, small: bool) -> ConfigSpace:
    """Block tile bm x bn x bk, warp tile wm x wn (16 x 8 mma tiles), stages cp.async stages;
    pruned to what fits 48 KiB of shared memory and 8 warps. The twin's default (``small``)
    is small: its emulated warps are slow (the CUDA defaults can be forced on it)."""
    if small:
        default = {"bm": 32, "bn": 32, "bk": 32, "wm": 16, "wn": 16, "stages": 2}
    elif eb == 4:  # 64 x 128 x 16 float32, 4 stages: 48 KiB; 32 x 32 warp tiles (a 64 x 32
        # one, with TF32's wider fragments, needs 164-180 registers: one block per SM)
        default = {"bm": 64, "bn": 128, "bk": 16, "wm": 32, "wn": 32, "stages": 4}
    else:  # 128 x 128 x 32 halves, 3 stages: 48 KiB
        default = {"bm": 128, "bn": 128, "bk": 32, "wm": 64, "wn": 32, "stages": 3}
    knobs = {"bm": (32, 64, 128, 256), "bn": (32, 64, 128, 256), "bk": (16, 32, 64),
             "wm": (16, 32, 64), "wn": (16, 32, 64), "stages": (2, 3, 4)}
    return ConfigSpace(knobs, default, constraint=_ok(eb))


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
    s.add(decl, PLEVEL_TWIN if twin else PLEVEL_CUDA, info=info,
          condition=None if twin else condition(p, eb, min_rows),
          fixed=dict(common, kind=kind, EB=eb), space=mma_space(eb, twin or target.on_cpu))


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


def _tile(params, config, operand: str):
    eb = params["EB"]
    k_major = params["a_k_major" if operand == "A" else "b_k_major"]
    rows = config["bm" if operand == "A" else "bn"]
    row_elems = config["bk"] if k_major else rows
    return k_major, row_elems * eb // 16


def smem_requests(params, config) -> list:
    """Per-lane byte addresses (within one operand's stage 0) of warp 0's first request of each
    shared-memory access of the core: the 16-byte cp.async stores of A and B and the ldmatrix.x4
    reads of A and B, evaluated with the kernel's own swizzle (gpucg.codegen.warp.swizzle)."""
    out = []
    nt = (config["bm"] // config["wm"]) * (config["bn"] // config["wn"]) * 32
    for operand in ("A", "B"):
        k_major, cpr = _tile(params, config, operand)
        at = [(q // cpr) * cpr * 16 + swizzle(q // cpr, q % cpr, cpr) * 16 for q in range(32)]
        out.append(Request(f"cp.async {operand}", 16, tuple(at) if nt >= 32 else ()))
        lanes = []
        for lane in range(32):
            j, r8 = lane >> 3, lane & 7
            if operand == "A":
                r, c = ((((j & 1) << 3) + r8, j >> 1) if k_major
                        else (((j >> 1) << 3) + r8, j & 1))
            else:
                r, c = ((((j >> 1) << 3) + r8, j & 1) if k_major
                        else (((j & 1) << 3) + r8, j >> 1))
            lanes.append(r * cpr * 16 + swizzle(r, c, cpr) * 16)
        out.append(Request(f"ldmatrix {operand}", 16, tuple(lanes)))
    return out
