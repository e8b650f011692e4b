"""Shared-memory tiles, defined once: shape, element size, swizzle, alignment, and where they
lie in a kernel's dynamic shared memory.

A tile is ``rows`` rows of ``row_bytes`` bytes, stored as 16-byte chunks whose places in a row
are permuted by an XOR swizzle of the row number (:class:`Swizzle`), so that the accesses of
the tensor-core kernels (16-byte cp.async stores by quarter warps, ldmatrix's 8 rows of one
logical chunk, the TF32 fragment reads of a row-major B) fall in distinct banks. The same
object gives the byte offset of an element as a number (the bank model, tests) and as C (the
kernel), through :class:`gpucg.codegen.ix.Ix`.

A kernel's tiles are carved from its dynamic shared memory by a :class:`SmemPlan`: each at an
offset aligned to its ``align`` (1024 bytes under a 128-byte swizzle of TMA and wgmma, 128
otherwise: a bank-conflict analysis assumes lines start at bank 0), repeated over pipeline
stages. The plan's ``bytes`` is what the launch gives (gpucg.implementation.Kernel's
``dynamic_local``); CUDA declares the block ``extern __shared__`` with the plan's alignment
and raises the kernel's max-dynamic-shared-memory attribute above 48 KiB before its first
launch; OpenCL passes a ``__local`` buffer of those bytes as the kernel's last argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError
from .ix import Ix

CHUNK = 16


def _log2(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
class Swizzle:
    """The physical chunk of logical chunk c of row r: ``c ^ (((r >> shift) & mask) << base)``.

    :func:`swizzle_for` picks the one for a row length; ``mask`` 0 is no swizzle."""

    shift: int = 0
    mask: int = 0
    base: int = 0

    def __call__(self, row, chunk):
        if not self.mask:
            return chunk
        return chunk ^ (((_ix(row) >> self.shift) & self.mask) << self.base)


def swizzle_for(cpr: int, fragments32: bool = False) -> Swizzle:
    """The swizzle of a tile of ``cpr`` (a power of two) chunks a row.

    Default: any 8 consecutive rows read at one logical chunk (an ldmatrix 8x8 matrix) and any
    8 consecutive chunks of a row (a quarter warp's 16-byte cp.async) fall in the 8 distinct
    16-byte slots of a 128-byte line (one wavefront): the row bits that pick the row's place
    in its line are XORed into the chunk.

    ``fragments32``: a row-major TF32 B tile, read a 32-bit word a lane by the fragment map
    (lanes (g, t) read rows t (or t + 4) at columns g: 4 rows of 8 words): rows 0-3 of every
    4 XOR chunk bits 1-2, so the 4 rows' chunk pairs take distinct slots (needs 8 chunks a
    row or more)."""
    if cpr < 1 or cpr & (cpr - 1):
        raise DTypeError(f"swizzle: chunks per row must be a power of two, got {cpr}")
    if fragments32:
        if cpr < 8:
            raise DTypeError(f"a TF32 fragment swizzle needs rows of 8 chunks or more, got {cpr}")
        return Swizzle(shift=0, mask=3, base=1)
    if cpr == 1:
        return Swizzle()
    return Swizzle(shift=max(0, _log2(8 // cpr)), mask=min(cpr, 8) - 1)


def swizzle(row, chunk, cpr: int):
    """The default swizzle of ``cpr`` chunks a row (:func:`swizzle_for`), on ints or C."""
    return swizzle_for(cpr)(row, chunk)


@dataclass(frozen=True)
class SmemTile:
    """A tile of shared memory: ``rows`` rows of ``row_elems`` elements of ``elem_bytes``.

    Rows are padded to a power of two of 16-byte chunks (the swizzle permutes within it)."""

    name: str
    rows: int
    row_elems: int
    elem_bytes: int
    fragments32: bool = False
    align: int = 128

    def __post_init__(self):
        if self.row_elems * self.elem_bytes % CHUNK:
            raise DTypeError(f"tile {self.name}: rows of {self.row_elems} x {self.elem_bytes} B "
                             "are not whole 16-byte chunks")

    @property
    def chunks(self) -> int:
        """16-byte chunks a row holds (the row's data, rounded up to a power of two)."""
        return 1 << (self.row_elems * self.elem_bytes // CHUNK - 1).bit_length()

    @property
    def row_bytes(self) -> int:
        return self.chunks * CHUNK

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def epc(self) -> int:
        """Elements a chunk."""
        return CHUNK // self.elem_bytes

    @property
    def swizzle(self) -> Swizzle:
        return swizzle_for(self.chunks, self.fragments32)

    def chunk_at(self, row, chunk):
        """Byte offset of logical chunk ``chunk`` of row ``row`` (ints or C)."""
        return _ix(row) * self.row_bytes + self.swizzle(row, chunk) * CHUNK

    def at(self, row, elem, aligned: bool = False):
        """Byte offset of element ``elem`` of row ``row`` (ints or C); ``aligned``: elem is
        known to start a chunk (no in-chunk part is computed)."""
        elem = _ix(elem)
        inner = 0 if aligned else (elem % self.epc) * self.elem_bytes
        return self.chunk_at(row, elem // self.epc) + inner


@dataclass(frozen=True)
class SmemPlan:
    """Tiles carved from one dynamic shared-memory block: ``tiles`` once each, then
    ``staged`` tiles repeated over ``stages`` (stage s at ``stage_base + s * stage_bytes``),
    each at its alignment."""

    tiles: tuple = ()
    staged: tuple = ()
    stages: int = 1

    def _layout(self):
        offsets, at = {}, 0
        for t in self.tiles:
            at = -(-at // t.align) * t.align
            offsets[t.name] = at
            at += t.bytes
        stage_align = max([t.align for t in self.staged] or [1])
        at = -(-at // stage_align) * stage_align
        base, inner = at, 0
        for t in self.staged:
            inner = -(-inner // t.align) * t.align
            offsets[t.name] = base + inner
            inner += t.bytes
        stage = -(-inner // stage_align) * stage_align if self.staged else 0
        return offsets, base, stage

    def offset(self, name: str) -> int:
        """Byte offset of tile ``name`` (its stage 0 for a staged one)."""
        offsets = self._layout()[0]
        if name not in offsets:
            raise DTypeError(f"shared-memory plan has no tile {name!r}; it has "
                             f"{', '.join(offsets)}")
        return offsets[name]

    @property
    def stage_bytes(self) -> int:
        return self._layout()[2]

    @property
    def align(self) -> int:
        return max([t.align for t in self.tiles + self.staged] or [16])

    @property
    def bytes(self) -> int:
        """The block's size: what each launch gives the kernel."""
        _, base, stage = self._layout()
        return base + stage * self.stages


def _ix(v):
    return Ix(v) if isinstance(v, str) else v
