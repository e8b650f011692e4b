"""The 16-bit float conversions a kernel defines when it loads or stores float16 or bfloat16,
and each dialect's storage formats (:class:`StorageFormat`: the 16-bit ones here, the 8-bit
ones in gpucg/codegen/fp8.py) that Dialect.storage/load/store/half_helpers read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StorageFormat:
    """How a dialect keeps one narrow float format in memory: the element type, a load as a
    float (``{ptr}``, ``{index}``), a store from a float (``{value}`` too), the helper
    functions each needs, (for packed vector accesses) the conversions of the element's
    bits (``{bits}``) and to them, and a float ``{value}`` rounded to the format and back in
    a register (what a store then a load gives) with the helper that needs beyond those of
    the load and the store ("": not offered)."""

    ctype: str
    load: str
    store: str
    load_fn: str = ""
    store_fn: str = ""
    from_bits: str = ""
    to_bits: str = ""
    round: str = ""
    round_fn: str = ""

CUDA_H2F = (
    "/* float16 bits to float: one PTX cvt (no cuda_fp16.h) */\n"
    "__device__ __forceinline__ float gpucg_h2f(unsigned short h)\n{\n"
    "    float f;\n"
    "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "    return f;\n}\n")

CUDA_F2H = (
    "/* float to float16 bits, rounded to nearest even: one PTX cvt */\n"
    "__device__ __forceinline__ unsigned short gpucg_f2h(float f)\n{\n"
    "    unsigned short h;\n"
    "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "    return h;\n}\n")

CUDA_F2BF = (
    "/* float to bfloat16 bits, rounded to nearest even (NaN stays NaN): one PTX cvt\n"
    "   (sm_80 and later) */\n"
    "__device__ __forceinline__ unsigned short gpucg_f2bf(float f)\n{\n"
    "    unsigned short h;\n"
    "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "    return h;\n}\n")

OPENCL_F2BF = (
    "/* float to bfloat16 bits, rounded to nearest even; a NaN becomes the quiet NaN of its\n"
    "   sign (adding the rounding bias could carry it into infinity) */\n"
    "static inline ushort gpucg_f2bf(float f)\n{\n"
    "    const uint u = as_uint(f);\n"
    "    if ((u & 0x7FFFFFFFU) > 0x7F800000U) return (ushort)(((u >> 16) & 0x8000U) | 0x7FC0U);\n"
    "    return (ushort)((u + 0x7FFFU + ((u >> 16) & 1U)) >> 16);\n}\n")


OPENCL_ROUND_H = (
    "/* float rounded to float16 and back (nearest even), through a private half: no\n"
    "   cl_khr_fp16 needed */\n"
    "static inline float gpucg_round_h(float f)\n{\n"
    "    ushort h;\n"
    "    vstore_half_rte(f, 0, (half*)&h);\n"
    "    return vload_half(0, (const half*)&h);\n}\n")


CUDA_FORMATS = {
    "float16": StorageFormat("unsigned short", "gpucg_h2f({ptr}[{index}])",
                             "{ptr}[{index}] = gpucg_f2h({value});", CUDA_H2F, CUDA_F2H,
                             round="gpucg_h2f(gpucg_f2h({value}))"),
    "bfloat16": StorageFormat("unsigned short",
                              "__uint_as_float((unsigned int){ptr}[{index}] << 16)",
                              "{ptr}[{index}] = gpucg_f2bf({value});", "", CUDA_F2BF,
                              round="__uint_as_float((unsigned int)gpucg_f2bf({value}) << 16)"),
}
# vload_half/vstore_half are core OpenCL (unlike half arithmetic): no helper, no cl_khr_fp16
OPENCL_FORMATS = {
    "float16": StorageFormat("half", "vload_half({index}, {ptr})",
                             "vstore_half_rte({value}, {index}, {ptr});",
                             round="gpucg_round_h({value})", round_fn=OPENCL_ROUND_H),
    "bfloat16": StorageFormat("ushort", "as_float((uint){ptr}[{index}] << 16)",
                              "{ptr}[{index}] = gpucg_f2bf({value});", "", OPENCL_F2BF,
                              round="as_float((uint)gpucg_f2bf({value}) << 16)"),
}
