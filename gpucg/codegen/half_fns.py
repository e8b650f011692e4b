"""The 16-bit float conversions a kernel defines when it loads or stores float16 or bfloat16
(the Dialect fields half_load_fn, half_store_fn, bf16_store_fn name these texts)."""

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
