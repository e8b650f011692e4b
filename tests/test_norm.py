"""softmax, log_softmax, layer_norm and rms_norm against a float64 NumPy evaluation of the
textbook formulas, on every backend here: every implementation forced, rows of -inf, +inf,
NaN and 1e30, float16 storage, symbolic dispatch, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.op import get_op

OPS = ["softmax", "log_softmax", "layer_norm", "rms_norm"]
PARAMS = {"softmax": 0, "log_softmax": 0, "layer_norm": 2, "rms_norm": 1}


def params_for(op, n, dtype, rng):
    return [rng.uniform(0.5, 1.5, n).astype(dtype) for _ in range(PARAMS[op])]


def check(op, got, x, params, axis=-1, tag="", **attrs):
    o = get_op(op)
    want = o.reference(x, *params, o.make_attrs(axis=axis, **attrs))
    assert got.shape == want.shape and got.dtype == want.dtype, (tag, got.dtype, want.dtype)
    # float32 math over a row: a few ulps of the row's values (float16 storage: its rounding)
    tol = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}[x.dtype.type]
    if op in ("layer_norm", "rms_norm"):
        tol *= 4
    if op == "layer_norm" and x.size and np.isfinite(x).all():
        # x - mean cancels: rows whose values are close lose digits in any float32 evaluation
        x64 = x.astype(np.float64)
        spread = np.std(x64, axis=axis, keepdims=True)
        big = np.max(np.abs(x64), axis=axis, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            cond = np.where(spread > 0, big / spread, 1.0)
        tol *= max(1.0, float(np.max(cond)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol, equal_nan=True, err_msg=f"{op} {tag}")


def run(op, x, params, target, **kw):
    return getattr(gpucg.ops, op)(x, *params, target=target, **kw)


SHAPES = [((7, 33), -1), ((5, 300), 1), ((2, 20000), -1), ((4, 9, 3), 1), ((6, 5), 0),
          ((1, 1), -1), ((3, 0), -1), ((0, 4), -1)]


@pytest.mark.parametrize("op", OPS)
def test_against_float64(target, op):
    rng = np.random.default_rng(1)
    for shape, axis in SHAPES:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        params = params_for(op, shape[axis], "float32", rng)
        check(op, run(op, x, params, target, axis=axis), x, params, axis, f"{shape} {axis}")


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_storage_dtypes(target, dtype):
    """float16 is stored and computed in float32; float64 computes in float64."""
    rng = np.random.default_rng(2)
    for op in ("softmax", "layer_norm") if target != "numpy" else OPS:
        x = (rng.standard_normal((5, 300)) * 3).astype(dtype)
        params = params_for(op, 300, dtype, rng)
        got = run(op, x, params, target)
        assert got.dtype == np.dtype(dtype)
        check(op, got, x, params, tag=dtype)


def special_rows():
    """Rows that break naive formulas: huge magnitudes, -inf (masked), all -inf, +inf, NaN,
    constant, tiny."""
    nan, inf = np.nan, np.inf
    return np.array([[1e30, -1e30, 3e30, 0, 2e30, 1], [-inf, 1, 2, -inf, 0, -inf],
                     [-inf] * 6, [inf, 1, 2, 3, inf, 0], [nan, 1, 2, 3, 4, 5], [7] * 6,
                     [1e-30, 2e-30, -1e-30, 0, 5e-31, 1e-30], [-3e38, 3e38, 0, 1, 2, 3]],
                    np.float32)


def test_special_rows_equal_float64_numpy(target):
    """1e30 and -inf give NumPy's float64 answers, not NaN; NaN where NumPy's is NaN (a row
    of -inf, or holding +inf or NaN, in softmax)."""
    x = special_rows()
    rng = np.random.default_rng(3)
    for op in OPS:
        params = params_for(op, x.shape[1], "float32", rng)
        got = run(op, x, params, target)
        check(op, got, x, params)
        if op == "softmax":
            assert np.isfinite(got[[0, 1, 5, 6]]).all() and np.isnan(got[[2, 3, 4]]).all()
            assert got[1].tolist()[0] == 0.0 and abs(got[0].sum() - 1) < 1e-6
        if op in ("layer_norm", "rms_norm"):
            assert np.isfinite(got[[0, 5, 6]]).all()


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-12, 1.0, 1e18, 1e30])
def test_norms_without_eps_at_every_magnitude(target, scale):
    """eps=0 leaves nothing to hide a lost square: rows scaled from 1e-30 (squares flush to
    zero) to 1e30 (squares overflow) still equal the float64 answer, O(1) values."""
    rng = np.random.default_rng(11)
    x = (rng.uniform(-2, 2, (3, 37)) * scale).astype(np.float32)
    for op in ("layer_norm", "rms_norm"):
        params = params_for(op, x.shape[1], "float32", rng)
        got = run(op, x, params, target, eps=0.0)
        assert np.abs(got).max() > 0.1, (op, scale)
        check(op, got, x, params, tag=f"scale {scale}", eps=0.0)


def _forced(op, x, params, impl, target="opencl -device=gpu", index="int32", axis=-1):
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in [x, *params]]
    f = gpucg.compile(op, *types, axis=axis, target=target, impl=impl, index=index)
    got = f(x, *params)
    assert f.last_impl.startswith(impl)
    return got


def test_every_implementation_forced():
    """Each implementation with GPU configs (lanes sharing a row, online pairs, registers),
    on rows its condition accepts; 64-bit indexing for the split rows."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(4)
    plan = {"norm_warp": [(9, 200)], "norm_group": [(3, 3001)], "norm_blocks": [(3, 5000)],
            "norm_split": [(2, 40009)], "norm_cols": [(40, 7)]}
    for op in OPS:
        for impl, shapes in plan.items():
            if op in ("log_softmax", "rms_norm") and impl not in ("norm_warp", "norm_split"):
                continue
            for shape in shapes:
                axis = 0 if impl == "norm_cols" else -1
                x = (rng.standard_normal(shape) * 3).astype(np.float32)
                x[0, :5] = -np.inf if op in ("softmax", "log_softmax") else 1e30
                params = params_for(op, shape[axis], "float32", rng)
                widths = ("int32", "int64") if impl == "norm_split" and op == "softmax" \
                    else ("int32",)
                for index in widths:
                    got = _forced(op, x, params, impl, index=index, axis=axis)
                    check(op, got, x, params, axis, f"{impl} {index}")


def test_cpu_defaults_split_long_rows():
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 70001)) * 4).astype(np.float32)
    for op in ("layer_norm", "softmax"):
        params = params_for(op, x.shape[1], "float32", rng)
        f = gpucg.compile(op, *[gpucg.tensor(a.shape, "float32") for a in [x, *params]],
                          target="opencl -device=cpu")
        check(op, f(x, *params), x, params)
        assert f.last_impl == "norm_split.opencl"


def test_row_length_decides_at_run_time():
    m, n = gpucg.var("m"), gpucg.var("n")
    sel = gpucg.explain("softmax", gpucg.tensor((m, n), "float32"), target="cuda")
    # every row kernel twice: 128-bit accesses where rows and address are aligned, else vw=1
    assert [(c.impl.name, c.config.get("vw")) for c in sel.choices] == [
        ("norm_warp.cuda", 4), ("norm_warp.cuda", 1), ("norm_split.cuda", 4),
        ("norm_split.cuda", 1), ("norm_group.cuda", 4), ("norm_group.cuda", 1),
        ("norm_blocks.cuda", 4), ("norm_blocks.cuda", 1)]
    assert str(sel.choices[1].condition) == "n <= 256"
    assert str(sel.choices[5].condition) == "n <= 4096"
    cols = gpucg.explain("layer_norm", gpucg.tensor((n, m), "float32"),
                         gpucg.tensor((n,), "float32"), gpucg.tensor((n,), "float32"), axis=0,
                         target="cuda")
    assert cols.choices[-1].impl.name == "norm_cols.cuda"
    fixed = gpucg.explain("softmax", gpucg.tensor((8, 1 << 20), "float32"), target="cuda")
    assert fixed.choices[0].impl.name == "norm_split.cuda"


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_hypothesis_numpy(data):
    _hypothesis_case(data, "numpy")


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_hypothesis_opencl(data):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    _hypothesis_case(data, "opencl")


def _hypothesis_case(data, target):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 17, 257, 1500]), min_size=ndim,
                                     max_size=ndim).filter(lambda s: np.prod(s) <= 100_000)))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    op = data.draw(st.sampled_from(OPS))
    scale = data.draw(st.sampled_from([1.0, 1e-20, 1e20]))
    rng = np.random.default_rng(ndim)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    params = params_for(op, shape[axis], "float32", rng)
    check(op, run(op, x, params, target, axis=axis), x, params, axis, f"{shape} {axis}")


def test_bad_input():
    x = np.ones((3, 4), np.float32)
    g = np.ones(4, np.float32)
    with pytest.raises(gpucg.InputError, match=r"layer_norm: gamma has shape \(3,\), but it "
                                               r"must be \(4,\), the length of axis -1"):
        gpucg.ops.layer_norm(x, np.ones(3, np.float32), g, target="numpy")
    with pytest.raises(gpucg.InputError, match=r"beta has rank 2, but it must be 1-D"):
        gpucg.ops.layer_norm(x, g, np.ones((4, 1), np.float32), target="numpy")
    with pytest.raises(gpucg.DTypeError, match="rms_norm: gamma dtype float64 must equal x's"):
        gpucg.ops.rms_norm(x, g.astype(np.float64), target="numpy")
    with pytest.raises(gpucg.AttrError, match=r"eps=-1e-05 is not allowed; it must be a finite "
                                              "number >= 0"):
        gpucg.ops.layer_norm(x, g, g, eps=-1e-5, target="numpy")
    with pytest.raises(gpucg.AttrError, match="eps=nan"):
        gpucg.ops.rms_norm(x, g, eps=float("nan"), target="numpy")
    with pytest.raises(gpucg.AttrError, match="eps='1' .* must be a number"):
        gpucg.ops.rms_norm(x, g, eps="1", target="numpy")
    with pytest.raises(gpucg.InputError, match=r"softmax: axis=2 is out of range"):
        gpucg.ops.softmax(x, axis=2, target="numpy")
    with pytest.raises(gpucg.DTypeError, match="softmax: x dtype 'int32' is not supported; "
                                               "allowed: float16, float32, float64"):
        gpucg.ops.softmax(x.astype(np.int32), target="numpy")
    with pytest.raises(gpucg.AttrError, match="takes 3 input"):
        gpucg.compile("layer_norm", gpucg.tensor((3, 4)), target="numpy")


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """Every kernel of every implementation for CUDA, float32, float16 storage and float64
    (the session's NVRTC check compiles what is rendered here)."""
    m, n = gpucg.var("m"), gpucg.var("n")
    keys = set()
    for op in OPS:
        for dtype in ("float32", "float16", "float64") if op in ("softmax", "layer_norm") \
                else ("float32",):
            for axis in (-1, 0):
                types = [gpucg.tensor((m, n), dtype)] + \
                    [gpucg.tensor((n if axis == -1 else m,), dtype)] * PARAMS[op]
                f = gpucg.compile(op, *types, axis=axis, target="cuda", index="int32")
                keys |= set(f.sources)
    assert {k.split(".")[0] for k in keys} == {"norm_warp", "norm_split", "norm_group",
                                               "norm_blocks", "norm_cols"}


def test_bench_softmax_quick(capsys):
    """The benchmark runs (not a speed test): errors against float64, GB/s, goals."""
    from gpucg.cli import main

    assert main(["bench", "softmax", "--quick", "--repeat", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert "numpy softmax" in out and "numpy layer_norm" in out and "max abs err" in out
    assert '"goals"' in out
