"""The NumPy target's conv2d paths (gpucg/strategies/conv2d_host.py) against a float64
shift-and-accumulate reference: depthwise channels last by stride phases (strides 1-3,
asymmetric padding, padding beyond the plane, a plane narrower than the kernel's reach), by a
window view and by contiguous runs of NCHW phase planes (large 3x3 planes at strides 1 and 2,
dilation), im2col by runs (strides 2 and 4, groups, dilation, a channels-last result from 32
outputs), depthwise with a channel multiplier, the 1x1 GEMM path, with the epilogue (bias,
activation, residual), special values, an empty batch."""

from __future__ import annotations

import numpy as np
import pytest

import gpucg


@pytest.fixture(autouse=True)
def _numpy_paths(monkeypatch):
    """These are the NumPy paths' tests: the C kernels (tests/test_host_c.py) stay off."""
    monkeypatch.setenv("GPUCG_HOST_C", "0")


def _ref(x, w, strides, padding, dilation, groups, bias=None):
    """Direct convolution in float64: each output a sum over its window."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    pt, pl, pb, pr = padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, hp, wp = xp.shape
    o, i, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    oh, ow = (hp - (kh - 1) * dh - 1) // sh + 1, (wp - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    for oc in range(o):
        gi = oc // (o // groups)
        for r in range(kh):
            for q in range(kw):
                tap = xp[:, gi * i:(gi + 1) * i, r * dh: r * dh + (oh - 1) * sh + 1: sh,
                         q * dw: q * dw + (ow - 1) * sw + 1: sw]
                y[:, oc] += np.einsum("nchw,c->nhw", tap, w[oc, :, r, q])
    return y if bias is None else y + bias[None, :, None, None]


CASES = [  # (n, c, h, w), (o, i, kh, kw), strides, padding, dilation, groups
    ((2, 5, 9, 7), (5, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 5),
    ((1, 3, 6, 5), (3, 1, 5, 5), (1, 1), (2, 1, 2, 3), (1, 1), 3),
    ((2, 4, 8, 8), (4, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 4),
    ((1, 6, 11, 10), (6, 1, 3, 3), (2, 2), (1, 0, 1, 1), (1, 1), 6),
    ((1, 3, 4, 4), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),
    ((3, 7, 5, 6), (4, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((0, 4, 5, 5), (4, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),
    # channels last by stride phases: stride 3 x 2 with asymmetric padding, a 1x1 kernel
    # under a stride above it, padding beyond the plane; a 56x56 3x3 plane stays in NCHW
    ((2, 3, 13, 11), (3, 1, 5, 5), (3, 2), (2, 0, 1, 3), (1, 1), 3),
    ((1, 4, 9, 9), (4, 1, 1, 1), (3, 3), (0, 0, 0, 0), (1, 1), 4),
    ((1, 2, 2, 3), (2, 1, 3, 3), (2, 2), (3, 3, 3, 3), (1, 1), 2),
    ((1, 2, 56, 56), (2, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    # NCHW by stride phases: a large plane at stride 2; dilation 2 at stride 2
    ((1, 2, 112, 112), (2, 1, 3, 3), (2, 2), (1, 0, 1, 1), (1, 1), 2),
    ((1, 3, 13, 12), (3, 1, 3, 3), (2, 2), (2, 1, 2, 2), (2, 2), 3),
    # im2col by runs (few taps a column): a stem's 3x3 at stride 2, a patchify 4x4 at stride
    # 4, two groups at strides 2 x 1 with dilation and asymmetric padding
    ((2, 3, 33, 30), (4, 3, 3, 3), (2, 2), (1, 1, 0, 1), (1, 1), 1),
    ((1, 3, 16, 16), (5, 3, 4, 4), (4, 4), (0, 0, 0, 0), (1, 1), 1),
    ((1, 4, 40, 37), (6, 2, 3, 2), (2, 1), (2, 0, 1, 1), (2, 1), 2),
    ((2, 3, 17, 15), (32, 3, 3, 3), (2, 2), (1, 1, 0, 1), (1, 1), 1),  # 32 outputs: NHWC
    ((2, 8, 9, 9), (4, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # window view: 72 taps
]


@pytest.mark.parametrize("xs, ws, strides, padding, dilation, groups", CASES)
def test_host_paths_equal_the_reference(xs, ws, strides, padding, dilation, groups):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    y = gpucg.ops.conv2d(x, w, strides=strides, padding=padding, dilation=dilation,
                         groups=groups, bias=b, activation="relu", target="numpy")
    want = np.maximum(_ref(x, w, strides, padding, dilation, groups, b), 0)
    np.testing.assert_allclose(gpucg.to_host(y), want, rtol=1e-5, atol=1e-5)


def test_depthwise_special_values_stay_in_their_windows():
    """A NaN or an infinity reaches only the outputs whose window holds it (the contiguous
    runs read the padded width: the extra columns they compute are dropped)."""
    x = np.zeros((1, 2, 6, 6), np.float32)
    x[0, 0, 0, 5], x[0, 1, 5, 0] = np.nan, np.inf
    w = np.ones((2, 1, 3, 3), np.float32)
    y = gpucg.to_host(gpucg.ops.conv2d(x, w, padding=(1, 1, 1, 1), groups=2, target="numpy"))
    want = _ref(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 2)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    assert np.isnan(y[0, 0]).sum() == 4 and np.isinf(y[0, 1]).sum() == 4


@pytest.mark.parametrize("tile_bytes", (256 << 10, 0))
def test_depthwise_window_equals_the_reference(monkeypatch, tile_bytes):
    """Many channels: the channels-last depthwise over a window view of the padded input (no
    stride phases) on the phase cases (strides 1-3, asymmetric padding, padding beyond the
    plane, a 1x1 kernel under stride 3, an empty batch), NCHW and channels-last data, with
    the weights tiled along an output row and (tile_bytes 0) read along it with stride 0."""
    from gpucg.strategies import conv2d_host

    monkeypatch.setattr(conv2d_host, "DEPTHWISE_BYTES", tile_bytes or 1)
    monkeypatch.setattr(conv2d_host, "WINDOW_CHANNELS", 1)
    monkeypatch.setattr(conv2d_host, "STRIDED_CHANNELS", 1)
    for xs, ws, strides, padding, dilation, groups in CASES[:2] + CASES[6:10]:
        test_host_paths_equal_the_reference(xs, ws, strides, padding, dilation, groups)
        rng = np.random.default_rng(len(xs))
        x = rng.standard_normal(xs[:1] + xs[2:] + xs[1:2]).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        y = gpucg.ops.conv2d(x.transpose(0, 3, 1, 2), w, strides=strides, padding=padding,
                             groups=groups, target="numpy")
        want = _ref(x.transpose(0, 3, 1, 2), w, strides, padding, dilation, groups)
        np.testing.assert_allclose(gpucg.to_host(y), want, rtol=1e-5, atol=1e-5)
    test_depthwise_special_values_stay_in_their_windows()


def test_buffers_are_written_before_read(monkeypatch):
    """Every path's scratch and padded buffers (np.empty, only their borders zeroed) come out
    the same when np.empty hands back NaN everywhere: no element is read before it is
    written (a NaN there would reach the output)."""
    import types

    from gpucg.strategies import conv2d_host

    def empty(shape, dtype=float, *args, **kwargs):
        return np.full(shape, np.nan, dtype)

    monkeypatch.setattr(conv2d_host, "np", types.SimpleNamespace(
        **{**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")}, "empty": empty}))
    for case in CASES:
        test_host_paths_equal_the_reference(*case)
    monkeypatch.setattr(conv2d_host, "WINDOW_CHANNELS", 1)
    monkeypatch.setattr(conv2d_host, "STRIDED_CHANNELS", 1)
    for case in CASES[:2] + CASES[6:10]:
        test_host_paths_equal_the_reference(*case)


@pytest.mark.parametrize("alpha, position", [(1.0, "before"), (1.0, "after"), (-2.0, "after")])
def test_depthwise_stores_the_bias_under_the_epilogue(alpha, position):
    """The depthwise phase paths add the bias as they store (alpha 1) and leave it to the
    epilogue otherwise: alpha * sum + bias, the residual before or after SiLU, on NCHW planes,
    channels-last phases and the window view."""
    rng = np.random.default_rng(5)
    for xs, strides in [((2, 6, 56, 56), (1, 1)), ((2, 9, 7, 5), (2, 2)), ((1, 70, 9, 8), (2, 1))]:
        x = rng.standard_normal(xs).astype(np.float32)
        c = xs[1]
        w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        z = alpha * _ref(x, w, strides, (1, 1, 1, 1), (1, 1), c) + b[None, :, None, None]
        r = rng.standard_normal(z.shape).astype(np.float32)
        for data in (x, np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
            y = gpucg.ops.conv2d(data, w, strides=strides, padding=(1, 1, 1, 1), groups=c,
                                 bias=b, activation="silu", residual=r, alpha=alpha,
                                 residual_position=position, target="numpy")
            pre = z + r if position == "before" else z
            want = pre / (1 + np.exp(-pre)) + (r if position == "after" else 0)
            np.testing.assert_allclose(gpucg.to_host(y), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("plane", ((3, 5), (57, 57)))
def test_pointwise_channels_last(plane):
    """A 1x1 layer on channels-last data: one GEMM over every image's rows (small planes) or
    one an image, the result channels last, the bias and SiLU in the blocked epilogue."""
    from gpucg.ops import _unary

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2,) + plane + (7,)).astype(np.float32).transpose(0, 3, 1, 2)
    w = rng.standard_normal((64, 7, 1, 1)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    y = gpucg.to_host(gpucg.ops.conv2d(x, w, bias=b, activation="silu", target="numpy"))
    z = _ref(x, w, (1, 1), (0, 0, 0, 0), (1, 1), 1, b).astype(np.float32)
    want = _unary.TABLE["silu"].numpy(z, {})
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)
