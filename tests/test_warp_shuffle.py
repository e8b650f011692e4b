"""Warp shuffles, warp reduce and scan, block reduce and scan (gpucg/codegen/shuffle.py): the
OpenCL emulation on PoCL against NumPy models of CUDA's shfl.sync (lane by lane, and the
butterfly and Hillis-Steele rounds in CUDA's order, so float results match bit for bit), and
the CUDA spellings compiled by NVRTC for sm_80 and sm_90.
"""

import numpy as np
import pytest

from gpucg.codegen import CUDA, OPENCL
from gpucg.errors import DTypeError
from gpucg.verify import nvrtc

from conftest import backend_or_skip

WG = 128  # four warps


def _run(body, x, ctype="float", outs=1, wg=WG, decl=""):
    """Run ``body`` (reads v = X[t], writes Y*) on PoCL: one work-group of ``wg``."""
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    d = OPENCL
    ys = "".join(f", __global {ctype}* Y{i}" for i in range(outs))
    pre = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" else ""
    src = f"""{pre}__kernel void k(__global const {ctype}* X{ys})
{{
    const int t = get_local_id(0);
{d.shfl_setup(wg // 32, "t", wg)}
{decl}
    {ctype} v = X[t];
{body}
}}
"""
    be = get_backend("opencl")
    prog = be.compile(src, "k")
    out = [be.empty((wg,), x.dtype) for _ in range(outs)]
    prog(be.to_device(x), *out, grid=1, block=wg)
    return [be.to_host(o) for o in out]


def shfl_model(x, mode, arg, width):
    """CUDA's shfl.sync over the lanes of each warp (x: one value a lane)."""
    out = x.copy()
    for i in range(len(x)):
        base, lane = i - i % 32, i % 32
        seg = lane - lane % width
        a = arg(lane) if callable(arg) else arg
        src = {"xor": lane ^ a, "up": lane - a, "down": lane + a, "idx": seg + a % width}[mode]
        # PTX shfl.sync: bfly and down check src <= the segment's last lane, up src >= its
        # first, idx stays inside
        if (mode == "up" and src >= seg) or (mode != "up" and 0 <= src < seg + width):
            out[i] = x[base + src]
    return out


@pytest.mark.parametrize("mode,arg", [("xor", 5), ("xor", 16), ("up", 3), ("down", 1),
                                      ("down", 7), ("idx", 9), ("idx", "lane")])
@pytest.mark.parametrize("width", [32, 8])
def test_emulated_shuffles_follow_shfl_sync(mode, arg, width):
    x = (np.arange(WG, dtype=np.int32) * 7 + 3)
    expr = "(gpucg_lane * 5 + 1) % 32" if arg == "lane" else str(arg)
    fn = (lambda lane: (lane * 5 + 1) % 32) if arg == "lane" else arg
    (got,) = _run(OPENCL.shfl(mode, "Y0[t]", "v", expr, "int", width), x, "int")
    np.testing.assert_array_equal(got, shfl_model(x, mode, fn, width))


def butterfly(x, width, comb):
    """The warp reduce's rounds as CUDA runs them: every lane, offsets width/2 .. 1."""
    v = x.copy()
    o = width // 2
    while o:
        other = np.array([v[i ^ o] for i in range(len(v))], v.dtype)
        v = comb(v, other)
        o //= 2
    return v


def hillis_steele(x, width, comb):
    v = x.copy()
    o = 1
    while o < width:
        lanes = np.arange(len(v)) % width
        prev = np.roll(v, o)
        v = np.where(lanes >= o, comb(prev, v), v)
        o *= 2
    return v


COMBS = {"sum": np.add, "max": np.maximum, "min": np.minimum,
         # a combine expression: the larger magnitude (a non-named one, keeping signs)
         "(fabs({a}) > fabs({b}) ? {a} : {b})": lambda a, b: np.where(np.abs(a) > np.abs(b), a, b)}


@pytest.mark.parametrize("op", list(COMBS))
@pytest.mark.parametrize("width", [32, 4])
def test_emulated_warp_reduce_is_the_butterfly(op, width):
    x = np.random.default_rng(3).standard_normal(WG).astype(np.float32)
    (got,) = _run(OPENCL.warp_reduce("v", op, "float", width) + "\nY0[t] = v;", x)
    want = butterfly(x, width, COMBS[op])
    np.testing.assert_array_equal(got, want)  # the same rounds: the same bits
    seg = x.astype(np.float64).reshape(-1, width)
    ref = {"sum": seg.sum(1), "max": seg.max(1), "min": seg.min(1)}.get(op)
    if ref is not None:
        np.testing.assert_allclose(got, np.repeat(ref, width), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ctype,dt", [("int", np.int32), ("double", np.float64)])
def test_emulated_warp_scan_is_hillis_steele(ctype, dt):
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    if ctype == "double" and "cl_khr_fp64" not in get_backend("opencl").device.extensions:
        pytest.skip("no double precision on this OpenCL device")
    x = np.random.default_rng(4).integers(-50, 50, WG).astype(dt)
    for width in (32, 8):
        (got,) = _run(OPENCL.warp_scan("v", "sum", ctype, width) + "\nY0[t] = v;", x, ctype)
        np.testing.assert_array_equal(got, hillis_steele(x, width, np.add))
        np.testing.assert_array_equal(got, np.cumsum(x.reshape(-1, width), 1).ravel())


@pytest.mark.parametrize("lanes", [16, 32, 64, 128])
def test_emulated_block_reduce_and_scan(lanes):
    """Sum and max over each ``lanes`` consecutive work-items; inclusive sum scan with its
    total; the scratch reused by the second and third call."""
    x = np.random.default_rng(lanes).integers(-1000, 1000, WG).astype(np.float32)
    body = "\n".join([
        "float s = v, m = v, c = v, tot = 0, ex = 0;",
        OPENCL.block_reduce("s", "sum", "float", lanes, "part"),
        OPENCL.block_reduce("m", "max", "float", lanes, "part"),
        OPENCL.block_scan("c", "sum", "float", lanes, "part", total="tot", exclusive="ex"),
        "Y0[t] = s; Y1[t] = m; Y2[t] = c; Y3[t] = tot; Y4[t] = ex;"])
    s, m, c, tot, ex = _run(body, x, outs=5, decl=f"__local float part[{WG // 32}];")
    seg = x.astype(np.float64).reshape(-1, lanes)
    np.testing.assert_array_equal(s, np.repeat(seg.sum(1), lanes))  # integers: exact
    np.testing.assert_array_equal(m, np.repeat(seg.max(1), lanes))
    np.testing.assert_array_equal(c, np.cumsum(seg, 1).ravel())
    np.testing.assert_array_equal(tot, np.repeat(seg.sum(1), lanes))
    prev = np.cumsum(seg, 1)
    prev = np.concatenate([seg[:, :1], prev[:, :-1]], 1)  # the first: its own value
    np.testing.assert_array_equal(ex, prev.ravel())


def test_emulated_narrow_type_scan():
    """short values (CUDA carries them as int): a running product wraps as short does."""
    x = np.random.default_rng(9).integers(-3, 4, WG).astype(np.int16)
    (got,) = _run(OPENCL.block_scan("v", "{a} * {b}", "short", 64, "part") + "\nY0[t] = v;",
                  x, "short", decl=f"__local short part[{WG // 32}];")
    want = np.cumprod(x.reshape(-1, 64).astype(np.int64), 1).astype(np.int16).ravel()
    np.testing.assert_array_equal(got, want)


PAIR = """{
    const float top = {b0} > a ? {b0} : a;
    b = b * exp(a - top) + {b1} * exp({b0} - top);
    a = top;
}"""


@pytest.mark.parametrize("lanes", [8, 32, 128])
def test_emulated_pair_reduce(lanes):
    """softmax's (maximum, sum of exp(v - maximum)) pair, folded by a statement."""
    x = np.random.default_rng(7).standard_normal(WG).astype(np.float32) * 4
    body = "\n".join(["float a = v, b = 1.0f;",
                      OPENCL.block_reduce(["a", "b"], PAIR, "float", lanes, ["pa", "pb"]),
                      "Y0[t] = a; Y1[t] = b;"])
    a, b = _run(body, x, outs=2, decl=f"__local float pa[{WG // 32}], pb[{WG // 32}];")
    seg = x.astype(np.float64).reshape(-1, lanes)
    top = seg.max(1)
    np.testing.assert_array_equal(a, np.repeat(top, lanes).astype(np.float32))
    np.testing.assert_allclose(b, np.repeat(np.exp(seg - top[:, None]).sum(1), lanes), rtol=1e-5)


def test_block_ops_barriers():
    """At most two block barriers past the warp step (none within a warp on CUDA)."""
    assert "__syncthreads" not in CUDA.block_reduce("v", "sum", "float", 32)
    assert CUDA.block_reduce("v", "sum", "float", 256, "p").count("__syncthreads") == 2
    assert CUDA.block_scan("v", "sum", "float", 1024, "p", "t").count("__syncthreads") == 2
    assert CUDA.warp_size == OPENCL.warp_size == 32


def test_bad_shuffle_arguments_are_refused():
    with pytest.raises(DTypeError, match="shuffle mode 'rot'"):
        CUDA.shfl("rot", "y", "v", "1")
    with pytest.raises(DTypeError, match="shuffle type 'half'"):
        OPENCL.warp_reduce("v", "sum", "half")
    with pytest.raises(DTypeError, match="warp width 12"):
        CUDA.warp_scan("v", "sum", "float", 12)
    with pytest.raises(DTypeError, match="block lanes 96"):
        OPENCL.block_reduce("v", "sum", "float", 96, "p")
    with pytest.raises(DTypeError, match="warp combine 'avg'"):
        CUDA.warp_reduce("v", "avg")
    with pytest.raises(DTypeError, match="a fold statement in"):
        CUDA.warp_reduce(["a", "b"], "a += {b0};")
    with pytest.raises(DTypeError, match="one scratch array each"):
        CUDA.block_reduce(["a", "b"], PAIR, "float", 64, "pa")
    with pytest.raises(DTypeError, match="variable 'v; x'"):
        CUDA.warp_reduce("v; x", "sum")


def _cuda_kernel():
    d = CUDA
    body = "\n".join([d.shfl(m, "w", "v", "3", "float", w) for m in ("xor", "up", "down", "idx")
                      for w in (32, 8)] + [
        d.warp_reduce("v", "max", "float"), d.warp_scan("i", "sum", "int", 16),
        d.warp_reduce("x", "sum", "double", 8),
        d.block_reduce(["a", "b"], PAIR, "float", 128, ["part", "part2"]),
        d.block_reduce("v", "sum", "float", 256, "part"),
        d.block_scan("i", "{a} + {b}", "int", 512, "ipart", "tot", "j"),
        d.block_scan("sh", "{a} * {b}", "short", 64, "spart")])
    return f"""extern "C" __global__ void k(const float* X, float* Y)
{{
    __shared__ float part[16], part2[16];
    __shared__ int ipart[16];
    __shared__ short spart[16];
    {d.shfl_setup(16, "threadIdx.x", 512)}
    float v = X[threadIdx.x], w = 0;
    int i = (int)v, tot = 0, j = 0;
    short sh = (short)i;
    double x = v;
    float a = v, b = 1.0f;
{body}
    Y[threadIdx.x] = v + w + i + tot + (float)x + a + b + j + sh;
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_shuffles_compile_with_nvrtc(nvrtc_or_skip, arch):
    ptx = nvrtc.compile_to_ptx(_cuda_kernel(), arch)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    for insn in ["shfl.sync.bfly.b32", "shfl.sync.up.b32", "shfl.sync.down.b32",
                 "shfl.sync.idx.b32", "bar.sync"]:
        assert insn in ptx, insn
