"""cast against NumPy's astype: every dtype pair, the numpy target's NaN and out-of-range
values as NumPy's own, and the kernels' documented rule for them (NaN is 0, out-of-range
values saturate; integers wrap as NumPy's astype)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from conftest import applicable, backend_or_skip

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
INTS = [d for d in DTYPES if d[0] in "iu"]
FLOATS = ["float16", "float32", "float64"]
PAIRS = [(a, b) for a in DTYPES for b in DTYPES]
#: each source with one destination (and each destination from one source): what the
#: default run compiles on PoCL (a compile each); -m exhaustive runs every pair there
SAMPLED = [(a, DTYPES[(i + 5) % len(DTYPES)]) for i, a in enumerate(DTYPES)]


def values(dtype, n=37):
    """Values every dtype holds (0..3 and booleans), in an odd length."""
    v = np.arange(n) % 4
    return (v % 2).astype(bool) if dtype == "bool" else v.astype(dtype)


def check_pair(src, dst, target, forced=False):
    x = values(src).reshape(37, 1)
    got = gpucg.ops.cast(x, dst, target=target)
    want = x.astype(dst)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst} on {target}")
    if forced:
        t = gpucg.tensor(x.shape, src)
        for impl in applicable("cast", t, target=target, dtype=dst):
            for index in ("int32", "int64"):
                f = gpucg.compile("cast", t, target=target, impl=impl, index=index, dtype=dst)
                np.testing.assert_array_equal(f(x), want, err_msg=f"{src}->{dst} {impl}")


@pytest.mark.parametrize("src,dst", PAIRS)
def test_every_pair_on_numpy(src, dst):
    check_pair(src, dst, "numpy", forced=True)


@pytest.mark.parametrize("src,dst", SAMPLED)
def test_pairs_on_opencl(src, dst):
    backend_or_skip("opencl")
    check_pair(src, dst, "opencl", forced=(src, dst) in SAMPLED[:4])


@pytest.mark.exhaustive
@pytest.mark.parametrize("src,dst", PAIRS)
def test_every_pair_on_opencl(src, dst):
    backend_or_skip("opencl")
    check_pair(src, dst, "opencl")


SPECIAL = [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, 0.7, -0.7, 2.5, -2.5, 127.9, 128.0,
           -128.5, -129.0, 255.5, 256.0, 32767.5, 65535.0, 65536.0, 2.0**31, -(2.0**31) - 512,
           2.0**32, 2.0**63, -(2.0**63), 2.0**64, 1e19]


def saturated(x: np.ndarray, dst: str) -> np.ndarray:
    """The kernels' rule: truncation toward zero, NaN -> 0, clamped to the type's range."""
    info = np.iinfo(dst)
    out = []
    for v in x.astype(np.float64).ravel():
        t = 0 if math.isnan(v) else (math.inf if v > 0 else -math.inf) if math.isinf(v) \
            else math.trunc(v)
        out.append(int(min(max(t, int(info.min)), int(info.max))))
    return np.array(out, dtype=dst).reshape(x.shape)


@pytest.mark.parametrize("src,dsts", [("float32", INTS), ("float64", ["int64", "uint64"]),
                                      ("float16", ["int8", "uint16"])])
def test_nan_and_out_of_range_floats(target, src, dsts):
    with np.errstate(over="ignore"):
        x = np.array(SPECIAL, np.float64).astype(src)
    for dst in dsts:
        got = gpucg.ops.cast(x, dst, target=target)
        if target == "numpy":
            with np.errstate(invalid="ignore"):
                want = x.astype(dst)  # NumPy's own values, whatever the platform gives
        else:
            want = saturated(x, dst)
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst} on {target}")
        b = gpucg.ops.cast(x, "bool", target=target)
        np.testing.assert_array_equal(b, x.astype(bool))  # NaN is True, as NumPy


def test_integers_wrap_as_numpy(target):
    big = np.array([-1, 300, -300, 2**40 + 5, 2**63 - 1, -(2**63), 65504, 70000], np.int64)
    for dst in ["int8", "uint32", "float16", "bool"]:
        with np.errstate(over="ignore"):
            want = big.astype(dst)
        np.testing.assert_array_equal(gpucg.ops.cast(big, dst, target=target), want, err_msg=dst)
    u = np.array([2**64 - 1, 2**63, 5], np.uint64)
    for dst in ["int64", "int8", "float64"]:
        np.testing.assert_array_equal(gpucg.ops.cast(u, dst, target=target), u.astype(dst))


def test_float64_to_float16_within_one_ulp(target):
    """The kernels round float64 -> float32 -> float16: equal to NumPy but in rare ties."""
    x = np.random.default_rng(7).standard_normal(4001) * 100
    got = gpucg.ops.cast(x, "float16", target=target).view(np.uint16).astype(np.int64)
    want = x.astype(np.float16).view(np.uint16).astype(np.int64)
    assert np.max(np.abs(got - want)) <= (0 if target == "numpy" else 1)


def test_edge_shapes(target):
    for shape in [(), (0,), (1,), (3, 0, 2), (5, 1, 3)]:
        x = np.asarray(np.random.default_rng(1).standard_normal(shape) * 9)
        np.testing.assert_array_equal(gpucg.ops.cast(x, "int16", target=target),
                                      x.astype(np.int16))


def test_bad_dtype():
    x = np.ones(3, np.float32)
    with pytest.raises(gpucg.DTypeError, match="dtype='complex64' is not supported; allowed: "
                                               "bool, int8"):
        gpucg.ops.cast(x, "complex64", target="numpy")
    with pytest.raises(gpucg.DTypeError, match="dtype='nothing' .* is not a dtype"):
        gpucg.ops.cast(x, "nothing", target="numpy")


#: each dtype on both sides of a conversion, and every float -> int saturation form: what
#: the default run renders for CUDA (NVRTC compiles each source twice; -m exhaustive: all)
RENDERED = sorted(set([(a, DTYPES[(i + k) % len(DTYPES)]) for i, a in enumerate(DTYPES)
                       for k in (1, 5)] + [("float32", d) for d in INTS]
                      + [("float64", "int64"), ("float64", "uint64"), ("float64", "int8"),
                         ("float16", "uint8"), ("float16", "int32"), ("float16", "bool"),
                         ("int64", "bool"), ("float64", "float16")]))


def render_cuda(pairs):
    n = gpucg.var("n")
    for src, dst in pairs:
        f = gpucg.compile("cast", gpucg.tensor((n,), src), dtype=dst, target="cuda")
        assert "gpucg_cast_copy_main" in f.sources["copy.cuda/main"]


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """Rendered for CUDA; conftest compiles each source with NVRTC at the session's end."""
    render_cuda(RENDERED)


@pytest.mark.exhaustive
def test_every_pair_compiles_with_nvrtc(nvrtc_or_skip):
    render_cuda(PAIRS)


@settings(max_examples=40, deadline=None)
@given(src=st.sampled_from(DTYPES), dst=st.sampled_from(DTYPES),
       shape=st.lists(st.integers(0, 6), max_size=3).map(tuple), seed=st.integers(0, 99))
def test_hypothesis_numpy(src, dst, shape, seed):
    rng = np.random.default_rng(seed)
    raw = np.asarray(rng.standard_normal(shape) * 200)
    with np.errstate(invalid="ignore", over="ignore"):
        x = raw.astype(src)
        want = x.astype(dst)
    np.testing.assert_array_equal(gpucg.ops.cast(x, dst, target="numpy"), want)
