"""Vector loads and cp.async copies read through an argument's address only where it is
aligned: the runtime backends report each argument's alignment (Backend.alignment), the
generated dispatcher checks it for the SIMT tiles' vector configs (dense's and conv2d's
vw > 1: else the same implementation with vw = 1), gemm_mma's launch for its 16-byte copies.
Offset views on PoCL (pyopencl arrays with an offset) and on the CUDA launch stand-in (CuPy
pointers) take the scalar path and give the right results."""

import numpy as np

import gpucg
from gpucg.runtime import alignment_of, use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.shape import MAX_ALIGN
from gpucg.verify.cupy_standin import StandInCupy

from conftest import backend_or_skip

rng = np.random.default_rng(7)


def _cl():
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    return get_backend("opencl")


def _view(cl, host: np.ndarray, start: int):
    """``host`` on the device as a pyopencl view ``start`` elements into a larger buffer."""
    import pyopencl.array as cla

    flat = np.zeros(host.size + 8, host.dtype)
    flat[start:start + host.size] = host.ravel()
    return cla.to_device(cl.queue, flat)[start:start + host.size].reshape(host.shape)


def test_backends_report_alignment():
    cl = _cl()
    x = np.zeros((4, 8), np.float32)
    assert alignment_of(x) == MAX_ALIGN
    assert cl.alignment(cl.to_device(x)) == MAX_ALIGN
    assert [alignment_of(_view(cl, x, s)) for s in (0, 1, 2, 4, 8)] == [MAX_ALIGN, 4, 8, 16, 32]
    cuda = CudaBackend(cupy=StandInCupy("sm_90", check=False))
    a = cuda.to_device(x)
    assert cuda.alignment(a) == MAX_ALIGN
    assert [cuda.alignment(a.view_at(n, (3, 8))) for n in (4, 8, 48)] == [4, 8, 16]


def test_dense_offset_views_take_the_scalar_config_on_pocl():
    """float32 dense with vw = 4 loads: a view 4 or 8 bytes into its buffer runs vw = 1 (and
    is right), one 16 bytes in keeps the vector loads."""
    cl = _cl()
    m, n, k = 37, 29, 64
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    f = gpucg.compile("dense", gpucg.tensor((m, k)), gpucg.tensor((n, k)), target="opencl",
                      records=False)
    configs = [dict(c.config) for c in f.selection.choices]
    assert [c["vw"] for c in configs] == [4, 1]
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    for sx, sw, index in ((0, 0, 0), (1, 0, 1), (0, 2, 1), (4, 4, 0)):
        xv, wv = _view(cl, x, sx), _view(cl, w, sw)
        assert f.plan(xv, wv).index == index, (sx, sw)
        got = f(xv, wv).get()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert f.last_impl == "gemm_tiled.opencl"


def test_eager_calls_choose_by_alignment_too(monkeypatch):
    """The eager path's memo keys device arrays by their alignment as well as their shape: an
    offset view after an aligned one of the same shape runs vw = 1, not the memoized vw = 4."""
    cl = _cl()
    m, n, k = 37, 29, 64
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    ran = []
    run = gpucg.compiled.CompiledOp.run
    monkeypatch.setattr(gpucg.compiled.CompiledOp, "run",
                        lambda self, plan, *a: ran.append(dict(
                            self.selection.choices[plan.index].config)["vw"]) or run(self, plan, *a))
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    for sx in (0, 0, 1, 1, 0):
        got = gpucg.ops.dense(_view(cl, x, sx), _view(cl, w, 0), target="opencl").get()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert ran == [4, 4, 1, 1, 4]


def test_conv2d_offset_views_take_the_scalar_config_on_pocl():
    """conv2d's direct kernel (NHWC: vector loads of x and W, forced with vw = 4): an
    offset view of x, or of the weights, runs vw = 1 and equals the forced vw = 4 run."""
    cl = _cl()
    x = rng.standard_normal((1, 6, 5, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    attrs = dict(padding=1, data_layout="NHWC", kernel_layout="HWIO")
    config = dict(bm=32, bn=64, bk=16, tm=4, tn=4, vw=4, double_buffer=True, conflict_free=True)
    f = gpucg.compile("conv2d", gpucg.tensor(x.shape), gpucg.tensor(w.shape), target="opencl",
                      impl="direct", config=config, **attrs)
    assert [c.config["vw"] for c in f.selection.choices] == [4, 1]
    want = gpucg.ops.conv2d(x, w, target="numpy", **attrs)
    assert f.plan(x, w).index == 0
    for sx, sw in ((1, 0), (0, 3), (2, 2)):
        xv, wv = _view(cl, x, sx), _view(cl, w, sw)
        assert f.plan(xv, wv).index == 1
        np.testing.assert_allclose(f(xv, wv).get(), want, rtol=1e-4, atol=1e-4)


def test_float16_offset_views_on_pocl():
    """float16 (gemm_mma's twin forced, and the SIMT tile, which reads halves one at a
    time) on a view one element into its buffer: right results."""
    cl = _cl()
    x = rng.standard_normal((20, 48)).astype(np.float16)
    w = rng.standard_normal((24, 48)).astype(np.float16)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    for impl in ("gemm_mma", "gemm_tiled"):
        f = gpucg.compile("dense", gpucg.tensor(x.shape, "float16"),
                          gpucg.tensor(w.shape, "float16"), target="opencl", impl=impl)
        got = f(_view(cl, x, 1), _view(cl, w, 3)).get().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=5e-2)


def test_cuda_launches_check_the_pointers(nvrtc_or_skip):
    """On the CUDA launch stand-in: a CuPy pointer 4 bytes off runs the vw = 1 kernel of dense
    and conv2d, and gemm_mma launches with its 16-byte copies off (flags bit 0)."""
    cupy = StandInCupy("sm_90")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        t = gpucg.tensor((256, 256))
        f = gpucg.compile("dense", t, t, target="cuda", records=False)
        a, b = cupy.empty((257, 256), "float32"), cupy.empty((256, 256), "float32")
        off = a.view_at(4, (256, 256))
        for x, index in ((a.view_at(0, (256, 256)), 0), (off, 1)):
            assert f.plan(x, b).index == index
            f(x, b)
            assert f"{4 if index == 0 else 1} element" in cupy.launches[-1].source
        c = gpucg.compile("conv2d", gpucg.tensor((1, 8, 8, 16)), gpucg.tensor((3, 3, 16, 16)),
                          target="cuda", impl="direct", padding=1, data_layout="NHWC",
                          kernel_layout="HWIO", records=False)
        xs, ws = cupy.empty((1, 8, 8, 16), "float32"), cupy.empty((3, 3, 16, 16), "float32")
        assert c.plan(xs, ws).index == 0 and c.plan(xs, ws.view_at(8, ws.shape)).index == 1
        h = gpucg.tensor((128, 128), "float16")
        g = gpucg.compile("dense", h, h, target="cuda", impl="gemm_mma")
        ha, hb = cupy.empty((128, 128), "float16"), cupy.empty((128, 128), "float16")
        for x, vector in ((ha, 1), (ha.view_at(2, (128, 128)), 0)):
            g(x, hb)
            assert cupy.launches[-1].args[-1] & 1 == vector
