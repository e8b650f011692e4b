"""The tensor-core GEMM core's geometry, defined once (templates/gemm/_mma.j2 renders it;
the strategies size shared memory and registers by it; the bank model evaluates its addresses).

One work-group computes a bm x bn tile of C = A (M x K) * B (K x N) with (bm / wm) x (bn / wn)
warps, each a wm x wn warp tile of (wm / 16) x (wn / 8) MMA atoms (gpucg.codegen.mma_atom).
K advances bk at a time through ``stages`` pipeline stages of two shared tiles (A's and B's,
gpucg.codegen.smem), filled by 16-byte cp.async copies and read by ldmatrix (by 32-bit loads
for a TF32 B that lies along N: ldmatrix has no 32-bit transpose).

Every lane's shared-memory addresses are computed once, before the K loop: for each operand an
array indexed by the one loop index its swizzled chunk depends on (the k-step where the tile
lies along K, the fragment where it lies along M or N), the other index adding a constant row
offset (the swizzle uses only the row bits below 16, checked here). The copies a thread makes
are fixed too: their shared offsets, global offsets and whether their rows are inside M or N.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import DTypeError
from .ix import Ix
from .mma_atom import MmaAtom, atom as atom_of
from .smem import CHUNK, SmemPlan, SmemTile

WARP = 32


@dataclass(frozen=True)
class Operand:
    """One operand's shared tile and how it is read: ``k_major`` (stored along K),
    ``lds`` (fragments by 32-bit loads, not ldmatrix), ``tiles`` (atoms an ldmatrix loads),
    ``frags`` (fragments a warp holds: MI for A, NI for B), ``outer`` (the operand's
    extent a warp covers: wm or wn)."""

    name: str
    tile: SmemTile
    k_major: bool
    lds: bool
    tiles: int
    frags: int
    outer: int
    copies: int

    @property
    def data_chunks(self) -> int:
        """16-byte chunks of data a row (the tile's row may be padded to a power of two)."""
        return self.tile.row_elems * self.tile.elem_bytes // CHUNK


@dataclass(frozen=True)
class GemmCore:
    kind: str
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    a_k_major: bool
    b_k_major: bool

    @property
    def atom(self) -> MmaAtom:
        return atom_of(self.kind)

    @property
    def warps_m(self) -> int:
        return self.bm // self.wm

    @property
    def nw(self) -> int:
        return self.warps_m * (self.bn // self.wn)

    @property
    def nt(self) -> int:
        return self.nw * WARP

    @property
    def mi(self) -> int:
        return self.wm // self.atom.m

    @property
    def ni(self) -> int:
        return self.wn // self.atom.n

    @property
    def ksteps(self) -> int:
        return self.bk // self.atom.k

    @functools.cached_property
    def A(self) -> Operand:
        eb = self.atom.elem_bytes
        rows, re = (self.bm, self.bk) if self.a_k_major else (self.bk, self.bm)
        tile = SmemTile("A", rows, re, eb)
        return Operand("A", tile, self.a_k_major, False, 1, self.mi, self.wm,
                       rows * (re * eb // CHUNK) // self.nt)

    @functools.cached_property
    def B(self) -> Operand:
        eb = self.atom.elem_bytes
        lds = self.atom.epr == 1 and not self.b_k_major
        rows, re = (self.bn, self.bk) if self.b_k_major else (self.bk, self.bn)
        tile = SmemTile("B", rows, re, eb, fragments32=lds)
        return Operand("B", tile, self.b_k_major, lds, 1 if lds else 2, self.ni, self.wn,
                       rows * (re * eb // CHUNK) // self.nt)

    @functools.cached_property
    def plan(self) -> SmemPlan:
        return SmemPlan(staged=(self.A.tile, self.B.tile), stages=self.stages)

    @property
    def smem_bytes(self) -> int:
        return self.plan.bytes

    def why_not(self) -> str:
        """Why this geometry cannot be rendered ("" when it can)."""
        a = self.atom
        if self.bm % self.wm or self.bn % self.wn or self.wm % a.m or self.wn % (2 * a.n):
            return (f"warp tile {self.wm} x {self.wn} must divide the block tile {self.bm} x "
                    f"{self.bn} and be whole {a.m} x {2 * a.n} atom pairs")
        if not 1 <= self.nw <= 16:
            return f"{self.nw} warps (1 to 16 allowed)"
        if self.bk % a.k or self.stages < 2:
            return f"bk={self.bk} must be whole k-steps of {a.k}, with 2 or more stages"
        for op in (self.A, self.B):
            if op.tile.row_elems * op.tile.elem_bytes % CHUNK:
                return f"{op.name}'s rows are not whole 16-byte chunks"
            total = op.tile.rows * op.data_chunks
            if total % self.nt:
                return (f"{op.name}'s {total} chunks a stage do not divide among "
                        f"{self.nt} threads")
            if op.tile.chunks != op.data_chunks:
                return f"{op.name}'s rows of {op.data_chunks} chunks are not a power of two"
        if not self.a_k_major and a.epr != 2:
            return f"{self.kind}'s A must lie along K (ldmatrix moves 16-bit elements only)"
        return ""

    # -- per-lane addresses (the kernel's and the bank model's) -------------------------------

    def lane_origin(self, op: Operand, lane, t=None):
        """(row, element) of the shared tile that ``lane`` reads for fragment 0 of k-step 0 of
        warp (0, 0): the ldmatrix row it addresses, or (LDS path) the word it reads for
        element 0 (row t, column g of a TF32 B)."""
        a = self.atom
        if op.lds:
            k, n = a.b(_ix(lane), 0)
            return k, n
        return a.ldmatrix_lane(op.name, op.tiles, op.k_major, _ix(lane))

    def frag_step(self, op: Operand) -> tuple[int, int]:
        """(rows, elements) one fragment index moves the address: an ldmatrix of ``tiles``
        atoms covers tiles x outer() along M or N."""
        along = self.atom.outer(op.name) * op.tiles
        return (along, 0) if op.k_major else (0, along)

    def kstep(self, op: Operand) -> tuple[int, int]:
        """(rows, elements) one k-step moves the address."""
        return (0, self.atom.k) if op.k_major else (self.atom.k, 0)

    def array_dim(self, op: Operand) -> str:
        """Which index the lane's address array runs over: the k-step where its chunk moves
        with K ("k"), else the fragment ("frag")."""
        return "k" if op.k_major else "frag"

    def array_len(self, op: Operand) -> int:
        return self.ksteps if self.array_dim(op) == "k" else op.frags // op.tiles

    def linear_bytes(self, op: Operand, ks, frag):
        """The constant byte offset added to the lane's array entry for (ks, frag): the index
        that moves only rows (a multiple of 16 of them, which the swizzle ignores)."""
        if self.array_dim(op) == "k":
            rows = self.frag_step(op)[0] * frag
        else:
            rows = self.kstep(op)[0] * ks
        return rows * op.tile.row_bytes

    def lane_start(self, op: Operand, lane, warp_index):
        """(row, element) of the tile that ``lane`` of warp tile ``warp_index`` (along M for A,
        N for B) reads first: fragment 0, k-step 0 (ints or C)."""
        r0, e0 = self.lane_origin(op, lane)
        w = _ix(warp_index) * op.outer
        return (r0 + w, e0) if self.array_dim(op) == "k" else (r0, e0 + w)

    def entry(self, op: Operand, row, elem, x):
        """Byte offset in stage 0 of array entry ``x`` (:meth:`array_dim`) of a lane whose
        :meth:`lane_start` is (``row``, ``elem``)."""
        x = _ix(x)
        if self.array_dim(op) == "k":
            e = _ix(elem) + x * self.atom.k
        else:
            e = _ix(elem) + x * (self.atom.outer(op.name) * op.tiles)
        return self.plan.offset(op.name) + op.tile.at(_ix(row), e, aligned=not op.lds)

    def lane_address(self, op: Operand, lane, warp_index, x):
        """:meth:`entry` of ``lane`` (ints: the bank model)."""
        return self.entry(op, *self.lane_start(op, lane, warp_index), x)

    def frag_addr(self, op: Operand, array: str, ks, frag, e: int = 0) -> str:
        """The C address (less the stage's) of fragment ``frag`` at k-step ``ks`` (element
        ``e`` of a 32-bit load): the lane's array entry plus the linear part."""
        dim = self.array_dim(op)
        x = ks if dim == "k" else frag
        if dim == "k":
            rows = _ix(frag) * (self.atom.outer(op.name) * op.tiles)
        else:
            rows = _ix(ks) * self.atom.k
        if e:
            rows = rows + (self.atom.b(0, e)[0] - self.atom.b(0, 0)[0])
        return str(Ix(f"{array}[{x}]") + rows * op.tile.row_bytes)

    def check_swizzle(self) -> None:
        """DTypeError unless every tile's swizzle ignores the row bits the linear offsets move
        (multiples of 8 rows: atom fragments and k-steps)."""
        for op in (self.A, self.B):
            sw = op.tile.swizzle
            for r in range(64):
                for c in range(op.tile.chunks):
                    if sw(r, c) != sw(r % 8, c):
                        raise DTypeError(f"{op.name}'s swizzle {sw} reads row bits above 8")

    # -- the copies a thread makes ------------------------------------------------------------

    def copy_chunk(self, op: Operand, t, c):
        """(row, chunk) of the tile that thread ``t``'s copy ``c`` fills (16 bytes)."""
        q = _ix(t) + c * self.nt
        return q // op.data_chunks, q % op.data_chunks


def _ix(v):
    return Ix(v) if isinstance(v, str) else v


@functools.lru_cache(maxsize=None)
def gemm_core(kind: str, bm: int, bn: int, bk: int, wm: int, wn: int, stages: int,
              a_k_major: bool, b_k_major: bool) -> GemmCore:
    """The core of these parameters (what the template and the strategies share)."""
    return GemmCore(kind, int(bm), int(bn), int(bk), int(wm), int(wn), int(stages),
                    bool(a_k_major), bool(b_k_major))
