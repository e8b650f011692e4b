"""The Hopper GEMM core's geometry, defined once (templates/gemm/_wgmma.j2 renders it, the
strategies size shared memory and launches by it, templates/tile/_tma_pipeline.j2 runs its
pipeline): a warp-specialized work-group of one producer warpgroup, which issues TMA copies
of A's and B's tiles into ``stages`` stages of 128-byte-swizzled shared memory, completing on
mbarriers (gpucg.codegen.mbarrier.Pipeline), and ``consumers`` warpgroups, each computing 64
rows of the bm x bn tile (bm = 64 * consumers) with one wgmma m64n{bn}k per k-step
(gpucg.codegen.wgmma), A and B read by descriptors (gpucg.codegen.hopper_layouts).

K advances ``bk`` elements a stage: one 128-byte swizzle row of K (64 16-bit, 32 TF32, 128
FP8 elements), four wgmma k-steps. A K-major operand's tile is one TMA box (bk x rows); an
MN-major one's is rows / 64 boxes of 64 (one swizzle row of MN) x bk, laid one after another
(hopper_layouts.tile_offset). The epilogue of each consumer goes through two staging buffers of
64 rows x 128 bytes, stored by TMA (``out_bytes``: the output's element size; 0: the consumers
store from registers instead).

A stage's barrier pair lies at ``BARS + 16 * stage`` (full, then empty); the tiles are carved
by a gpucg.codegen.smem.SmemPlan, 1024-byte aligned, and the block holds 1024 bytes more so
that CUDA may round its base up to the swizzle's alignment.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import DTypeError
from . import hopper_layouts as hl
from .mbarrier import MBARRIER_BYTES, Pipeline
from .smem import SmemPlan, SmemTile
from .wgmma import wgmma_atom

SWIZZLE = 128
#: registers a thread of each role keeps after setmaxnreg (CUTLASS's warp-specialized
#: kernels: 40 for the producer, 232 for two consumer warpgroups; 3 x 128 threads fit 64 K)
PRODUCER_REGS, CONSUMER_REGS = 40, 232
#: the MN extent of one box of an MN-major operand: one 128-byte swizzle row
SLAB_BYTES = SWIZZLE


@dataclass(frozen=True)
class Operand:
    """One operand's shared tile: ``rows`` (M or N) x ``bk``, ``major`` K or MN."""

    name: str
    rows: int
    bk: int
    major: str
    elem_bytes: int

    @property
    def bytes(self) -> int:
        return self.rows * self.bk * self.elem_bytes

    @property
    def slab(self) -> int:
        """Elements of MN one box of an MN-major operand covers."""
        return SLAB_BYTES // self.elem_bytes

    @property
    def boxes(self) -> int:
        """TMA boxes that fill the tile: one a slab (128 bytes) of K (K-major: one unless bk
        spans several swizzle rows, as attention's head dims do) or of MN."""
        if self.major == "K":
            return max(1, self.bk // self.slab)
        return self.rows // self.slab

    @property
    def box(self) -> tuple:
        """The box in the driver's order (dimension 0 innermost), batch dimensions aside."""
        return (min(self.bk, self.slab), self.rows) if self.major == "K" else (self.slab, self.bk)

    def box_offset(self, j: int) -> int:
        """Byte offset in the tile of box ``j``."""
        if self.major == "K":
            return j * self.rows * SLAB_BYTES
        return j * self.slab * self.bk * self.elem_bytes

    def k_start(self, k0: int) -> int:
        """Byte offset in the tile of a wgmma's descriptor start for the K step at column
        ``k0`` (across swizzle rows where bk spans several)."""
        return hl.tile_k_start(k0, rows=self.rows, cols=self.bk, major=self.major,
                               swizzle=SWIZZLE, elem_bytes=self.elem_bytes)

    def offset(self, row, col):
        """Byte offset (before the swizzle) of element (row, col) of the tile."""
        return hl.tile_offset(row, col, rows=self.rows, cols=self.bk, major=self.major,
                              swizzle=SWIZZLE, elem_bytes=self.elem_bytes)

    @property
    def strides(self) -> tuple:
        """(lbo, sbo) of the descriptors that read the tile."""
        return hl.tile_strides(rows=self.rows, cols=self.bk, major=self.major, swizzle=SWIZZLE,
                               elem_bytes=self.elem_bytes)


class TmaRing:
    """What a geometry of a TMA ring shares (WgmmaGemm, attention's FlashWgmma): a subclass
    gives ``plan`` (a SmemPlan with a "bars" tile: stage s's full and empty mbarriers at
    ``16 * s`` and ``16 * s + 8`` in it) and ``pipe``."""

    @property
    def stage_bytes(self) -> int:
        return self.plan.stage_bytes

    @property
    def smem_bytes(self) -> int:
        """The dynamic shared memory a launch gives: the plan, and 1024 bytes of alignment."""
        return self.plan.bytes + 1024

    def off(self, name: str) -> int:
        return self.plan.offset(name)

    def full(self, stage) -> str:
        """The C address (less the base) of stage ``stage``'s full barrier (int or C name)."""
        return self._bar(stage, 0)

    def empty(self, stage) -> str:
        return self._bar(stage, 8)

    def _bar(self, stage, at: int) -> str:
        base = self.off("bars") + at
        if not isinstance(stage, str):
            return str(base + 16 * stage)
        return f"{base} + ({stage} << 4)" if base else f"({stage} << 4)"

    def descriptor(self, op: Operand, start: str, d) -> str:
        """The C descriptor of ``op`` whose tile starts at shared address ``start``, in
        dialect ``d``'s 64-bit spelling."""
        lbo, sbo = op.strides
        return hl.descriptor(start, lbo, sbo, SWIZZLE, u64=d.utype(64), suffix=d.u64_suffix)


@dataclass(frozen=True)
class WgmmaGemm(TmaRing):
    kind: str
    bm: int
    bn: int
    stages: int
    a_major: str
    b_major: str
    out_bytes: int = 0

    @property
    def atom(self):
        return wgmma_atom(self.kind, self.bn)

    @property
    def promotes(self) -> bool:
        """FP8: each k-tile's products go to a second set of accumulators, added to the float32
        sums after every k-tile (4 k-steps; the FP8 tensor-core accumulator keeps fewer bits)."""
        return self.kind in ("e4m3", "e5m2")

    @property
    def consumers(self) -> int:
        return self.bm // 64

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def eb(self) -> int:
        return self.atom.elem_bytes

    @property
    def bk(self) -> int:
        return SWIZZLE // self.eb

    @property
    def ksteps(self) -> int:
        return self.bk // self.atom.k

    @functools.cached_property
    def A(self) -> Operand:
        return Operand("A", self.bm, self.bk, self.a_major, self.eb)

    @functools.cached_property
    def B(self) -> Operand:
        return Operand("B", self.bn, self.bk, self.b_major, self.eb)

    @property
    def epi_cols(self) -> int:
        """Output columns of one staging buffer (128 bytes a row, at most bn)."""
        return min(SWIZZLE // self.out_bytes, self.bn) if self.out_bytes else 0

    @functools.cached_property
    def plan(self) -> SmemPlan:
        bars = SmemTile("bars", 1, 2 * self.stages * MBARRIER_BYTES + 16, 1, align=16)
        tiles = (bars,)
        if self.out_bytes:
            tiles += (SmemTile("epi", 2 * self.consumers * 64, SWIZZLE, 1, align=1024),)
        staged = (SmemTile("A", self.A.bytes // SWIZZLE, SWIZZLE, 1, align=1024),
                  SmemTile("B", self.B.bytes // SWIZZLE, SWIZZLE, 1, align=1024))
        return SmemPlan(tiles=tiles, staged=staged, stages=self.stages)

    @functools.cached_property
    def pipe(self) -> Pipeline:
        """The ring's stage and phase arithmetic: each stage completes on A's and B's bytes."""
        return Pipeline(self.stages, self.consumers, self.A.bytes + self.B.bytes)

    def epi(self, consumer, buf: int) -> str:
        """The C offset of staging buffer ``buf`` (0, 1) of consumer ``consumer`` (int or C)."""
        base = self.off("epi") + buf * 64 * SWIZZLE
        if isinstance(consumer, int):
            return str(base + consumer * 2 * 64 * SWIZZLE)
        return f"{base} + ({consumer} << 14)"

    def consumer_offset(self, op: Operand) -> int:
        """Bytes from A's tile to the 64 rows of the next consumer (A only)."""
        return op.offset(64, 0)

    def kstep_offset(self, op: Operand, s: int) -> int:
        """Bytes from a tile to k-step ``s``'s descriptor start: s times one step's (checked:
        a k-step stays within one swizzle row of K, or moves whole rows of an MN-major tile)."""
        def at(i):
            return hl.tile_k_start(i * self.atom.k, rows=op.rows, cols=op.bk, major=op.major,
                                   swizzle=SWIZZLE, elem_bytes=op.elem_bytes)
        if any(at(i) != i * at(1) for i in range(self.ksteps)):
            raise DTypeError(f"{op.name}'s k-steps are not evenly spaced")
        return at(s)

    def why_not(self) -> str:
        """Why this geometry cannot be rendered ("" when it can)."""
        if self.bm not in (64, 128):
            return f"bm={self.bm}: one or two consumer warpgroups of 64 rows (64 or 128)"
        try:
            self.atom.check_majors(self.a_major, self.b_major)
        except DTypeError as exc:
            return str(exc)
        if self.promotes and self.bn > 128:
            return (f"bn={self.bn}: FP8 tiles keep two sets of accumulators (promotion), "
                    "bn <= 128")
        if not 2 <= self.stages <= 8:
            return f"{self.stages} stages (2 to 8)"
        for op in (self.A, self.B):
            if op.major == "MN" and op.rows % op.slab:
                return f"an MN-major {op.name} needs rows in slabs of {op.slab}"
        if self.out_bytes and self.bn % self.epi_cols:
            return f"bn={self.bn} is not whole staging buffers of {self.epi_cols} columns"
        return ""


@functools.lru_cache(maxsize=None)
def wgmma_gemm(kind: str, bm: int, bn: int, stages: int, a_major: str, b_major: str,
               out_bytes: int = 0) -> WgmmaGemm:
    """The core of these parameters (what the template and the strategies share)."""
    return WgmmaGemm(kind, int(bm), int(bn), int(stages), a_major, b_major, int(out_bytes))
