"""The 16-bit float conversions a kernel defines when it loads or stores float16 or bfloat16
(the Dialect fields half_load_fn, half_store_fn, bf16_store_fn name these texts), and how a
float is rounded to either format in a register (Dialect.rounding)."""

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Rounding:
    """A float rounded to float16 or bfloat16 and back to float, in a register (what a store
    then a load gives): ``{value}`` spellings per format, and the helper float16's needs beyond
    the load and store ones (the kernel defines those: Dialect.half_helpers)."""

    float16: str
    bfloat16: str
    float16_fn: str = ""

    def round(self, value: str, fmt) -> str:
        """``value`` rounded to ``fmt`` ("float16", "bfloat16"); as is for anything else."""
        return getattr(self, fmt).format(value=value) if fmt in ("float16", "bfloat16") \
            else value

    def helpers(self, fmt) -> str:
        """The helper :meth:`round` needs for ``fmt``, if any."""
        return self.float16_fn if fmt == "float16" else ""


CUDA_ROUNDING = Rounding("gpucg_h2f(gpucg_f2h({value}))",
                         "__uint_as_float((unsigned int)gpucg_f2bf({value}) << 16)")
OPENCL_ROUNDING = Rounding("gpucg_round_h({value})", "as_float((uint)gpucg_f2bf({value}) << 16)",
                           OPENCL_ROUND_H)
