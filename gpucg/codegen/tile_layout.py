"""Where the SIMT GEMM tile (templates/gemm/_tile.j2) keeps its operands in local (shared)
memory, and which addresses each warp touches there: defined once here, rendered into the
template as C and evaluated by the bank-conflict check (gpucg.verify.banks).

A local tile is bk rows (along K) of C columns (bm of A, bn of B). Element (kk, c) lives at
row kk, column ``c ^ (((kk >> shift) % period) * unit)`` (an XOR swizzle of unit-wide column
blocks; none when unit is 0) of a row ``C + pad`` elements long. A work-item reads its tm (tn)
fragment values of a step FV at a time as one vector (128 bits for float: LDS.128): the
values of work-item row ty are rows ``(i / FV) * TY * FV + ty * FV + i % FV`` of the tile.

The layout is chosen per tile config so that one warp's stores (the tile load: per vw slot,
k-major or not) and fragment loads each need one wavefront per phase (tests/test_banks.py
checks every default config with gpucg.verify.banks); it keeps rows 16-byte aligned (pad a
multiple of 4) unless the stores need an odd spread, then FV drops to what stays aligned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WARP = 32
BANKS = 32


@dataclass(frozen=True)
class TileLayout:
    """One operand's local tile: ``rows`` x ``cols`` elements, row padding, XOR swizzle, and
    ``frag`` the widest fragment vector (elements) its alignment allows."""

    rows: int
    cols: int
    pad: int = 0
    unit: int = 0
    shift: int = 0
    period: int = 1
    frag: int = 4

    @property
    def stride(self) -> int:
        return self.cols + self.pad

    def column(self, kk: int, c: int) -> int:
        return c ^ (((kk >> self.shift) % self.period) * self.unit) if self.unit else c

    def offset(self, kk: int, c: int) -> int:
        """Element offset of (kk, c) from the tile's start."""
        return kk * self.stride + self.column(kk, c)

    def c_column(self, kk: str, c: str) -> str:
        """The column of (kk, c) as a C expression."""
        if not self.unit:
            return str(c)
        k = _operand(kk)
        g = f"({k} >> {self.shift})" if self.shift else k
        return f"{_operand(c)} ^ ({g} % {self.period}) * {self.unit}"

    def short(self) -> str:
        swz = f", xor {self.unit} * ((kk >> {self.shift}) % {self.period})" if self.unit else ""
        return f"{self.rows}x{self.cols}+{self.pad}{swz}"


def phase_wavefronts(words: list[int]) -> int:
    """Wavefronts of one phase touching these 4-byte word indices (duplicates broadcast):
    the bank model's count (gpucg.verify.banks), here so that strategies may choose layouts
    with it."""
    per_bank: dict[int, set] = {}
    for w in words:
        per_bank.setdefault(w % BANKS, set()).add(w)
    return max((len(s) for s in per_bank.values()), default=0)


def _operand(x) -> str:
    """x as an operand of a C operator: a name or number as it is, an expression in parentheses."""
    x = str(x)
    return x if re.fullmatch(r"\w+", x) else f"({x})"


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _spread(stride: int, groups: int, step: int, lanes: int) -> bool:
    """Whether `groups` rows `step` apart, each with `lanes` consecutive columns, start in
    distinct lane-aligned bank blocks for a row stride of `stride`."""
    starts = [(g * step * stride) % BANKS for g in range(groups)]
    return all(s % lanes == 0 for s in starts) and len(set(starts)) == groups


def choose(rows: int, cols: int, vw: int, k_major: bool) -> TileLayout:
    """The layout of a rows x cols tile whose stores come vw elements a slot (along K when
    ``k_major``: then one warp store touches rows // vw rows vw apart)."""
    groups = rows // vw
    if not k_major or groups <= 1 or groups > WARP:
        return TileLayout(rows, cols)  # stores run along a row: consecutive banks
    lanes = WARP // groups
    if _spread(cols, groups, vw, lanes):
        return TileLayout(rows, cols)
    if lanes >= 4 and cols >= WARP and cols % WARP == 0:
        return TileLayout(rows, cols, unit=lanes, shift=_log2(vw), period=groups)
    for pad in range(4, BANKS, 4):
        if _spread(cols + pad, groups, vw, lanes):
            return TileLayout(rows, cols, pad=pad)
    for pad in range(1, BANKS):  # an odd spread: fragment vectors only as wide as stays aligned
        if _spread(cols + pad, groups, vw, lanes):
            return TileLayout(rows, cols, pad=pad, frag=pad & -pad)
    return TileLayout(rows, cols)


def frag_width(layout: TileLayout, per_item: int, acc_bytes: int = 4) -> int:
    """Fragment vector width (elements) for tm (tn) values a work-item: at most 16 bytes,
    dividing tm, and what the layout's alignment allows."""
    fv = min(layout.frag, 16 // acc_bytes)
    while fv > 1 and per_item % fv:
        fv //= 2
    return fv


@dataclass(frozen=True)
class SimtTile:
    """Both local tiles of one config of the SIMT tile, their fragment widths, and whether
    each stores a slot as one vector (vw elements along the row, 16 bytes at most)."""

    a: TileLayout
    b: TileLayout
    fa: int
    fb: int
    va: bool = False
    vb: bool = False


def simt_tile(bm: int, bn: int, bk: int, tm: int, tn: int, vw: int, a_k_major: bool,
              b_k_major: bool, acc_bytes: int = 4, cf: bool = True) -> SimtTile:
    """The layouts of a config (the template calls this with its parameters); ``cf`` False
    (the conflict_free knob) keeps the plain tile: no padding or swizzle, scalar fragment reads, slot
    elements stored one by one (PoCL's dense default: faster there)."""
    if not cf:
        return SimtTile(TileLayout(bk, bm), TileLayout(bk, bn), 1, 1)
    a, b = choose(bk, bm, vw, a_k_major), choose(bk, bn, vw, b_k_major)
    row_vec = 1 < vw and vw * acc_bytes <= 16
    return SimtTile(a, b, frag_width(a, tm, acc_bytes), frag_width(b, tn, acc_bytes),
                    row_vec and not a_k_major, row_vec and not b_k_major)


def requests(config: dict, a_k_major: bool, b_k_major: bool, acc_bytes: int = 4,
             tile: SimtTile | None = None) -> list[tuple]:
    """One warp request of each kind the SIMT tile's first warp makes: (name, 32 lanes' byte
    addresses, access width in bytes). Stores of each vw slot element (one store per element,
    or one vector store when the slot runs along the row), fragment reads of A and B, once
    per kk = 0..bk-1 under the same name (the worst is what counts). ``tile``: the layouts (default: the
    ones the template renders; ``SimtTile(plain, plain, 1, 1)`` is the tile before it had
    layouts: no padding or swizzle, scalar fragments, every slot element stored alone)."""
    bm, bn, bk, tm, tn = (config[k] for k in ("bm", "bn", "bk", "tm", "tn"))
    vw = config.get("vw", 1)
    tile = tile or simt_tile(bm, bn, bk, tm, tn, vw, a_k_major, b_k_major, acc_bytes,
                             config.get("conflict_free", True))
    TY, TX = bm // tm, bn // tn
    b_base = bk * tile.a.stride  # Bs follows As (the offset cannot change a request's banks)
    out = []
    for name, lay, cols, k_major, base, vec in (("A", tile.a, bm, a_k_major, 0, tile.va),
                                                ("B", tile.b, bn, b_k_major, b_base, tile.vb)):
        q = bk // vw if k_major else cols // vw
        if k_major or (vw > 1 and not vec):
            for u in range(vw):
                kk, c = ((lambda t: (t % q) * vw + u, lambda t: t // q) if k_major else
                         (lambda t: t // q, lambda t: (t % q) * vw + u))
                addr = [(base + lay.offset(kk(t), c(t))) * acc_bytes for t in range(WARP)]
                out.append((f"store {name} slot element {u}", addr, acc_bytes))
        else:
            addr = [(base + lay.offset(t // q, (t % q) * vw)) * acc_bytes for t in range(WARP)]
            out.append((f"store {name} slot ({vw} along the row)", addr, acc_bytes * vw))
    for name, lay, n, fv, base, who in (("A", tile.a, tm, tile.fa, 0, lambda t: t // TX),
                                        ("B", tile.b, tn, tile.fb, b_base, lambda t: t % TX)):
        threads = TY if name == "A" else TX
        for i in range(0, n, fv):
            c = [(i // fv) * threads * fv + who(t) * fv for t in range(WARP)]
            for kk in range(bk):
                addr = [(base + lay.offset(kk, x)) * acc_bytes for x in c]
                out.append((f"load {name} fragment {i // fv}", addr, acc_bytes * fv))
    return out
