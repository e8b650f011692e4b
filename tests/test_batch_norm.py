"""batch_norm (inference) against its definition in float64 and against PyTorch where it is
installed, on every backend here; fold_batch_norm against batch_norm after conv2d and dense."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from conftest import applicable

TOL = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}


def params(c, dtype, seed=0):
    rng = np.random.default_rng(seed)
    gamma, beta, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = (rng.random(c) + 0.1).astype(dtype)
    return gamma, beta, mean, var


def want(x, gamma, beta, mean, var, axis, eps):
    view = [1] * x.ndim
    view[axis] = -1
    g, b, m, v = (np.asarray(a, np.float64).reshape(view) for a in (gamma, beta, mean, var))
    return (x.astype(np.float64) - m) / np.sqrt(v + eps) * g + b


def check(x, vecs, target, axis=1, eps=1e-5, forced=True):
    expect = want(x, *vecs, axis % x.ndim if x.ndim else 0, eps)
    tol = TOL[x.dtype.name]
    got = gpucg.ops.batch_norm(x, *vecs, axis=axis, eps=eps, target=target)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_allclose(got.astype(np.float64), expect, rtol=tol, atol=tol)
    if not forced:
        return
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in (x,) + tuple(vecs)]
    for impl in applicable("batch_norm", *types, target=target, axis=axis, eps=eps):
        for index in ("int32", "int64"):
            f = gpucg.compile("batch_norm", *types, target=target, impl=impl, index=index,
                              axis=axis, eps=eps)
            np.testing.assert_allclose(f(x, *vecs).astype(np.float64), expect, rtol=tol,
                                       atol=tol, err_msg=f"{impl} {index}")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dtypes(target, dtype):
    x = np.random.default_rng(1).standard_normal((2, 5, 3, 4)).astype(dtype)
    check(x, params(5, dtype), target)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -4])
def test_axes(target, axis):
    x = np.random.default_rng(2).standard_normal((3, 4, 5, 2)).astype(np.float32)
    check(x, params(x.shape[axis], "float32"), target, axis=axis, eps=1e-3,
          forced=axis in (0, -1, 2))


def test_edge_shapes(target):
    for shape, axis in [((7,), 0), ((0, 3), 1), ((4, 0), 1), ((1, 1, 1), 1), ((2, 1), -1),
                        ((9, 13), 1)]:
        x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
        check(x, params(shape[axis], "float32"), target, axis=axis, eps=0.0, forced=False)


def test_symbolic_sizes(target):
    n, c = gpucg.var("n"), gpucg.var("c")
    vec = gpucg.tensor((c,))
    f = gpucg.compile("batch_norm", gpucg.tensor((n, c, 3)), vec, vec, vec, vec, target=target)
    for rows, ch in [(2, 5), (1, 7), (4, 1)]:
        x = np.random.default_rng(rows).standard_normal((rows, ch, 3)).astype(np.float32)
        vecs = params(ch, "float32")
        np.testing.assert_allclose(f(x, *vecs), want(x, *vecs, 1, 1e-5), rtol=2e-6, atol=2e-6)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 6, 5, 5)).astype(np.float32)
    g, b, m, v = params(6, "float32")
    t = torch.nn.functional.batch_norm(torch.from_numpy(x), torch.from_numpy(m),
                                       torch.from_numpy(v), torch.from_numpy(g),
                                       torch.from_numpy(b), training=False, eps=1e-3).numpy()
    got = gpucg.ops.batch_norm(x, g, b, m, v, eps=1e-3, target="numpy")
    np.testing.assert_allclose(got, t, rtol=1e-5, atol=1e-5)


def test_bad_input():
    x = np.ones((2, 3, 4), np.float32)
    vecs = params(3, "float32")
    cases = [
        (lambda: gpucg.ops.batch_norm(x.astype(np.int32), *vecs), gpucg.DTypeError,
         "batch_norm: x dtype 'int32' is not supported; allowed: float16"),
        (lambda: gpucg.ops.batch_norm(x, vecs[0].astype(np.float64), *vecs[1:]),
         gpucg.DTypeError, "gamma has dtype float64 but x has float32"),
        (lambda: gpucg.ops.batch_norm(x, *vecs, axis=3), gpucg.InputError,
         "axis=3 is out of range for an input of rank 3; allowed: -3..2"),
        (lambda: gpucg.ops.batch_norm(x, *vecs, axis=2), gpucg.InputError,
         r"gamma.shape\[0\] .* is 3 but must be 4"),
        (lambda: gpucg.ops.batch_norm(x, vecs[0], vecs[1].reshape(3, 1), *vecs[2:]),
         gpucg.InputError, r"beta has shape .*; it must be 1-D"),
        (lambda: gpucg.ops.batch_norm(x, *vecs, eps=-1.0), gpucg.AttrError,
         "eps=-1.0 .* must be a finite number >= 0"),
        (lambda: gpucg.ops.batch_norm(x, *vecs, axis="1"), gpucg.AttrError, "axis='1'"),
    ]
    for fn, err, match in cases:
        with pytest.raises(err, match=match):
            fn()


# -- folding ------------------------------------------------------------------------------------

def test_fold_into_conv2d():
    """Folding is host arithmetic: one target shows it (the numpy one, no compile)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    vecs = params(8, "float32", 6)
    ref = gpucg.ops.batch_norm(gpucg.ops.conv2d(x, w, padding=1, bias=bias, target="numpy"),
                               *vecs, eps=1e-3, target="numpy")
    w2, b2 = gpucg.ops.fold_batch_norm(w, bias, *vecs, eps=1e-3)
    assert w2.dtype == w.dtype and w2.shape == w.shape and b2.shape == (8,)
    got = gpucg.ops.conv2d(x, w2, padding=1, bias=b2, target="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_fold_into_dense_and_hwio():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 16)).astype(np.float32)
    w = rng.standard_normal((6, 16)).astype(np.float32)
    vecs = params(6, "float32", 8)
    ref = want(x.astype(np.float64) @ w.T, *vecs, 1, 1e-5)
    w2, b2 = gpucg.ops.fold_batch_norm(w, None, *vecs)  # no bias before: the shift alone
    np.testing.assert_allclose(gpucg.ops.dense(x, w2, b2, target="numpy"), ref, rtol=1e-4,
                               atol=1e-4)
    hwio = rng.standard_normal((3, 3, 2, 4))
    w3, _ = gpucg.ops.fold_batch_norm(hwio, None, *params(4, "float64"), axis=3)
    s = params(4, "float64")[0] / np.sqrt(params(4, "float64")[3] + 1e-5)
    np.testing.assert_allclose(w3, hwio * s, rtol=1e-12)


def test_fold_bad_input():
    w = np.ones((4, 3), np.float32)
    vecs = params(4, "float32")
    with pytest.raises(gpucg.InputError, match=r"fold_batch_norm: gamma has shape \(3,\); it "
                                               r"must be \(4,\)"):
        gpucg.ops.fold_batch_norm(w, None, vecs[0][:3], *vecs[1:])
    with pytest.raises(gpucg.InputError, match=r"bias has shape \(5,\)"):
        gpucg.ops.fold_batch_norm(w, np.ones(5), *vecs)
    with pytest.raises(gpucg.DTypeError, match="weight dtype 'int64' is not supported"):
        gpucg.ops.fold_batch_norm(np.ones((4, 3), np.int64), None, *vecs)
    with pytest.raises(gpucg.InputError, match="axis=2 is out of range"):
        gpucg.ops.fold_batch_norm(w, None, *vecs, axis=2)


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    n = gpucg.var("n")
    for dtype, shape, axis in [("float16", (n, 8, 3, 3), 1), ("float32", (n, 8), -1),
                               ("float64", (8, n), 0)]:
        vec = gpucg.tensor((8,), dtype)
        f = gpucg.compile("batch_norm", gpucg.tensor(shape, dtype), vec, vec, vec, vec,
                          axis=axis, target="cuda")
        assert "gpucg_batch_norm_bn_direct_main" in f.sources["bn_direct.cuda/main"]


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple), data=st.data())
def test_hypothesis_numpy(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dtype = data.draw(st.sampled_from(["float16", "float32", "float64"]))
    eps = data.draw(st.sampled_from([0.0, 1e-5, 0.5]))
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    check(x, params(shape[axis], dtype), "numpy", axis=axis, eps=eps, forced=False)
