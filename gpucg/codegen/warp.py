"""Warp-level operations: mma.sync, ldmatrix and cp.async, spelled for CUDA and emulated for OpenCL.

A template writes ``{{ d.mma("f16", "acc", "af", "bf") }}`` and never tests the backend: the
Dialect holds one of the two objects below. CUDA gets the PTX instructions as inline asm (no
mma.h, no cuda_pipeline.h: NVRTC compiles them for sm_80 and sm_90 with no header). OpenCL gets
an emulation for a "warp" of 32 consecutive work-items through local memory, written from the
PTX ISA's fragment tables (quoted beside :data:`_OPENCL_MMA`), so that the twin runs the CUDA
kernel's loads, swizzles, fragment indexing and epilogue on PoCL and under Oclgrind. Every
emulated operation holds barriers: it must be called by every work-item of the work-group
(work-group uniform control flow), as PoCL 3.1 and Oclgrind have no sub-group functions.

Registers are 32-bit unsigned ints: an f16/bf16 fragment register holds two 16-bit elements
(the lower-indexed element in the low half), a tf32 one holds one float's bits. Shared tiles
are arrays of 16-bit units; ``off`` arguments count those units.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError
from .mma_atom import SCRATCH_WORDS, atom, cuda_mma, opencl_mma
from .shuffle import CudaShuffles, OpenCLShuffles

LDMATRIX_NUMS = (1, 2, 4)


def _kind(kind: str) -> str:
    return atom(kind).kind


def _variants(ldmatrix) -> list:
    """The (num, trans) ldmatrix variants a kernel uses: True for all, else an iterable."""
    if ldmatrix is True:
        return [(n, t) for n in LDMATRIX_NUMS for t in (False, True)]
    out = []
    for num, trans in ldmatrix or ():
        if (_num(num), bool(trans)) not in out:
            out.append((num, bool(trans)))
    return out


def _sizes(cp_async) -> list:
    """The cp.async sizes a kernel uses: True for all, else an iterable of 4, 8, 16."""
    sizes = (4, 8, 16) if cp_async is True else sorted(set(cp_async or ()))
    for n in sizes:
        if n not in (4, 8, 16):
            raise DTypeError(f"cp.async copies 4, 8 or 16 bytes, not {n}")
    return list(sizes)


def _num(num: int) -> int:
    if num not in LDMATRIX_NUMS:
        raise DTypeError(f"ldmatrix num={num!r}; allowed: 1, 2, 4")
    return num


# -- CUDA: the instructions --------------------------------------------------------------------

_CUDA_SMEM_ADDR = """\
/* the 32-bit shared-state-space address of a generic pointer into shared memory */
__device__ __forceinline__ unsigned gpucg_smem_addr(const void* p)
{
    unsigned s;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
}
"""
_CUDA_GMEM_ADDR = """\
/* the global-state-space address of a generic pointer into global memory (cp.async's source) */
__device__ __forceinline__ unsigned long long gpucg_gmem_addr(const void* p)
{
    unsigned long long g;
    asm("cvta.to.global.u64 %0, %1;" : "=l"(g) : "l"(p));
    return g;
}
"""


_CUDA_TF32 = """\
/* float32 fragment registers rounded to TF32 in place: to nearest, ties away */
__device__ __forceinline__ void gpucg_to_tf32(unsigned* r, int n)
{
    for (int i = 0; i < n; ++i)
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r[i]) : "f"(__uint_as_float(r[i])));
}
"""


def _cuda_mma(kind: str) -> str:
    return (_CUDA_TF32 if kind == "tf32" else "") + cuda_mma(atom(kind))


def _cuda_ldmatrix(num: int, trans: bool) -> str:
    regs = ", ".join(f"%{i}" for i in range(num))
    outs = ", ".join(f"\"=r\"(r[{i}])" for i in range(num))
    tr = ".trans" if trans else ""
    return (f"__device__ __forceinline__ void gpucg_ldmatrix_x{num}{'_trans' if trans else ''}"
            "(unsigned* r, const void* row)\n{\n"
            f"    asm volatile(\"ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16 {{ {regs} }}, "
            f"[%{num}];\" : {outs} : \"r\"(gpucg_smem_addr(row)) : \"memory\");\n}}\n")


def _cuda_cp_async(n: int) -> str:
    cache = "cg" if n == 16 else "ca"  # .cg (L2 only) takes 16 bytes alone
    return (f"/* {n} bytes global -> shared, asynchronously; ok == 0 writes zeros and reads "
            "nothing (src-size 0) */\n"
            f"__device__ __forceinline__ void gpucg_cp_async{n}(void* dst, const void* src, "
            "int ok)\n{\n"
            f"    asm volatile(\"cp.async.{cache}.shared.global [%1], [%0], {n}, %2;\" :: "
            f"\"l\"(gpucg_gmem_addr(src)), \"r\"(gpucg_smem_addr(dst)), \"r\"(ok ? {n} : 0) : \"memory\");\n}}\n")


@dataclass(frozen=True)
class CudaWarp(CudaShuffles):
    """The PTX instructions as inline asm (shuffles: gpucg/codegen/shuffle.py)."""

    unroll: str = "#pragma unroll"
    #: two floats as a register of two float16 bits (the store helper's); a float's bits
    pack_f16: str = "((unsigned)gpucg_f2h({a}) | ((unsigned)gpucg_f2h({b}) << 16))"
    float_bits: str = "__float_as_uint({x})"

    def helpers(self, mma=(), ldmatrix=False, cp_async=False, pack=False) -> str:
        variants, sizes = _variants(ldmatrix), _sizes(cp_async)
        parts = [_CUDA_SMEM_ADDR] if variants or sizes else []
        parts += [_cuda_mma(_kind(k)) for k in mma]
        parts += [_cuda_ldmatrix(n, t) for n, t in variants]
        parts += [_CUDA_GMEM_ADDR] if sizes else []
        parts += [_cuda_cp_async(n) for n in sizes]
        return "\n".join(parts)

    def setup(self, nwarps: int, tid: str, words: int = SCRATCH_WORDS, ids=()) -> str:
        """Only the ids the kernel's operations name (``lane``, ``warp``): no scratch."""
        decl = {"lane": f"const int gpucg_lane = (int)({tid}) & 31;",
                "warp": f"const int gpucg_warp = (int)({tid}) >> 5;"}
        return "\n".join(decl[i] for i in ids)

    def bounds(self, threads: int, blocks: int) -> str:
        return f" __launch_bounds__({int(threads)}, {int(blocks)})"

    def smem(self, name: str, units: int) -> str:
        return f"__shared__ __align__(16) unsigned short {name}[{units}];"

    def mma(self, kind: str, c: str, a: str, b: str) -> str:
        return f"gpucg_mma_{_kind(kind)}({c}, {a}, {b});"

    def to_tf32(self, regs: str, n: int) -> str:
        return f"gpucg_to_tf32({regs}, {int(n)});"

    def store2(self, ptr: str, index: str, a: str, b: str, half: bool) -> str:
        if half:
            return (f"*(unsigned*)({ptr} + {index}) = (unsigned)gpucg_f2h({a}) | "
                    f"((unsigned)gpucg_f2h({b}) << 16);")
        return f"*(float2*)({ptr} + {index}) = make_float2({a}, {b});"

    def ldmatrix(self, regs: str, num: int, trans: bool, smem: str, off: str) -> str:
        return (f"gpucg_ldmatrix_x{_num(num)}{'_trans' if trans else ''}({regs}, "
                f"{smem} + {off});")

    def cp_async(self, smem: str, off: str, src: str, nbytes: int, ok: str) -> str:
        if nbytes not in (4, 8, 16):
            raise DTypeError(f"cp.async copies 4, 8 or 16 bytes, not {nbytes}")
        return f"gpucg_cp_async{nbytes}({smem} + {off}, {src}, {ok});"

    def commit(self) -> str:
        return 'asm volatile("cp.async.commit_group;" ::: "memory");'

    def wait(self, n: int) -> str:
        return f'asm volatile("cp.async.wait_group {int(n)};" ::: "memory");'


# -- OpenCL: the emulation ---------------------------------------------------------------------

_OPENCL_TF32 = """\
/* float bits rounded to TF32 as cvt.rna.tf32.f32: 10 mantissa bits, nearest, ties away */
static inline uint gpucg_tf32(uint u)
{
    return (u & 0x7F800000u) == 0x7F800000u ? u : (u + 0x1000u) & 0xFFFFE000u;
}
static inline void gpucg_to_tf32(uint* r, int n)
{
    for (int i = 0; i < n; ++i)
        r[i] = gpucg_tf32(r[i]);
}
"""

def _opencl_mma(kind: str) -> str:
    return (_OPENCL_TF32 if kind == "tf32" else "") + opencl_mma(atom(kind))


#: The emulated ldmatrix (PTX ISA, "ldmatrix"): lane i supplies the address of row i % 8 of
#: matrix i / 8 (lanes 0-7 for .x1, 0-15 for .x2, 0-31 for .x4); register j of lane t receives
#: elements (t / 4, 2 * (t % 4)) and (t / 4, 2 * (t % 4) + 1) of matrix j, the first in its low
#: half. With .trans it receives those elements of the transposed matrix: (row 2 * (t % 4),
#: col t / 4) and (row 2 * (t % 4) + 1, col t / 4) of the matrix as stored.
_OPENCL_LDMATRIX = """\
/* emulated ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16; off: this lane's row, in 16-bit units */
static inline void gpucg_ldmatrix_x{num}{suffix}(__local uint* ws, int lane, uint* r, __local const ushort* smem, int off)
{{
    ws[lane] = (uint)off;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < {num}; ++j) {{
{body}
        r[j] = (uint)lo | ((uint)hi << 16);
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
}}
"""
_LDM_PLAIN = """\
        const int p = (int)ws[j * 8 + (lane >> 2)] + 2 * (lane & 3);
        const ushort lo = smem[p], hi = smem[p + 1];"""
_LDM_TRANS = """\
        const ushort lo = smem[(int)ws[j * 8 + 2 * (lane & 3)] + (lane >> 2)];
        const ushort hi = smem[(int)ws[j * 8 + 2 * (lane & 3) + 1] + (lane >> 2)];"""


def _opencl_ldmatrix(num: int, trans: bool) -> str:
    return _OPENCL_LDMATRIX.format(num=num, tr=".trans" if trans else "",
                                   suffix="_trans" if trans else "",
                                   body=_LDM_TRANS if trans else _LDM_PLAIN)


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

    def helpers(self, mma=(), ldmatrix=False, cp_async=False, pack=False) -> str:
        _sizes(cp_async)  # copies need no helper here
        parts = [_OPENCL_PACK_F16] if pack else []
        parts += [_opencl_mma(_kind(k)) for k in mma]
        parts += [_opencl_ldmatrix(n, t) for n, t in _variants(ldmatrix)]
        return "\n".join(parts)

    def bounds(self, threads: int, blocks: int) -> str:
        return ""

    def setup(self, nwarps: int, tid: str, words: int = SCRATCH_WORDS, ids=()) -> str:
        """Lane, warp and the scratch (every emulated operation names them): ``words`` 32-bit words a warp: :data:`SCRATCH_WORDS` for mma and ldmatrix,
        :data:`~gpucg.codegen.shuffle.SHFL_WORDS` for shuffles alone."""
        words = int(words)
        return (f"__local uint gpucg_scratch[{int(nwarps) * words}] __attribute__((aligned(8)));\n"
                f"const int gpucg_lane = (int)({tid}) & 31, gpucg_warp = (int)({tid}) >> 5;\n"
                f"__local uint* gpucg_ws = gpucg_scratch + gpucg_warp * {words};")

    def smem(self, name: str, units: int) -> str:
        return f"__local ushort {name}[{units}] __attribute__((aligned(16)));"

    def mma(self, kind: str, c: str, a: str, b: str) -> str:
        return f"gpucg_mma_{_kind(kind)}(gpucg_ws, gpucg_lane, {c}, {a}, {b});"

    def to_tf32(self, regs: str, n: int) -> str:
        return f"gpucg_to_tf32({regs}, {int(n)});"

    def store2(self, ptr: str, index: str, a: str, b: str, half: bool) -> str:
        fn = "vstore_half2_rte" if half else "vstore2"
        return f"{fn}((float2)({a}, {b}), 0, {ptr} + {index});"

    def ldmatrix(self, regs: str, num: int, trans: bool, smem: str, off: str) -> str:
        return (f"gpucg_ldmatrix_x{_num(num)}{'_trans' if trans else ''}(gpucg_ws, gpucg_lane, "
                f"{regs}, {smem}, {off});")

    def cp_async(self, smem: str, off: str, src: str, nbytes: int, ok: str) -> str:
        """A plain copy (zeros where not ok); its wait is a barrier."""
        vt = {4: "uint", 8: "uint2", 16: "uint4"}.get(nbytes)
        if vt is None:
            raise DTypeError(f"cp.async copies 4, 8 or 16 bytes, not {nbytes}")
        zero = "0u" if nbytes == 4 else f"({vt})(0u)"
        return (f"*(__local {vt}*)({smem} + {off}) = {_p(ok)} ? "
                f"*(__global const {vt}*)({src}) : {zero};")

    def commit(self) -> str:
        return ""

    def wait(self, n: int) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"


CUDA_WARP = CudaWarp()
OPENCL_WARP = OpenCLWarp()


def _p(expr) -> str:
    """``expr`` parenthesized unless it is one name or number."""
    text = str(expr)
    return text if text.replace("_", "a").isalnum() else f"({text})"
