"""The warp-level Dialect operations (gpucg/codegen/warp.py): the OpenCL emulation of mma.sync,
ldmatrix and cp.async checked lane by lane on PoCL against NumPy statements of the PTX ISA's
tables, the shared-tile swizzle, and the CUDA spellings compiled by NVRTC for sm_80 and sm_90.
"""

import numpy as np
import pytest

from gpucg.codegen import CUDA, OPENCL
from gpucg.codegen.smem import swizzle
from gpucg.errors import DTypeError
from gpucg.verify import nvrtc

from conftest import backend_or_skip

# -- the PTX ISA's fragment tables, as NumPy sees them (g = lane >> 2, t = lane % 4) ----------


def a_at(kind, lane, i):
    """(row, col) of A element i of a lane."""
    g, t = lane >> 2, lane & 3
    if kind == "tf32":  # a0, a2: row g; a1, a3: g + 8; a0, a1: col t; a2, a3: t + 4
        return g + 8 * (i % 2), t + 4 * (i // 2)
    return g + 8 * (i in (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4)


def b_at(kind, lane, i):
    """(row k, col n) of B element i of a lane."""
    g, t = lane >> 2, lane & 3
    if kind == "tf32":
        return t + 4 * i, g
    return 2 * t + (i & 1) + 8 * (i >= 2), g


def c_at(lane, i):
    return (lane >> 2) + 8 * (i >= 2), 2 * (lane & 3) + (i & 1)


def tf32(x):
    """float32 rounded as cvt.rna.tf32.f32: 10 mantissa bits, nearest, ties away from zero."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _bits16(values, kind):
    if kind == "f16":
        return values.astype(np.float16).view(np.uint16).astype(np.uint32)
    return (values.astype(np.float32).view(np.uint32) >> 16)  # bf16: exact for these values


def _run(source, entry, args, out_shapes, wg=32):
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    be = get_backend("opencl")
    prog = be.compile(source, entry)
    dev = [be.to_device(np.ascontiguousarray(a)) for a in args]
    outs = [be.empty(s, dt) for s, dt in out_shapes]
    prog(*dev, *outs, grid=1, block=wg)
    return [be.to_host(o) for o in outs]


def _mma_kernel(kind):
    d = OPENCL
    return f"""{d.warp_helpers([kind])}
__kernel void k(__global const uint* A, __global const uint* B, __global const float* C,
                __global float* D)
{{
    const int t = get_local_id(0);
{d.warp_setup(2, "t")}
    uint a[4], b[2];
    float c[4];
    for (int i = 0; i < 4; ++i) {{ a[i] = A[t * 4 + i]; c[i] = C[t * 4 + i]; }}
    b[0] = B[t * 2]; b[1] = B[t * 2 + 1];
    {d.mma(kind, "c", "a", "b")}
    for (int i = 0; i < 4; ++i) D[t * 4 + i] = c[i];
}}
"""


@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
def test_emulated_mma_follows_the_fragment_tables(kind):
    """Two warps (64 work-items), each its own product: lane l's registers are filled from the
    tables, and its four sums must be D = A B + C at the C/D table's places."""
    rng = np.random.default_rng(1)
    kk = 8 if kind == "tf32" else 16
    nwarp = 2
    if kind == "tf32":
        A = rng.standard_normal((nwarp, 16, kk)).astype(np.float32)
        B = rng.standard_normal((nwarp, kk, 8)).astype(np.float32)
    else:  # small integers and halves: exact in f16 and bf16
        A = rng.integers(-8, 8, (nwarp, 16, kk)).astype(np.float32) / 2
        B = rng.integers(-8, 8, (nwarp, kk, 8)).astype(np.float32) / 2
    C = rng.standard_normal((nwarp, 16, 8)).astype(np.float32)
    regs_a = np.zeros((nwarp * 32, 4), np.uint32)
    regs_b = np.zeros((nwarp * 32, 2), np.uint32)
    regs_c = np.zeros((nwarp * 32, 4), np.float32)
    for w in range(nwarp):
        for lane in range(32):
            x = w * 32 + lane
            if kind == "tf32":
                regs_a[x] = [A[w][a_at(kind, lane, i)].view(np.uint32) for i in range(4)]
                regs_b[x] = [B[w][b_at(kind, lane, i)].view(np.uint32) for i in range(2)]
            else:
                ea = _bits16(np.array([A[w][a_at(kind, lane, i)] for i in range(8)]), kind)
                eb = _bits16(np.array([B[w][b_at(kind, lane, i)] for i in range(4)]), kind)
                regs_a[x] = ea[0::2] | (ea[1::2] << 16)
                regs_b[x] = eb[0::2] | (eb[1::2] << 16)
            regs_c[x] = [C[w][c_at(lane, i)] for i in range(4)]
    (out,) = _run(_mma_kernel(kind), "k", [regs_a, regs_b, regs_c], [((64, 4), np.float32)], 64)
    for w in range(nwarp):
        a, b = (tf32(A[w]), tf32(B[w])) if kind == "tf32" else (A[w], B[w])
        want = a.astype(np.float64) @ b.astype(np.float64) + C[w]
        for lane in range(32):
            got = out[w * 32 + lane]
            exp = [want[c_at(lane, i)] for i in range(4)]
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5, err_msg=f"lane {lane}")


def test_tf32_rounding_is_nearest_ties_away():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -12], np.float32)
    np.testing.assert_array_equal(tf32(x), np.array([1 + 2 ** -10, 1 + 2 ** -9,
                                                     -(1 + 2 ** -10), 1], np.float32))


def _ldmatrix_kernel(num, trans):
    d = OPENCL
    return f"""{d.tile.helpers([(num, trans)])}
__kernel void k(__global const ushort* S, __global const int* OFF, __global uint* R)
{{
    const int t = get_local_id(0);
{d.warp_setup(1, "t")}
    __local uchar gpucg_smem[1024] __attribute__((aligned(16)));
    for (int i = t; i < 512; i += 32) ((__local ushort*)gpucg_smem)[i] = S[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    uint r[4] = {{0, 0, 0, 0}};
    {d.tile.ldsm("r", num, trans, "(uint)OFF[t] * 2")}
    for (int j = 0; j < 4; ++j) R[t * 4 + j] = r[j];
}}
"""


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_emulated_ldmatrix_follows_its_table(num, trans):
    """Rows at scattered addresses (each lane names one row); register j of lane t must hold
    elements (t / 4, 2 (t % 4)) and (t / 4, 2 (t % 4) + 1) of matrix j (transposed with .trans)."""
    rng = np.random.default_rng(num + 10 * trans)
    smem = rng.integers(0, 2 ** 16, 512).astype(np.uint16)
    off = (rng.permutation(64)[:32] * 8).astype(np.int32)  # 16-byte aligned row starts
    (got,) = _run(_ldmatrix_kernel(num, trans), "k", [smem, off], [((32, 4), np.uint32)])
    for j in range(num):
        mat = np.array([[smem[off[j * 8 + r] + c] for c in range(8)] for r in range(8)])
        if trans:
            mat = mat.T
        for t in range(32):
            lo, hi = mat[t // 4][2 * (t % 4)], mat[t // 4][2 * (t % 4) + 1]
            assert got[t][j] == int(lo) | (int(hi) << 16), (j, t)
    assert not got[:, num:].any()


def test_emulated_cp_async_copies_and_zero_fills():
    d = OPENCL
    src = f"""__kernel void k(__global const float* G, __global float* O)
{{
    const int t = get_local_id(0);
    __local uchar gpucg_smem[32 * 20] __attribute__((aligned(16)));
    __local const float* sm = (__local const float*)gpucg_smem;
    {d.tile.cp(16, "t * 16", "G + t * 4", "t % 3 != 0")}
    {d.tile.cp(4, "512 + t * 4", "G + t", "t % 2")}
    {d.cp_async_commit()}
    {d.cp_async_wait(0)}
    for (int i = 0; i < 4; ++i) O[t * 4 + i] = sm[t * 4 + i];
    O[128 + t] = sm[128 + t];
}}
"""
    g = np.arange(128, dtype=np.float32) + 1
    (out,) = _run(src, "k", [g], [((160,), np.float32)])
    want16 = np.concatenate([g[4 * t:4 * t + 4] if t % 3 else np.zeros(4) for t in range(32)])
    want4 = np.array([g[t] if t % 2 else 0 for t in range(32)])
    np.testing.assert_array_equal(out, np.concatenate([want16, want4]))


@pytest.mark.parametrize("cpr", [2, 4, 8, 16])
def test_swizzle_rows_and_chunks_hit_distinct_slots(cpr):
    """8 consecutive rows at one chunk (an ldmatrix matrix) and 8 consecutive chunks stored
    (a quarter warp's 16-byte copies) cover the 8 16-byte slots of a 128-byte line; the C
    expression computes the same chunk as the Python function."""
    for r0 in range(0, 32, 8):
        for c in range(cpr):
            slots = {(r * cpr + swizzle(r, c, cpr)) % 8 for r in range(r0, r0 + 8)}
            assert len(slots) == 8, (cpr, r0, c)
    for q0 in range(0, 64, 8):
        slots = {((q // cpr) * cpr + swizzle(q // cpr, q % cpr, cpr)) % 8 for q in range(q0, q0 + 8)}
        assert len(slots) == min(8, max(cpr, 8)), (cpr, q0)
    for r in range(16):
        for c in range(cpr):
            assert eval(str(swizzle("r", "c", cpr)), {"r": r, "c": c}) == swizzle(r, c, cpr)


def test_bad_warp_op_arguments_are_refused():
    with pytest.raises(DTypeError, match="mma kind 'f64'"):
        CUDA.mma("f64", "c", "a", "b")
    with pytest.raises(DTypeError, match="1, 2 or 4 matrices, not 3"):
        OPENCL.tile.ldsm("r", 3, False, "0")
    with pytest.raises(DTypeError, match="4, 8 or 16 bytes, not 2"):
        CUDA.tile.cp(2, "0", "g", "1")


def _cuda_kernel():
    d = CUDA
    variants = [(n, tr) for n in (1, 2, 4) for tr in (False, True)]
    body = "\n".join(
        [d.tile.ldsm("r", n, tr, f"sbase + {16 * n}") for n, tr in variants]
        + [d.to_tf32("r", 4)] + [d.mma(k, "c", "r", "r + 2") for k in ("f16", "bf16", "tf32")])
    return f"""{d.warp_helpers(["f16", "bf16", "tf32"])}
{d.tile.helpers(variants, [16, 4], True, True, True)}
extern "C" __global__ void k(const float* G, float* O)
{{
    {d.tile.smem_block(128)}
    const unsigned sbase = {d.tile.base};
    const int t = threadIdx.x;
    {d.tile.cp(16, "sbase + t * 16", "G + t * 4", "t < 100")}
    {d.tile.cp(4, "sbase + 4096 + t * 4", "G + t", "t < 100")}
    {d.cp_async_commit()}
    {d.cp_async_wait(0)}
    __syncthreads();
    unsigned r[4];
    float c[4] = {{0, 0, 0, 0}};
{body}
    for (int i = 0; i < 4; ++i) O[t * 4 + i] = c[i] + r[i];
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_spellings_compile_with_nvrtc(nvrtc_or_skip, arch):
    ptx = nvrtc.compile_to_ptx(_cuda_kernel(), arch)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    for insn in ["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                 "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "cvt.rna.tf32.f32",
                 "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
                 "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                 "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                 "cp.async.cg.shared.global", "cp.async.ca.shared.global",
                 "cp.async.commit_group", "cp.async.wait_group 0", "cvta.to.shared.u64"]:
        assert insn in ptx, insn
