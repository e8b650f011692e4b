"""The fused epilogue conv2d shares with the GEMM family (templates/gemm/_epilogue.j2): every
activation, alpha, beta and a residual before or after the activation, in every conv2d kernel
(direct, Winograd, depthwise) on every backend here, against an independent float64
reference; and the residual's shape and dtype rules."""

import math

import numpy as np
import pytest

import gpucg
from gpucg.ops.conv2d import Conv2dAttrs, reference_conv

rng = np.random.default_rng(5)
erf = np.vectorize(math.erf, otypes=[np.float64])
ACTS = {None: lambda y: y, "relu": lambda y: np.maximum(y, 0),
        "gelu": lambda y: 0.5 * y * (1 + erf(y / np.sqrt(2))),
        "gelu_tanh": lambda y: 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                      * (y + 0.044715 * y ** 3))),
        "sigmoid": lambda y: 1 / (1 + np.exp(-y)), "tanh": np.tanh}


def expected(x, w, b, r, attrs):
    """The plain convolution from gpucg's reference, the epilogue written out here."""
    conv = reference_conv(x, w, None, Conv2dAttrs(**{k: v for k, v in attrs.items()
                                                     if k in ("padding", "groups",
                                                              "data_layout")}), "float64")
    z = attrs.get("alpha", 1.0) * conv + b.astype(np.float64).reshape(
        (1, -1, 1, 1) if attrs.get("data_layout", "NCHW") == "NCHW" else (1, 1, 1, -1))
    beta, act = attrs.get("beta", 1.0), ACTS[attrs.get("activation")]
    if attrs.get("residual_position") == "before":
        return act(z + beta * r), conv
    return act(z) + beta * r, conv


# the epilogue is one macro: every activation through one kernel, every kernel with some
KINDS = [("other", a) for a in ACTS] + [("winograd", "gelu"), ("winograd", None),
                                         ("depthwise", "sigmoid"), ("depthwise", "relu")]


@pytest.mark.parametrize("kind,activation", KINDS)
def test_conv2d_epilogue_every_kernel(target, kind, activation):
    from conftest import applicable

    c, o, groups = (6, 6, 6) if kind == "depthwise" else (5, 7, 1)
    x = rng.standard_normal((2, c, 15, 14)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, 3, 3) if kind != "other" else
                            (o, c, 1, 2)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    attrs = dict(padding=1, groups=groups, activation=activation, alpha=0.5, beta=-2.0,
                 residual_position="before" if kind == "winograd" else "after")
    out_shape = reference_conv(x, w, None, Conv2dAttrs(padding=1, groups=groups), "float64").shape
    r = rng.standard_normal(out_shape).astype(np.float32)
    want, conv = expected(x, w, b, r, attrs)
    types = [gpucg.tensor(a.shape) for a in (x, w, b, r)]
    names = [None] if target == "numpy" else applicable("conv2d", *types, target=target, **attrs)
    for name in names:
        got = gpucg.compile("conv2d", *types, target=target, impl=name, **attrs)(x, w, b, r)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * (1 + np.abs(conv).max()))


def test_conv2d_float16_residual_nhwc(target):
    x = rng.standard_normal((1, 9, 9, 4)).astype(np.float16)
    w = rng.standard_normal((3, 3, 4, 8)).astype(np.float16)
    r = rng.standard_normal((1, 9, 9, 8)).astype(np.float16)
    attrs = dict(padding="SAME", data_layout="NHWC", kernel_layout="HWIO", activation="tanh")
    got = gpucg.ops.conv2d(x, w, residual=r, target=target, **attrs)
    assert got.dtype == np.float16
    conv = reference_conv(x, w, None, Conv2dAttrs(**{k: v for k, v in attrs.items()
                                                     if k != "activation"}), "float64")
    np.testing.assert_allclose(got.astype(np.float64), np.tanh(conv) + r, rtol=3e-3, atol=3e-3)


def test_residual_rules():
    t = gpucg.tensor
    with pytest.raises(gpucg.InputError, match="residual must have the output's shape"):
        gpucg.compile("conv2d", t((1, 3, 8, 8)), t((2, 3, 3, 3)), t((2,)), t((1, 2, 6, 5)),
                      target="numpy")
    with pytest.raises(gpucg.DTypeError, match="residual dtype float16 must equal"):
        gpucg.compile("conv2d", t((1, 3, 8, 8)), t((2, 3, 3, 3)), t((2,)),
                      t((1, 2, 6, 6), "float16"), target="numpy")
    # a symbolic output size: the dispatcher checks the residual at run time
    h = gpucg.var("h")
    f = gpucg.compile("conv2d", t((1, 3, h, 8)), t((2, 3, 3, 3)), t((2,)), t((1, 2, 4, 3)),
                      target="numpy", strides=2)
    with pytest.raises(gpucg.InputError, match=r"residual.shape\[2\] is 4 but the output's is 3"):
        f(*[np.ones(s, np.float32) for s in ((1, 3, 8, 8), (2, 3, 3, 3), (2,), (1, 2, 4, 3))])
    ok = f(*[np.ones(s, np.float32) for s in ((1, 3, 9, 8), (2, 3, 3, 3), (2,), (1, 2, 4, 3))])
    assert ok.shape == (1, 2, 4, 3)
    with pytest.raises(gpucg.AttrError, match="alpha=inf must be finite"):
        gpucg.compile("conv2d", t((1, 3, 8, 8)), t((2, 3, 3, 3)), alpha=float("inf"))


@pytest.mark.parametrize("op", ["dense", "conv2d"])
@pytest.mark.parametrize("activation", [a for a in ACTS if a is not None])
def test_nan_in_nan_out(target, op, activation):
    """A NaN in the data makes NaN of every output it reaches, through every activation, as
    the elementwise operator of the same name keeps it (relu once gave 0 on OpenCL)."""
    x = np.array([[1.0, np.nan, -2.0], [0.5, -1.0, 3.0]], np.float32)
    w = np.eye(3, dtype=np.float32)
    if op == "dense":
        got = gpucg.ops.dense(x, w, activation=activation, target=target)
        plain = gpucg.ops.dense(x, w, target=target)
    else:
        x4, w4 = x.reshape(2, 3, 1, 1), w.reshape(3, 3, 1, 1)
        got = gpucg.ops.conv2d(x4, w4, activation=activation, target=target).reshape(2, 3)
        plain = gpucg.ops.conv2d(x4, w4, target=target).reshape(2, 3)
    assert np.isnan(got[0]).all() and not np.isnan(got[1]).any(), got
    np.testing.assert_allclose(got[1], ACTS[activation](plain[1].astype(np.float64)), rtol=1e-6,
                               atol=1e-7)
