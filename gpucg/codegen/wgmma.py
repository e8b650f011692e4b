"""Warpgroup MMA atoms (Hopper's ``wgmma.mma_async``, sm_90a): one definition of each shape,
its fragments, its CUDA instruction and its OpenCL emulation.

A warpgroup is 128 threads (4 consecutive warps, the first at a warp index divisible by 4).
One ``wgmma.mma_async.sync.aligned.m64nNkK`` computes D (64 x N, float32) = A (64 x K) * B
(K x N) + D, K = 16 for f16/bf16, 8 for tf32, 32 for e4m3/e5m2, N a multiple of 8 up to 256.
B always comes from shared memory through a matrix descriptor; A from shared memory (a
descriptor: the "SS" form) or from registers (the "RS" form, the layout of
gpucg.codegen.hopper_layouts.a_fragment). D's layout is hopper_layouts.accumulator: thread t
holds N / 2 floats. The descriptors and their canonical layouts (no, 32-, 64- and 128-byte
swizzles, K- or MN-major) are hopper_layouts' functions; f16 and bf16 operands may be
MN-major (the instruction's transpose flags), tf32 and FP8 only K-major (the ISA allows no
transpose for them).

CUDA gets the instruction as inline PTX: ``gpucg_wgmma_<atom>(float* d, desc_a or regs,
desc_b, int scale_d)`` (scale_d 0: D = A * B, the accumulators' old values ignored), with
``wgmma.fence``, ``commit_group`` and ``wait_group`` (:data:`CUDA_SYNC`). The OpenCL twin
(:func:`opencl_wgmma`) runs the same call for a warpgroup of 128 consecutive work-items: each
computes its accumulator elements, reading A and B from the local-memory block at the
addresses the descriptor gives, through the same descriptor arithmetic (start, LBO, SBO and the
swizzle code decoded from the 64-bit value, canonical_offset, the swizzle's XOR); the RS form
exchanges A's registers through the warps' scratch, so it holds barriers (work-group uniform
control flow), the SS form none. The emulation reads operands when the instruction is issued:
kernels keep a stage unwritten until the wait that follows, as the hardware requires, so the
two agree. tf32 operands are read as the tensor core reads float32 bits (the low 13 mantissa
bits ignored); gpucg's kernels round them to TF32 (cvt.rna) in shared memory first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError
from . import hopper_layouts as hl

WARPGROUP = hl.WARPGROUP
M = 64
#: PTX element type, SASS opcode, element bits of each kind
KINDS = {"f16": ("f16", "HGMMA", 16), "bf16": ("bf16", "HGMMA", 16),
         "tf32": ("tf32", "HGMMA", 32), "e4m3": ("e4m3", "QGMMA", 8),
         "e5m2": ("e5m2", "QGMMA", 8)}
#: the capability (gpucg.arch) every wgmma needs
FEATURE = "wgmma"
#: a CUDA source holding arch-specific instructions names the arch on a comment line of its
#: own (gpucg.verify.nvrtc.required_arch reads it; the backend compiles for it)
ARCH_MARK = "/* gpucg needs sm_90a: wgmma and setmaxnreg are arch-specific */"


def required_arch(source: str) -> str:
    """The arch a CUDA source must be compiled for because of arch-specific instructions
    ("sm_90a" where it holds :data:`ARCH_MARK`), else ""."""
    return "sm_90a" if ARCH_MARK in source else ""


@dataclass(frozen=True)
class WgmmaAtom:
    """One wgmma shape: ``m64n{n}k{k}`` of ``kind``, A from shared memory or registers."""

    kind: str
    n: int
    a_regs: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise DTypeError(f"wgmma kind {self.kind!r} is not supported; allowed: "
                             f"{', '.join(KINDS)}")
        if not isinstance(self.n, int) or not 8 <= self.n <= 256 or self.n % 8:
            raise DTypeError(f"wgmma N={self.n!r} must be a multiple of 8 in [8, 256]")

    m = M

    @property
    def k(self) -> int:
        return hl.WGMMA_K[self.kind]

    @property
    def ptx_type(self) -> str:
        return KINDS[self.kind][0]

    @property
    def sass(self) -> str:
        return KINDS[self.kind][1]

    @property
    def bits(self) -> int:
        return KINDS[self.kind][2]

    @property
    def elem_bytes(self) -> int:
        return self.bits // 8

    @property
    def transposable(self) -> bool:
        """Whether A and B may be MN-major (16-bit kinds only)."""
        return self.bits == 16

    @property
    def d_elems(self) -> int:
        """Accumulators a thread holds."""
        return self.n // 2

    @property
    def a_elems(self) -> int:
        """A elements a thread holds in the RS form."""
        return self.k // 2

    @property
    def a_words(self) -> int:
        """32-bit registers of A a thread holds in the RS form (4 for every kind)."""
        return self.a_elems * self.bits // 32

    @property
    def shape(self) -> str:
        return f"m64n{self.n}k{self.k}"

    @property
    def name(self) -> str:
        return f"{self.kind}_n{self.n}_{'rs' if self.a_regs else 'ss'}"

    def ptx(self) -> str:
        t = self.ptx_type
        return f"wgmma.mma_async.sync.aligned.{self.shape}.f32.{t}.{t}"

    def d_at(self, thread, i):
        """(row, col) of accumulator ``i`` of warpgroup thread ``thread`` (ints or C)."""
        return hl.accumulator(self.n, thread, i)

    def a_at(self, thread: int, i: int):
        """(row, col) of A element ``i`` a thread holds in the RS form."""
        return hl.a_fragment(self.kind, thread, i)

    def check_majors(self, a_major: str, b_major: str) -> None:
        """DTypeError unless the instruction can read A and B in these majors."""
        for name, major in (("A", a_major), ("B", b_major)):
            if major not in hl.MAJORS:
                raise DTypeError(f"wgmma {name} major={major!r}; allowed: K, MN")
            if major == "MN" and not self.transposable:
                raise DTypeError(f"wgmma .{self.ptx_type} reads {name} K-major only (the ISA "
                                 "has no transpose for 32- and 8-bit types)")
        if self.a_regs and a_major != "K":
            raise DTypeError("wgmma with A from registers has no A major")


def wgmma_atom(kind: str, n: int, a_regs: bool = False) -> WgmmaAtom:
    """The atom, validated (DTypeError naming what is allowed)."""
    return WgmmaAtom(kind, int(n), bool(a_regs))


def fn_name(atom: WgmmaAtom, a_major: str = "K", b_major: str = "K") -> str:
    """The helper's name in both dialects."""
    tr = "" if atom.a_regs else f"_{a_major.lower()}"
    return f"gpucg_wgmma_{atom.name}{tr}_{b_major.lower()}"


# -- CUDA: the instruction ---------------------------------------------------------------------

def cuda_wgmma(atom: WgmmaAtom, a_major: str = "K", b_major: str = "K") -> str:
    """``void gpucg_wgmma_...(float* d, A, unsigned long long desc_b, int scale_d)``: one
    wgmma.mma_async, A an ``unsigned long long`` descriptor (SS) or ``const unsigned*``
    registers (RS). Asynchronous: fence before, commit and wait after (:data:`CUDA_SYNC`)."""
    atom.check_majors(a_major, b_major)
    nd = atom.d_elems
    outs = ", ".join(f"%{i}" for i in range(nd))
    if atom.a_regs:
        a_ops = ", ".join(f"%{nd + i}" for i in range(atom.a_words))
        a_arg, a_in = "{ " + a_ops + " }", [f'"r"(a[{i}])' for i in range(atom.a_words)]
        a_decl = "const unsigned* a"
    else:
        a_arg, a_in, a_decl = f"%{nd}", ['"l"(a)'], "unsigned long long a"
    nb = nd + len(a_in)
    imm = "1, 1"
    if atom.transposable:
        imm += ("" if atom.a_regs else f", {int(a_major == 'MN')}") + f", {int(b_major == 'MN')}"
    ins = ", ".join(a_in + ['"l"(b)', '"r"(scale_d)'])
    dlist = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    a_doc = "registers" if atom.a_regs else f"{a_major}-major by descriptor"
    return (f"/* D (64 x {atom.n}) += A * B: {atom.ptx()}, A {a_doc}, B {b_major}-major by "
            "descriptor */\n"
            f"__device__ __forceinline__ void {fn_name(atom, a_major, b_major)}(float* d, "
            f"{a_decl}, unsigned long long b, int scale_d)\n{{\n"
            f'    asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{nb + 1}, 0;\\n"\n'
            f'        "{atom.ptx()} {{ {outs} }}, {a_arg}, %{nb}, p, {imm}; }}"\n'
            f"        : {dlist}\n        : {ins} : \"memory\");\n}}\n")


# -- OpenCL: the emulation ------------------------------------------------------------------------

#: one element at a local byte address as the tensor core reads it
_READ = {"f16": "vload_half(0, (__local const half*)(smem + {a}))",
         "bf16": "as_float(((uint)*(__local const ushort*)(smem + {a})) << 16)",
         "tf32": "as_float(*(__local const uint*)(smem + {a}) & 0xFFFFE000u)",
         "e4m3": "gpucg_e4m3_to_f(smem[{a}])",
         "e5m2": "gpucg_e5m2_to_f(smem[{a}])"}
#: one element of a 32-bit register word ``w``, element ``s`` of it
_WORD = {"f16": "vload_half(0, (const half*)&h)", "bf16": "as_float(((uint)h) << 16)",
         "tf32": "as_float(w & 0xFFFFE000u)", "e4m3": "gpucg_e4m3_to_f(h)",
         "e5m2": "gpucg_e5m2_to_f(h)"}


def opencl_address(major: str, elem_bytes: int) -> str:
    """``uint gpucg_wg_addr_<major><bytes>(ulong desc, uint row, uint col)``: the swizzled
    local byte address wgmma reads element (row, col) of an operand from, decoded from its
    descriptor with hopper_layouts' canonical layouts (one branch per swizzle code)."""
    name = f"gpucg_wg_addr_{major.lower()}{elem_bytes}"
    branches = []
    for swizzle in hl.SWIZZLES:
        off = hl.canonical_offset("row", "col", major=major, swizzle=swizzle,
                                  elem_bytes=elem_bytes, lbo="lbo", sbo="sbo")
        addr = hl.swizzle_address(f"(start + {off})", swizzle)
        branches.append(f"    if (sw == {hl.DESCRIPTOR_SWIZZLE[swizzle]}u) return {addr};")
    return (f"/* the local address wgmma reads ({major}-major, {elem_bytes}-byte elements) "
            "from its descriptor (gpucg/codegen/hopper_layouts.py) */\n"
            f"static inline uint {name}(ulong desc, uint row, uint col)\n{{\n"
            "    const uint start = ((uint)desc & 0x3FFFu) << 4;\n"
            "    const uint lbo = ((uint)(desc >> 16) & 0x3FFFu) << 4;\n"
            "    const uint sbo = ((uint)(desc >> 32) & 0x3FFFu) << 4;\n"
            "    const uint sw = (uint)(desc >> 62);\n"
            + "\n".join(branches[1:]) + f"\n    return {branches[0].split('return ')[1][:-1]};\n}}\n")


def a_inverse(atom: WgmmaAtom) -> list[int]:
    """For each (row, k) of A's 64 x K tile, row-major, where the warpgroup's registers hold
    it in the RS form: ``(thread * a_words + word) << 2 | element in the word``."""
    table = [-1] * (M * atom.k)
    per = 32 // atom.bits
    for t in range(WARPGROUP):
        for i in range(atom.a_elems):
            r, c = atom.a_at(t, i)
            table[r * atom.k + c] = (t * atom.a_words + i // per) << 2 | i % per
    if -1 in table:
        raise DTypeError(f"wgmma {atom.kind}: the A register map leaves elements unheld")
    return table


def opencl_wgmma(atom: WgmmaAtom, a_major: str = "K", b_major: str = "K") -> str:
    """The emulated wgmma for the warpgroup of work-item ``wt`` (0-127): each computes its
    accumulators D[row][col] = (scale_d ? D : 0) + sum_k A[row][k] B[k][col] in float32, with
    A and B read as the descriptors place them. ``active`` 0: a work-item outside a consumer
    warpgroup (its registers untouched; it still takes the RS form's barriers)."""
    atom.check_majors(a_major, b_major)
    eb, k = atom.elem_bytes, atom.k
    row, col = atom.d_at("wt", 0)
    b_addr = f"gpucg_wg_addr_{b_major.lower()}{eb}(b, (uint)col, (uint)kk)"
    rd_b = _READ[atom.kind].format(a=b_addr)
    pre, a_decl = "", "ulong a"
    if atom.a_regs:
        a_decl = "const uint* a"
        per = 32 // atom.bits
        table = a_inverse(atom)
        pre = (f"__constant ushort {fn_name(atom)}_a[{len(table)}] = "
               f"{{ {', '.join(map(str, table))} }};\n")
        get_a = (f"const uint pa = {fn_name(atom)}_a[r * {k} + kk];\n"
                 "                const uint w = ws[pa >> 2];\n"
                 f"                const {'uint' if per == 1 else 'ushort' if per == 2 else 'uchar'} h = "
                 f"({'w' if per == 1 else f'w >> ({atom.bits} * (pa & 3))'});\n"
                 f"                const float x = {_WORD[atom.kind]};")
        body_a = (f"    for (int i = 0; i < {atom.a_words}; ++i) ws[wt * {atom.a_words} + i] = a[i];\n"
                  "    barrier(CLK_LOCAL_MEM_FENCE);\n")
        tail = "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    else:
        a_addr = f"gpucg_wg_addr_{a_major.lower()}{eb}(a, (uint)r, (uint)kk)"
        get_a = f"const float x = {_READ[atom.kind].format(a=a_addr)};"
        body_a, tail = "", ""
    r_expr = row
    return (pre + f"/* emulated {atom.ptx()} for a warpgroup of 128 work-items (wt: 0-127) */\n"
            f"static inline void {fn_name(atom, a_major, b_major)}(__local uint* ws, int wt, "
            f"int active, __local const uchar* smem, float* d, {a_decl}, ulong b, int scale_d)\n{{\n"
            + body_a +
            "    if (active) {\n"
            f"        for (int j = 0; j < {atom.n // 8}; ++j) {{\n"
            "            for (int e = 0; e < 4; ++e) {\n"
            f"                const int r = {r_expr} + 8 * (e >> 1);\n"
            "                const int col = 8 * j + ((wt & 3) << 1) + (e & 1);\n"
            "                float s = scale_d ? d[4 * j + e] : 0.0f;\n"
            f"                for (int kk = 0; kk < {k}; ++kk) {{\n"
            f"                    {get_a.replace(chr(10) + '                ', chr(10) + '                    ')}\n"
            f"                    const float y = {rd_b};\n"
            "                    s += x * y;\n"
            "                }\n"
            "                d[4 * j + e] = s;\n"
            "            }\n"
            "        }\n"
            "    }\n" + tail + "}\n")


def opencl_decoders(kinds) -> str:
    """The FP8 decoders the emulation of ``kinds`` calls (from gpucg.codegen.fp8)."""
    from .fp8 import OPENCL_FORMATS
    names = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
    return "".join(OPENCL_FORMATS[names[k]].load_fn for k in sorted(set(kinds)) if k in names)
