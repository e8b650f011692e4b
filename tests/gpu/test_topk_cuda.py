"""The GPU tier for topk/sort/argsort: CUDA against the NumPy reference (skipped without CUDA)."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]


def _helpers():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import test_topk

    return test_topk


@pytest.mark.parametrize("shape,axis,k", _helpers().CASES + [((1, 1 << 22), -1, 1000),
                                                             ((64, 4096), -1, 4096),
                                                             ((300, 20000), 1, 256)])
@pytest.mark.parametrize("is_ascend", [False, True])
def test_topk_cuda_cases(shape, axis, k, is_ascend):
    t = _helpers()
    x = t.make(shape, "float32", np.random.default_rng(len(shape) + k))
    got = gpucg.ops.topk(x, k=k, axis=axis, is_ascend=is_ascend, target="cuda")
    t.same(got, t.reference("topk", x, k=k, axis=axis, is_ascend=is_ascend))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("ties", [False, True])
def test_cuda_dtypes_sort_argsort(dtype, ties):
    t = _helpers()
    rng = np.random.default_rng(3)
    for shape, k in [((9, 700), 20), ((3, 9000), 300), ((2, 50000), 0)]:
        x = t.make(shape, dtype, rng, ties)
        for asc in (False, True):
            t.same(gpucg.ops.topk(x, k=k, is_ascend=asc, target="cuda"),
                   t.reference("topk", x, k=k, is_ascend=asc))
            t.same(gpucg.ops.argsort(x, is_ascend=asc, dtype="int64", target="cuda"),
                   t.reference("argsort", x, is_ascend=asc, dtype="int64"))


def test_every_cuda_topk_implementation_and_wide_variant():
    from conftest import applicable

    t = _helpers()
    rng = np.random.default_rng(5)
    ran = set()
    for shape, k, dtype in [((3, 40), 5, "float32"), ((2, 3000), 200, "float64"),
                            ((1, 200000), 300, "float16"), ((5, 1000), 0, "int64"),
                            ((2, 90000), 100, "int32"), ((2, 9000), 1000, "float32")]:
        x = t.make(shape, dtype, rng, ties=True)
        typ = gpucg.tensor(shape, dtype)
        for asc in (False, True):
            for impl in applicable("topk", typ, k=k, is_ascend=asc, target="cuda"):
                for index in ("int32", "int64"):
                    f = gpucg.compile("topk", typ, k=k, is_ascend=asc, target="cuda", impl=impl,
                                      index=index)
                    t.same(f(x), t.reference("topk", x, k=k, is_ascend=asc))
                ran.add(impl)
    assert ran == {"topk_warp", "topk_group", "topk_radix", "sort_bitonic", "sort_merge",
                   "sort_radix"}


def test_cupy_arrays_stay_on_gpu():
    import cupy

    x = cupy.random.standard_normal((100, 3000), dtype=cupy.float32)
    v, i = gpucg.ops.topk(x, k=10)
    assert isinstance(v, cupy.ndarray) and isinstance(i, cupy.ndarray)
    t = _helpers()
    t.same((v.get(), i.get()), t.reference("topk", x.get(), k=10))
