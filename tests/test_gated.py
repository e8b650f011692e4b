"""silu_and_mul and gelu_and_mul against PyTorch (vLLM's semantics: act(x[..., :d]) * x[..., d:])
in float64 (gelu's tail written with erfc, where torch's 1 + erf cancels), on every dtype and
backend; the vector and scalar configs forced on the same special values; odd, empty and unit
sizes; bad input; their CUDA kernel's SASS."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpucg
from gpucg.verify import resources as res, sass

from conftest import as_dtype

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
rng = np.random.default_rng(33)
DTYPES = ("float16", "bfloat16", "float32", "float64")
#: a float16/bfloat16 result is rounded once from float32: half an ulp, plus float32's own
RTOL = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 4e-7, "float64": 1e-14}
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu(g):
    """gelu in float64 without torch's cancellation (1 + erf(x / sqrt 2) is 0 below -8.3)."""
    x = g.numpy()
    return torch.from_numpy(np.where(np.isneginf(x), np.nan, x * 0.5 * _ERFC(-x / math.sqrt(2))))


def _gelu_tanh(g):
    """x * sigmoid(2u), the tanh form without cancellation."""
    u2 = 2 * math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)
    return g * torch.sigmoid(u2)


CALLS = [("silu_and_mul", {}, lambda g: F.silu(g)),
         ("gelu_and_mul", {}, _gelu),
         ("gelu_and_mul", {"approximate": "tanh"}, _gelu_tanh)]


def sample(shape, dtype):
    return as_dtype(rng.standard_normal(shape) * 3, dtype)


def want(x, act):
    """act(gate) * up in float64 from x's stored values."""
    t = torch.from_numpy(np.asarray(x, np.float64))
    d = t.shape[-1] // 2
    return (act(t[..., :d]) * t[..., d:]).numpy()


def check(got, x, act):
    """got within RTOL of the float64 result; gelu's tail amplifies the rounding of x / sqrt 2
    2 x^2 times (|x| <= 12 here: 300 ulp of float32 or float64)."""
    w = want(x, act)
    rtol = RTOL[x.dtype.name] * (300 if act is not CALLS[0][2] and x.dtype.itemsize > 2 else 1)
    assert got.dtype == x.dtype and got.shape == w.shape
    g = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    with np.errstate(over="ignore"):
        rounded = w.astype(x.dtype).astype(np.float64)
    inf = np.isinf(rounded)
    np.testing.assert_array_equal(g[inf], rounded[inf])  # overflow of the stored dtype
    ok = ~np.isnan(w) & ~inf
    # results in the last binades above float32's smallest normal may flush (the tails of exp)
    f = np.float32 if x.dtype.name == "bfloat16" else x.dtype
    tiny = 16 * float(np.finfo(f).smallest_normal)
    np.testing.assert_allclose(g[ok], w[ok], rtol=rtol, atol=tiny)


#: silu on every dtype, the gelus on one each in the default tier; the rest -m exhaustive
TORCH_CASES = [(0, d) for d in DTYPES] + [(1, "float32"), (2, "bfloat16")] + [
    pytest.param(c, d, marks=pytest.mark.exhaustive)
    for c, d in [(1, "float16"), (1, "bfloat16"), (1, "float64"), (2, "float16"),
                 (2, "float32"), (2, "float64")]]


@pytest.mark.parametrize("call,dtype", TORCH_CASES)
def test_against_torch(target, call, dtype):
    op, attrs, act = CALLS[call]
    # rows of whole 128-bit vectors; odd d (scalar accesses); 3-D
    for shape in ((5, 2 * 1000), (3, 2 * 37), (2, 1, 2 * 16)):
        x = sample(shape, dtype)
        check(getattr(gpucg.ops, op)(x, target=target, **attrs), x, act)


def test_edge_sizes(target):
    for shape in ((0, 8), (4, 0), (2,), (1, 2), (7, 2 * 9)):
        x = sample(shape, "float32")
        got = gpucg.ops.silu_and_mul(x, target=target)
        assert got.shape == shape[:-1] + (shape[-1] // 2,)
        check(got, x, F.silu)


def special(dtype):
    """Gates and ups that hold NaN, the infinities, signed zeros, large magnitudes (silu's
    exp overflows at -89 in float32), as (rows, 2d) with d a multiple of 8."""
    v = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 100.0, -100.0, 1e4, -1e4, 3.0,
         -3.0, 0.5, 20.0, -20.0]
    gate = np.array(v * 2)
    up = np.array(v[3:] + v[:3] + v[::-1])
    return as_dtype(np.concatenate([gate, up]).reshape(1, -1).repeat(3, 0), dtype)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_every_config_agrees_on_special_values(dtype):
    """The 128-bit and the scalar path (forced), on PoCL with GPU configs, and the numpy
    target: the same NaN, infinities and signed zeros as torch on float64."""
    x = special(dtype)
    t = gpucg.tensor(x.shape, dtype)
    runs = {"numpy": gpucg.ops.silu_and_mul(x, target="numpy")}
    for vw in (1, 16 // np.dtype(x.dtype).itemsize):
        f = gpucg.compile("silu_and_mul", t, target="opencl -device=gpu", impl="act_and_mul",
                          config={"wg": 64, "items": 1, "vw": vw})
        runs[f"vw={vw}"] = f(x)
    with np.errstate(over="ignore"):
        w = want(x, F.silu).astype(x.dtype)  # torch's silu(-inf) is NaN: -inf * 0
    for name, got in runs.items():
        np.testing.assert_array_equal(np.isnan(got.astype(np.float64)),
                                      np.isnan(w.astype(np.float64)), err_msg=name)
        fin = ~np.isnan(w.astype(np.float64))
        np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(w[fin]), err_msg=name)
        check(got, x, F.silu)


def test_a_misaligned_view_takes_the_scalar_path():
    """x starting 2 elements into a buffer (not 16-byte aligned): the dispatcher picks vw = 1."""
    base = sample((3, 2 * 64 + 2), "float16")
    x = base[:, 2:]
    check(gpucg.ops.silu_and_mul(x, target="opencl -device=gpu"), x, F.silu)
    check(gpucg.ops.silu_and_mul(np.ascontiguousarray(x)[1:], target="opencl -device=gpu"),
          np.ascontiguousarray(x)[1:], F.silu)


@pytest.mark.parametrize("call,error,match", [
    (lambda: gpucg.ops.silu_and_mul(np.ones((3, 5), np.float32), target="opencl"),
     gpucg.InputError, "last dimension 5, which must be even"),
    (lambda: gpucg.ops.gelu_and_mul(np.ones(4, np.float32), approximate="fast"),
     gpucg.AttrError, "approximate='fast' is not allowed"),
    (lambda: gpucg.ops.silu_and_mul(np.ones((2, 4), np.int32)), gpucg.DTypeError,
     "x dtype 'int32' is not supported"),
    (lambda: gpucg.ops.silu_and_mul(np.float32(1)), gpucg.InputError, "x is 0-d"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_symbolic_last_dimension_is_checked_at_run_time():
    f = gpucg.compile("silu_and_mul", gpucg.tensor((3, gpucg.var("m")), "float32"),
                      target="numpy")
    assert f(np.ones((3, 6), np.float32)).shape == (3, 3)
    with pytest.raises(gpucg.InputError, match="last dimension 7"):
        f(np.ones((3, 7), np.float32))


@pytest.mark.parametrize("arch", ("sm_90", pytest.param("sm_80", marks=pytest.mark.exhaustive)))
def test_sass_moves_128_bits(sass_or_skip, arch):
    """The vector config: 128-bit loads and stores, no local memory."""
    for dtype, op in (("float16", "silu_and_mul"), ("float32", "gelu_and_mul")):
        rows = res.resources(op, gpucg.tensor((16, 2 * 11008), dtype), impl="act_and_mul",
                             target=f"cuda -arch={arch}", sass=True)
        for r in rows:
            sass.assert_sass(r.sass, has=("LDG.128", "STG.128"), none=("LDL", "STL"),
                             what=f"{op} {dtype} {arch}")


def test_bench_llm_ops_quick(capsys):
    from gpucg.benchmarks.llm_ops import main

    assert main(["--quick", "--repeat", "1", "--no-traffic", "--targets", "numpy",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert "silu_and_mul (16, 2*11008)" in out and "GB/s" in out
    assert "gpucg numpy [numpy_act_and_mul.numpy]" in out and "not measured on a GPU" in out
