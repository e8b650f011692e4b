"""The numpy target's host kernels in C (gpucg/ops/_host_c.py): the epilogue's activations and
the depthwise convolution against float64 references and NumPy's own float32 values, special
values included; without a compiler (or with GPUCG_HOST_C=0) the NumPy paths run."""

import numpy as np
import pytest

import gpucg
from gpucg.ops import _host_c, _unary

pytestmark = pytest.mark.skipif(not _host_c.status()[0],
                                reason=f"no host C kernels: {_host_c.status()[1]}")

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 88.72, 88.7228, -87.33, -103.9,
           -104.5, 89.5, 16.6, -16.6]


@pytest.mark.parametrize("activation", [a for a in _host_c.ACTIVATIONS if a])
def test_activations_equal_the_operators(activation):
    """Each activation (exp a float32 polynomial) within 4 ulp of NumPy's float32 operator and
    within 3 ulp of float64's, on a sweep of [-110, 95] and special values: NaN, infinities,
    signed zeros and overflow as the operator gives them."""
    x = np.concatenate([np.linspace(-110, 95, 200001), SPECIAL]).astype(np.float32)
    got = x.copy()
    assert _host_c.epilogue(got, 1, 1, x.size, None, activation)
    with np.errstate(all="ignore"):
        want32 = _unary.TABLE[activation].numpy(x, {})
        want64 = _unary.TABLE[activation].numpy(x.astype(np.float64), {})
    for cls in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(cls(got), cls(want32))
    zero = want32 == 0
    np.testing.assert_array_equal(got[zero], want32[zero])
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want32[zero]))
    ok = np.isfinite(want32) & ~zero
    ulp = np.spacing(np.abs(want32[ok])).astype(np.float64)
    assert np.max(np.abs(got[ok] - want32[ok].astype(np.float64)) / ulp) <= 4
    normal = ok & (np.abs(want64) > 1e-30) & np.isfinite(want64.astype(np.float32))
    ulp64 = np.spacing(np.abs(want64[normal].astype(np.float32))).astype(np.float64)
    assert np.max(np.abs(got[normal] - want64[normal]) / ulp64) <= 3


@pytest.mark.parametrize("activation", ["relu", "silu", "hardswish"])
def test_epilogue_bias_layouts(activation):
    """The epilogue's bias and activation in one C pass on an NCHW result (a bias a plane), a
    channels-last view of NHWC memory and a GEMM's rows (a bias along the innermost axis),
    with a residual after: the operator on (y + bias) in float64, special values in y."""
    from gpucg.ops import _epilogue
    from gpucg.ops.conv2d import Conv2dAttrs

    rng = np.random.default_rng(3)
    attrs = Conv2dAttrs(activation=activation)
    for shape, order, bshape in [((2, 5, 3, 4), (0, 1, 2, 3), (1, 5, 1, 1)),
                                 ((2, 3, 4, 5), (0, 3, 1, 2), (1, 5, 1, 1)),
                                 ((9, 13), (0, 1), (13,))]:
        mem = (rng.standard_normal(shape) * 8).astype(np.float32)
        mem.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, 0.0, -90.0]
        y = mem.transpose(order)
        bias = (rng.standard_normal(bshape) * 4).astype(np.float32)
        with np.errstate(all="ignore"):
            want = _unary.TABLE[activation].numpy((y + bias).astype(np.float64), {})
            got = _epilogue.apply(y.copy(order="K"), bias, y, attrs)
        np.testing.assert_allclose(got, want + y, rtol=3e-6, atol=1e-6)


def _reference(x, w, b, strides, pads, dilation):
    """Direct depthwise convolution in float64."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, c, oh, ow)) + (0 if b is None else b[None, :, None, None])
    for r in range(kh):
        for q in range(kw):
            tap = xp[:, :, r * dh:r * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw]
            y += tap * w[None, :, 0, r, q, None, None]
    return y


CASES = [  # n, c, (h, w), (kh, kw), strides, pads (top, left, bottom, right), dilation
    (2, 17, (9, 8), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 16 + a tail of 1
    (1, 40, (11, 7), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),  # 16, 16, 8
    (2, 8, (7, 10), (3, 2), (3, 2), (0, 1, 2, 0), (1, 1)),  # asymmetric padding
    (1, 1, (6, 6), (3, 3), (1, 1), (2, 2, 2, 2), (2, 1)),  # dilation, one channel
    (1, 24, (5, 5), (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (0, 16, (5, 5), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # an empty batch
]


@pytest.mark.parametrize("activation", [None, "relu", "silu", "hardswish", "gelu"])
@pytest.mark.parametrize("last", [False, True], ids=["nchw", "channels_last"])
def test_depthwise_equals_the_reference(activation, last):
    """conv2d through the C depthwise (bias and activation in the kernel; gelu, which it lacks,
    after it) equals a float64 direct convolution on NCHW and channels-last data, at channel
    counts that leave tails of 8 and 1, strides 1-3, asymmetric padding, dilation, an empty
    batch; the result is channels last."""
    rng = np.random.default_rng(7)
    for n, c, (h, wd), (kh, kw), strides, pads, dilation in CASES:
        x = rng.standard_normal((n, h, wd, c) if last else (n, c, h, wd)).astype(np.float32)
        x = x.transpose(0, 3, 1, 2) if last else x
        w = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        y = gpucg.to_host(gpucg.ops.conv2d(x, w, bias=b, strides=strides, padding=pads,
                                           dilation=dilation, groups=c, activation=activation,
                                           target="numpy"))
        z = _reference(x, w, b, strides, pads, dilation)
        want = z if activation is None else _unary.TABLE[activation].numpy(z, {})
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)
        assert y.size == 0 or y.transpose(0, 2, 3, 1).flags.c_contiguous


def test_depthwise_special_values_and_residual():
    """NaN and infinities reach only the outputs whose windows hold them; a residual (which
    comes after the activation) and alpha take the kernel's plain sums and NumPy's epilogue."""
    x = np.ones((1, 16, 6, 6), np.float32)
    x[0, 0, 0, 0], x[0, 1, 5, 5], x[0, 2, 3, 3] = np.nan, np.inf, -np.inf
    w = np.ones((16, 1, 3, 3), np.float32)
    y = gpucg.to_host(gpucg.ops.conv2d(x, w, padding=(1, 1, 1, 1), groups=16, target="numpy"))
    assert np.isnan(y[0, 0]).sum() == 4 and np.isposinf(y[0, 1]).sum() == 4
    assert np.isneginf(y[0, 2]).sum() == 9 and np.isfinite(y[0, 3:]).all()
    res = np.full((1, 16, 6, 6), 0.5, np.float32)
    ones = np.ones((1, 16, 6, 6), np.float32)
    y = gpucg.to_host(gpucg.ops.conv2d(ones, -w, residual=res, alpha=2.0, activation="relu",
                                       padding=(1, 1, 1, 1), groups=16, target="numpy"))
    np.testing.assert_array_equal(y, np.full_like(y, 0.5))  # relu(2 * -sums) + 0.5
    y = gpucg.to_host(gpucg.ops.conv2d(ones, w, residual=res, alpha=2.0, activation="relu",
                                       padding=(1, 1, 1, 1), groups=16, target="numpy"))
    want = 2 * _reference(ones, w, None, (1, 1), (1, 1, 1, 1), (1, 1)) + 0.5
    np.testing.assert_array_equal(y, want)


def test_without_the_kernels_numpy_runs(monkeypatch):
    """GPUCG_HOST_C=0, or a compiler that is not there, leaves the NumPy paths: status says
    why, and conv2d's results stay within rounding of the kernels'."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 24, 9, 9)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    with_c = gpucg.to_host(gpucg.ops.conv2d(x, w, padding=(1, 1, 1, 1), groups=24,
                                            activation="silu", target="numpy"))
    with gpucg.settings.scope(GPUCG_HOST_C="0"):
        assert _host_c.status() == (False, "GPUCG_HOST_C=0") and _host_c.library() is None
        plain = gpucg.to_host(gpucg.ops.conv2d(x, w, padding=(1, 1, 1, 1), groups=24,
                                               activation="silu", target="numpy"))
    np.testing.assert_allclose(with_c, plain, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    _host_c.forget()
    try:
        usable, why = _host_c.status()
        assert not usable and "cc" in why
        again = gpucg.to_host(gpucg.ops.conv2d(x, w, padding=(1, 1, 1, 1), groups=24,
                                               activation="silu", target="numpy"))
        np.testing.assert_array_equal(again, plain)
    finally:
        monkeypatch.delenv("CC")
        _host_c.forget()
    assert _host_c.status()[0]


DIRECT = [  # n, c, o, (h, w), (kh, kw), strides, pads, dilation
    (2, 3, 16, (15, 13), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # a stem, rows of 7 and 8
    (1, 3, 20, (8, 9), (4, 4), (4, 4), (0, 0, 0, 3), (1, 1)),  # a patchify, 8 + 8 + a tail of 4
    (1, 2, 5, (9, 6), (3, 2), (1, 2), (2, 0, 1, 1), (2, 1)),  # outputs below one vector
]


@pytest.mark.parametrize("activation", [None, "hardswish", "gelu"])
def test_direct_equals_the_reference(activation):
    """Few taps an output (a stem, a patchify: one group) through the C direct kernel equals a
    float64 direct convolution (padded, strided, dilated; output rows not a multiple of 4,
    output counts not a multiple of 8), NCHW and channels-last data; channels-last result."""
    rng = np.random.default_rng(9)
    for n, c, o, (h, wd), (kh, kw), strides, pads, dilation in DIRECT:
        for last in (False, True):
            x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
            data = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) \
                if last else x
            w = rng.standard_normal((o, c, kh, kw)).astype(np.float32)
            b = rng.standard_normal(o).astype(np.float32)
            y = gpucg.to_host(gpucg.ops.conv2d(data, w, bias=b, strides=strides, padding=pads,
                                               dilation=dilation, activation=activation,
                                               target="numpy"))
            z = _direct_reference(x, w, b, strides, pads, dilation)
            want = z if activation is None else _unary.TABLE[activation].numpy(z, {})
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)
            assert y.transpose(0, 2, 3, 1).flags.c_contiguous


def _direct_reference(x, w, b, strides, pads, dilation):
    """Direct convolution (one group) in float64."""
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, c, kh, kw = w.shape
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((x.shape[0], o, oh, ow)) + b[None, :, None, None]
    for r in range(kh):
        for q in range(kw):
            tap = xp[:, :, r * dh:r * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw]
            y += np.einsum("nchw,oc->nohw", tap, w[:, :, r, q].astype(np.float64))
    return y
