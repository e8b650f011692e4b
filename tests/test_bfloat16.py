"""bfloat16 end to end: every operator family that takes float16 takes bfloat16, on numpy and
opencl (every implementation that can run, forced), against float32 NumPy on the same
bfloat16 inputs with the result rounded to bfloat16; the store's rounding (ties, NaN, inf,
overflow, subnormals) bit for bit against ml_dtypes; torch bfloat16 tensors in and out; the
CUDA kernels through NVRTC; and a clear error without ml_dtypes."""

import subprocess
import sys

import numpy as np
import pytest

import gpucg
from gpucg.verify import nvrtc

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
BF = np.dtype(ml_dtypes.bfloat16)
EPS = 2.0 ** -8  # bfloat16's unit roundoff
T = gpucg.tensor


def bf(a):
    return np.asarray(a, np.float32).astype(BF)


def impls(op, arrays, target, **attrs):
    """[None] on numpy (selection's choice); every applicable implementation on opencl."""
    from conftest import applicable

    if target == "numpy":
        return [None]
    types = [T(a.shape, a.dtype.name) for a in arrays]
    return applicable(op, *types, target=target, **attrs)


def run(op, arrays, target, impl=None, **attrs):
    types = [T(a.shape, a.dtype.name) for a in arrays]
    out = gpucg.compile(op, *types, target=target, impl=impl, **attrs)(*arrays)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def check(got, want32, terms=1, magnitude=None, tag=""):
    """``got`` (bfloat16) against the float32 result ``want32`` rounded to bfloat16: one
    bfloat16 rounding apart (the float32 results may straddle a rounding boundary), plus
    float32's summation-order error over ``terms`` terms of ``magnitude``."""
    assert got.dtype == BF, (tag, got.dtype)
    want = np.asarray(want32, np.float32).astype(BF).astype(np.float64)
    g = got.astype(np.float64)
    assert g.shape == want.shape, (tag, g.shape, want.shape)
    mag = np.abs(want32).max(initial=1.0) if magnitude is None else magnitude
    atol = terms * 2.0 ** -22 * mag + 1e-30
    np.testing.assert_allclose(g, want, rtol=2 * EPS, atol=atol, equal_nan=True, err_msg=tag)


@pytest.fixture
def rng():
    return np.random.default_rng(17)


# -- the store's rounding, bit for bit --------------------------------------------------------

#: float32 bit patterns where rounding to bfloat16 is delicate
EDGES = np.array([
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  # ties to even (down, up), just over, under
    0xBF808000, 0xBF818000, 0xC0FF8000,              # negative ties
    0x7F800000, 0xFF800000,                          # infinities
    0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0xFF7FFFFF,  # overflow to inf, a tie into inf, below
    0x00008000, 0x00018000, 0x00010000, 0x007FFFFF,  # subnormals: ties, exact, up to normal
    0x80018000, 0x00000001, 0x00000000,
    0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00001,  # NaNs: quiet, signalling, all ones
    0x3DCCCCCD, 0x40490FDB, 0xC2F6E979,              # 0.1, pi, -123.456
], np.uint32)


def test_store_rounds_to_nearest_even_bit_exactly(target):
    """float32 values stored as bfloat16 by a kernel (dense with out_dtype, x times 1):
    exactly ml_dtypes' bits, NaNs quiet NaNs of their sign, never an infinity."""
    x = EDGES.view(np.float32).reshape(-1, 1)
    one = np.ones((1, 1), np.float32)
    with np.errstate(invalid="ignore"):  # NaNs are the point
        want = x.astype(BF).view(np.uint16)
    assert not np.isinf(want.view(BF)[np.isnan(x)]).any()
    for impl in impls("dense", [x, one], target, out_dtype="bfloat16"):
        with np.errstate(invalid="ignore"):
            got = run("dense", [x, one], target, impl, out_dtype="bfloat16").view(np.uint16)
        bad = np.flatnonzero(got != want)
        assert not bad.size, [(hex(EDGES[i]), hex(got[i, 0]), hex(want[i, 0])) for i in bad]


def test_every_bfloat16_round_trips(target):
    """All 65536 bit patterns loaded (to float) and stored again: the same bits; a NaN
    becomes the quiet NaN of its sign."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(BF).reshape(256, 256)
    got = np.asarray(gpucg.ops.negative(gpucg.ops.negative(x, target=target), target=target))
    nan = np.isnan(x.astype(np.float32))
    assert np.array_equal(got.view(np.uint16)[~nan], x.view(np.uint16)[~nan])
    assert np.isnan(got.astype(np.float32)[nan]).all()
    if target == "opencl":
        assert set(np.unique(got.view(np.uint16)[nan])) == {0x7FC0, 0xFFC0}


# -- every family -----------------------------------------------------------------------------

def test_elementwise(target, rng):
    a, b = bf(rng.standard_normal((3, 1, 257))), bf(rng.standard_normal((5, 257)))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    check(np.asarray(gpucg.ops.add(a, b, target=target)), a32 + b32)
    check(np.asarray(gpucg.ops.multiply(a, 0.5, target=target)), a32 * np.float32(0.5))
    check(np.asarray(gpucg.ops.exp(a, target=target)), np.exp(a32))
    check(np.asarray(gpucg.ops.gelu(a, approximate="tanh", target=target)),
          0.5 * a32 * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (a32 + 0.044715 * a32 ** 3))))
    # a fused chain computes in float32 and rounds once, at the store
    got = np.asarray(gpucg.ops.fused("relu(add(multiply(x0, x1), x0))")(a, b, target=target))
    check(got, np.maximum(a32 * b32 + a32, 0))
    # promotion: bfloat16 as float16 does in NumPy 2; with float16, float32
    assert np.asarray(gpucg.ops.add(a, np.int8(3), target=target)).dtype == BF
    assert np.asarray(gpucg.ops.add(a, np.ones(257, np.float16), target=target)).dtype == np.float32
    assert np.asarray(gpucg.ops.less(a, b, target=target)).dtype == np.bool_
    x = bf(rng.standard_normal((4, 6)))
    check(np.asarray(gpucg.ops.pad(x, [(1, 2, 0), (0, 1, 1)], value=2.5, target=target)),
          np.asarray(gpucg.ops.pad(x.astype(np.float32), [(1, 2, 0), (0, 1, 1)], value=2.5,
                                   target="numpy")))
    check(np.asarray(gpucg.ops.sum_to(x, (1, 6), target=target)),
          x.astype(np.float32).sum(0, keepdims=True), terms=4)


@pytest.mark.parametrize("axis", [1, 0, None])
def test_reductions(target, rng, axis):
    x = bf(rng.standard_normal((33, 1001)))
    x32 = x.astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    mag = np.abs(x32).sum(axis=axis).max()
    for op, fn in [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]:
        for impl in impls(op, [x], target, axis=axis):
            check(run(op, [x], target, impl, axis=axis), fn(x32, axis=axis), n,
                  mag / (n if op == "mean" else 1), f"{op} {impl}")
    p = bf(rng.uniform(0.99, 1.01, (7, 60)))
    check(np.asarray(gpucg.ops.prod(p, axis=1, target=target)),
          np.prod(p.astype(np.float32), axis=1), 60)
    for op, fn in [("argmax", np.argmax), ("argmin", np.argmin)]:
        if axis is not None:
            assert np.array_equal(run(op, [x], target, axis=axis), fn(x32, axis=axis))
    b = bf(np.where(rng.random((5, 9)) < 0.3, 0.0, 1.5))
    assert np.array_equal(np.asarray(gpucg.ops.any(b, axis=1, target=target)),
                          (b.astype(np.float32) != 0).any(1))


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_norms(target, rng, op):
    from gpucg.op import get_op

    for shape, axis in [((7, 300), -1), ((4, 9, 3), 1), ((2, 5000), -1)]:
        x = bf(rng.standard_normal(shape) * 3)
        params = [bf(rng.uniform(0.5, 1.5, shape[axis])) for _ in
                  range({"layer_norm": 2, "rms_norm": 1}.get(op, 0))]
        o = get_op(op)
        # the float64 textbook formulas on the float32 values of the inputs
        want = o.reference(x.astype(np.float32), *(p.astype(np.float32) for p in params),
                           o.make_attrs(axis=axis))
        for impl in impls(op, [x, *params], target, axis=axis):
            got = run(op, [x, *params], target, impl, axis=axis)
            check(got, want, shape[axis], tag=f"{op} {shape} {impl}")


def test_pooling(target, rng):
    x = bf(rng.standard_normal((2, 5, 9, 7)))
    x32 = x.astype(np.float32)
    for op, attrs in [("max_pool2d", dict(kernel=3, strides=2, padding=1)),
                      ("avg_pool2d", dict(kernel=(2, 3), padding="SAME_LOWER")),
                      ("avg_pool2d", dict(kernel=2, layout="NHWC", count_include_pad=False)),
                      ("global_avg_pool2d", {}), ("global_max_pool2d", {})]:
        want = getattr(gpucg.ops, op)(x32, target="numpy", **attrs)
        for impl in impls(op, [x], target, **attrs):
            check(run(op, [x], target, impl, **attrs), want, 63, tag=f"{op} {attrs} {impl}")


def test_topk_and_sort_keys(target, rng):
    """Keys order as floats (NaN above +inf, -0.0 equal to +0.0), values bit for bit."""
    from gpucg.ops.topk import stable_order

    x = bf(rng.integers(-20, 20, (3, 3001)))  # ties everywhere
    flat = x.reshape(-1)
    flat[::17], flat[::23], flat[::29], flat[::31] = np.nan, -0.0, np.inf, -np.inf
    x32 = x.astype(np.float32)
    for k, asc in [(5, False), (200, True), (0, False)]:
        order = stable_order(x32, asc)[:, :k or None]
        for impl in impls("topk", [x], target, k=k, is_ascend=asc):
            v, i = run("topk", [x], target, impl, k=k, is_ascend=asc)
            assert np.array_equal(i, order), (k, asc, impl)
            assert np.array_equal(v.view(np.uint16),
                                  np.take_along_axis(x, order, 1).view(np.uint16)), (k, impl)
    got = np.asarray(gpucg.ops.argsort(x, axis=1, target=target))
    assert np.array_equal(got, stable_order(x32, True))


@pytest.mark.parametrize("op", ["dense", "matmul", "batch_matmul"])
def test_dense_family(target, rng, op):
    for m, k, n in [(3, 65, 17), (33, 65, 17), (8, 4100, 9)]:
        a, w = bf(rng.standard_normal((m, k))), bf(rng.standard_normal((n, k)))
        a32, w32 = a.astype(np.float32), w.astype(np.float32)
        if op == "dense":
            bias, res = bf(rng.standard_normal(n)), bf(rng.standard_normal((m, n)))
            arrays, attrs = [a, w, bias, res], dict(activation="relu")
            want = np.maximum(a32 @ w32.T + bias.astype(np.float32), 0) + res.astype(np.float32)
        elif op == "matmul":
            arrays, attrs, want = [a, np.ascontiguousarray(w.T)], {}, a32 @ w32.T
        else:  # a broadcast batch
            arrays = [np.stack([a, a[::-1]]), np.ascontiguousarray(w.T)[None]]
            attrs, want = {}, np.stack([a32, a32[::-1]]) @ w32.T
        for impl in impls(op, arrays, target, **attrs):
            got = run(op, arrays, target, impl, **attrs)
            check(got, want, k, np.abs(a32).max() * np.abs(w32).max() * k, f"{op} {m} {k} {impl}")
    # float32 out of bfloat16 operands, and bfloat16 out of float16 ones
    a, w = bf(rng.standard_normal((5, 40))), bf(rng.standard_normal((6, 40)))
    want = a.astype(np.float32) @ w.astype(np.float32).T
    got = np.asarray(gpucg.ops.dense(a, w, out_dtype="float32", target=target))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    h = rng.standard_normal((5, 40)).astype(np.float16)
    got = np.asarray(gpucg.ops.dense(h, h, out_dtype="bfloat16", target=target))
    check(got, h.astype(np.float32) @ h.astype(np.float32).T, 40, 40 * 16)


def exhaustive_case(params) -> bool:
    """The cases of default-tier tests that run with -m exhaustive only (conftest): bfloat16
    conv2d in NHWC on OpenCL (every implementation takes bfloat16 in NCHW here, and NHWC in
    test_conv2d.py's every-implementation cases: the layout's indexing is the dtype's own
    nowhere)."""
    return params.get("layouts") == ("NHWC", "HWIO") and params.get("target") == "opencl"


@pytest.mark.parametrize("layouts", [("NCHW", "OIHW"), ("NHWC", "HWIO")])
def test_conv2d(target, rng, layouts):
    dl, kl = layouts
    for n, c, h, w, o, ks, attrs in [(2, 8, 13, 11, 12, 3, dict(padding=1)),
                                     (1, 8, 9, 9, 8, 3, dict(padding=1, groups=8, strides=2)),
                                     (1, 4, 30, 30, 8, 3, dict(padding=1)),
                                     (1, 6, 11, 11, 4, 3, dict(padding=2, dilation=2, groups=2))]:
        x = bf(rng.standard_normal((n, c, h, w) if dl == "NCHW" else (n, h, w, c)))
        cg = c // attrs.get("groups", 1)
        wt = bf(rng.standard_normal((o, cg, ks, ks) if kl == "OIHW" else (ks, ks, cg, o)))
        bias = bf(rng.standard_normal(o))
        attrs = dict(attrs, data_layout=dl, kernel_layout=kl, activation="relu")
        want = gpucg.ops.conv2d(x.astype(np.float32), wt.astype(np.float32),
                                bias=bias.astype(np.float32), target="numpy", **attrs)
        terms = cg * ks * ks
        for impl in impls("conv2d", [x, wt, bias], target, **attrs):
            got = run("conv2d", [x, wt, bias], target, impl, **attrs)
            check(got, want, terms, 4 * terms, f"conv2d {attrs} {impl}")


# -- interop ----------------------------------------------------------------------------------

def test_torch_bfloat16_in_and_out(target):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x = torch.randn(4, 33).to(torch.bfloat16)
    y = gpucg.ops.relu(x, target=target)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and torch.equal(y, x.relu())
    a, w = torch.randn(8, 16).to(torch.bfloat16), torch.randn(5, 16).to(torch.bfloat16)
    y = gpucg.ops.dense(a, w, target=target)
    assert y.dtype == torch.bfloat16
    want = (a.float() @ w.float().T).to(torch.bfloat16).float()
    assert torch.allclose(y.float(), want, rtol=2 * EPS, atol=1e-3)
    v, i = gpucg.ops.topk(x, k=3, target=target)
    assert v.dtype == torch.bfloat16 and torch.equal(v, torch.topk(x, 3).values)
    # no copy on the way in: a NumPy view of the tensor's memory
    from gpucg.interop import ingest

    arr, kind, _ = ingest(x[:, 1:], "x", "relu")
    assert kind == "numpy" and arr.dtype == BF
    assert np.shares_memory(arr.view(np.int16), x.view(torch.int16).numpy())


def test_pyopencl_bfloat16_arrays():
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    import pyopencl.array as cla

    from gpucg.runtime import get_backend

    queue = get_backend("opencl").queue
    x = bf(np.linspace(-3, 3, 40))
    y = gpucg.ops.relu(cla.to_device(queue, x), target="opencl")
    assert isinstance(y, cla.Array) and y.dtype == BF
    assert np.array_equal(y.get().view(np.uint16), np.maximum(x, bf(0)).view(np.uint16))


# -- CUDA and the optional dependency -----------------------------------------------------------

# sm_80 with -m exhaustive (the session's NVRTC pass compiles every source for it)
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.exhaustive), "sm_90"])
def test_cuda_kernels_compile_with_nvrtc(nvrtc_or_skip, arch):
    """One call of each family in bfloat16 (the CUDA implementation selection picks): NVRTC
    compiles it and the store is the one PTX instruction cvt.rn.bf16.f32. (Every CUDA source
    a test renders is compiled at the end of the session too: tests/conftest.py.)"""
    m, n = gpucg.var("m"), gpucg.var("n")
    calls = [("add", (T((m, n), "bfloat16"), T((n,), "bfloat16")), {}),
             ("mean", (T((m, n), "bfloat16"),), dict(axis=1)),
             ("layer_norm", (T((m, n), "bfloat16"), T((n,), "bfloat16"), T((n,), "bfloat16")), {}),
             ("max_pool2d", (T((m, 4, n, n), "bfloat16"),), dict(kernel=3)),
             ("topk", (T((m, n), "bfloat16"),), dict(k=8)),
             ("dense", (T((m, 256), "bfloat16"), T((64, 256), "bfloat16"), T((64,), "bfloat16"),
                        T((m, 64), "bfloat16")), dict(activation="gelu")),
             ("conv2d", (T((4, 16, 9, 9), "bfloat16"), T((32, 16, 3, 3), "bfloat16")),
              dict(padding=1, impl="direct"))]
    for op, types, attrs in calls:
        f = gpucg.compile(op, *types, target=f"cuda -arch={arch}", **attrs)
        ptx = {key: nvrtc.compile_to_ptx(src, arch) for key, src in f.sources.items()
               if not key.endswith("@i64")}
        assert all(".entry" in p for p in ptx.values()), op
        if op != "topk":  # topk moves bit patterns only
            assert any("cvt.rn.bf16.f32" in p for p in ptx.values()), op


def test_without_ml_dtypes_import_works_and_bfloat16_says_what_to_install():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, gpucg\n"
            "assert gpucg.ops.relu(np.ones(3, np.float16)).dtype == np.float16\n"
            "try:\n    gpucg.tensor((3,), 'bfloat16')\n"
            "except gpucg.DTypeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'gpucg[bfloat16]'" in out.stdout


def test_bad_bfloat16_input_is_a_clear_error():
    with pytest.raises(gpucg.DTypeError, match="x dtype 'bfloat16' is not supported; allowed: "
                       "float16, float32, float64"):
        gpucg.compile("batch_norm", T((2, 4, 3, 3), "bfloat16"), *[T((4,), "bfloat16")] * 4,
                      target="numpy")
    with pytest.raises(gpucg.DTypeError, match="bfloat16"):
        gpucg.compile("dense", T((4, 4), "bfloat16"), T((4, 4), "float16"), target="numpy")
