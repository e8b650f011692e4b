"""Hopper's layouts (gpucg/codegen/hopper_layouts.py, gpucg/codegen/tma.py) against the PTX
ISA's tables: the wgmma descriptor's bit fields, the swizzle atoms of Table 38 and its figures,
a TMA box copy read back through wgmma descriptors element by element (both majors, every
swizzle, 1-, 2- and 4-byte elements), out-of-bounds fill, and the register fragments."""

import re

import numpy as np
import pytest

import gpucg
from gpucg.codegen import hopper_layouts as hl
from gpucg.codegen.tma import TensorMap, box_load, box_store


def test_descriptor_fields():
    # start 0x400 (>> 4: 0x40) bits 0-13, LBO 16 (1) bits 16-29, SBO 1024 (64) bits 32-45,
    # base offset bits 49-51, 128B swizzle code 1 in bits 62-63
    assert hl.descriptor(0x400, 16, 1024, 128) == 0x4000_0040_0001_0040
    assert hl.descriptor(0x3FFF0, 0x3FFF0, 0x10, 32, base_offset=7) == \
        (3 << 62) | (7 << 49) | (1 << 32) | (0x3FFF << 16) | 0x3FFF
    assert [hl.descriptor(0, 0, 0, s) >> 62 for s in (0, 128, 64, 32)] == [0, 1, 2, 3]
    d = hl.descriptor(0x1230, 4096, 256, 64, base_offset=2)
    assert hl.descriptor_fields(d) == dict(start=0x1230, lbo=4096, sbo=256, base_offset=2,
                                           swizzle=64)
    # the C spelling: the constant fields folded, the address masked to 18 bits and shifted
    c = hl.descriptor("smem_a", 16, 1024, 128)
    py = re.sub(r"ULL|\(unsigned long long\)", "", c)
    assert eval(py, {"smem_a": 0x40400}) == hl.descriptor(0x400, 16, 1024, 128)


@pytest.mark.parametrize("kw,msg", [
    (dict(start=8, lbo=16, sbo=16, swizzle=0), "start=8 must be a 16-byte aligned"),
    (dict(start=0, lbo=24, sbo=16, swizzle=0), "lbo=24 must be an int in"),
    (dict(start=0, lbo=16, sbo=1 << 18, swizzle=0), "sbo=262144"),
    (dict(start=0, lbo=16, sbo=16, swizzle=48), "swizzle=48 is not a swizzle span"),
    (dict(start=0, lbo=16, sbo=16, swizzle=0, base_offset=8), "base_offset=8")])
def test_bad_descriptors(kw, msg):
    with pytest.raises(gpucg.InputError, match=msg):
        hl.descriptor(**kw)


#: Table 38 and its figures: per swizzle, the physical 16-byte chunk of logical chunk c in
#: row r of a K-major atom (rows of S bytes); 128B: c ^ r over 8 x 8, 64B: c ^ (r / 2) over
#: 8 x 4, 32B: c ^ (r / 4) over 8 x 2, none: 8 x 1
ATOMS = {128: [[c ^ r for c in range(8)] for r in range(8)],
         64: [[c ^ (r >> 1) for c in range(4)] for r in range(8)],
         32: [[c ^ (r >> 2) for c in range(2)] for r in range(8)],
         0: [[0] for _ in range(8)]}


@pytest.mark.parametrize("swizzle", hl.SWIZZLES)
def test_swizzle_atoms(swizzle):
    span = swizzle or 16
    lbo, sbo = hl.tile_strides(rows=8, cols=span // 2, major="K", swizzle=swizzle, elem_bytes=2)
    got = [[(hl.operand_address(0, r, 8 * c, major="K", swizzle=swizzle, elem_bytes=2, lbo=lbo,
                                sbo=sbo) - r * span) // 16 for c in range(span // 16)]
           for r in range(8)]
    assert got == ATOMS[swizzle]
    # MN-major atoms are the transposes: S/16 chunks of MN by 8 rows of K
    lbo, sbo = hl.tile_strides(rows=span // 2, cols=8, major="MN", swizzle=swizzle, elem_bytes=2)
    got = [[(hl.operand_address(0, 8 * c, k, major="MN", swizzle=swizzle, elem_bytes=2, lbo=lbo,
                                sbo=sbo) - k * span) // 16 for c in range(span // 16)]
           for k in range(8)]
    assert got == ATOMS[swizzle]
    # the C spelling computes the same addresses
    for a in (0, 0x3F0, 0x1000 + 7 * 128 + 48):
        assert eval(str(hl.swizzle_address("a", swizzle)), {"a": a}) == \
            hl.swizzle_address(a, swizzle)


CASES = [(major, swizzle, es) for major in hl.MAJORS for swizzle in hl.SWIZZLES
         for es in (1, 2, 4)]


@pytest.mark.parametrize("major,swizzle,es", CASES)
def test_tma_tiles_read_back_through_descriptors(major, swizzle, es):
    """An M x K operand tile filled by TMA boxes (slab by slab), then every element of every
    wgmma K step read through its descriptor: each is the global element it should be."""
    kinst = 32 // es  # a wgmma's K: 32 bytes (k16 f16, k8 tf32, k32 fp8)
    span = (swizzle or 16) // es
    rows = max(64, span) if major == "MN" else 64  # an MN-major tile spans a swizzle row of MN
    cols = 2 * max(kinst, span)
    inner = hl.box_inner_bytes(swizzle) // es
    rng = np.random.default_rng(5)
    shape = (rows, cols) if major == "K" else (cols, rows)  # NumPy order, contiguous last
    g = rng.integers(0, 256, shape[0] * shape[1] * es, dtype=np.uint8)
    t = TensorMap.for_array(shape, {1: "uint8", 2: "float16", 4: "float32"}[es],
                            (shape[0], inner), swizzle=swizzle)
    base, smem = 2048, np.zeros(2048 + rows * cols * es, np.uint8)
    slab = shape[0] * inner * es
    for s in range(shape[1] // inner):
        assert box_load(t, g, (s * inner, 0), smem, base + s * slab) == slab
    lbo, sbo = hl.tile_strides(rows=rows, cols=cols, major=major, swizzle=swizzle, elem_bytes=es)
    layout = dict(major=major, swizzle=swizzle, elem_bytes=es, lbo=lbo, sbo=sbo)
    elem = g.reshape(shape[0], shape[1] * es)
    for k0 in range(0, cols, kinst):
        start = base + hl.tile_k_start(k0, rows=rows, cols=cols, major=major, swizzle=swizzle,
                                       elem_bytes=es)
        for r in range(rows):
            for c in range(kinst):
                a = hl.operand_address(start, r, c, **layout)
                i, j = (r, k0 + c) if major == "K" else (k0 + c, r)
                assert bytes(smem[a:a + es]) == bytes(elem[i, j * es:(j + 1) * es]), (r, k0, c)
    # the C spelling of the canonical offset agrees
    c_expr = hl.canonical_offset("r", "c", **layout)
    for r, c in ((0, 0), (9, kinst - 1), (63, 3)):
        assert eval(c_expr.replace("/", "//"), {"r": r, "c": c}) == \
            hl.canonical_offset(r, c, **layout)


def test_out_of_bounds_fill_and_store():
    x = np.arange(6 * 24, dtype=np.float16).reshape(6, 24)[:, :20]  # dims (20, 6), rows 48 B
    t = TensorMap.for_array(x.shape, "float16", (4, 8), strides=(48, 2))
    smem = np.zeros(4 * 8 * 2, np.uint8)
    mem = np.ascontiguousarray(x.base).view(np.uint8).reshape(-1)
    box_load(t, mem, (16, 4), smem)  # columns 16..23, rows 4..7
    got = smem.view(np.float16).reshape(4, 8)
    want = np.zeros((4, 8), np.float16)
    want[:2, :4] = x[4:6, 16:20]
    np.testing.assert_array_equal(got, want)
    nan = TensorMap.for_array(x.shape, "float16", (4, 8), strides=(48, 2), oob_fill="nan")
    box_load(nan, mem, (-2, -1), smem)
    got = smem.view(np.float16).reshape(4, 8)
    assert np.isnan(got[0]).all() and np.isnan(got[:, :2]).all()
    np.testing.assert_array_equal(got[1:, 2:], x[:3, :6])
    # a store writes the in-bounds part only
    y = np.full((6, 24), -1, np.float16)
    box_store(t, smem, 0, y.view(np.uint8).reshape(-1), (-2, -1))
    np.testing.assert_array_equal(y[:3, :6], x[:3, :6])
    assert (y[3:] == -1).all() and (y[:, 6:] == -1).all()
    with pytest.raises(gpucg.InputError, match="128-byte aligned"):
        box_load(t, mem, (0, 0), np.zeros(4096, np.uint8), 64)


@pytest.mark.parametrize("n", [8, 64, 256])
def test_accumulator_fragment(n):
    seen = {}
    for thread in range(hl.WARPGROUP):
        for i in range(n // 2):
            rc = hl.accumulator(n, thread, i)
            assert rc not in seen
            seen[rc] = (thread, i)
            assert hl.accumulator_owner(n, *rc) == (thread, i)
            # the PTX ISA's m64nNk16 D figure: warp w rows 16w + lane/4 (+8), columns
            # 8j + 2 (lane % 4) (+1), registers d[4j .. 4j + 3]
            w, lane, j = thread // 32, thread % 32, i // 4
            assert rc == (16 * w + lane // 4 + 8 * (i % 4 // 2), 8 * j + 2 * (lane % 4) + i % 2)
    assert set(seen) == {(r, c) for r in range(64) for c in range(n)}
    row, col = hl.accumulator(n, "tid", n // 2 - 1)
    for thread in (0, 37, 127):
        assert (eval(row, {"tid": thread}), eval(col, {"tid": thread})) == \
            hl.accumulator(n, thread, n // 2 - 1)
    with pytest.raises(gpucg.InputError, match="N=12 must be a multiple of 8"):
        hl.accumulator(12, 0, 0)


@pytest.mark.parametrize("kind", list(hl.WGMMA_K))
def test_a_register_fragment(kind):
    k = hl.WGMMA_K[kind]
    cells = [hl.a_fragment(kind, t, i) for t in range(hl.WARPGROUP) for i in range(k // 2)]
    assert sorted(cells) == [(r, c) for r in range(64) for c in range(k)]
    # mma.sync m16n8k16's A for lane 5 (group 1, thread 1): a0 (1, 2), a2 (9, 2), a4 (1, 10)
    if kind == "f16":
        assert [hl.a_fragment(kind, 32 + 5, i) for i in (0, 1, 2, 4, 7)] == \
            [(17, 2), (17, 3), (25, 2), (17, 10), (25, 11)]


@pytest.mark.parametrize("rank", [3, 5])
def test_box_of_a_strided_tensor_of_every_rank(rank):
    """A box of a 3-D and a 5-D tensor whose rows are padded (strides beyond the dims), at
    coordinates partly outside: NumPy's slice of the tensor, zeros outside."""
    rng = np.random.default_rng(rank)
    shape = (3, 4, 5, 6, 16)[-rank:]
    padded = shape[:-1] + (24,)  # each innermost row padded to 48 bytes
    full = rng.integers(1, 1000, padded).astype(np.float16)
    strides = tuple(s for s in full.strides)  # NumPy's byte strides, innermost 2
    box = (2, 3, 2, 4, 8)[-rank:]
    t = TensorMap.for_array(shape, "float16", box, strides=strides)
    coords = (-1, 2, 4, 3, 12)[-rank:][::-1]  # driver order: innermost first
    smem = np.zeros(int(np.prod(box)) * 2, np.uint8)
    box_load(t, full.view(np.uint8).reshape(-1), coords, smem)
    want = np.zeros(box, np.float16)
    lo = coords[::-1]
    src = tuple(slice(max(c, 0), min(c + b, d)) for c, b, d in zip(lo, box, shape))
    dst = tuple(slice(s.start - c, s.stop - c) for s, c in zip(src, lo))
    want[dst] = full[src]
    np.testing.assert_array_equal(smem.view(np.float16).reshape(box), want)
