"""The GPU tier of the dense and elementwise families: every implementation on CUDA against
NumPy, device arrays staying on the device. Skipped (with the reason) without CUDA."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]
rng = np.random.default_rng(0)


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 1000, 3000), (40, 512, 8192),
                                   (1000, 1000, 1000), (130, 67, 33), (3, 5, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_dense_every_implementation_cuda(m, n, k, dtype):
    x = rng.standard_normal((m, k)).astype(dtype)
    w = (rng.standard_normal((n, k)) / max(1, k) ** 0.5).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    types = [gpucg.tensor(a.shape, dtype) for a in (x, w, b)]
    want = gpucg.get_op("dense").reference(x, w, b, gpucg.get_op("dense").make_attrs(
        activation="gelu"))
    sel = gpucg.explain("dense", *types, target="cuda", activation="gelu")
    for cand in sel.candidates:
        if cand.verdict == "excluded":
            continue
        impl = cand.name.rsplit(".", 1)[0]
        for index in ("int32", "int64"):
            got = gpucg.compile("dense", *types, target="cuda", impl=impl, index=index,
                                activation="gelu")(x, w, b)
            tol = {"float16": 2e-2, "float32": 1e-4, "float64": 1e-10}[dtype]
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=tol, atol=tol)


def test_matmul_broadcast_and_cupy_arrays_stay_on_gpu():
    import cupy

    a = cupy.asarray(rng.standard_normal((3, 1, 50, 70)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((2, 70, 40)).astype(np.float32))
    y = gpucg.ops.matmul(a, b)
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(y.get(), np.matmul(a.get(), b.get()), rtol=1e-4, atol=1e-4)
    c = gpucg.ops.batch_matmul(b, b, transpose_b=True)  # b @ b^T: b given as (batch, n, k)
    assert isinstance(c, cupy.ndarray)
    np.testing.assert_allclose(c.get(), np.matmul(b.get(), b.get().transpose(0, 2, 1)),
                               rtol=1e-4, atol=1e-3)


def test_fused_chain_is_one_launch_on_cuda():
    a, b, c = (rng.standard_normal((1000, 300)).astype(np.float32) for _ in range(3))
    f = gpucg.ops.fused(lambda x, y, z: gpucg.ops.relu(x * y + z))
    f(a, b, c, target="cuda")
    before = gpucg.stats()["launches"]
    got = f(a, b, c, target="cuda")
    assert gpucg.stats()["launches"] - before == 1
    # NVRTC contracts x * y + z into one fma (one rounding, where NumPy rounds twice): the
    # result is within an ulp of the exact value's scale, |x*y| + |z|, not of NumPy's
    a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
    exact = np.maximum(a64 * b64 + c64, 0)
    bound = np.finfo(np.float32).eps * (np.abs(a64 * b64) + np.abs(c64))
    assert (np.abs(got - exact) <= bound).all()


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "bool", "float64"])
def test_elementwise_dtypes_cuda(dtype):
    x = (rng.standard_normal((37, 41)) * 20).astype(dtype)
    y = (rng.standard_normal((41,)) * 20).astype(dtype)
    for op in ("add", "maximum", "less", "multiply"):
        want = getattr(np, op)(x, y)
        got = getattr(gpucg.ops, op)(x, y, target="cuda")
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3)
