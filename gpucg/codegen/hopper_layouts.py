"""Hopper's operand layouts as the PTX ISA defines them, one Python definition each: the wgmma
shared-memory matrix descriptor, the canonical layouts of its K-major and MN-major operands
under no, 32-, 64- and 128-byte swizzles, the tile a TMA box copy lays down (with
gpucg/codegen/tma.py's copy), and the wgmma register fragments (accumulator D, and A taken
from registers).

Every function takes ints (the bank model, the OpenCL emulation, tests) and, where a kernel
needs it, C expressions as strings (like gpucg.codegen.warp.swizzle). Sources: PTX ISA 9.7.15
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (matrix descriptor format; shared
memory matrix layout: swizzle atoms and the strides LBO/SBO; register fragments), written in
the notation CUTLASS's make_gmma_desc documents.

Swizzles act on shared-memory *byte addresses*: a ``S``-byte swizzle (S = 32, 64, 128) XORs the
16-byte chunk bits [4, 4 + b) of an address with its bits [7, 7 + b), b = log2(S / 16)
(CuTe's Swizzle<b, 4, 3>); the pattern repeats every 8 * S bytes, so a tile base aligned to
8 * S bytes (1024 for 128B) sees it from its first row, and the descriptor's base offset is 0.
"""

from __future__ import annotations

from ..errors import InputError
from .ix import Ix
from .mma_atom import ATOMS

#: swizzle spans in bytes (0: none), and each one's 2-bit code in a wgmma descriptor
SWIZZLES = (0, 32, 64, 128)
DESCRIPTOR_SWIZZLE = {0: 0, 128: 1, 64: 2, 32: 3}
MAJORS = ("K", "MN")
#: bytes of one core-matrix row (a "128-bit element" of the ISA's normalized tables)
CHUNK = 16


def _p(expr) -> str:
    text = str(expr)
    return text if text.replace("_", "a").isalnum() else f"({text})"


def _is_int(*xs) -> bool:
    return all(isinstance(x, int) for x in xs)


def _check_swizzle(swizzle) -> None:
    if swizzle not in SWIZZLES:
        raise InputError(f"swizzle={swizzle!r} is not a swizzle span; allowed: "
                         f"{', '.join(map(str, SWIZZLES))} (bytes, 0: none)")


def swizzle_address(addr, swizzle: int):
    """A shared-memory byte address after a ``swizzle``-byte swizzle (0: unchanged)."""
    _check_swizzle(swizzle)
    if swizzle == 0:
        return addr
    mask = swizzle // CHUNK - 1
    if _is_int(addr):
        return addr ^ (((addr >> 7) & mask) << 4)
    a = _p(addr)
    return f"({a} ^ ((({a} >> 7) & {mask}) << 4))"


# -- the matrix descriptor ----------------------------------------------------------------

#: (field, lowest bit, width) of the 64-bit wgmma matrix descriptor; addresses and the two
#: byte offsets are stored divided by 16 (their 4 low bits are zero)
DESCRIPTOR_FIELDS = (("start", 0, 14), ("lbo", 16, 14), ("sbo", 32, 14), ("base_offset", 49, 3),
                     ("swizzle", 62, 2))


def descriptor(start, lbo: int, sbo: int, swizzle: int, base_offset: int = 0,
               u64: str = "unsigned long long", suffix: str = "ULL"):
    """The wgmma matrix descriptor of an operand at shared-memory byte address ``start`` with
    leading and stride byte offsets ``lbo``, ``sbo`` (see :func:`canonical_offset`) and a
    ``swizzle``-byte swizzle. ``start`` may be a C expression (a 32-bit shared address):
    then the C expression of the descriptor, a 64-bit unsigned value spelled with ``u64`` and
    ``suffix`` (CUDA's; a dialect gives its own: OpenCL's ``long long`` is 128 bits)."""
    _check_swizzle(swizzle)
    for name, v, hi in (("lbo", lbo, 1 << 18), ("sbo", sbo, 1 << 18), ("base_offset", base_offset, 8)):
        if not isinstance(v, int) or v < 0 or v >= hi or (name != "base_offset" and v % CHUNK):
            raise InputError(f"descriptor {name}={v!r} must be an int in [0, {hi})"
                             + (" and a multiple of 16" if name != "base_offset" else ""))
    const = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (base_offset << 49) \
        | (DESCRIPTOR_SWIZZLE[swizzle] << 62)
    if _is_int(start):
        if start < 0 or start >= 1 << 18 or start % CHUNK:
            raise InputError(f"descriptor start={start} must be a 16-byte aligned shared "
                             "address below 2**18")
        return const | (start >> 4)
    return f"(0x{const:X}{suffix} | ({u64})(({_p(start)} & 0x3FFFF) >> 4))"


def descriptor_fields(desc: int) -> dict:
    """The fields of a descriptor, byte values restored (start, lbo, sbo), swizzle in bytes."""
    out = {name: (desc >> lo) & ((1 << width) - 1) for name, lo, width in DESCRIPTOR_FIELDS}
    for name in ("start", "lbo", "sbo"):
        out[name] <<= 4
    out["swizzle"] = {code: s for s, code in DESCRIPTOR_SWIZZLE.items()}[out["swizzle"]]
    return out


# -- the canonical layouts ------------------------------------------------------------------

def canonical_offset(row, col, *, major: str, swizzle: int, elem_bytes: int, lbo: int, sbo: int):
    """The byte offset from a descriptor's start address (before the swizzle) at which wgmma
    reads element (row, col) of an operand: row in M (A) or N (B), col in K. In units of
    16-byte chunks the ISA's canonical layouts are (T = 16 / elem_bytes elements):

    K-major   none   ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))   8 rows x 16 B core matrices
              S-byte ((8,m),(T,2k)) : ((S/16 T,SBO),(1,T)) rows of S bytes; LBO unused
    MN-major  none   ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO)) 8 K-rows x 16 B of MN
              S-byte ((T,S/16,m),(8,k)) : ((1,T,LBO),(S/16 T,SBO))

    so K-major swizzled rows hold S bytes of K (col * elem_bytes < S: a wgmma's 32 bytes of K
    come from one swizzle row), SBO steps 8 rows; MN-major swizzled rows hold S bytes of MN,
    LBO steps to the next S bytes of MN, SBO to the next 8 rows of K."""
    _check_swizzle(swizzle)
    if major not in MAJORS:
        raise InputError(f"major={major!r} is not allowed; allowed: {', '.join(MAJORS)}")
    if elem_bytes not in (1, 2, 4):
        raise InputError(f"elem_bytes={elem_bytes!r} must be 1, 2 or 4")
    if major == "K":
        if swizzle == 0:
            terms = [(row, 8, 16, 1), (row, None, sbo, 8), (col, T := CHUNK // elem_bytes,
                                                            elem_bytes, 1), (col, None, lbo, T)]
        else:
            span = swizzle // elem_bytes
            if _is_int(col) and not 0 <= col < span:
                raise InputError(f"K-major {swizzle}B swizzle: col={col} must be below {span} "
                                 "(one swizzle row of K; advance the start address for more)")
            terms = [(row, 8, swizzle, 1), (row, None, sbo, 8), (col, None, elem_bytes, 1)]
    else:
        T = CHUNK // elem_bytes
        if swizzle == 0:
            terms = [(row, T, elem_bytes, 1), (row, None, sbo, T), (col, 8, CHUNK, 1),
                     (col, None, lbo, 8)]
        else:
            span = swizzle // elem_bytes
            terms = [(row, span, elem_bytes, 1), (row, None, lbo, span), (col, 8, swizzle, 1),
                     (col, None, sbo, 8)]
    return _affine(terms)


def _affine(terms):
    """sum over (x, mod, scale, div) of ((x // div) % mod) * scale (mod None: no modulo)."""
    if all(_is_int(t[0]) for t in terms):
        return sum(((x // div) % mod if mod else x // div) * scale
                   for x, mod, scale, div in terms)
    parts = []
    for x, mod, scale, div in terms:
        v = _p(x) if div == 1 else f"({_p(x)} / {div})"
        v = f"({v} % {mod})" if mod else v
        parts.append(v if scale == 1 else f"{v} * {scale}")
    return "(" + " + ".join(parts) + ")"


def operand_address(start, row, col, **layout):
    """The swizzled shared-memory byte address wgmma reads element (row, col) from, for a
    descriptor with ``start`` and the ``layout`` of :func:`canonical_offset`."""
    off = canonical_offset(row, col, **layout)
    addr = start + off if _is_int(start, off) else f"({_p(start)} + {off})"
    return swizzle_address(addr, layout["swizzle"])


# -- the tiles TMA lays down, and the descriptors that read them -------------------------------

def box_inner_bytes(swizzle: int) -> int:
    """Bytes of the inner box dimension one TMA copy moves into a canonical tile: the swizzle
    span, or one 16-byte core-matrix row without a swizzle."""
    _check_swizzle(swizzle)
    return swizzle or CHUNK


def tile_offset(row, col, *, rows: int, cols: int, major: str, swizzle: int, elem_bytes: int):
    """The byte offset (before the swizzle) of element (row, col) in a ``rows`` (M or N) x
    ``cols`` (K) operand tile that TMA boxes fill: the contiguous dimension (K for K-major,
    MN for MN-major) cut into slabs of :func:`box_inner_bytes`, each slab one box of every
    row of the other dimension, the slabs one after another."""
    inner = box_inner_bytes(swizzle) // elem_bytes
    if major == "K":
        return _affine([(col, None, rows * inner * elem_bytes, inner),
                        (row, None, inner * elem_bytes, 1), (col, inner, elem_bytes, 1)])
    if major == "MN":
        return _affine([(row, None, cols * inner * elem_bytes, inner),
                        (col, None, inner * elem_bytes, 1), (row, inner, elem_bytes, 1)])
    raise InputError(f"major={major!r} is not allowed; allowed: {', '.join(MAJORS)}")


def tile_strides(*, rows: int, cols: int, major: str, swizzle: int, elem_bytes: int) -> tuple:
    """(lbo, sbo) of the descriptors reading a :func:`tile_offset` tile."""
    inner = box_inner_bytes(swizzle)
    if major == "K":
        return (rows * CHUNK if swizzle == 0 else CHUNK), 8 * inner
    if swizzle == 0:
        return 8 * CHUNK, cols * CHUNK
    return cols * inner, 8 * inner


def tile_k_start(k0: int, *, rows: int, cols: int, major: str, swizzle: int,
                 elem_bytes: int) -> int:
    """The byte offset in such a tile of a wgmma's descriptor start for the K step beginning
    at column ``k0`` (a multiple of the instruction's K)."""
    return tile_offset(0, k0, rows=rows, cols=cols, major=major, swizzle=swizzle,
                       elem_bytes=elem_bytes)


# -- register fragments ---------------------------------------------------------------------

#: wgmma K per A/B type, and the elements of A one thread holds in registers
WGMMA_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32}
WARPGROUP = 128


def _check_n(n: int) -> None:
    if not isinstance(n, int) or not 8 <= n <= 256 or n % 8:
        raise InputError(f"wgmma N={n!r} must be a multiple of 8 in [8, 256]")


def accumulator(n: int, thread, index: int):
    """(row, col) of accumulator element ``index`` (0 <= index < n / 2) of warpgroup thread
    ``thread`` for wgmma m64nNk*: warp w holds rows 16w..16w+15, and per 8 columns j elements
    4j..4j+3 are mma.sync's m16n8 C fragment (gpucg.codegen.mma_atom: a lane holds (lane/4,
    2(lane%4)) and the next column, then the same 8 rows down). (An f16 accumulator packs
    elements 2i, 2i+1 in register i.)"""
    _check_n(n)
    if not 0 <= index < n // 2:
        raise InputError(f"accumulator index={index} must be in [0, {n // 2}) for N={n}")
    t = Ix(thread) if isinstance(thread, str) else thread
    row, col = ATOMS["f16"].c(t & 31, index % 4)
    row, col = 16 * (t >> 5) + row, 8 * (index // 4) + col
    return (row, col) if _is_int(thread) else (str(row), str(col))


def accumulator_owner(n: int, row: int, col: int) -> tuple[int, int]:
    """(thread, index) holding accumulator element (row, col): the inverse of
    :func:`accumulator`."""
    _check_n(n)
    warp, r = divmod(row, 16)
    half, g = divmod(r, 8)
    j, rest = divmod(col, 8)
    return 32 * warp + 4 * g + rest // 2, 4 * j + 2 * half + rest % 2


def a_fragment(kind: str, thread: int, index: int) -> tuple[int, int]:
    """(row, col) of element ``index`` of the A fragment thread ``thread`` holds when A comes
    from registers (wgmma m64nNkK, K = WGMMA_K[kind]): per warp mma.sync's m16 x K A
    fragment (gpucg.codegen.mma_atom's map), rows 16w.. for warp w. f16/bf16: 8 elements
    in 4 registers; tf32: 4; e4m3/e5m2: 16 (four bytes a register)."""
    if kind not in WGMMA_K:
        raise InputError(f"kind={kind!r} is not allowed; allowed: {', '.join(WGMMA_K)}")
    per = WGMMA_K[kind] // 2
    if not 0 <= index < per:
        raise InputError(f"index={index} must be in [0, {per}) for {kind}")
    row, col = ATOMS[kind].a(thread % 32, index)
    return 16 * (thread // 32) + row, col
