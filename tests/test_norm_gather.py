"""The norms' GPU kernels that read x at most twice (issue 19), forced on PoCL with GPU configs
against NumPy's float64 textbook formulas: norm_split gathering each row's statistics once (the
row's last work-group combines its chunks', softmax's maps its own chunk from registers, apply
maps row_loop rows a group), layer_norm's one-pass (Welford) statistics in norm_split,
norm_cols and norm_blocks, and norm_cols's gamma and beta staged in local memory: every op,
odd lengths, split rows past the groups' target, 16-bit storage, special values, a mean 1e4
times the spread."""

import numpy as np
import pytest

import gpucg
from gpucg.half import numpy_dtype

from conftest import backend_or_skip
from test_norm import OPS, check, params_for, special_rows

GPU = "opencl -device=gpu"

#: (impl, shape, axis, config): each path of the gathered and one-pass kernels
PLAN = [
    # cached chunks (16 a lane), the last group maps its own, gamma once for 3 rows
    ("norm_split", (3, 40009), -1, {}),
    # chunks read from memory (chunk_items 256): Welford in the pair kernel, no own chunk
    ("norm_split", (2, 16387), -1, {"chunk_items": 256, "unroll": 4}),
    # 100 rows want 11 chunks of 1490, more than a lane holds: 16 chunks of 1024; row_loop 16
    # leaves groups past the last row
    ("norm_split", (100, 16384), -1, {"wg": 64, "row_loop": 16}),
    # one work-item a chunk (no lane meeting); no rows at all
    ("norm_split", (1, 16411), -1, {"wg": 1, "groups": 8, "chunk_items": 4096}),
    ("norm_split", (0, 16411), -1, {}),
    # gamma and beta in three tiles of 128
    ("norm_cols", (3, 257, 5), 1, {}),
    ("norm_cols", (40, 7), 0, {"wg": 1, "unroll": 2}),
    ("norm_blocks", (3, 5000), -1, {"unroll": 4}),
]


def _run(op, x, params, impl, config, axis=-1, index="int32", vw=None):
    """y, by impl with config forced on PoCL; vw: the 128-bit accesses' elements it must take."""
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in [x, *params]]
    f = gpucg.compile(op, *types, axis=axis, target=GPU, impl=impl, config=config, index=index)
    got = np.asarray(gpucg.to_host(f(x, *params)))
    assert f.last_impl.startswith(impl), f.last_impl
    if vw is not None:
        assert f.selection.choices[f.plan(x, *params).index].config["vw"] == vw
    return got


@pytest.fixture(scope="module")
def pocl():
    backend_or_skip("opencl")


@pytest.mark.parametrize("impl,shape,axis,config", PLAN,
                         ids=[f"{p[0]}-{'x'.join(map(str, p[1]))}" for p in PLAN])
def test_gathered_kernels_against_float64(pocl, impl, shape, axis, config):
    rng = np.random.default_rng(sum(shape))
    # the default configs take every op; the other configs' paths are softmax's (own chunk)
    # and layer_norm's (Welford, gamma and beta): log_softmax and rms_norm share them
    for op in OPS if not config else ("softmax", "layer_norm"):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        params = params_for(op, shape[axis], "float32", rng)
        check(op, _run(op, x, params, impl, config, axis), x, params, axis, f"{impl} {config}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_storage_dtypes_and_64_bit_indices(pocl, dtype):
    """16-bit storage (float32 math) and float64: split rows of whole 128-bit vectors (they take
    vw = 16 bytes; 16400 in chunks of 4096: the last chunk shorter) and a non-last axis."""
    rng = np.random.default_rng(7)
    nd = numpy_dtype(dtype)
    plan = (("norm_split", (2, 16400), -1, 16 // nd.itemsize), ("norm_cols", (33, 4, 3), 0, None))
    for impl, shape, axis, vw in plan:
        for op in ("softmax", "layer_norm"):
            x = (rng.standard_normal(shape) * 3).astype(nd)
            params = [p.astype(nd) for p in params_for(op, shape[axis], "float32", rng)]
            got = _run(op, x, params, impl, {}, axis, "int64", vw)
            assert got.dtype == nd
            if dtype == "bfloat16":  # check() knows NumPy's dtypes: compare in float32
                x, params = x.astype(np.float32), [p.astype(np.float32) for p in params]
                want = np.asarray(getattr(gpucg.ops, op)(x, *params, axis=axis, target="numpy"))
                np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)
                continue
            check(op, got, x, params, axis, f"{impl} {dtype}")


def test_special_values(pocl):
    """Rows of 1e30, -inf, +inf, NaN, constants and 1e-30 in split rows (the special row
    repeated along the row) and down a non-last axis. Not the row of -3e38 and 3e38: the
    one-pass statistics take differences of two values, which overflow there."""
    rows = special_rows()[:7]
    rng = np.random.default_rng(8)
    split = np.tile(rows, (1, 2732))  # 16392 long
    for op in OPS:
        for impl, x, axis in (("norm_split", split, -1), ("norm_cols", rows.T.copy(), 0)):
            params = params_for(op, x.shape[axis], "float32", rng)
            got = _run(op, x, params, impl, {}, axis)
            check(op, got, x, params, axis, impl)
            if op in ("layer_norm", "rms_norm"):
                finite = [0, 5, 6]
                assert np.isfinite(got[finite] if axis == -1 else got[:, finite]).all(), impl


@pytest.mark.parametrize("impl,shape,axis", [("norm_split", (2, 20011), -1),
                                             ("norm_cols", (301, 9), 0),
                                             ("norm_blocks", (3, 5001), -1)])
def test_layer_norm_of_a_large_mean(pocl, impl, shape, axis):
    """x = 1e4 + noise in float32: the one-pass mean and deviations keep the variance (a sum
    of squares less the squared sum would lose it all); within the rounding of a float32 mean
    of 1e4 (half a unit in the last place: 5e-4) of NumPy's float64 answer."""
    rng = np.random.default_rng(9)
    x = (1e4 + rng.standard_normal(shape)).astype(np.float32)
    g, b = (rng.uniform(0.5, 1.5, shape[axis]).astype(np.float32) for _ in range(2))
    got = _run("layer_norm", x, [g, b], impl, {}, axis)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axis, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axis, keepdims=True)
    shape_p = [1] * x.ndim
    shape_p[axis] = -1
    want = (x64 - mean) / np.sqrt(var + 1e-5) * g.reshape(shape_p) + b.reshape(shape_p)
    assert np.abs(got - want).max() < 2e-3, np.abs(got - want).max()


def test_cpu_defaults_keep_their_passes():
    """PoCL's CPU defaults stay offline (two passes, partial pairs combined by each chunk): the
    gathered kernels are the GPUs'."""
    sel = gpucg.explain("layer_norm", gpucg.tensor((2, 40000), "float32"),
                        gpucg.tensor((40000,), "float32"), gpucg.tensor((40000,), "float32"),
                        target="opencl -device=cpu")
    split = [c for c in sel.choices if c.impl.name.startswith("norm_split")][0]
    assert split.config["online"] is False
    gpu = gpucg.explain("softmax", gpucg.tensor((2, 40000), "float32"), target="cuda")
    split = [c for c in gpu.choices if c.impl.name.startswith("norm_split")][0]
    assert split.config["online"] is True and split.config["chunk_items"] == 16


#: kernels reading rows from memory, forced with vw = 4 (rows of whole 128-bit vectors): the
#: lanes take runs of 4 in turn (blocks; split chunks from memory, gathered and offline)
VECTOR = [("norm_blocks", (3, 5008), {"unroll": 4, "wg": 64}),
          ("norm_split", (2, 16400), {"chunk_items": 256}),
          ("norm_split", (2, 16400), {"online": False, "unroll": 4})]


@pytest.mark.parametrize("impl,shape,config", VECTOR, ids=[f"{v[0]}-{len(v[2])}" for v in VECTOR])
def test_rows_read_from_memory_in_128_bit_runs(pocl, impl, shape, config):
    rng = np.random.default_rng(10)
    for op in ("softmax", "layer_norm"):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        x[0, :5] = -np.inf if op == "softmax" else 1e30
        params = params_for(op, shape[-1], "float32", rng)
        check(op, _run(op, x, params, impl, config, vw=4), x, params, tag=f"{impl} {config}")
