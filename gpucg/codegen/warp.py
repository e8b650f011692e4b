"""Warp-level operations: mma.sync (and the cp.async group commit and wait), spelled for CUDA
and emulated for OpenCL.

A template writes ``{{ d.mma("f16", "acc", "af", "bf") }}`` and never tests the backend: the
Dialect holds one of the two objects below. CUDA gets the PTX instructions as inline asm (no
mma.h, no cuda_pipeline.h: NVRTC compiles them for sm_80 and sm_90 with no header). OpenCL gets
an emulation for a "warp" of 32 consecutive work-items through local memory, built from the
atoms' fragment maps (gpucg/codegen/mma_atom.py), so that the twin runs the CUDA kernel's
loads, swizzles, fragment indexing and epilogue on PoCL and under Oclgrind. Every emulated
operation holds barriers: it must be called by every work-item of the work-group (work-group
uniform control flow), as PoCL 3.1 and Oclgrind have no sub-group functions. The shared-memory
operations on tiles (ldmatrix, cp.async) are the tile layer's: gpucg/codegen/tile_ops.py.

Registers are 32-bit unsigned ints: an f16/bf16 fragment register holds two 16-bit elements
(the lower-indexed element in the low half), a tf32 one holds one float's bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from .mma_atom import SCRATCH_WORDS, atom, cuda_mma, opencl_mma
from .shuffle import CudaShuffles, OpenCLShuffles


def _kind(kind: str) -> str:
    return atom(kind).kind


# -- CUDA: the instructions --------------------------------------------------------------------

_CUDA_TF32 = """\
/* float32 fragment registers rounded to TF32 in place: to nearest, ties away */
__device__ __forceinline__ void gpucg_to_tf32(unsigned* r, int n)
{
    for (int i = 0; i < n; ++i)
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r[i]) : "f"(__uint_as_float(r[i])));
}
"""


@dataclass(frozen=True)
class CudaWarp(CudaShuffles):
    """The PTX instructions as inline asm (shuffles: gpucg/codegen/shuffle.py)."""

    unroll: str = "#pragma unroll"
    #: two floats as a register of two float16 bits (the store helper's); a float's bits
    pack_f16: str = "((unsigned)gpucg_f2h({a}) | ((unsigned)gpucg_f2h({b}) << 16))"
    float_bits: str = "__float_as_uint({x})"

    def helpers(self, mma=(), pack=False) -> str:
        return "\n".join((_CUDA_TF32 if k == "tf32" else "") + cuda_mma(atom(k)) for k in mma)

    def setup(self, nwarps: int, tid: str, words: int = SCRATCH_WORDS, ids=()) -> str:
        """Only the ids the kernel's operations name (``lane``, ``warp``): no scratch."""
        decl = {"lane": f"const int gpucg_lane = (int)({tid}) & 31;",
                "warp": f"const int gpucg_warp = (int)({tid}) >> 5;"}
        return "\n".join(decl[i] for i in ids)

    def bounds(self, threads: int, blocks: int) -> str:
        return f" __launch_bounds__({int(threads)}, {int(blocks)})"

    def mma(self, kind: str, c: str, a: str, b: str) -> str:
        return f"gpucg_mma_{_kind(kind)}({c}, {a}, {b});"

    def to_tf32(self, regs: str, n: int) -> str:
        return f"gpucg_to_tf32({regs}, {int(n)});"

    def store2(self, ptr: str, index: str, a: str, b: str, half: bool) -> str:
        if half:
            return (f"*(unsigned*)({ptr} + {index}) = (unsigned)gpucg_f2h({a}) | "
                    f"((unsigned)gpucg_f2h({b}) << 16);")
        return f"*(float2*)({ptr} + {index}) = make_float2({a}, {b});"

    def commit(self) -> str:
        return 'asm volatile("cp.async.commit_group;" ::: "memory");'

    def wait(self, n: int) -> str:
        return f'asm volatile("cp.async.wait_group {int(n)};" ::: "memory");'


# -- OpenCL: the emulation ---------------------------------------------------------------------

#: the one rounding to TF32 of the OpenCL twins (the tile layer's in-place chunks use it too)
OPENCL_TF32_ROUND = """\
/* float bits rounded to TF32 as cvt.rna.tf32.f32: 10 mantissa bits, nearest, ties away */
static inline uint gpucg_tf32(uint u)
{
    return (u & 0x7F800000u) == 0x7F800000u ? u : (u + 0x1000u) & 0xFFFFE000u;
}
"""
_OPENCL_TF32 = OPENCL_TF32_ROUND + """\
static inline void gpucg_to_tf32(uint* r, int n)
{
    for (int i = 0; i < n; ++i)
        r[i] = gpucg_tf32(r[i]);
}
"""


_OPENCL_PACK_F16 = """\
/* two floats as float16 bits (rounded to nearest even) in one register, a in the low half */
static inline uint gpucg_pack_f16(float a, float b)
{ ushort2 h; vstore_half2_rte((float2)(a, b), 0, (half*)&h); return as_uint(h); }
"""


@dataclass(frozen=True)
class OpenCLWarp(OpenCLShuffles):
    """The emulation: warps of 32 consecutive work-items, registers exchanged through local
    scratch (``gpucg_ws``: this warp's :data:`SCRATCH_WORDS` words; ``gpucg_lane``)."""

    unroll: str = ""
    pack_f16: str = "gpucg_pack_f16({a}, {b})"
    float_bits: str = "as_uint({x})"

    def helpers(self, mma=(), pack=False) -> str:
        parts = [_OPENCL_PACK_F16] if pack else []
        parts += [(_OPENCL_TF32 if k == "tf32" else "") + opencl_mma(atom(k)) for k in mma]
        return "\n".join(parts)

    def bounds(self, threads: int, blocks: int) -> str:
        return ""

    def setup(self, nwarps: int, tid: str, words: int = SCRATCH_WORDS, ids=()) -> str:
        """Lane, warp and the scratch (every emulated operation names them): ``words`` 32-bit
        words a warp: :data:`SCRATCH_WORDS` for mma and ldmatrix,
        :data:`~gpucg.codegen.shuffle.SHFL_WORDS` for shuffles alone."""
        words = int(words)
        return (f"__local uint gpucg_scratch[{int(nwarps) * words}] __attribute__((aligned(8)));\n"
                f"const int gpucg_lane = (int)({tid}) & 31, gpucg_warp = (int)({tid}) >> 5;\n"
                f"__local uint* gpucg_ws = gpucg_scratch + gpucg_warp * {words};")

    def mma(self, kind: str, c: str, a: str, b: str) -> str:
        return f"gpucg_mma_{_kind(kind)}(gpucg_ws, gpucg_lane, {c}, {a}, {b});"

    def to_tf32(self, regs: str, n: int) -> str:
        return f"gpucg_to_tf32({regs}, {int(n)});"

    def store2(self, ptr: str, index: str, a: str, b: str, half: bool) -> str:
        fn = "vstore_half2_rte" if half else "vstore2"
        return f"{fn}((float2)({a}, {b}), 0, {ptr} + {index});"

    def commit(self) -> str:
        return ""

    def wait(self, n: int) -> str:
        """cp.async's copies are plain copies here: waiting is a barrier."""
        return "barrier(CLK_LOCAL_MEM_FENCE);"


CUDA_WARP = CudaWarp()
OPENCL_WARP = OpenCLWarp()
