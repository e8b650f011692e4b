"""GEMMs over batches: dense/linear over any leading dimensions, matmul and batch_matmul over
broadcast batch dimensions with transposes and alpha, every implementation forced, against
NumPy in float64; strided pyopencl views read in place by every GEMM kernel; and no copy of
the inputs (kernel launches, device buffers and host transfers counted with gpucg.counters)."""

import numpy as np
import pytest

import gpucg
from conftest import counted, opencl_arrays

rng = np.random.default_rng(11)
TOL = {"float16": 3e-3, "bfloat16": 2e-2, "float32": 2e-5, "float64": 1e-12}


def impls(op, *types, target, **attrs):
    from conftest import applicable

    return [None] if target == "numpy" else applicable(op, *types, target=target, **attrs)


def sample(shape, dtype):
    from gpucg.half import ml_dtypes

    dt = ml_dtypes().bfloat16 if dtype == "bfloat16" else dtype
    return rng.standard_normal(shape).astype(dt)


def f64(x):
    return np.asarray(x).astype(np.float64)


def close(got, want, dtype, scale):
    got = f64(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.size:
        err = np.abs(got - want)
        assert (err <= TOL[dtype] * (scale + np.abs(want) + 1)).all(), f"max error {err.max():.3g}"


def mm(a, b, ta, tb, alpha):
    """The float64 product of the operands as the flags present them, times alpha."""
    a, b = f64(a), f64(b)
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return alpha * np.matmul(a, b), np.abs(alpha) * np.matmul(np.abs(a), np.abs(b))


DENSE = [((2, 5, 33), 17), ((3, 1, 4, 65), 9), ((1, 1, 7), 5), ((0, 3, 8), 4), ((2, 0, 8), 4),
         ((6, 3, 2100), 7), ((4, 9), 0)]


@pytest.mark.parametrize("shape,n", DENSE)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_dense_folds_leading_dimensions(target, shape, n, dtype):
    if dtype == "bfloat16" and target == "numpy" and shape[-1] > 100:
        pytest.skip("one long-K bfloat16 case is enough: float32's covers it")
    x, w, b = sample(shape, dtype), sample((n, shape[-1]), dtype), sample((n,), dtype)
    want = f64(x) @ f64(w).T + f64(b)
    scale = np.abs(f64(x)) @ np.abs(f64(w)).T
    types = [gpucg.tensor(a.shape, dtype) for a in (x, w, b)]
    for impl in impls("dense", *types, target=target):
        got = gpucg.compile("dense", *types, target=target, impl=impl)(x, w, b)
        close(got, want, dtype, scale)
    close(gpucg.ops.linear(x, w, b, target=target), want, dtype, scale)


BATCHED = [  # (a shape, b shape, transpose_a, transpose_b, alpha)
    ((2, 12, 5, 16), (2, 12, 16, 5), False, False, 1.0),
    ((2, 12, 5, 16), (1, 12, 7, 16), False, True, 0.125),
    ((3, 1, 9, 5), (4, 6, 9), True, True, -1.5),
    ((1, 3, 7, 4), (2, 1, 7, 5), True, False, 2.0),
    ((5, 1, 17), (17, 3), False, False, 0.5),
    ((2, 1, 3, 0), (1, 4, 0, 6), False, False, 1.0),
    ((2, 0, 4, 3), (3, 5), False, False, 1.0),
    ((1, 1, 1), (1, 1, 1), True, True, 3.0),
]


@pytest.mark.parametrize("sa,sb,ta,tb,alpha", BATCHED)
@pytest.mark.parametrize("op", ["matmul", "batch_matmul"])
def test_broadcast_batches_transposes_and_alpha(target, op, sa, sb, ta, tb, alpha):
    dtypes = ["float32", "float64", "float16"] if (sa, sb) == BATCHED[1][:2] else ["float32"]
    for dtype in dtypes:
        a, b = sample(sa, dtype), sample(sb, dtype)
        want, scale = mm(a, b, ta, tb, alpha)
        types = [gpucg.tensor(sa, dtype), gpucg.tensor(sb, dtype)]
        attrs = dict(transpose_a=ta, transpose_b=tb, alpha=alpha)
        for impl in impls(op, *types, target=target, **attrs):
            got = gpucg.compile(op, *types, target=target, impl=impl, **attrs)(a, b)
            close(got, want, dtype, scale)
        close(getattr(gpucg.ops, op)(a, b, ta, tb, alpha, target=target), want, dtype, scale)


def test_bfloat16_and_tf32_batches(target):
    """The tensor-core dtypes over a broadcast 4-D batch with k^T (gemm_mma's twin on OpenCL)."""
    if target != "cuda":  # CuPy has no bfloat16 arrays (the tf32 half runs there)
        a, b = sample((2, 3, 20, 16), "bfloat16"), sample((1, 3, 24, 16), "bfloat16")
        want, scale = mm(a, b, False, True, 0.5)
        close(gpucg.ops.batch_matmul(a, b, transpose_b=True, alpha=0.5, target=target), want,
              "bfloat16", scale)
    a, b = sample((2, 3, 20, 16), "float32"), sample((1, 3, 24, 16), "float32")
    want, scale = mm(a, b, False, True, 0.5)
    got = gpucg.ops.batch_matmul(a, b, transpose_b=True, alpha=0.5, target=target,
                                 allow_tf32=True)
    close(got, want, "float16", scale)  # TF32 keeps 10 bits of mantissa, as float16


def test_linear_is_torch_linear():
    torch = pytest.importorskip("torch")
    x, w, b = sample((2, 5, 24), "float32"), sample((7, 24), "float32"), sample((7,), "float32")
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w),
                                      torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(gpucg.ops.linear(x, w, b, target="numpy"), want, rtol=1e-5,
                               atol=1e-5)
    got = gpucg.ops.linear(torch.from_numpy(x), torch.from_numpy(w), target="numpy")
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 5, 7)


def _compile(op, *shapes, **attrs):
    """Constant shapes: the errors print them (eager calls print what issue 20's errors part
    makes of them, in runtime/ and eager.py)."""
    return lambda: gpucg.compile(op, *[gpucg.tensor(sh, "float32") for sh in shapes],
                                 target="numpy", **attrs)


@pytest.mark.parametrize("call,err,msg", [
    (_compile("dense", (2, 3, 4), (5, 6)),
     gpucg.InputError, r"data has 4 along k but weight has 6 \(shapes \(2, 3, 4\) and \(5, 6\)\)"),
    (_compile("dense", (2, 3, 4), (5, 4), (6,)), gpucg.InputError, "bias must have shape"),
    (_compile("batch_matmul", (2, 12, 5, 64), (3, 12, 5, 64), transpose_b=True),
     gpucg.InputError, r"batch dimensions of a \(shape \(2, 12, 5, 64\)\) and b \(shape "
                       r"\(3, 12, 5, 64\)\) do not broadcast: \(2, 12\) against \(3, 12\)"),
    (_compile("matmul", (3, 4), (4,), transpose_b=True),
     gpucg.InputError, r"b has shape \(4,\); allowed for transpose_b=True: rank >= 2"),
    (lambda: gpucg.ops.linear(np.ones((2, 3, 4), np.float32), np.ones((5, 6, 1), np.float32),
                              target="numpy"),
     gpucg.InputError, "weight has shape .*; allowed: rank 2"),
    (lambda: gpucg.ops.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32),
                              alpha=float("inf"), target="numpy"),
     gpucg.AttrError, "alpha=inf must be finite"),
])
def test_bad_input(call, err, msg):
    with pytest.raises(err, match=msg):
        call()


# -- no copies: launches, buffers and host transfers counted ---------------------------------



def _assert_no_copies(stats, launches, buffers=1):
    assert stats["launches"] == launches, stats
    assert stats["buffers"] == buffers, stats  # the kernels' outputs (and split-K's partials)
    assert stats["uploads"] == stats["downloads"] == stats["device_copies"] == 0, stats


KERNELS = {"gemm_tiled": 1, "gemv": 1, "gemm_splitk": 2, "gemm_mma": 1}


def test_device_arrays_are_read_in_place_by_every_gemm_kernel():
    """Every implementation runs on pyopencl inputs with one launch (two for split-K) and one
    buffer, its output: no upload, no download, no device copy of an input."""
    be, cla = opencl_arrays()
    q = be.queue
    cases = [("dense", (sample((2, 5, 40), "float32"), sample((24, 40), "float32")), {}),
             ("batch_matmul", (sample((2, 3, 5, 16), "float16"), sample((1, 3, 7, 16), "float16")),
              dict(transpose_b=True, alpha=0.25)),
             ("matmul", (sample((2, 1, 9, 2048), "float32"), sample((3, 2048, 4), "float32")),
              dict(alpha=2.0))]
    for op, (a, b), attrs in cases:
        types = [gpucg.tensor(x.shape, x.dtype.name) for x in (a, b)]
        dev = [cla.to_device(q, x) for x in (a, b)]
        want, scale = mm(a, b, False, op == "dense" or attrs.get("transpose_b"),
                         attrs.get("alpha", 1.0))
        for impl in impls(op, *types, target="opencl", **attrs):
            f = gpucg.compile(op, *types, target="opencl", impl=impl, **attrs)
            out, stats = counted(lambda: f(*dev))
            _assert_no_copies(stats, KERNELS[impl], KERNELS[impl])
            close(out.get(), want, a.dtype.name, scale)


def _views(x, heads):
    """x (B, S, H * D) on the device, as (B, H, S, D): a reshape and a transpose, both views."""
    b, s, hd = x.shape
    v = gpucg.ops.reshape(x, (b, s, heads, hd // heads))
    return gpucg.ops.transpose(v, (0, 2, 1, 3))


def test_strided_views_are_read_in_place():
    """q and k as transposed pyopencl views of linear's outputs: every GEMM implementation
    reads their strides (and a view's offset) in place."""
    be, cla = opencl_arrays()
    qkv = cla.to_device(be.queue, sample((2, 5, 3 * 32), "float32"))
    whole = qkv.get()
    q = _views(qkv, 6)  # (2, 6, 5, 16)
    assert not q.flags.c_contiguous and q.base_data is qkv.base_data
    k = gpucg.ops.transpose(q, (0, 1, 3, 2))  # (2, 6, 16, 5): k read as transposed twice
    ref = whole.reshape(2, 5, 6, 16).transpose(0, 2, 1, 3).astype(np.float64)
    want = 0.25 * ref @ ref.transpose(0, 1, 3, 2)
    types = [gpucg.tensor(q.shape, "float32"), gpucg.tensor(q.shape, "float32")]
    for impl in impls("batch_matmul", *types, target="opencl", transpose_b=True):
        f = gpucg.compile("batch_matmul", *types, target="opencl", impl=impl, transpose_b=True,
                          alpha=0.25)
        out, stats = counted(lambda: f(q, q))
        _assert_no_copies(stats, KERNELS[impl], KERNELS[impl])
        close(out.get(), want, "float32", np.abs(want))
    # k^T as a view whose last axis is strided: the kernels walk their inner loops along an
    # operand's last axis, so this one is packed once on the device (transpose_b=True on q
    # itself is the in-place way), never through the host
    out, stats = counted(lambda: gpucg.ops.batch_matmul(q, k, alpha=0.25))
    assert stats["device_copies"] == 1 and stats["uploads"] == stats["downloads"] == 0, stats
    close(out.get(), want, "float32", np.abs(want))
    # a view with an offset (a slice of the batch): read at its first element
    tail = qkv[1:]
    out, stats = counted(lambda: gpucg.ops.linear(tail, cla.to_device(
        be.queue, np.eye(96, dtype=np.float32))))
    np.testing.assert_allclose(out.get(), whole[1:], rtol=1e-6, atol=1e-6)


def test_numpy_views_reach_np_matmul_without_a_copy(monkeypatch):
    """On the numpy target a transposed view goes to np.matmul as it is."""
    x = sample((2, 5, 12, 8), "float32")
    seen = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b: seen.append((a, b)) or real(a, b))
    q = gpucg.ops.transpose(x, (0, 2, 1, 3), target="numpy")
    assert np.shares_memory(q, x)
    got = gpucg.ops.batch_matmul(q, q, transpose_b=True, alpha=0.5, target="numpy")
    assert np.shares_memory(seen[-1][0], x) and np.shares_memory(seen[-1][1], x)
    xt = f64(x).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, 0.5 * xt @ xt.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-5)
