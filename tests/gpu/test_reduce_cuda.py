"""The GPU tier for reductions, softmax and norms, pooling, reverse scans and integer keys:
CUDA against the references (skipped without CUDA)."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]


def _helpers(name):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    return importlib.import_module(name)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "argmax", "argmin", "all", "prod"])
def test_every_cuda_reduction_implementation(op):
    from conftest import applicable

    t = _helpers("test_reduce")
    rng = np.random.default_rng(1)
    ran = set()
    for shape, axis in [((9, 100), 1), ((5, 3001), 1), ((3, 70001), 1), ((5000, 7), 0),
                        ((3, 40, 37), 1), ((6, 5, 7), (0, 2)), ((2, 3, 4, 5, 6), (0, 2, 4))]:
        if op.startswith("arg") and isinstance(axis, tuple):
            continue
        for dtype in ("float32", "float16", "int8", "uint64"):
            x = t.make(shape, dtype, rng, op)
            typ = gpucg.tensor(shape, dtype)
            for impl in applicable(op, typ, axis=axis, target="cuda"):
                for index in ("int32", "int64"):
                    f = gpucg.compile(op, typ, axis=axis, target="cuda", impl=impl, index=index)
                    try:
                        got = f(x)
                    except gpucg.InputError as exc:
                        assert "the forced implementation" in str(exc)
                        continue
                    t.check(got, t.reference(op, x, axis=axis), x, f"{op} {impl} {shape}")
                    ran.add(impl)
    assert {"reduce_warp", "reduce_group", "reduce_split", "reduce_cols"} <= ran


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_every_cuda_norm_implementation(op, dtype):
    from conftest import applicable

    t = _helpers("test_norm")
    rng = np.random.default_rng(2)
    ran = set()
    for shape, axis in [((9, 200), -1), ((3, 3001), -1), ((3, 5000), -1), ((2, 40009), -1),
                        ((40, 7), 0)]:
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        x[0, :3] = -np.inf if "softmax" in op else 1e4
        params = t.params_for(op, shape[axis], dtype, rng)
        types = [gpucg.tensor(a.shape, dtype) for a in [x, *params]]
        for impl in applicable(op, *types, axis=axis, target="cuda"):
            f = gpucg.compile(op, *types, axis=axis, target="cuda", impl=impl)
            try:
                got = f(x, *params)
            except gpucg.InputError as exc:
                assert "the forced implementation" in str(exc)
                continue
            t.check(op, got, x, params, axis, impl)
            ran.add(impl)
    assert len(ran) == 5


def test_cuda_special_rows_and_pools_and_gaps():
    n = _helpers("test_norm")
    x = n.special_rows()
    for op in n.OPS:
        params = n.params_for(op, x.shape[1], "float32", np.random.default_rng(3))
        n.check(op, gpucg.ops.__dict__[op](x, *params, target="cuda"), x, params)
    p = _helpers("test_pool")
    rng = np.random.default_rng(4)
    for layout in ("NCHW", "NHWC"):
        xs = p.make((2, 3, 7, 9) if layout == "NCHW" else (2, 7, 9, 3), "float32", rng)
        for window in p.WINDOWS:
            p.check("max_pool2d", xs, "cuda", layout=layout, **window)
            p.check("avg_pool2d", xs, "cuda", layout=layout, **window)
        p.check("global_avg_pool2d", xs, "cuda", layout=layout)
    g = _helpers("test_numpy_onnx_gaps")
    g.test_reverse_scan_is_onnx_cumsum("cuda")
    g.test_unsigned_64_bit_keys_above_2_63_order_correctly("cuda")
    for dtype in g.INTS:
        g.test_topk_sort_integer_dtypes("cuda", dtype)
