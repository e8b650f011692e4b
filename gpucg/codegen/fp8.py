"""The 8-bit float formats (OCP FP8: float8_e4m3fn, float8_e5m2) as kernels store them.

A kernel keeps an FP8 value as its 8 bits in memory and as a float in registers, as it does
float16 and bfloat16 (gpucg/half.py). The conversions follow ml_dtypes bit for bit, which is
what the numpy target computes:

- to float: exact; a NaN becomes the float NaN of its sign.
- from float: rounded to nearest, ties to even, subnormals included; a NaN gives the format's
  NaN of its sign (e4m3fn S.1111.111, e5m2 S.11111.10); a magnitude that rounds beyond the
  largest finite value overflows: to NaN in e4m3fn (no infinities: above 464, infinities too),
  to infinity in e5m2 (from 61440). A float64 value is rounded to float32 first, as ml_dtypes
  does. (torch 2.13's CPU ``.to(float8_e4m3fn)`` saturates instead, +-inf and all, to +-448:
  in-range values agree.)

Each dialect spells the two conversions as helper functions (``gpucg_e4m3_to_f``,
``gpucg_f_to_e4m3``, ...) in integer arithmetic; CUDA builds on architectures whose capability
record has native FP8 (gpucg/arch.py, sm_89 on) convert with the PTX instructions instead,
``cvt.rn.satfinite.e4m3x2.f32`` and ``cvt.rn.f16x2.e4m3x2`` (e5m2 likewise), behind an
``__CUDA_ARCH__`` guard: the special cases above are decided before the instruction, so
``.satfinite``'s clamping never shows.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .half_fns import StorageFormat


@dataclass(frozen=True)
class Fp8Format:
    """One FP8 format: exponent and mantissa bits, bias, and whether the top exponent holds
    infinities (e5m2, IEEE-like) or only the NaN of an all-ones code (e4m3fn)."""

    name: str
    tag: str
    ebits: int
    mbits: int
    bias: int
    has_inf: bool

    @property
    def nan_code(self) -> int:
        """The positive NaN ml_dtypes writes (the sign bit gives the negative one)."""
        return 0x7E if self.has_inf else 0x7F

    @property
    def max_code(self) -> int:
        """The largest finite value's code."""
        return (0x7F - (1 << self.mbits)) if self.has_inf else 0x7E

    @property
    def overflow_code(self) -> int:
        """What a magnitude beyond the largest finite value becomes: infinity, or NaN."""
        return 0x7F & ~((1 << self.mbits) - 1) if self.has_inf else self.nan_code

    def value(self, code: int) -> float:
        """The value of an 8-bit code (NaN for the NaN codes)."""
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> self.mbits) & ((1 << self.ebits) - 1), code & ((1 << self.mbits) - 1)
        top = (1 << self.ebits) - 1
        if e == top and (self.has_inf or m == (1 << self.mbits) - 1):
            return sign * float("inf") if self.has_inf and m == 0 else float("nan")
        if e == 0:
            return sign * m * 2.0 ** (1 - self.bias - self.mbits)
        return sign * (1 + m / (1 << self.mbits)) * 2.0 ** (e - self.bias)

    @property
    def max_value(self) -> float:
        return self.value(self.max_code)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mbits)

    @property
    def overflow_bits(self) -> int:
        """The smallest float32 magnitude's bits that overflows: the midpoint between the
        largest finite value and the next step, included when the tie rounds up (the largest
        value's mantissa is odd)."""
        ulp = 2.0 ** (int(self.max_value).bit_length() - 1 - self.mbits)
        mid = struct.unpack("<I", struct.pack("<f", self.max_value + ulp / 2))[0]
        return mid if self.max_code & 1 else mid + 1


FORMATS = {f.name: f for f in (Fp8Format("float8_e4m3fn", "e4m3", 4, 3, 7, False),
                               Fp8Format("float8_e5m2", "e5m2", 5, 2, 15, True))}


#: the first __CUDA_ARCH__ with the FP8 conversions: sm_89, the first record of gpucg/arch.py
#: with native "fp8" (tests/test_fp8.py holds the two equal; codegen sits below arch.py)
NATIVE_CUDA_ARCH = 890


@dataclass(frozen=True)
class Fp8Spelling:
    """How a kernel language writes the conversions' pieces."""

    fn: str          # helper function qualifiers
    u32: str
    u8: str
    bits: str        # a float's bits as u32: {x}
    as_float: str    # u32 bits as a float: {x}
    native: bool     # whether PTX instructions exist behind an __CUDA_ARCH__ guard


CUDA_SPELLING = Fp8Spelling("__device__ __forceinline__", "unsigned int", "unsigned char",
                            "__float_as_uint({x})", "__uint_as_float({x})", True)
OPENCL_SPELLING = Fp8Spelling("static inline", "uint", "uchar", "as_uint({x})",
                              "as_float({x})", False)


def _guarded(sp: Fp8Spelling, native: str, portable: str) -> str:
    if not sp.native:
        return portable
    return (f"    #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= {NATIVE_CUDA_ARCH}\n{native}"
            f"    #else\n{portable}    #endif\n")


def decode_fn(f: Fp8Format, sp: Fp8Spelling) -> str:
    """The helper ``float gpucg_<tag>_to_f(u32 code)`` (code < 256)."""
    u, m, top = sp.u32, f.mbits, (1 << f.ebits) - 1
    special = (f"if (e == {top}U) return {sp.as_float.format(x='s | (m ? 0x7FC00000U : 0x7F800000U)')};"
               if f.has_inf else
               f"if (e == {top}U && m == {(1 << m) - 1}U) return {sp.as_float.format(x='s | 0x7FC00000U')};")
    sub = sp.as_float.format(x=f"s | {sp.bits.format(x=f'(float)m * {f.min_subnormal!r}f')}")
    portable = (f"    const {u} s = (b & 0x80U) << 24, e = (b >> {m}) & {top}U, m = b & {(1 << m) - 1}U;\n"
                f"    {special}\n"
                f"    if (e == 0U) return {sub};\n"
                f"    return {sp.as_float.format(x=f's | ((e + {127 - f.bias}U) << 23) | (m << {23 - m})')};\n")
    native = (f"    unsigned int h; float r;\n"
              f"    asm(\"cvt.rn.f16x2.{f.tag}x2 %0, %1;\" : \"=r\"(h) : \"h\"((unsigned short)b));\n"
              f"    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(r) : \"h\"((unsigned short)h));\n"
              f"    return r;\n")
    return (f"/* {f.name} bits to float: exact (a NaN: the float NaN of its sign) */\n"
            f"{sp.fn} float gpucg_{f.tag}_to_f({u} b)\n{{\n{_guarded(sp, native, portable)}}}\n")


def encode_fn(f: Fp8Format, sp: Fp8Spelling) -> str:
    """The helper ``u8 gpucg_f_to_<tag>(float x)``: round to nearest even, ml_dtypes' NaN and
    overflow (see the module's docstring)."""
    u, m = sp.u32, f.mbits
    over = "infinity" if f.has_inf else "NaN"
    min_normal = (128 - f.bias) << 23
    # subnormals: the magnitude in units of the smallest subnormal, rounded to nearest even
    portable = (
        f"    if (a >= 0x{min_normal:08X}U)\n"
        f"        return ({sp.u8})(s | (((a + 0x{(1 << (22 - m)) - 1:X}U + ((a >> {23 - m}) & 1U)) "
        f">> {23 - m}) - {(127 - f.bias) << m}U));\n"
        f"    {{\n"
        f"        const {u} e = a >> 23, mm = (a & 0x7FFFFFU) | (e ? 0x800000U : 0U);\n"
        f"        const {u} sh = e >= {151 - f.bias - m - 31}U ? {151 - f.bias - m}U - (e ? e : 1U) : 31U;\n"
        f"        const {u} q = mm >> sh, rem = mm & ((1U << sh) - 1U), mid = 1U << (sh - 1U);\n"
        f"        return ({sp.u8})(s | (q + (rem > mid || (rem == mid && (q & 1U)))));\n"
        f"    }}\n")
    native = (f"    unsigned short r;\n"
              f"    asm(\"cvt.rn.satfinite.{f.tag}x2.f32 %0, %1, %2;\" : \"=h\"(r) : \"f\"(0.0f), \"f\"(x));\n"
              f"    return ({sp.u8})(s | (r & 0x7FU));\n")
    return (f"/* float to {f.name} bits, rounded to nearest even; a NaN gives the NaN of its sign,\n"
            f"   a magnitude rounding beyond {f.max_value:g} (infinities too) {over} */\n"
            f"{sp.fn} {sp.u8} gpucg_f_to_{f.tag}(float x)\n{{\n"
            f"    const {u} w = {sp.bits.format(x='x')}, s = (w >> 24) & 0x80U, a = w & 0x7FFFFFFFU;\n"
            f"    if (a > 0x7F800000U) return ({sp.u8})(s | 0x{f.nan_code:02X}U);\n"
            f"    if (a >= 0x{f.overflow_bits:08X}U) return ({sp.u8})(s | 0x{f.overflow_code:02X}U);\n"
            f"{_guarded(sp, native, portable)}}}\n")


def storage_formats(sp: Fp8Spelling) -> dict:
    """dtype name -> StorageFormat for each FP8 format in one dialect's spelling."""
    out = {}
    for name, f in FORMATS.items():
        out[name] = StorageFormat(
            ctype=sp.u8, load=f"gpucg_{f.tag}_to_f({{ptr}}[{{index}}])",
            store=f"{{ptr}}[{{index}}] = gpucg_f_to_{f.tag}({{value}});",
            load_fn=decode_fn(f, sp), store_fn=encode_fn(f, sp),
            from_bits=f"gpucg_{f.tag}_to_f({{bits}})", to_bits=f"gpucg_f_to_{f.tag}({{value}})")
    return out


CUDA_FORMATS = storage_formats(CUDA_SPELLING)
OPENCL_FORMATS = storage_formats(OPENCL_SPELLING)
