"""conv2d on the tensor-core core (direct_mma): its OpenCL twin forced on PoCL against a float64
NumPy reference on inputs rounded to float16, bfloat16 or TF32 (float32 sums), NCHW and NHWC,
stride, padding, dilation, groups, every epilogue, sizes not multiples of any tile and K not a
multiple of 16, both copy paths; under Oclgrind; selection and explain on CUDA; the CUDA kernels
through NVRTC and ptxas and the launch stand-in; the swizzled requests conflict-free.

Each compiled twin is one PoCL compile (20-50 s): the cases share them through symbolic batch,
height and width, so one kernel runs every size.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpucg
from gpucg.ops.conv2d import Conv2dAttrs, reference_conv
from gpucg.strategies import conv2d_mma, gemm_mma
from gpucg.verify import nvrtc

from conftest import backend_or_skip
from test_warp_ops import tf32

SLOW = pytest.mark.exhaustive


def _host(y):
    return y.get() if hasattr(y, "get") else np.asarray(y)


def _rand(rng, shape, dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    return rng.standard_normal(shape).astype(dtype)


def _seen(a, dtype):
    """The operand as the tensor cores see it, in float64."""
    a = np.asarray(a)
    if dtype == "float32":
        a = tf32(a.astype(np.float32))
    return a.astype(np.float64)


#: (label, dtype, data layout, kernel layout, channels C, O, kernel, attrs): each one compiled
#: twin, run on every size of SIZES
CASES = [
    ("nchw f16 stride 2 groups 2 gelu", "float16", "NCHW", "OIHW", 10, 12, (3, 3),
     dict(strides=2, padding=1, groups=2, activation="gelu", alpha=0.5, beta=2.0)),
    ("nhwc bf16 dilation 2 relu before", "bfloat16", "NHWC", "HWIO", 16, 24, (3, 2),
     dict(dilation=(2, 1), padding=(1, 0, 2, 1), activation="relu",
          residual_position="before", out_dtype="float32")),
    ("nhwc tf32 groups 3 oihw", "float32", "NHWC", "OIHW", 6, 9, (2, 3),
     dict(strides=(1, 2), padding="SAME", groups=3, allow_tf32=True, activation="sigmoid")),
    pytest.param(("nchw bf16 hwio 1x1 tanh", "bfloat16", "NCHW", "HWIO", 24, 40, (1, 1),
                  dict(activation="tanh", beta=0.25)), marks=SLOW),
    pytest.param(("nhwc f16 groups 2 aligned", "float16", "NHWC", "HWIO", 32, 48, (3, 3),
                  dict(padding=1, groups=2, strides=2)), marks=SLOW),
]
SIZES = [(1, 5, 7), (2, 9, 12), (3, 17, 6)]  # (N, H, W): M = N * OH * OW odd, past a tile


def _compile(dtype, dl, kl, c, o, kernel, attrs):
    """The twin with a bias and a residual, for symbolic batch, height and width."""
    backend_or_skip("opencl")
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    g = attrs.get("groups", 1)
    kh, kw = kernel
    x = (n, c, h, w) if dl == "NCHW" else (n, h, w, c)
    wt = (o, c // g, kh, kw) if kl == "OIHW" else (kh, kw, c // g, o)
    types = [gpucg.tensor(x, dtype), gpucg.tensor(wt, dtype), gpucg.tensor((o,), dtype)]
    layouts = dict(data_layout=dl, kernel_layout=kl, **attrs)
    out = gpucg.compile("conv2d", *types, target="numpy", **layouts).output_types[0]
    f = gpucg.compile("conv2d", *types, out, target="opencl", impl="direct_mma", **layouts)
    assert f.selection.choices[0].impl.name == "direct_mma.opencl"
    return f, out.dtype


def _check(f, out_dtype, dtype, dl, kl, c, o, kernel, attrs, rng, n, h, w, residual):
    g = attrs.get("groups", 1)
    kh, kw = kernel
    x = _rand(rng, (n, c, h, w) if dl == "NCHW" else (n, h, w, c), dtype)
    wt = _rand(rng, (o, c // g, kh, kw) if kl == "OIHW" else (kh, kw, c // g, o), dtype)
    bias = _rand(rng, (o,), dtype)
    ca = Conv2dAttrs(data_layout=dl, kernel_layout=kl, **{k: v for k, v in attrs.items()
                                                           if k != "allow_tf32"})
    want = reference_conv(_seen(x, dtype), _seen(wt, dtype), bias.astype(np.float64), ca,
                          "float64")
    args = [x, wt, bias]
    if residual:
        res = _rand(rng, want.shape, out_dtype)
        args.append(res)
        want = reference_conv(_seen(x, dtype), _seen(wt, dtype), bias.astype(np.float64), ca,
                              "float64", residual=res.astype(np.float64))
    got = _host(f(*args)).astype(np.float64)
    plain = Conv2dAttrs(data_layout=dl, kernel_layout=kl, strides=ca.strides,
                        padding=ca.padding, dilation=ca.dilation, groups=g)
    scale = reference_conv(np.abs(_seen(x, dtype)), np.abs(_seen(wt, dtype)), None, plain,
                           "float64")
    scale = abs(ca.alpha) * scale + np.abs(bias.astype(np.float64)).max() + \
        (abs(ca.beta) * np.abs(res.astype(np.float64)) if residual else 0)
    tol = {"float16": 4e-3, "bfloat16": 8e-3}.get(out_dtype, 2e-5) * (scale + 1)
    assert got.shape == want.shape
    err = np.abs(got - want)
    assert (err <= tol).all(), f"({n}, {h}, {w}): max error {err.max()} (tolerance {tol.max()})"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].replace(" ", "-"))
def test_direct_twin_every_layout_and_epilogue(case, monkeypatch):
    """Every size with the bias and a residual; then the element-by-element path (the base
    pointers reported unaligned: vec = 0) on one size."""
    label, dtype, dl, kl, c, o, kernel, attrs = case
    f, out = _compile(dtype, dl, kl, c, o, kernel, attrs)
    rng = np.random.default_rng(len(label))
    for n, h, w in SIZES:
        _check(f, out, dtype, dl, kl, c, o, kernel, attrs, rng, n, h, w, residual=True)
    monkeypatch.setattr(gemm_mma, "base_address", lambda a: 1)
    _check(f, out, dtype, dl, kl, c, o, kernel, attrs, rng, *SIZES[1], residual=True)
