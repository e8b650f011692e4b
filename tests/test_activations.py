"""The ONNX activations of the elementwise family (silu, hardswish, hardsigmoid, softplus, mish,
elu, selu) against PyTorch's functions in the same dtype, on ordinary values, special values
and magnitudes where a naive softplus overflows; their ONNX default attributes; integer
inputs (exp's types); inside a fused chain; bad attributes. tests/test_special_values.py holds
them to a float64 reference too."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpucg

from conftest import as_dtype

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
rng = np.random.default_rng(35)
#: ONNX's Selu defaults
ALPHA, GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
TORCH = {
    "silu": lambda t, a: F.silu(t),
    "hardswish": lambda t, a: F.hardswish(t),
    "hardsigmoid": lambda t, a: torch.clamp(a.get("alpha", 0.2) * t + a.get("beta", 0.5), 0, 1),
    # F.softplus returns x past its threshold 20 (ONNX's softplus has none): logaddexp(x, 0)
    "softplus": lambda t, a: torch.logaddexp(t, torch.zeros_like(t)),
    "mish": lambda t, a: F.mish(t),
    "elu": lambda t, a: F.elu(t, a.get("alpha", 1.0)),
    "selu": lambda t, a: a.get("gamma", GAMMA) * F.elu(t, a.get("alpha", ALPHA)),
}
#: bfloat16 in the default tier (tests/test_special_values.py holds float16, float32 and float64
#: to a float64 reference written with PyTorch's conventions); the rest with -m exhaustive
DTYPES = ("bfloat16",) + tuple(pytest.param(d, marks=pytest.mark.exhaustive)
                               for d in ("float16", "float32", "float64"))


def inputs(dtype: str) -> np.ndarray:
    """Special values, magnitudes past exp's range in the dtype, values around the kinks, and
    random ones."""
    big = float(np.finfo(np.float32 if dtype == "bfloat16" else dtype).max)
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 3.0, -3.0, 2.5, -2.5, 20.0, 21.0,
               88.8, 89.0, 100.0, 710.0, 1e4, big]
    vals = special + [-v for v in special[7:]] + list(rng.standard_normal(40) * 6)
    return as_dtype(np.array(vals, np.float64), dtype)


def torch_of(x: np.ndarray) -> torch.Tensor:
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.astype(np.float32)).bfloat16()
    return torch.from_numpy(x)


def agree(got: np.ndarray, want: torch.Tensor, what: str, scale: float = 0.0):
    """Equal NaN positions and infinities, zeros of the same sign, the rest within 4 ulp of
    the dtype (in the normal range; subnormal results to its smallest normal), plus 4 ulp of
    ``scale`` where the result is a difference of terms that large (alpha * x + beta)."""
    want = want.float().numpy().astype(np.float64) if want.dtype == torch.bfloat16 \
        else want.numpy().astype(np.float64)
    g = got.astype(np.float64)
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
           "float64": 2.0 ** -52}[got.dtype.name]
    tiny = {"float16": 6.2e-5, "bfloat16": 1.2e-38, "float32": 1.2e-38,
            "float64": 2.3e-308}[got.dtype.name]
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=f"{what}: NaN")
    inf = np.isinf(want) | np.isinf(g)
    np.testing.assert_array_equal(g[inf], want[inf], err_msg=f"{what}: infinities")
    zero = (g == 0) & (want == 0)
    np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(want[zero]),
                                  err_msg=f"{what}: signed zeros")
    ok = ~np.isnan(want) & ~inf
    np.testing.assert_allclose(g[ok], want[ok], rtol=4 * eps, atol=max(tiny, 4 * eps * scale),
                               err_msg=what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(TORCH))
def test_against_torch(target, op, dtype):
    x = inputs(dtype)
    got = np.asarray(getattr(gpucg.ops, op)(x, target=target))
    assert got.dtype == x.dtype
    agree(got, TORCH[op](torch_of(x), {}), f"{op} {dtype} on {target}",
          scale=0.5 if op == "hardsigmoid" else 0.0)


@pytest.mark.parametrize("op,attrs", [("hardsigmoid", {"alpha": 1 / 6, "beta": 0.5}),
                                      ("elu", {"alpha": 0.3}),
                                      ("selu", {"alpha": 2.0, "gamma": 0.5})])
def test_attributes(target, op, attrs):
    x = inputs("float32")
    got = getattr(gpucg.ops, op)(x, target=target, **attrs)
    scale = 0.5 if op == "hardsigmoid" else 0.0
    agree(got, TORCH[op](torch_of(x), attrs), f"{op} {attrs} on {target}", scale)
    if op == "hardsigmoid":  # PyTorch's own hardsigmoid is ONNX's with alpha = 1/6
        agree(got, F.hardsigmoid(torch_of(x)), "hardsigmoid as torch's", scale)


def test_onnx_defaults():
    """The attributes ONNX gives each operator when a node leaves them out."""
    defaults = {op: gpucg.get_op(op).make_attrs() for op in TORCH}
    assert (defaults["hardsigmoid"].alpha, defaults["hardsigmoid"].beta) == (0.2, 0.5)
    assert defaults["elu"].alpha == 1.0
    assert (defaults["selu"].alpha, defaults["selu"].gamma) == (ALPHA, GAMMA)


def test_integer_inputs_compute_as_exp(target):
    """Integers take exp's types (int8 -> float16, int32 -> float64), as NumPy's ufuncs."""
    for dtype, out in (("int8", "float16"), ("int32", "float64"), ("bool", "float16")):
        x = np.array([-5, -1, 0, 1, 3, 7], dtype) if dtype != "bool" else np.array([0, 1], bool)
        got = gpucg.ops.silu(x, target=target)
        assert got.dtype == out
        want = F.silu(torch.from_numpy(x.astype(np.float64))).numpy()
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3)


def test_in_a_fused_chain(target):
    """SwiGLU's silu(a) * b and a chain with every other activation, one kernel each."""
    x, y = gpucg.ops.placeholders(2)
    a, b = (rng.standard_normal((7, 33)).astype(np.float32) for _ in range(2))
    got = gpucg.ops.fused(gpucg.ops.silu(x) * y)(a, b, target=target)
    want = F.silu(torch.from_numpy(a)) * torch.from_numpy(b)
    np.testing.assert_allclose(got, want.numpy(), rtol=3e-6, atol=1e-7)
    e = gpucg.ops.selu(gpucg.ops.elu(gpucg.ops.mish(gpucg.ops.softplus(
        gpucg.ops.hardsigmoid(gpucg.ops.hardswish(x), alpha=0.25))), alpha=0.5))
    assert str(e) == ("selu(elu(mish(softplus(hardsigmoid(hardswish(x0), alpha=0.25))), "
                      "alpha=0.5))")
    f = gpucg.ops.fused(str(e))
    t = torch.from_numpy(a)
    want = F.selu(F.elu(F.mish(F.softplus(torch.clamp(0.25 * F.hardswish(t) + 0.5, 0, 1))),
                        0.5))
    np.testing.assert_allclose(f(a, target=target), want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("call,match", [
    (lambda: gpucg.ops.hardsigmoid(np.ones(3), alpha="x", target="numpy"), "alpha='x'"),
    (lambda: gpucg.ops.selu(np.ones(3), gamma=math.inf, target="numpy"), "gamma=inf"),
    (lambda: gpucg.ops.elu(np.ones(3), beta=1.0, target="numpy"), "unknown attribute 'beta'"),
    (lambda: gpucg.ops.silu(np.ones(3), alpha=1.0, target="numpy"), "allowed: none"),
])
def test_bad_attributes(call, match):
    with pytest.raises(gpucg.AttrError, match=match):
        call()
