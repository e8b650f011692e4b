"""The tile layer's shared-memory operations, on 32-bit byte addresses of one dynamic block.

A tile kernel's shared memory is one dynamic block (gpucg.codegen.smem.SmemPlan): CUDA declares
it ``extern __shared__ __align__(n) unsigned char gpucg_smem[]`` and addresses it in the shared
state space with 32-bit byte addresses (``cvta.to.shared`` once, then integer arithmetic: an
address the K loop adds a constant to is one IADD, or an immediate of the LDSM/LDGSTS itself);
OpenCL takes it as the kernel's last parameter, ``__local uchar* gpucg_smem``, and an address
is a byte offset into it. Templates write ``{{ d.tile.ldsm("af[i]", 4, false, "a_ld[ks] + rd") }}``
and never see the difference.

The OpenCL spellings are the warp emulation (gpucg/codegen/warp.py's ldmatrix table, followed
here on byte addresses): cp.async is a plain 16-byte copy whose wait is a barrier, so every
emulated operation must be called in work-group uniform control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError

_CUDA_LDSM = """\
/* ldmatrix .x{num}{tr}: this lane gives the shared address of row lane % 8 of matrix lane / 8 */
__device__ __forceinline__ void gpucg_ldsm_x{num}{suffix}(unsigned* r, unsigned addr)
{{
    asm volatile("ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16 {{ {regs} }}, [%{num}];"
        : {outs} : "r"(addr) : "memory");
}}
"""
_CUDA_CP16 = """\
/* 16 bytes global -> shared, asynchronously (L2 only); ok == 0 reads nothing and writes zeros */
__device__ __forceinline__ void gpucg_cp16(unsigned dst, const void* src, int ok)
{
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.cg.shared.global [%0], [g], 16, %2; }"
        :: "r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
"""
_CUDA_CP8 = """\
/* 8 bytes global -> shared, asynchronously; ok == 0 reads nothing and writes zeros */
__device__ __forceinline__ void gpucg_cp8(unsigned dst, const void* src, int ok)
{
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.ca.shared.global [%0], [g], 8, %2; }"
        :: "r"(dst), "l"(src), "r"(ok ? 8 : 0) : "memory");
}
"""
_CUDA_CP4 = """\
/* 4 bytes global -> shared, asynchronously; ok == 0 reads nothing and writes zeros */
__device__ __forceinline__ void gpucg_cp4(unsigned dst, const void* src, int ok)
{
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; cp.async.ca.shared.global [%0], [g], 4, %2; }"
        :: "r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
"""
_CUDA_BASE = """\
/* the 32-bit shared-state-space address of a generic pointer into shared memory */
__device__ __forceinline__ unsigned gpucg_smem_addr(const void* p)
{
    unsigned s;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
}
"""
_CUDA_LDS32 = """\
__device__ __forceinline__ unsigned gpucg_lds32(unsigned addr)
{
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
"""
_CUDA_STS16 = """\
__device__ __forceinline__ void gpucg_sts16(unsigned addr, unsigned short v)
{
    asm volatile("st.shared.b16 [%0], %1;" :: "r"(addr), "h"(v) : "memory");
}
"""
_CUDA_TF32_CHUNK = """\
/* the 16 bytes at a shared address rounded to TF32 in place (cvt.rna: nearest, ties away) */
__device__ __forceinline__ void gpucg_tf32_chunk(unsigned addr)
{
    unsigned x, y, z, w;
    asm volatile("ld.shared.v4.b32 { %0, %1, %2, %3 }, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(addr) : "memory");
    asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(x));
    asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(y));
    asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(z));
    asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(w));
    asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };" :: "r"(addr), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
"""


def _check(num: int) -> int:
    if num not in (1, 2, 4):
        raise DTypeError(f"ldmatrix loads 1, 2 or 4 matrices, not {num!r}")
    return num


@dataclass(frozen=True)
class CudaTileOps:
    """The instructions."""

    smem_param: str = ""
    base: str = "gpucg_smem_addr(gpucg_smem)"

    def smem_block(self, align: int) -> str:
        """The dynamic block's declaration in the kernel's body."""
        return f"extern __shared__ __align__({int(align)}) unsigned char gpucg_smem[];"

    def helpers(self, ldsm=(), cp=(), lds32: bool = False, sts16: bool = False,
                tf32: bool = False) -> str:
        """The device functions a kernel uses: ldmatrix (num, trans) variants, cp.async sizes
        (4, 16), the 32-bit load and the 16-bit store, the in-place TF32 rounding of a
        chunk."""
        parts = [_CUDA_BASE]
        for num, trans in sorted(set((_check(n), bool(t)) for n, t in ldsm)):
            parts.append(_CUDA_LDSM.format(
                num=num, tr=".trans" if trans else "", suffix="_trans" if trans else "",
                regs=", ".join(f"%{i}" for i in range(num)),
                outs=", ".join(f'"=r"(r[{i}])' for i in range(num))))
        parts += [_CP[n] and {16: _CUDA_CP16, 8: _CUDA_CP8, 4: _CUDA_CP4}[n]
                  for n in sorted(set(cp))]
        parts += [_CUDA_LDS32] if lds32 else []
        parts += [_CUDA_STS16] if sts16 else []
        parts += [_CUDA_TF32_CHUNK] if tf32 else []
        return "\n".join(parts)

    def ldsm(self, regs: str, num: int, trans: bool, addr: str) -> str:
        return f"gpucg_ldsm_x{_check(num)}{'_trans' if trans else ''}({regs}, {addr});"

    def cluster_dims(self, x: int, y: int = 1, z: int = 1) -> str:
        """A kernel qualifier grouping its work-groups in thread-block clusters of x * y * z
        (__cluster_dims__, sm_90 on: the capability "clusters"; the launch grid must be a
        multiple of it); OpenCL spells none (each work-group alone, a cluster of one)."""
        dims = tuple(int(v) for v in (x, y, z))
        if min(dims) < 1 or x * y * z > 16:
            raise DTypeError(f"cluster dims {dims}: positive, at most 16 blocks (8 portable)")
        return "" if dims == (1, 1, 1) else f" __cluster_dims__({dims[0]}, {dims[1]}, {dims[2]})"

    def cp(self, nbytes: int, dst: str, src: str, ok: str) -> str:
        """Copy ``nbytes`` (16, 8 or 4) from global ``src`` to shared byte address ``dst``;
        zeros where not ``ok``."""
        return f"gpucg_cp{_CP[nbytes] and nbytes}({dst}, {src}, {ok});"

    def static_smem(self, name: str, units: int) -> str:
        """A static shared array of ``units`` 16-bit units (a kernel whose tiles are not
        carved from the dynamic block), 16-byte aligned."""
        return f"__shared__ __align__(16) unsigned short {name}[{int(units)}];"

    def cp_array(self, nbytes: int, smem: str, off: str, src: str, ok: str) -> str:
        """:meth:`cp` into a static shared array at ``off`` 16-bit units."""
        return self.cp(nbytes, f"gpucg_smem_addr({smem} + {off})", src, ok)

    def lds32(self, addr: str) -> str:
        return f"gpucg_lds32({addr})"

    def sts16(self, addr: str, value: str) -> str:
        return f"gpucg_sts16({addr}, {value});"

    def tf32_chunk(self, addr: str) -> str:
        return f"gpucg_tf32_chunk({addr});"


#: The emulated ldmatrix (PTX ISA, "ldmatrix"): lane i supplies the address of row i % 8 of
#: matrix i / 8 (lanes 0-7 for .x1, 0-15 for .x2, 0-31 for .x4); register j of lane t receives
#: elements (t / 4, 2 * (t % 4)) and (t / 4, 2 * (t % 4) + 1) of matrix j, the first in its low
#: half. With .trans it receives those elements of the transposed matrix: (row 2 * (t % 4),
#: col t / 4) and (row 2 * (t % 4) + 1, col t / 4) of the matrix as stored.
_OCL_LDSM = """\
/* emulated ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16 on byte addresses (the PTX ISA's
   table: gpucg/codegen/tile_ops.py): each lane gives the address of row lane % 8 of matrix
   lane / 8 */
static inline void gpucg_ldsm_x{num}{suffix}(__local uint* ws, int lane, uint* r, __local const uchar* smem, uint addr)
{{
    __local const ushort* h = (__local const ushort*)smem;
    ws[lane] = addr >> 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < {num}; ++j) {{
{body}
        r[j] = (uint)lo | ((uint)hi << 16);
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
}}
"""
_OCL_PLAIN = """\
        const uint p = ws[j * 8 + (lane >> 2)] + 2 * (lane & 3);
        const ushort lo = h[p], hi = h[p + 1];"""
_OCL_TRANS = """\
        const ushort lo = h[ws[j * 8 + 2 * (lane & 3)] + (lane >> 2)];
        const ushort hi = h[ws[j * 8 + 2 * (lane & 3) + 1] + (lane >> 2)];"""
_OCL_TF32_CHUNK = """\
/* the 16 bytes at a local byte address rounded to TF32 in place (cvt.rna's rounding) */
static inline void gpucg_tf32_chunk(__local uchar* smem, uint addr)
{
    __local uint* p = (__local uint*)(smem + addr);
    for (int i = 0; i < 4; ++i)
        p[i] = gpucg_tf32(p[i]);
}
"""


@dataclass(frozen=True)
class OpenCLTileOps:
    """The emulation on byte offsets into the ``__local uchar* gpucg_smem`` parameter."""

    smem_param: str = ",\n    __local uchar* restrict gpucg_smem"
    base: str = "0u"

    def smem_block(self, align: int) -> str:
        return ""

    def cluster_dims(self, x: int, y: int = 1, z: int = 1) -> str:
        return ""

    def helpers(self, ldsm=(), cp=(), lds32: bool = False, sts16: bool = False,
                tf32: bool = False) -> str:
        parts = []
        for num, trans in sorted(set((_check(n), bool(t)) for n, t in ldsm)):
            parts.append(_OCL_LDSM.format(num=num, tr=".trans" if trans else "",
                                          suffix="_trans" if trans else "",
                                          body=_OCL_TRANS if trans else _OCL_PLAIN))
        parts += [_OCL_TF32_CHUNK] if tf32 else []
        return "\n".join(parts)

    def ldsm(self, regs: str, num: int, trans: bool, addr: str) -> str:
        return (f"gpucg_ldsm_x{_check(num)}{'_trans' if trans else ''}(gpucg_ws, gpucg_lane, "
                f"{regs}, gpucg_smem, {addr});")

    def cp(self, nbytes: int, dst: str, src: str, ok: str) -> str:
        return self._copy(nbytes, f"gpucg_smem + {_p(dst)}", src, ok)

    def _copy(self, nbytes: int, dst: str, src: str, ok: str) -> str:
        vt = {4: "uint", 8: "uint2", 16: "uint4"}[_CP[nbytes] and nbytes]
        zero = "0u" if nbytes == 4 else f"({vt})(0u)"
        return (f"*(__local {vt}*)({dst}) = {_p(ok)} ? "
                f"*(__global const {vt}*)({src}) : {zero};")

    def static_smem(self, name: str, units: int) -> str:
        return f"__local ushort {name}[{int(units)}] __attribute__((aligned(16)));"

    def cp_array(self, nbytes: int, smem: str, off: str, src: str, ok: str) -> str:
        return self._copy(nbytes, f"{smem} + {off}", src, ok)

    def lds32(self, addr: str) -> str:
        return f"*(__local const uint*)(gpucg_smem + {_p(addr)})"

    def sts16(self, addr: str, value: str) -> str:
        return f"*(__local ushort*)(gpucg_smem + {_p(addr)}) = {value};"

    def tf32_chunk(self, addr: str) -> str:
        return f"gpucg_tf32_chunk(gpucg_smem, {addr});"


class _Sizes(dict):
    """The copy sizes there are: 4, 8 and 16 bytes (a DTypeError for any other)."""

    def __missing__(self, n):
        raise DTypeError(f"tile copies move 4, 8 or 16 bytes, not {n!r}")


_CP = _Sizes({4: True, 8: True, 16: True})


def _p(expr) -> str:
    """``expr`` parenthesized unless it is one name or number."""
    text = str(expr).strip()
    return text if text.replace("_", "a").isalnum() else f"({text})"


CUDA_TILE = CudaTileOps()
OPENCL_TILE = OpenCLTileOps()
