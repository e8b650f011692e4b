"""Pooling against the NumPy reference (a gather per window tap) and against PyTorch where it
is installed, on every backend here: layouts, paddings, ceil_mode, dilation, dtypes, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.op import get_op


def make(shape, dtype, rng):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def check(op, x, target, **attrs):
    got = getattr(gpucg.ops, op)(x, target=target, **attrs)
    o = get_op(op)
    want = o.reference(x, o.make_attrs(**attrs))
    assert got.shape == want.shape and got.dtype == want.dtype, (op, attrs, got.shape, want.shape)
    if x.dtype.kind == "f":
        tol = 2e-3 if x.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, equal_nan=True, err_msg=f"{op} {attrs}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {attrs}")
    return got


WINDOWS = [dict(kernel=3, strides=2, padding=1), dict(kernel=2), dict(kernel=3, strides=2,
           padding=1, ceil_mode=True), dict(kernel=(2, 3), strides=1, padding="SAME"),
           dict(kernel=(2, 3), strides=(2, 1), padding="SAME_LOWER"),
           dict(kernel=3, strides=2, padding=(1, 0, 2, 1), dilation=2, ceil_mode=True),
           dict(kernel=1), dict(kernel=(3, 2), strides=3, padding="VALID", ceil_mode=True)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
def test_windows(target, op, layout):
    rng = np.random.default_rng(1)
    x = make((2, 3, 7, 9) if layout == "NCHW" else (2, 7, 9, 3), "float32", rng)
    for window in WINDOWS:
        extra = [{}] if op == "max_pool2d" else [{"count_include_pad": True},
                                                  {"count_include_pad": False}]
        for e in extra:
            check(op, x, target, layout=layout, **window, **e)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint16", "int64", "uint64"])
def test_dtypes(target, dtype):
    """max pooling on integers of every width (the lowest value is the padding); float16
    stored as float16; avg on the floats."""
    rng = np.random.default_rng(2)
    x = make((2, 3, 6, 5), dtype, rng)
    check("max_pool2d", x, target, kernel=3, strides=2, padding=1, ceil_mode=True)
    check("global_max_pool2d", x, target)
    if x.dtype.kind == "f":
        check("avg_pool2d", x, target, kernel=2, padding="SAME", strides=1)
        check("global_avg_pool2d", x, target, layout="NHWC")


def test_padding_never_wins_and_nan_does(target):
    x = -np.ones((1, 1, 3, 3), np.float32) * 1e30
    y = gpucg.ops.max_pool2d(x, kernel=3, strides=1, padding=1, target=target)
    assert (y == -1e30).all()
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 2] = np.nan
    y = check("max_pool2d", x, target, kernel=2, strides=2)
    assert np.isnan(y[0, 0, 0, 1]) and not np.isnan(y[0, 0, 1, 1])


def test_global_pools(target):
    rng = np.random.default_rng(3)
    for layout, shape in [("NCHW", (2, 5, 7, 9)), ("NHWC", (2, 7, 9, 5)), ("NCHW", (3, 4, 1, 1))]:
        x = make(shape, "float32", rng)
        assert check("global_avg_pool2d", x, target, layout=layout).shape[0] == shape[0]
        check("global_max_pool2d", x, target, layout=layout)


def test_global_avg_pool_of_channels_last_data(target):
    """NCHW-shaped views of NHWC memory (a channels-last convolution's result: the host sums
    each image's rows of channels in one GEMV) and NHWC arrays, 1x1 and odd planes: each
    plane's mean, NaN and infinities where a plane holds them."""
    rng = np.random.default_rng(4)
    for shape in [(2, 7, 9, 5), (3, 1, 1, 4), (1, 13, 11, 16)]:
        x = make(shape, "float32", rng)
        x[0, 0, 0, 0], x[-1, -1, -1, -1] = np.nan, np.inf
        y = check("global_avg_pool2d", x.transpose(0, 3, 1, 2), target)
        assert np.isnan(y[0, 0, 0, 0]) and np.isinf(y[-1, -1, 0, 0])
        check("global_avg_pool2d", x, target, layout="NHWC")


def test_global_pools_dispatch_as_reductions():
    """NCHW reduces rows (n = H * W), NHWC reduces columns (inner = C)."""
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    rows = gpucg.explain("global_avg_pool2d", gpucg.tensor((n, 64, h, w)), target="cuda")
    assert rows.choices[-1].impl.name == "reduce_group.cuda"
    cols = gpucg.explain("global_avg_pool2d", gpucg.tensor((n, h, w, 64)), layout="NHWC",
                         target="cuda")
    # 128-bit loads of 4 neighbouring channels where x is aligned (checked at run time), else
    # the scalar config
    assert [c.impl.name for c in cols.choices] == ["reduce_cols.cuda"] * 2
    assert [c.config["vw"] for c in cols.choices] == [4, 1]


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(4)
    for h, w in [(7, 9), (8, 8)]:
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        t = torch.from_numpy(x)
        for k, s, p, d, c in [(3, 2, 1, 1, True), (2, 2, 0, 1, False), ((2, 3), 3, 1, 1, True),
                              (3, 1, 1, 2, False), (3, 2, 0, 1, True)]:
            want = F.max_pool2d(t, k, s, p, dilation=d, ceil_mode=c).numpy()
            got = gpucg.ops.max_pool2d(x, kernel=k, strides=s, padding=p, dilation=d,
                                       ceil_mode=c, target="numpy")
            np.testing.assert_array_equal(got, want)
            if d == 1:
                for cip in (True, False):
                    want = F.avg_pool2d(t, k, s, p, ceil_mode=c, count_include_pad=cip).numpy()
                    got = gpucg.ops.avg_pool2d(x, kernel=k, strides=s, padding=p, ceil_mode=c,
                                               count_include_pad=cip, target="numpy")
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_hypothesis_numpy(data):
    h, w = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    dh, dw = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    padding = data.draw(st.one_of(
        st.sampled_from(["SAME", "SAME_LOWER", "VALID"]),
        st.tuples(*(st.integers(0, span[i % 2] - 1) for i in range(4)))))
    pads = (0, 0, 0, 0) if isinstance(padding, str) else padding
    if (padding == "VALID" or not isinstance(padding, str)) \
            and (h + pads[0] + pads[2] < span[0] or w + pads[1] + pads[3] < span[1]):
        padding = "SAME"  # the window would not fit
    attrs = dict(kernel=(kh, kw), strides=(data.draw(st.integers(1, 3)),
                                           data.draw(st.integers(1, 3))),
                 padding=padding, dilation=(dh, dw), ceil_mode=data.draw(st.booleans()),
                 layout=data.draw(st.sampled_from(["NCHW", "NHWC"])))
    shape = (2, 3, h, w) if attrs["layout"] == "NCHW" else (2, h, w, 3)
    x = make(shape, "float32", np.random.default_rng(h * w))
    check("max_pool2d", x, "numpy", **attrs)
    check("avg_pool2d", x, "numpy", count_include_pad=data.draw(st.booleans()), **attrs)


def test_bad_input():
    x = np.ones((1, 2, 4, 4), np.float32)
    with pytest.raises(gpucg.AttrError, match="kernel=None: a pooling window .* is required"):
        gpucg.compile("max_pool2d", gpucg.tensor(x.shape), target="numpy")
    cases = [
        (dict(kernel=3, padding=3), gpucg.AttrError,
         r"the top padding 3 must be smaller than the window's span 3"),
        (dict(kernel=3, dilation=2, padding=(0, 0, 5, 0)), gpucg.AttrError, "bottom padding 5"),
        (dict(kernel=5), gpucg.InputError,
         r"max_pool2d: the window \(5 with dilation 1\) is larger than the padded input height 4"),
        (dict(kernel=(1, 3), dilation=(1, 2)), gpucg.InputError, "padded input width 4"),
        (dict(kernel=2, layout="NCWH"), gpucg.AttrError, "layout='NCWH'"),
        (dict(kernel=2, padding="SAME_UPPERISH"), gpucg.AttrError, "allowed strings"),
        (dict(kernel=(2, 0)), gpucg.AttrError, r"kernel=\(2, 0\): w is 0, must be >= 1"),
        (dict(kernel=2, ceil_mode=1), gpucg.AttrError, "ceil_mode=1 .* must be a bool"),
    ]
    for kwargs, err, match in cases:
        with pytest.raises(err, match=match):
            gpucg.ops.max_pool2d(x, target="numpy", **kwargs)
    with pytest.raises(gpucg.DTypeError, match="avg_pool2d: x dtype 'int32' is not supported"):
        gpucg.ops.avg_pool2d(x.astype(np.int32), kernel=2, target="numpy")
    with pytest.raises(gpucg.InputError, match="it must be 4-D"):
        gpucg.ops.max_pool2d(np.ones((2, 4, 4), np.float32), kernel=2, target="numpy")
    h = gpucg.var("h")
    f = gpucg.compile("max_pool2d", gpucg.tensor((1, 2, h, 8)), kernel=3, target="numpy")
    with pytest.raises(gpucg.InputError, match="padded input height 2 .*x.shape.2. = 2"):
        f(np.ones((1, 2, 2, 8), np.float32))


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    for dtype, layout in [("float32", "NCHW"), ("float16", "NHWC"), ("float64", "NCHW"),
                          ("int8", "NHWC"), ("uint64", "NCHW")]:
        shape = (n, 16, h, w) if layout == "NCHW" else (n, h, w, 16)
        for op in ("max_pool2d", "avg_pool2d") if dtype.startswith("float") else ("max_pool2d",):
            f = gpucg.compile(op, gpucg.tensor(shape, dtype), kernel=3, strides=2,
                              padding="SAME_LOWER", layout=layout, target="cuda")
            assert any("pool_direct" in k for k in f.sources)
