"""What users bring from NumPy and ONNX to the operators that existed: reverse scans (with
exclusive as ONNX's CumSum), conv2d's SAME_LOWER, and the six narrow or unsigned integer
dtypes on cumsum/cumprod and topk/sort/argsort, on every backend here."""

import numpy as np
import pytest

import gpucg
from gpucg.op import get_op

INTS = ["int8", "int16", "uint8", "uint16", "uint32", "uint64"]


def reference(op, x, **attrs):
    o = get_op(op)
    return o.reference(x, o.make_attrs(**attrs))


def test_reverse_scan_is_onnx_cumsum(target):
    """ONNX CumSum, x = [1, 2, 3, 4]: reverse gives [10, 9, 7, 4], reverse and exclusive
    [9, 7, 4, 0]."""
    x = np.array([1, 2, 3, 4], np.float32)
    assert gpucg.ops.cumsum(x, reverse=True, target=target).tolist() == [10, 9, 7, 4]
    assert gpucg.ops.cumsum(x, reverse=True, exclusive=True, target=target).tolist() == \
        [9, 7, 4, 0]
    assert gpucg.ops.cumprod(x, reverse=True, exclusive=True, target=target).tolist() == \
        [24, 12, 4, 1]


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_reverse_scans_on_every_axis(target, op):
    rng = np.random.default_rng(1)
    for shape, axis in [((7,), None), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1), ((0, 4), 1)]:
        x = rng.uniform(0.9, 1.1, shape).astype(np.float32)
        for exclusive in (False, True):
            got = getattr(gpucg.ops, op)(x, axis=axis, reverse=True, exclusive=exclusive,
                                         target=target)
            along = 0 if axis is None else axis
            base = x.reshape(-1) if axis is None else x
            want = getattr(np, op)(np.flip(base, along), axis=along)
            if exclusive and want.size:
                want = reference(op, np.flip(base, along), axis=along, exclusive=True)
            np.testing.assert_allclose(got, np.flip(want, along), rtol=1e-5,
                                       err_msg=f"{shape} {axis}")


def test_every_scan_implementation_in_reverse():
    """Each scan implementation, forced, scans from the end (its partial totals stay in scan
    order), exclusive too."""
    from conftest import applicable, backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(2)
    ran = set()
    for device in ("gpu", "cpu"):
        target = f"opencl -device={device}"
        for shape, axis in [((5, 300), 1), ((3, 9000), 1), ((40, 3000), 0), ((2, 5000, 3), 1)]:
            x = rng.integers(-3, 4, shape).astype(np.int32)
            t = gpucg.tensor(shape, "int32")
            for impl in applicable("cumsum", t, axis=axis, reverse=True, target=target):
                f = gpucg.compile("cumsum", t, axis=axis, reverse=True, exclusive=True,
                                  target=target, impl=impl)
                np.testing.assert_array_equal(
                    f(x), reference("cumsum", x, axis=axis, reverse=True, exclusive=True))
                ran.add(impl)
    assert ran == {"scan_rows", "scan_lookback", "scan_device", "scan_cols", "scan_cols_lookback",
                   "scan_chunked"}


@pytest.mark.parametrize("dtype", INTS)
def test_scan_integer_dtypes_accumulate_as_numpy(target, dtype):
    """Signed integers accumulate in int64, unsigned ones in uint64; a dtype argument wraps
    as NumPy does."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(3).integers(info.min, info.max, (4, 300), endpoint=True,
                                          dtype=dtype)
    got = gpucg.ops.cumsum(x, axis=1, target=target)
    assert got.dtype == np.cumsum(x, axis=1).dtype
    np.testing.assert_array_equal(got, np.cumsum(x, axis=1))
    got = gpucg.ops.cumprod(x, axis=0, dtype=dtype, target=target)
    np.testing.assert_array_equal(got, np.cumprod(x, axis=0, dtype=dtype))


def _ints(shape, dtype, rng, ties):
    info = np.iinfo(dtype)
    if ties:
        base = np.dtype(dtype).type(info.max - 5 if info.min == 0 else -2)
        return rng.integers(0, 5, size=shape).astype(dtype) + base
    x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    x.reshape(-1)[:3] = [info.min, info.max, info.max // 2 + 1]  # 2^63 for uint64
    return x


#: the narrowest, widest and unsigned keys in the default tier, the rest with -m exhaustive
@pytest.mark.parametrize("dtype", [d if d in ("int8", "uint8", "uint64") else
                                   pytest.param(d, marks=pytest.mark.exhaustive) for d in INTS])
def test_topk_sort_integer_dtypes(target, dtype):
    rng = np.random.default_rng(4)
    for shape, k in [((5, 300), 10), ((3, 2000), 150)]:
        for ties in (False, True):
            x = _ints(shape, dtype, rng, ties)
            for asc in (False, True):
                got = gpucg.ops.topk(x, k=k, is_ascend=asc, target=target)
                for g, w in zip(got, reference("topk", x, k=k, is_ascend=asc)):
                    np.testing.assert_array_equal(g, w)
    x = _ints((4, 700), dtype, rng, False)
    np.testing.assert_array_equal(gpucg.ops.sort(x, target=target), np.sort(x, kind="stable"))
    np.testing.assert_array_equal(gpucg.ops.argsort(x, target=target),
                                  np.argsort(x, kind="stable"))


def test_unsigned_64_bit_keys_above_2_63_order_correctly(target):
    u = np.array([2**64 - 1, 2**63, 2**63 - 1, 0, 5, 2**63 + 1], np.uint64)
    assert gpucg.ops.sort(u, target=target).tolist() == sorted(u.tolist())
    assert gpucg.ops.argsort(u, is_ascend=False, target=target).tolist() == [0, 5, 1, 2, 4, 3]
    v, i = gpucg.ops.topk(u, k=2, target=target)
    assert v.tolist() == [2**64 - 1, 2**63 + 1] and i.tolist() == [0, 5]


def test_every_topk_implementation_on_narrow_and_unsigned_keys():
    """The key function differs for signed and unsigned 8- to 64-bit integers: every topk
    implementation, forced, on int8 and uint64."""
    from conftest import applicable, backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(5)
    ran = set()
    for dtype in ("int8", "uint64"):
        for shape, k in [((3, 40), 5), ((2, 3001), 200), ((5, 1000), 0), ((2, 9000), 1000)]:
            x = _ints(shape, dtype, rng, ties=True)
            t = gpucg.tensor(shape, dtype)
            for impl in applicable("topk", t, k=k, target="opencl -device=gpu"):
                f = gpucg.compile("topk", t, k=k, target="opencl -device=gpu", impl=impl)
                try:
                    got = f(x)
                except gpucg.InputError as exc:  # the forced implementation's size condition
                    assert "the forced implementation" in str(exc)
                    continue
                for g, w in zip(got, reference("topk", x, k=k)):
                    np.testing.assert_array_equal(g, w, err_msg=f"{dtype} {impl} {shape}")
                ran.add(impl)
    assert ran == {"topk_warp", "topk_group", "topk_radix", "sort_bitonic", "sort_merge"}


def test_conv2d_same_lower_puts_the_odd_padding_first(target):
    """ONNX auto_pad SAME_LOWER: with an odd total the extra row/column goes at the start;
    "SAME" (SAME_UPPER) puts it at the end."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 6, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 4)).astype(np.float32)
    # height: total padding 1, width: 3 -> lower (top 1, left 2, bottom 0, right 1)
    lower = gpucg.ops.conv2d(x, w, padding="SAME_LOWER", target=target)
    upper = gpucg.ops.conv2d(x, w, padding="SAME", target=target)
    np.testing.assert_allclose(lower, gpucg.ops.conv2d(x, w, padding=(1, 2, 0, 1),
                                                       target="numpy"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(upper, gpucg.ops.conv2d(x, w, padding=(0, 1, 1, 2),
                                                       target="numpy"), rtol=1e-5, atol=1e-5)
    assert lower.shape == upper.shape == (1, 3, 6, 7)
    s2 = gpucg.ops.conv2d(x, w, padding="same_lower", strides=2, target=target)
    ref = get_op("conv2d").reference(x, w, get_op("conv2d").make_attrs(padding=(0, 2, 0, 1),
                                                                       strides=2))
    np.testing.assert_allclose(s2, ref, rtol=1e-5, atol=1e-5)


def test_conv2d_same_lower_with_symbolic_sizes():
    h, w = gpucg.var("h"), gpucg.var("w")
    f = gpucg.compile("conv2d", gpucg.tensor((1, 2, h, w)), gpucg.tensor((3, 2, 3, 3)),
                      padding="SAME_LOWER", strides=2, target="numpy")
    x = np.random.default_rng(7).standard_normal((1, 2, 8, 5)).astype(np.float32)
    wt = np.ones((3, 2, 3, 3), np.float32)
    assert f(x, wt).shape == (1, 3, 4, 3)


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """The changed kernels for CUDA: reverse scans on each implementation, and the topk key
    of signed and unsigned integers of every width."""
    n, m, k = gpucg.var("n"), gpucg.var("m"), gpucg.var("k")
    for dtype, shape, axis in [("uint8", (n, m), 1), ("int16", (n, m, k), 1)]:
        for op in ("cumsum", "cumprod"):
            assert gpucg.compile(op, gpucg.tensor(shape, dtype), axis=axis, reverse=True,
                                 exclusive=True, target="cuda", index="int32").sources
    for dtype in INTS:
        for kk in (10, 300):
            assert gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=kk, target="cuda",
                                 index="int32").sources
