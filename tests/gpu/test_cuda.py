"""The GPU tier: runs on a machine with CUDA and CuPy, skipped (with the reason) elsewhere."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]

CASES = [((10,), None), ((3, 5000), 1), ((70000,), 0), ((2, 40000), 0), ((4096, 1024), 1),
         ((1024, 4096), 0), ((3, 1000, 2), 1), ((0, 4), 1), ((1 << 22,), 0)]


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_cuda_matches_numpy(shape, axis, dtype, exclusive):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, size=shape).astype(dtype)
    got = gpucg.ops.cumsum(x, axis=axis, exclusive=exclusive, target="cuda")
    want = gpucg.get_op("cumsum").reference(x, gpucg.get_op("cumsum").make_attrs(axis=axis, exclusive=exclusive))
    np.testing.assert_array_equal(got, want)


def test_cupy_arrays_stay_on_gpu():
    import cupy

    x = cupy.arange(1000, dtype=cupy.float32)
    y = gpucg.ops.cumprod(x / 1000 + 1)
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(y.get(), np.cumprod((np.arange(1000, dtype=np.float32) / 1000 + 1)), rtol=1e-4)


def test_every_cuda_implementation_runs():
    x = np.random.default_rng(1).standard_normal((33, 9000)).astype(np.float32)
    n, m = gpucg.var("n"), gpucg.var("m")
    typ = gpucg.tensor((n, m), "float32")
    for index in ("int32", "int64"):
        for choice in gpucg.explain("cumsum", typ, axis=1, target="cuda").choices:
            # a CuPy allocation's address: aligned to 256 bytes, past gpucg.shape.MAX_ALIGN
            sizes = {n: 33, m: 9000, gpucg.shape.alignment(0): gpucg.shape.MAX_ALIGN}
            if choice.condition is not None and not choice.condition.evaluate(sizes):
                continue
            f = gpucg.compile("cumsum", typ, axis=1, target="cuda", impl=choice.impl.name,
                              index=index)
            np.testing.assert_allclose(f(x), np.cumsum(x, axis=1), rtol=1e-3, atol=1e-3)
