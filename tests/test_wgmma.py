"""The warpgroup MMA atoms (gpucg/codegen/wgmma.py): the OpenCL emulation run for one
warpgroup on PoCL against NumPy, its operands laid in local memory by TMA's tile layout
(gpucg.codegen.hopper_layouts.tile_offset, swizzled by address) and read through descriptors
the host builds (both majors, every swizzle, A from registers by the ISA's fragment table),
and the CUDA spellings compiled by NVRTC for sm_90a into HGMMA / QGMMA."""

import ml_dtypes  # noqa: F401  (registers the FP8 and bfloat16 dtype names with NumPy)
import numpy as np
import pytest

from gpucg.codegen import CUDA, OPENCL
from gpucg.codegen import hopper_layouts as hl
from gpucg.codegen.wgmma import ARCH_MARK, wgmma_atom
from gpucg.errors import DTypeError
from gpucg.verify import nvrtc

from test_warp_ops import _run, tf32

DTYPES = {"f16": np.float16, "bf16": "bfloat16", "tf32": np.float32,
          "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def _values(rng, kind, shape):
    """Values every kind holds exactly: small multiples of 1/4 (tf32: any float, rounded)."""
    if kind == "tf32":  # rounded as the kernels round them (the tensor core ignores the rest)
        return tf32(rng.standard_normal(shape).astype(np.float32))
    return (rng.integers(-8, 8, shape) / 4).astype(np.float32)


def _place(smem, base, x, kind, major, swizzle):
    """x (rows x cols: M or N by K) into smem as TMA boxes lay it (K-major: rows of K; MN-major:
    rows of MN), at byte base; returns the descriptor's (lbo, sbo)."""
    rows, cols = x.shape
    eb = np.dtype(DTYPES[kind]).itemsize
    raw = x.astype(DTYPES[kind]).view(np.uint8).reshape(rows, cols, eb)
    for r in range(rows):
        for c in range(cols):
            at = hl.swizzle_address(base + hl.tile_offset(r, c, rows=rows, cols=cols, major=major,
                                                          swizzle=swizzle, elem_bytes=eb), swizzle)
            smem[at:at + eb] = raw[r, c]
    return hl.tile_strides(rows=rows, cols=cols, major=major, swizzle=swizzle, elem_bytes=eb)


def _kernel(atom, am, bm, ksteps, smem_bytes):
    d = OPENCL
    h = d.hopper
    a_arg = "a" if atom.a_regs else "DA[ks]"
    call = h.wgmma(atom, am, bm, "acc", a_arg, "DB[ks]", "ks > 0 || keep")
    load_a = (f"    for (int i = 0; i < 4; ++i) a[i] = RA[(ks * 128 + t) * 4 + i];\n"
              if atom.a_regs else "")
    return f"""{h.helpers(wgmma=[(atom, am, bm)])}
__kernel void k(__global const uchar* S, __global const ulong* DA, __global const ulong* DB,
                __global const uint* RA, __global const float* C, __global const int* KEEP,
                __global float* D)
{{
    __local uchar gpucg_smem[{smem_bytes}] __attribute__((aligned(1024)));
    const int t = get_local_id(0), keep = KEEP[0];
{h.wg_setup("t", 1, "1", atom.a_regs)}
    for (int i = t; i < {smem_bytes}; i += 128) gpucg_smem[i] = S[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc[{atom.d_elems}];
    uint a[4];
    for (int i = 0; i < {atom.d_elems}; ++i) acc[i] = C[t * {atom.d_elems} + i];
    for (int ks = 0; ks < {ksteps}; ++ks) {{
{load_a}        {call}
    }}
    for (int i = 0; i < {atom.d_elems}; ++i) D[t * {atom.d_elems} + i] = acc[i];
}}
"""


#: the cases the kernels' own tests also reach (gemm_wgmma's f16 K/K, fp8_wgmma's) run with
#: -m exhaustive only
CASES = [("f16", 16, False, "MN", "MN", 128), ("bf16", 24, False, "K", "MN", 64),
         ("tf32", 16, False, "K", "K", 32), ("f16", 16, True, "K", "MN", 0),
         ("e4m3", 8, True, "K", "K", 64)]
MORE = [("f16", 32, False, "K", "K", 128), ("e4m3", 16, False, "K", "K", 128),
        ("e5m2", 8, False, "K", "K", 0)]


def _id(c):
    return f"{c[0]}-n{c[1]}-{'rs' if c[2] else 'ss'}-{c[3]}{c[4]}-sw{c[5]}"


@pytest.mark.parametrize("kind,n,a_regs,am,bm,swizzle",
                         CASES + [pytest.param(*c, marks=pytest.mark.exhaustive) for c in MORE],
                         ids=[_id(c) for c in CASES + MORE])
def test_emulated_wgmma_is_the_product_its_descriptors_name(kind, n, a_regs, am, bm, swizzle):
    """Two k-steps, the second descriptor's start advanced as a kernel advances it
    (hopper_layouts.tile_k_start); D = A B (+ C where scale-d keeps it) at the accumulator
    table's places."""
    atom = wgmma_atom(kind, n, a_regs)
    rng = np.random.default_rng(hash((kind, n, a_regs)) % 2**32)
    ks, kk = 2, atom.k
    K = ks * kk
    eb = atom.elem_bytes
    A, B = _values(rng, kind, (64, K)), _values(rng, kind, (n, K))
    C = rng.standard_normal((64, n)).astype(np.float32)
    smem = np.zeros(65536, np.uint8)
    a_base, b_base = 0, 16384
    la, sa = _place(smem, a_base, A, kind, am, swizzle)
    lb, sb = _place(smem, b_base, B, kind, bm, swizzle)
    kw = dict(swizzle=swizzle, elem_bytes=eb)
    da = [hl.descriptor(a_base + hl.tile_k_start(s * kk, rows=64, cols=K, major=am, **kw),
                        la, sa, swizzle) for s in range(ks)]
    db = [hl.descriptor(b_base + hl.tile_k_start(s * kk, rows=n, cols=K, major=bm, **kw),
                        lb, sb, swizzle) for s in range(ks)]
    regs = np.zeros((ks, 128, 4), np.uint32)
    if a_regs:
        per = 32 // atom.bits
        bits = A.astype(DTYPES[kind]).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[eb])
        for s in range(ks):
            for t in range(128):
                for i in range(atom.a_elems):
                    r, c = atom.a_at(t, i)
                    regs[s, t, i // per] |= np.uint32(bits[r, s * kk + c]) << (atom.bits * (i % per))
    keep = int(a_regs)  # the RS cases keep C (scale-d 1 from the first step), the SS ones not
    Cd = np.zeros((128, atom.d_elems), np.float32)
    for t in range(128):
        for i in range(atom.d_elems):
            Cd[t, i] = C[atom.d_at(t, i)]
    src = _kernel(atom, am, bm, ks, 32768)
    (out,) = _run(src, "k", [smem[:32768], np.array(da, np.uint64), np.array(db, np.uint64),
                             regs, Cd, np.array([keep], np.int32)],
                  [((128, atom.d_elems), np.float32)], 128)
    want = A.astype(np.float64) @ B.astype(np.float64).T + (C if keep else 0)
    for t in range(128):
        got = [want[atom.d_at(t, i)] for i in range(atom.d_elems)]
        np.testing.assert_allclose(out[t], got, rtol=1e-5, atol=1e-4, err_msg=f"thread {t}")


def test_atoms_refuse_what_the_isa_does_not_have():
    with pytest.raises(DTypeError, match="multiple of 8 in"):
        wgmma_atom("f16", 12)
    with pytest.raises(DTypeError, match="allowed: f16, bf16, tf32, e4m3, e5m2"):
        wgmma_atom("f64", 64)
    with pytest.raises(DTypeError, match="K-major only"):
        wgmma_atom("tf32", 64).check_majors("K", "MN")
    with pytest.raises(DTypeError, match="setmaxnreg takes a multiple of 8"):
        CUDA.hopper.setmaxnreg(100, True)
    with pytest.raises(DTypeError, match="1 to 5 dimensions"):
        OPENCL.hopper.tma_load("0", "tm", "0", [0] * 6)
    atom = wgmma_atom("e4m3", 64)
    assert (atom.shape, atom.sass, atom.d_elems, atom.a_words) == ("m64n64k32", "QGMMA", 32, 4)


def _cuda_source():
    h = CUDA.hopper
    forms = [(wgmma_atom("f16", 256), "K", "K"), (wgmma_atom("bf16", 128), "MN", "MN"),
             (wgmma_atom("tf32", 64), "K", "K"), (wgmma_atom("e4m3", 128), "K", "K"),
             (wgmma_atom("e5m2", 32), "K", "K"), (wgmma_atom("f16", 64, True), "K", "MN")]
    calls = "\n".join(
        "    " + h.wgmma(a, am, bm, "acc", "ra" if a.a_regs else "da", "db", "kt") for a, am, bm in forms)
    return f"""{CUDA.tile.helpers()}
{h.helpers(wgmma=forms, loads=[2, 3], stores=[2], arch_specific=True, elect=True)}
extern "C" __global__ void __launch_bounds__(384, 1) k({h.map_param("tm")}, float* out, int n)
{{
    {CUDA.tile.smem_block(1024)}
    const unsigned sbase = {h.base};
    const int t = threadIdx.x;
    if (t == 0) {{ {h.init("sbase", 1)} {h.init_fence()} }}
    __syncthreads();
    if (t < 128) {{
        {h.setmaxnreg(40, False)}
        if (t < 32 && {h.elect()}) {{
            {h.prefetch("tm")}
            for (int kt = 0; kt < n; ++kt) {{
                {h.wait("sbase + 8", "(kt & 1) ^ 1")}
                {h.expect_tx("sbase", 8192)}
                {h.tma_load("sbase + 1024", "tm", "sbase", ["kt * 64", 0])}
                {h.tma_load("sbase + 9216", "tm", "sbase", ["kt * 64", 0, 0])}
            }}
        }}
    }} else {{
        {h.setmaxnreg(232, True)}
        float acc[128];
        unsigned ra[4] = {{1u, 2u, 3u, 4u}};
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < n; ++kt) {{
            {h.wait("sbase", "kt & 1")}
            const unsigned long long da = {hl.descriptor("sbase + 1024", 16, 1024, 128)};
            const unsigned long long db = {hl.descriptor("sbase + 9216", 16, 1024, 128)};
            {h.wgmma_fence()}
{calls}
            {h.wgmma_commit()}
            {h.wgmma_wait(0)}
            {h.wgmma_keep("acc", 128)}
            if ((t & 127) == 0) {h.arrive("sbase + 8")}
        }}
        for (int i = 0; i < 128; ++i) out[t * 128 + i] = acc[i];
        {h.fence_proxy()}
        {h.bar_sync(1, 256)}
        if (t == 128) {{
            {h.tma_store("tm", "sbase + 1024", [0, 0])}
            {h.store_commit()}
            {h.store_wait_read(0)}
            {h.store_wait()}
        }}
    }}
}}
"""


def test_cuda_spellings_assemble_for_sm_90a(sass_or_skip):
    """ptxas for sm_90a takes every form; the SASS holds HGMMA, QGMMA, UTMALDG, UTMASTG and
    SYNCS; no local memory; setmaxnreg honoured (no C7508); plain sm_90 refuses the source."""
    from gpucg.verify import sass

    src = _cuda_source()
    assert nvrtc.required_arch(src) == "sm_90a" and ARCH_MARK in src
    cubin, log = nvrtc.compile_to_cubin(src, "sm_90a")
    assert "C7508" not in log and "0 bytes stack frame" in log, log
    ops = {op.split(".")[0] for op in sass.parse_sass(sass.disassemble(cubin))["k"]}
    assert {"HGMMA", "QGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG"} <= ops
    assert not ops & {"LDL", "STL"}
    with pytest.raises(Exception, match="not supported on .target 'sm_90'"):
        nvrtc.compile_to_cubin(src, "sm_90")
