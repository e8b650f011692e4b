"""128-bit loads in the column and multi-pass reductions (reduce_cols, reduce_passes): each
work-item's vec neighbouring columns read vw at a time where the whole block is in the view
(element by element in the last, partial block), the first pass of reduce_passes (rows or
columns) likewise; forced on PoCL against NumPy for several dtypes, odd sizes, split columns
and offset views (which take the vw = 1 config), under Oclgrind with zero reports, and on the
CUDA launch stand-in."""

import json

import numpy as np
import pytest

import gpucg
from gpucg.runtime import use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.verify.cupy_standin import StandInCupy

from conftest import backend_or_skip, under_oclgrind
from test_alignment import _view

rng = np.random.default_rng(23)

#: (impl, shape, axis, config, the length vw must divide): whole and partial column blocks
#: (40 columns of blocks of 16), a split column (part and merge), the passes' first pass over
#: columns and over rows
PLAN = [("reduce_cols", (3, 37, 40), 1, dict(tx=1, ty=4, vec=16, chunk_items=16, groups=8), 40),
        ("reduce_cols", (300, 16), 0, dict(tx=1, ty=4, vec=16, chunk_items=16, groups=1024), 16),
        ("reduce_passes", (3, 5, 9, 40), (0, 2), dict(wg=64, unroll=2, tx=1, ty=4, vec=16), 40),
        ("reduce_passes", (6, 5, 16), (0, 2), dict(wg=64, unroll=2, tx=1, ty=4, vec=16), 16)]
#: (op, dtypes): argmax has no multi-pass kernel (reduce_passes does not take it)
OPS = [("sum", ("float32", "float16", "float64")), ("max", ("int8", "bfloat16")),
       ("argmax", ("float32",)),
       pytest.param("prod", ("int32",), marks=pytest.mark.exhaustive, id="prod")]  # sum's kernels


def _data(shape, dtype):
    from gpucg.half import numpy_dtype

    x = (rng.standard_normal(shape) * (1 if dtype in ("int32", "float64") else 5))
    x = x.astype(numpy_dtype(dtype))
    if dtype.startswith("float") or dtype == "bfloat16":
        x.ravel()[7] = np.nan
    return x


def _want(op, x, axis):
    if x.dtype.name == "bfloat16":
        x = x.astype(np.float32)
    return np.asarray(getattr(gpucg.ops, op)(x, axis=axis, target="numpy")).astype(np.float64)


def _vw(dtype):
    from gpucg.codegen.vector import lanes

    return lanes(dtype)


@pytest.mark.parametrize("op,dtypes", OPS, ids=["sum", "max", "argmax", "prod"])
def test_column_and_pass_vector_configs_on_pocl(op, dtypes):
    backend_or_skip("opencl")
    for dtype in dtypes:
        vw = _vw(dtype)
        for impl, shape, axis, config, length in PLAN:
            if (op == "argmax" and impl == "reduce_passes") or length % vw:
                continue
            x = _data(shape, dtype)
            for index in ("int32", "int64") if impl == "reduce_cols" else ("int32",):
                f = gpucg.compile(op, gpucg.tensor(shape, dtype), target="opencl", impl=impl,
                                  config=dict(config, vw=vw), index=index, axis=axis)
                assert [c.config["vw"] for c in f.selection.choices] == [vw, 1]
                assert f.plan(x).index == 0, (op, dtype, impl)
                got = np.asarray(gpucg.to_host(f(x))).astype(np.float64)
                tol = 2e-2 if dtype in ("float16", "bfloat16") else 1e-4
                np.testing.assert_allclose(got, _want(op, x, axis), rtol=tol, atol=tol,
                                           equal_nan=True, err_msg=f"{op} {dtype} {impl} {shape}")


def test_offset_views_and_unaligned_columns_take_the_scalar_config():
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    cl = get_backend("opencl")
    x = rng.standard_normal((4, 9, 24)).astype(np.float32)
    for impl, axis, config in (("reduce_cols", 1, dict(tx=1, ty=4, vec=8, vw=4, chunk_items=16,
                                                       groups=8)),
                               ("reduce_passes", (0, 1), dict(wg=64, unroll=2, tx=1, ty=4,
                                                              vec=8, vw=4))):
        f = gpucg.compile("sum", gpucg.tensor(x.shape), target="opencl", impl=impl,
                          config=config, axis=axis)
        for off, index in ((0, 0), (1, 1), (2, 1), (4, 0)):
            xv = _view(cl, x, off)
            assert f.plan(xv).index == index, (impl, off)
            np.testing.assert_allclose(np.asarray(gpucg.to_host(f(xv))), x.sum(axis=axis),
                                       rtol=1e-5, atol=1e-4)
    # columns not a multiple of vw: the scalar config alone
    g = gpucg.compile("sum", gpucg.tensor((4, 9, 22)), target="opencl", impl="reduce_cols",
                      config=dict(tx=1, ty=4, vec=8, vw=4, chunk_items=16, groups=8), axis=1)
    assert [c.config["vw"] for c in g.selection.choices] == [1]


def test_gpu_defaults_read_128_bits_and_cpu_defaults_do_not():
    for target, vw in (("opencl -device=gpu", 4), ("opencl", 1)):
        for axis, impl in ((0, "reduce_cols"), ((0, 2), "reduce_passes")):
            sel = gpucg.explain("sum", gpucg.tensor((64, 32, 64)), axis=axis, target=target,
                                records=False, impl=impl)
            assert sel.choices[0].config["vw"] == vw, (target, impl, sel.choices[0].config)


OCLGRIND = """
import json, numpy as np, gpucg
rng = np.random.default_rng(5)
errors = []
for op, shape, axis, impl, config in (
        ("sum", (3, 37, 20), 1, "reduce_cols", dict(tx=1, ty=4, vec=8, vw=4, chunk_items=16, groups=8)),
        ("argmax", (70, 24), 0, "reduce_cols", dict(tx=16, ty=4, vec=4, vw=4, chunk_items=16, groups=1024)),
        ("max", (3, 5, 9, 20), (0, 2), "reduce_passes", dict(wg=64, unroll=2, tx=1, ty=4, vec=4, vw=4)),
        ("sum", (6, 5, 16), (0, 2), "reduce_passes", dict(wg=64, unroll=2, tx=1, ty=4, vec=4, vw=4))):
    x = rng.standard_normal(shape).astype(np.float32)
    f = gpucg.compile(op, gpucg.tensor(shape), target="opencl", impl=impl, config=config,
                      axis=axis, records=False)
    assert f.plan(x).index == 0
    want = getattr(np, op)(x.astype(np.float64), axis=axis)
    errors.append(float(np.abs(np.asarray(gpucg.to_host(f(x))) - want).max()))
print(json.dumps(errors))
"""


def test_vector_configs_under_oclgrind(oclgrind_or_skip, tmp_path):
    """The vector loads and their partial blocks: no out-of-bounds accesses, no races."""
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    assert max(json.loads(done.stdout.strip().splitlines()[-1])) < 1e-4
    assert not reports, "\n\n".join(r.text for r in reports)


def test_cuda_launches_check_the_pointers(nvrtc_or_skip):
    """The CUDA launch stand-in: an aligned pointer runs the vw > 1 kernels (the first pass's
    source reads float4), a pointer 4 bytes off the vw = 1 ones."""
    cupy = StandInCupy("sm_90")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        for shape, axis in (((64, 256), 0), ((8, 16, 64), (0, 2)), ((4, 8, 16, 32), (0, 2))):
            f = gpucg.compile("sum", gpucg.tensor(shape), target="cuda", axis=axis)
            big = cupy.empty((shape[0] + 1,) + shape[1:], "float32")
            for x, vector in ((big.view_at(0, shape), True), (big.view_at(4, shape), False)):
                before = len(cupy.launches)
                f(x)
                first = cupy.launches[before]  # the pass that reads x
                assert ("float4" in first.source) == vector, (shape, vector)
