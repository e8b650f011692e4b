"""The GPU tier of this wave's kernels: the tensor-core GEMM (gemm_mma) for float16 and TF32
forced and selected, and the transform and batch_norm families on CUDA against NumPy. Skipped
(with the reason) without CUDA. bfloat16 cannot be held in a CuPy array, so its tensor-core
kernels are held by NVRTC, ptxas and SASS (tests/test_sass.py) and by the OpenCL twin."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]
rng = np.random.default_rng(0)


def _tf32(a):
    """float32 rounded to TF32 as cvt.rna does: 10 mantissa bits, ties away from zero."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (1000, 1000, 1000), (130, 72, 40),
                                   (17, 33, 72)])
@pytest.mark.parametrize("dtype", ["float16", "tf32"])
def test_gemm_mma_forced_and_selected(m, n, k, dtype):
    tf32 = dtype == "tf32"
    dt = "float32" if tf32 else dtype
    x = rng.standard_normal((m, k)).astype(dt)
    w = (rng.standard_normal((n, k)) / k ** 0.5).astype(dt)
    a, b = (_tf32(x), _tf32(w)) if tf32 else (x, w)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    types = [gpucg.tensor(t.shape, dt) for t in (x, w)]
    attrs = {"allow_tf32": True} if tf32 else {}
    f = gpucg.compile("dense", *types, target="cuda", impl="gemm_mma", **attrs)
    got = f(x, w)
    tol = 2e-2 if dtype == "float16" else 1e-4 * k ** 0.5
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)
    if m > 16 and k % 8 == 0:
        sel = gpucg.explain("dense", *types, target="cuda", **attrs)
        assert sel.choices[0].impl.name == "gemm_mma.cuda"


def test_gemm_mma_takes_an_offset_view_through_its_scalar_path():
    import cupy

    base = cupy.asarray(rng.standard_normal(64 * 64 + 1).astype(np.float16))
    x = base[1:].reshape(64, 64)  # 2 bytes in: not 16-byte aligned
    w = cupy.asarray(rng.standard_normal((48, 64)).astype(np.float16))
    got = gpucg.ops.dense(x, w)
    want = x.get().astype(np.float64) @ w.get().astype(np.float64).T
    np.testing.assert_allclose(got.get().astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_transform_family_on_cuda():
    x = rng.standard_normal((5, 7, 9)).astype(np.float32)
    parts = gpucg.ops.split(x, 3, axis=2, target="cuda")
    for got, want in zip(parts, np.split(x, 3, axis=2)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(gpucg.ops.concatenate([x, x], axis=1, target="cuda"),
                                  np.concatenate([x, x], axis=1))
    np.testing.assert_array_equal(
        gpucg.ops.strided_slice(x, [4, 0], [0, 9], [-2, 3], axes=[0, 2], target="cuda"),
        x[4:0:-2, :, 0:9:3])
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    ids = rng.integers(-1000, 1000, (8, 16)).astype(np.int64)
    np.testing.assert_array_equal(gpucg.ops.take(table, ids, axis=0, target="cuda"),
                                  np.take(table, ids, axis=0))
    y = (x * 300).astype(np.float32)
    np.testing.assert_array_equal(gpucg.ops.cast(y, "int8", target="cuda"),
                                  np.clip(np.trunc(y), -128, 127).astype(np.int8))


def test_batch_norm_on_cuda():
    x = rng.standard_normal((4, 16, 9, 9)).astype(np.float32)
    g, b, mu = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
    var = rng.random(16).astype(np.float32) + 0.5
    got = gpucg.ops.batch_norm(x, g, b, mu, var, target="cuda")
    c = (slice(None), None, None)
    want = (x - mu[c]) / np.sqrt(var[c] + 1e-5) * g[c] + b[c]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["direct_mma", "winograd_mma"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float16", "tf32"])
def test_conv2d_tensor_core_kernels(impl, layout, dtype):
    """conv2d's tensor-core kernels forced on CUDA against NumPy on the rounded inputs
    (a ResNet 3x3 layer with a bias and relu; odd spatial size)."""
    tf32 = dtype == "tf32"
    dt = "float32" if tf32 else dtype
    x = rng.standard_normal((2, 64, 15, 15)).astype(dt)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(dt)
    b = rng.standard_normal(64).astype(dt)
    xr, wr = (_tf32(x), _tf32(w)) if tf32 else (x, w)
    x_nchw = x
    # the NumPy target in float32 on the rounded inputs (conv2d takes no float64)
    want = gpucg.ops.conv2d(xr.astype(np.float32), wr.astype(np.float32), padding=1,
                            bias=b.astype(np.float32), activation="relu", target="numpy")
    attrs = dict(padding=1, activation="relu", allow_tf32=tf32)
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy()
        attrs.update(data_layout="NHWC", kernel_layout="HWIO")
    f = gpucg.compile("conv2d", *(gpucg.tensor(a.shape, dt) for a in (x, w, b)), target="cuda",
                      impl=impl, **attrs)
    got = np.asarray(f(x, w, b), np.float64)
    if layout == "NHWC":
        got = got.transpose(0, 3, 1, 2)
    if tf32 and impl == "winograd_mma":
        # Winograd rounds its transformed tiles to TF32 (2^-11 relative each), not the inputs:
        # the error is bounded by the products' magnitudes, |x| (*) |w|, not by rounding x, w
        scale = gpucg.ops.conv2d(np.abs(x_nchw), np.abs(wr), padding=1, target="numpy")
        assert (np.abs(got - want) <= 4 * 2.0 ** -11 * scale + 1e-5).all()
        return
    tol = 3e-2 if dtype == "float16" else 1e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
