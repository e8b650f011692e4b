"""MMA atoms: one tensor-core instruction's shape and fragment layout, defined once.

An atom is what one ``mma.sync`` computes, D (M x N, float32) = A (M x K) * B (K x N) + C, and
which lane of a warp holds which element of A, B and C: the PTX ISA's tables "Matrix
Fragments for mma.m16n8k16 with floating point type", "for mma.m16n8k8" (.tf32) and "for
mma.m16n8k32" (.e4m3/.e5m2), written below as maps ``(lane, i) -> (row, col)`` with
g = groupID = lane >> 2 and t = threadID_in_group = lane % 4 (A: (m, k), B: (k, n), C: (m, n);
``i`` is the element's number in the lane's fragment, ``EPR`` elements a 32-bit register,
the lowest-numbered in the low bits).

Everything that depends on the layout reads these maps, so a new atom is one entry:
- the kernels' index expressions: :meth:`MmaAtom.c_at` (the epilogue), :meth:`MmaAtom.ldmatrix_origin` (which rows
  a lane addresses for ldmatrix), evaluated as C with :class:`gpucg.codegen.ix.Ix`;
- the OpenCL emulation (:func:`opencl_mma`): its lookup tables are the maps inverted here;
- the bank model (gpucg.strategies.gemm_mma.smem_requests) and the register estimates
  (attention_mma), with ints;
- the SASS expectation (:attr:`MmaAtom.sass`) and the capability it needs (:attr:`feature`).

Adding an atom (docs/design.md walks through it): write its three maps from the ISA's table,
its PTX spelling and element conversion, register it in :data:`ATOMS`; tests/test_mma_atoms.py
checks every atom's maps are a bijection onto the tile, that its fragments are what ldmatrix
delivers, and runs its emulation against NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..arch import MMA_BF16, MMA_E4M3, MMA_E5M2, MMA_F16, MMA_TF32
from ..errors import DTypeError
from .ix import Ix


@dataclass(frozen=True)
class MmaAtom:
    """One mma.sync instruction: ``m16n8k{k}.row.col.f32.{ptx_type}.{ptx_type}.f32``.

    Attributes:
        kind: gpucg's name ("f16", "bf16", "tf32", "e4m3", "e5m2").
        m, n, k: the tile shape.
        bits: bits of one A/B element (16, 32, 8).
        ptx_type: the PTX element type.
        feature: the capability the instruction needs (gpucg.arch).
        sass: the SASS opcode it becomes.
        a, b, c: the fragment maps (lane, i) -> (row, col).
    """

    kind: str
    m: int
    n: int
    k: int
    bits: int
    ptx_type: str
    feature: str
    sass: str
    a: Callable
    b: Callable
    c: Callable

    @property
    def epr(self) -> int:
        """Elements of A or B a 32-bit register holds."""
        return 32 // self.bits

    @property
    def elem_bytes(self) -> int:
        return self.bits // 8

    @property
    def a_elems(self) -> int:
        return self.m * self.k // 32

    @property
    def b_elems(self) -> int:
        return self.k * self.n // 32

    @property
    def c_elems(self) -> int:
        return self.m * self.n // 32

    @property
    def a_regs(self) -> int:
        return self.a_elems // self.epr

    @property
    def b_regs(self) -> int:
        return self.b_elems // self.epr

    @property
    def shape(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"

    @property
    def ptx(self) -> str:
        t = self.ptx_type
        return f"mma.sync.aligned.{self.shape}.row.col.f32.{t}.{t}.f32"

    # -- the maps, evaluated -----------------------------------------------------------------

    def c_at(self, lane, e):
        """(row, col) of accumulator element ``e`` of ``lane`` (ints or C expressions)."""
        return self.c(_ix(lane), _ix(e))

    def operand_map(self, operand: str):
        """Operand "A" or "B"'s map as (lane, i) -> (outer, k): the row (A: m) or column
        (B: n) it lies in, and its K index."""
        if operand == "A":
            return self.a
        if operand == "B":
            return lambda lane, i: tuple(reversed(self.b(lane, i)))
        raise DTypeError(f"operand={operand!r}; allowed: 'A', 'B'")

    def regs(self, operand: str) -> int:
        return self.a_regs if operand == "A" else self.b_regs

    def outer(self, operand: str) -> int:
        """The operand's extent across K: M for A, N for B."""
        return self.m if operand == "A" else self.n

    def ldmatrix_origin(self, operand: str, q: int, tiles: int = 1) -> tuple[int, int]:
        """(outer, k) of the top-left element of 8x8 (16-byte-row) matrix ``q`` of an ldmatrix
        loading ``tiles`` atoms' fragments of ``operand``: the registers of tile 0, then of
        tile 1 (which lies :meth:`outer` further along M or N). Register r of lane (g, t) holds
        row g of matrix r, bytes 4t..4t+3 (the ldmatrix table), so matrix r's origin is where
        element ``r * epr`` of lane 0 lies."""
        regs = self.regs(operand)
        outer, k = self.operand_map(operand)(0, (q % regs) * self.epr)
        return outer + (q // regs) * self.outer(operand), k

    def ldmatrix_count(self, operand: str, tiles: int = 1) -> int:
        """Matrices (registers a lane receives) of one ldmatrix of ``tiles`` atoms."""
        return self.regs(operand) * tiles

    def ldmatrix_lane(self, operand: str, tiles: int, k_major: bool, lane):
        """(row, element) of the shared tile that ``lane`` addresses for an ldmatrix of
        ``tiles`` atoms' fragments of ``operand``, in the tile's storage coordinates: (outer,
        k) where the tile lies along K (``k_major``: rows of K, no .trans), else (k, outer)
        (.trans; 16-bit atoms only). Lane L gives row L % 8 of matrix L / 8. ``lane`` an int
        or a C name; the origins must be linear in the bits of the matrix number (checked),
        so the C expression is a few shifts."""
        count = self.ldmatrix_count(operand, tiles)
        if count not in (1, 2, 4):
            raise DTypeError(f"ldmatrix loads 1, 2 or 4 matrices; {tiles} {self.kind} "
                             f"{operand} fragments are {count}")
        if not k_major and self.epr != 2:
            raise DTypeError(f"ldmatrix .trans moves 16-bit elements: {self.kind} {operand} "
                             "must lie along K in shared memory")
        origins = [self.ldmatrix_origin(operand, q, tiles) for q in range(count)]
        bits = [origins[1 << b] for b in range(count.bit_length() - 1)]
        for q, o in enumerate(origins):
            want = tuple(sum(bits[b][x] for b in range(len(bits)) if q >> b & 1) for x in (0, 1))
            if want != o:
                raise DTypeError(f"atom {self.kind}: ldmatrix origins {origins} are not linear "
                                 "in the matrix number")
        lane = _ix(lane)
        q = lane >> 3
        outer, k = 0, 0
        for b, (ob, kb) in enumerate(bits):
            bit = (q >> b) & 1 if b + 1 < len(bits) else q >> b
            outer, k = outer + bit * ob, k + bit * kb
        row = lane & 7
        return (outer + row, k) if k_major else (k + row, outer)


def _ix(v):
    return Ix(v) if isinstance(v, str) else v


# -- the PTX ISA's fragment tables ------------------------------------------------------------

def _c(lane, e):  # C/D of every shape: c0, c1 at row g, c2, c3 at row g + 8; cols 2t + (e & 1)
    return (lane >> 2) + 8 * ((e >> 1) & 1), (lane & 3) * 2 + (e & 1)


def _a16(lane, i):  # m16n8k16 A, a0..a7: rows g (a0 a1 a4 a5) and g + 8; cols 2t + (i & 1), + 8 from a4
    return (lane >> 2) + 8 * ((i >> 1) & 1), (lane & 3) * 2 + (i & 1) + 8 * (i >> 2)


def _b16(lane, i):  # m16n8k16 B, b0..b3: rows (k) 2t + (i & 1), + 8 for b2 b3; col (n) g
    return (lane & 3) * 2 + (i & 1) + 8 * (i >> 1), lane >> 2


def _a_tf32(lane, i):  # m16n8k8 .tf32 A, a0..a3: rows g (a0 a2) and g + 8; cols t, t + 4 (a2 a3)
    return (lane >> 2) + 8 * (i & 1), (lane & 3) + 4 * (i >> 1)


def _b_tf32(lane, i):  # m16n8k8 .tf32 B, b0 b1: rows (k) t, t + 4; col (n) g
    return (lane & 3) + 4 * i, lane >> 2


def _a8(lane, i):  # m16n8k32 .e4m3/.e5m2 A, a0..a15: rows g (a0-a3, a8-a11) and g + 8; cols 4t + (i & 3), + 16 from a8
    return (lane >> 2) + 8 * ((i >> 2) & 1), (lane & 3) * 4 + (i & 3) + 16 * (i >> 3)


def _b8(lane, i):  # m16n8k32 .e4m3/.e5m2 B, b0..b7: rows (k) 4t + (i & 3), + 16 from b4; col (n) g
    return (lane & 3) * 4 + (i & 3) + 16 * (i >> 2), lane >> 2


ATOMS = {a.kind: a for a in [
    MmaAtom("f16", 16, 8, 16, 16, "f16", MMA_F16, "HMMA", _a16, _b16, _c),
    MmaAtom("bf16", 16, 8, 16, 16, "bf16", MMA_BF16, "HMMA", _a16, _b16, _c),
    MmaAtom("tf32", 16, 8, 8, 32, "tf32", MMA_TF32, "HMMA", _a_tf32, _b_tf32, _c),
    MmaAtom("e4m3", 16, 8, 32, 8, "e4m3", MMA_E4M3, "QMMA", _a8, _b8, _c),
    MmaAtom("e5m2", 16, 8, 32, 8, "e5m2", MMA_E5M2, "QMMA", _a8, _b8, _c),
]}


def atom(kind: str) -> MmaAtom:
    """The atom of element kind ``kind``, or DTypeError naming the known ones."""
    try:
        return ATOMS[kind]
    except KeyError:
        raise DTypeError(f"mma kind {kind!r} is not supported; allowed: {', '.join(ATOMS)}") from None


# -- CUDA: the instruction ----------------------------------------------------------------------

def cuda_mma(a: MmaAtom) -> str:
    """The device function ``gpucg_mma_{kind}(float* c, const unsigned* a, const unsigned*
    b)``: D = A * B + D as inline PTX (no mma.h: NVRTC compiles it without headers)."""
    na, nb = a.a_regs, a.b_regs
    outs = ", ".join(f"%{i}" for i in range(4))
    ins_a = ", ".join(f"%{4 + i}" for i in range(na))
    ins_b = ", ".join(f"%{4 + na + i}" for i in range(nb))
    ops = ", ".join([f'"r"(a[{i}])' for i in range(na)] + [f'"r"(b[{i}])' for i in range(nb)])
    return (f"/* D = A * B + D, one {a.shape} tile, {a.ptx_type} inputs, float32 sums */\n"
            f"__device__ __forceinline__ void gpucg_mma_{a.kind}(float* c, const unsigned* a, "
            "const unsigned* b)\n{\n"
            f'    asm volatile("{a.ptx} {{ {outs} }}, {{ {ins_a} }}, {{ {ins_b} }}, '
            f'{{ {outs} }};" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : {ops});\n}}\n')


# -- OpenCL: the emulation, read off the same maps ---------------------------------------------

#: how the emulation reads element ``{e}`` of the scratch as a float, per kind: the element's
#: number counted in elements of its own size from the scratch's start (``{ws}``: the scratch)
_ELEMENT = {
    "f16": "vload_half({e}, (__local const half*){ws})",
    "bf16": "as_float(((uint)((__local const ushort*){ws})[{e}]) << 16)",
    "tf32": "as_float(gpucg_tf32({ws}[{e}]))",
}


def inverse(a: MmaAtom, operand: str) -> list[int]:
    """For every (row, col) of the operand's tile in row-major order, where a warp's registers
    hold it: ``(lane * regs + register) << 2 | element in the register``."""
    rows, cols = (a.m, a.k) if operand == "A" else (a.k, a.n)
    fn, regs, n = (a.a, a.a_regs, a.a_elems) if operand == "A" else (a.b, a.b_regs, a.b_elems)
    table = [-1] * (rows * cols)
    for lane in range(32):
        for i in range(n):
            r, c = fn(lane, i)
            table[r * cols + c] = (lane * regs + i // a.epr) << 2 | i % a.epr
    if -1 in table:
        raise DTypeError(f"atom {a.kind}: operand {operand} map leaves elements unheld")
    return table


def _table(name: str, values) -> str:
    body = ", ".join(map(str, values))
    return f"__constant ushort {name}[{len(values)}] = {{ {body} }};\n"


def opencl_mma(a: MmaAtom) -> str:
    """The emulated mma for a warp of 32 consecutive work-items, from the atom's maps: each lane
    stores its A and B registers in the warp's scratch (A first, ``a_regs`` words a lane, then
    B), and after a barrier computes its C elements, reading A(row, k) and B(k, col) where the
    inverted maps (:func:`inverse`, as constant tables) say they are. Operands are converted to
    float as the tensor core reads them (tf32: rounded as cvt.rna.tf32.f32 does) and summed in
    float32. Call it from work-group uniform control flow (it holds barriers)."""
    if a.kind not in _ELEMENT:
        raise DTypeError(f"atom {a.kind} has no OpenCL emulation yet")
    row, col = a.c_at(Ix("lane"), Ix("e"))
    boff = 32 * a.a_regs

    def element(table_entry: str, base: int) -> str:
        # (word << 2 | element in the word) -> the element's number of its own size
        word = f"({base} + ({table_entry} >> 2))" if base else f"({table_entry} >> 2)"
        e = f"{word} * {a.epr} + ({table_entry} & 3)" if a.epr > 1 else word
        return _ELEMENT[a.kind].format(e=e, ws="ws")
    return (_table(f"gpucg_mma_{a.kind}_a", inverse(a, "A"))
            + _table(f"gpucg_mma_{a.kind}_b", inverse(a, "B")) +
            f"/* emulated {a.ptx} (maps: gpucg/codegen/mma_atom.py) */\n"
            f"static inline void gpucg_mma_{a.kind}(__local uint* ws, int lane, float* c, "
            "const uint* a, const uint* b)\n{\n"
            f"    for (int i = 0; i < {a.a_regs}; ++i) ws[lane * {a.a_regs} + i] = a[i];\n"
            f"    for (int i = 0; i < {a.b_regs}; ++i) ws[{boff} + lane * {a.b_regs} + i] = b[i];\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int e = 0; e < {a.c_elems}; ++e) {{\n"
            f"        const int row = {row}, col = {col};\n"
            "        float s = c[e];\n"
            f"        for (int k = 0; k < {a.k}; ++k) {{\n"
            f"            const uint pa = gpucg_mma_{a.kind}_a[row * {a.k} + k];\n"
            f"            const uint pb = gpucg_mma_{a.kind}_b[k * {a.n} + col];\n"
            f"            s += {element('pa', 0)} * {element('pb', boff)};\n"
            "        }\n"
            "        c[e] = s;\n"
            "    }\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n}\n")


#: 32-bit words of local scratch an emulated warp needs for the widest atom's registers
SCRATCH_WORDS = max(32 * (a.a_regs + a.b_regs) for a in ATOMS.values())


def scores_as_a(a: MmaAtom):
    """How one atom product's accumulators (C, float) become the next product's A fragment
    (FlashAttention's P = softmax(S) fed to P V straight from S's registers): for each A
    element i of a lane, the (C tile, C element) of the same lane it takes, and the key
    permutation that makes this possible (``perm[k]``: the key, within the A tile's K, that
    A's column k holds). Per lane and row, A's elements sorted by column take the C elements
    covering those keys in column order; the permutation must be the same for every lane
    (checked). 16-bit atoms: the identity (C's two columns a register are A's pair); TF32
    (A k = t, t + 4 where C holds columns 2t, 2t + 1): keys 2t and 2t + 1 as k = t, t + 4."""
    tiles = a.k // a.n
    take, perm = [None] * a.a_elems, [None] * a.k
    for lane in range(32):
        rows: dict = {}
        for i in range(a.a_elems):
            r, k = a.a(lane, i)
            rows.setdefault(r, [[], []])[0].append((k, i))
        for j in range(tiles):
            for e in range(a.c_elems):
                r, col = a.c(lane, e)
                if r in rows:
                    rows[r][1].append((j * a.n + col, j, e))
        for r, (aks, cks) in rows.items():
            if len(aks) != len(cks):
                raise DTypeError(f"atom {a.kind}: lane {lane} row {r} holds {len(aks)} A "
                                 f"elements and {len(cks)} C elements")
            for (k, i), (key, j, e) in zip(sorted(aks), sorted(cks)):
                if take[i] not in (None, (j, e)) or perm[k] not in (None, key):
                    raise DTypeError(f"atom {a.kind}: C -> A differs between lanes")
                take[i], perm[k] = (j, e), key
    return tuple(take), tuple(perm)


def permuted_row(a: MmaAtom, perm, u: int):
    """The C expression of the key (row of the second operand, within a k-step) that B element
    ``u`` of a lane holds under the key permutation ``perm`` of :func:`scores_as_a`: affine in
    the lane's threadID_in_group (checked; lanes of one group hold the same key)."""
    keys = [perm[a.b(lane, u)[0]] for lane in range(4)]
    step, first = keys[1] - keys[0], keys[0]
    if any(keys[t] != first + step * t for t in range(4)) or any(
            perm[a.b(lane, u)[0]] != keys[lane & 3] for lane in range(32)):
        raise DTypeError(f"atom {a.kind}: permuted B rows are not affine in the lane")
    return (Ix("lane") & 3) * step + first
