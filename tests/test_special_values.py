"""Special values through every float unary operator and activation, alone and as the fused
epilogue of dense and conv2d, in every float dtype on every target: NaN in, NaN out (as NumPy
and PyTorch), infinities and signed zeros as the function has them, subnormals and the float16
extremes; and every other value within a few ulp of a float64 reference written here with
the math module (independent of gpucg's NumPy target and its host erf)."""

import math

import numpy as np
import pytest

import gpucg

FLOATS = ("float16", "float32", "float64")
#: relative tolerance of a value computed in the dtype (float16 computes in float32, stores
#: rounded: its eps)
RTOL = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-12}
_S2 = math.sqrt(2.0)
_U = 2 * math.sqrt(2 / math.pi)


def _sigmoid(v):
    if v >= 0:
        return 1 / (1 + math.exp(-v))
    e = math.exp(v)
    return e / (1 + e)


def _exp(v):
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _gelu_tanh(v):
    if v == -math.inf:  # -inf * 0, as torch's
        return math.nan
    return v if v == math.inf else v * _sigmoid(_U * (v + 0.044715 * v ** 3))


def _clip(v, lo, hi):
    v = v if v > lo else lo  # as np.maximum: -0.0 against 0.0 gives 0.0
    return v if v < hi else hi


def _softplus(v):
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


def _elu(v, alpha=1.0):
    return v if v > 0 else alpha * math.expm1(v)


def _times(f):
    """v * f(v) with PyTorch's values at the infinities: -inf * 0 is NaN there, +inf stays."""
    return lambda v: math.nan if v == -math.inf else v if v == math.inf else v * f(v)


_SELU = (1.67326319217681884765625, 1.05070102214813232421875)  # ONNX's alpha, gamma


#: the operators' math in float64, for a non-NaN float input (every NaN gives NaN)
REF = {
    "exp": _exp,
    "log": lambda v: math.nan if v < 0 else (-math.inf if v == 0 else math.log(v)),
    "sqrt": lambda v: math.nan if v < 0 else math.sqrt(v),
    "rsqrt": lambda v: (math.nan if v < 0 else math.copysign(math.inf, v) if v == 0
                        else 0.0 if v == math.inf else 1 / math.sqrt(v)),
    "abs": math.fabs,
    "negative": lambda v: -v,
    "sigmoid": _sigmoid,
    "tanh": math.tanh,
    "erf": math.erf,
    "gelu": lambda v: math.nan if v == -math.inf else v * 0.5 * math.erfc(-v / _S2),
    "gelu_tanh": _gelu_tanh,
    "relu": lambda v: v if v > 0 else 0.0,
    "leaky_relu": lambda v: v if v > 0 else 0.01 * v,
    "relu6": lambda v: _clip(v, 0.0, 6.0),
    "silu": _times(_sigmoid),
    "hardswish": _times(lambda v: _clip(v + 3.0, 0.0, 6.0) / 6.0),
    "hardsigmoid": lambda v: _clip(0.2 * v + 0.5, 0.0, 1.0),
    "softplus": _softplus,
    "mish": _times(lambda v: math.tanh(_softplus(v))),
    "elu": _elu,
    "selu": lambda v: _SELU[1] * _elu(v, _SELU[0]),
}
#: case -> (operator, attributes)
OPS = {name: (name, {}) for name in ("exp", "log", "sqrt", "rsqrt", "abs", "negative", "sigmoid",
                                      "tanh", "erf", "gelu", "relu", "leaky_relu", "silu",
                                      "hardswish", "hardsigmoid", "softplus", "mish", "elu",
                                      "selu")}
OPS["gelu_tanh"] = ("gelu", {"approximate": "tanh"})
OPS["relu6"] = ("clip", {"a_min": 0.0, "a_max": 6.0})
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "silu", "hardswish")


def values(dtype: str) -> np.ndarray:
    """NaN, the infinities, both zeros, subnormals, float16's extremes (largest, smallest
    normal, smallest subnormal), ordinary values; as ``dtype``."""
    fi = np.finfo(dtype)
    sub = [float(fi.smallest_subnormal), float(fi.smallest_normal) / 3]
    edge = [65504.0, 6.1e-5, 6e-8]
    plain = [0.5, 1.0, 3.0, 10.0]
    vs = [math.nan, math.inf, -math.inf, -0.0, 0.0] + [s * v for v in sub + edge + plain
                                                        for s in (1, -1)]
    return np.array(vs, np.float64).astype(dtype)


def check(got: np.ndarray, x: np.ndarray, case: str, dtype: str, where: str):
    """got (an array of dtype) against the float64 reference of ``case`` at x."""
    assert got.dtype == np.dtype(dtype), where
    tiny = float(np.finfo(dtype).smallest_subnormal)
    for v, g in zip(x.astype(np.float64).tolist(), got.astype(np.float64).tolist()):
        want = math.nan if math.isnan(v) else REF[case](v)
        with np.errstate(over="ignore"):
            rounded = float(np.array(want).astype(dtype))
        at = f"{where}: {case}({v!r}) is {g!r}, want {want!r}"
        if math.isnan(want) or math.isnan(g):
            assert math.isnan(want) and math.isnan(g), at
        elif math.isinf(rounded):
            assert g == rounded, at
        elif want == 0 and not 0 < abs(v) < float(np.finfo(dtype).smallest_normal):
            assert g == 0 and math.copysign(1, g) == math.copysign(1, want), at
        else:
            assert abs(g - want) <= RTOL[dtype] * abs(want) + 4 * tiny, at


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", list(OPS))
def test_operator(target, case, dtype):
    op, attrs = OPS[case]
    x = values(dtype)
    got = getattr(gpucg.ops, op)(x, target=target, **attrs)
    check(np.asarray(got), x, case, dtype, f"{op} on {target}")


def _epilogue_inputs(dtype: str):
    """z = alpha * acc + bias with alpha -1, zero data (acc = +0.0, so -acc = -0.0) and the
    values as the bias: z is each value exactly, both zeros included; a second row of NaN
    data makes every z of it NaN through the accumulator."""
    v = values(dtype)
    return v, np.array([0.0, math.nan], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_dense_epilogue(target, activation, dtype):
    v, col = _epilogue_inputs(dtype)
    x, w = col.reshape(2, 1), np.zeros((v.size, 1), dtype)
    got = gpucg.ops.dense(x, w, v, activation=activation, alpha=-1.0, target=target)
    check(got[0], v, activation, dtype, f"dense epilogue on {target}")
    assert np.isnan(got[1]).all(), f"dense: NaN data must give NaN on {target}: {got[1]}"


@pytest.mark.parametrize("dtype", ("float16", "float32"))
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_conv2d_epilogue(target, activation, dtype):
    v, col = _epilogue_inputs(dtype)
    x, w = col.reshape(2, 1, 1, 1), np.zeros((v.size, 1, 1, 1), dtype)
    got = gpucg.ops.conv2d(x, w, bias=v, activation=activation, alpha=-1.0, target=target)
    check(got[0, :, 0, 0], v, activation, dtype, f"conv2d epilogue on {target}")
    assert np.isnan(got[1]).all(), f"conv2d: NaN data must give NaN on {target}: {got[1]}"


def test_host_erf_is_float64_accurate():
    """The NumPy target's erf (and the erfc under gelu) to ~1e-15 relative against the math
    module, the tails included."""
    x = np.concatenate([np.linspace(-26, 26, 20001), [0.46875, 4.0, 1e-300, -1e-300]])
    got = gpucg.ops.erf(x, target="numpy")
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=2e-15, atol=0)
    # gelu: x / sqrt 2 rounded is amplified 2 x^2 times in the tail: |x| <= 6 for 1e-14
    x = np.linspace(-6, 6, 2001)
    want = np.array([v * 0.5 * math.erfc(-v / _S2) for v in x])
    np.testing.assert_allclose(gpucg.ops.gelu(x, target="numpy"), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cuda_spellings_render(dtype):
    """Every operator and epilogue rendered for CUDA too (the session's NVRTC check compiles
    them: a misspelled CUDA math function fails the run)."""
    t = gpucg.tensor
    for op, attrs in OPS.values():
        assert gpucg.compile(op, t((7,), dtype), target="cuda", **attrs).sources
    for activation in ACTIVATIONS:
        f = gpucg.compile("dense", t((2, 1), dtype), t((5, 1), dtype), t((5,), dtype),
                          target="cuda", activation=activation, alpha=-1.0)
        assert any("val" in s for s in f.sources.values())
        if dtype != "float64":
            f = gpucg.compile("conv2d", t((2, 1, 1, 1), dtype), t((5, 1, 1, 1), dtype),
                              t((5,), dtype), target="cuda", activation=activation)
            assert any("val" in s for s in f.sources.values())


def test_host_erf_float32_is_float32_accurate():
    """float32 inputs take the host's float32 paths: erf by the one-exp erfc (Numerical
    Recipes' fit in float64) and gelu by its table of cubics (gpucg/ops/_gelu32.py), each
    within 2.5e-7 of the math module after the float32 rounding (the bound above is 1e-6), on
    a dense grid of the range where the results are normal numbers, gelu's deep tail (float64
    there) and the table's ends included."""
    x = np.concatenate([np.linspace(-9.5, 9.5, 38001), np.linspace(-0.5, 0.5, 2001),
                        [0.46875, -0.46875, 1e-30, -1e-30]]).astype(np.float32)
    want = [math.erf(v) for v in x.astype(np.float64).tolist()]
    np.testing.assert_allclose(gpucg.ops.erf(x, target="numpy"), want, rtol=2.5e-7, atol=0)
    x = np.concatenate([x, np.linspace(-13, -9.5, 3001), np.linspace(5.5, 6, 101),
                        np.nextafter(np.float32([-11, 5.75]), np.float32([-12, 6])),
                        [-11, 5.75]]).astype(np.float32)
    want = [v * 0.5 * math.erfc(-v / _S2) for v in x.astype(np.float64).tolist()]
    np.testing.assert_allclose(gpucg.ops.gelu(x, target="numpy"), want, rtol=2.5e-7, atol=0)


@pytest.mark.parametrize("activation", ("gelu", "silu", "hardswish"))
def test_host_in_place_activation_equals_the_operator(monkeypatch, activation):
    """The GEMM and conv2d epilogues' in-place float32 activations, block by block (small
    blocks and a ragged last one here), give the operator's values (one whole block for gelu,
    the operator's formula for silu and hardswish) bit for bit, special values included."""
    from gpucg.ops import _unary

    x = np.concatenate([np.linspace(-12, 12, 50), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32).reshape(5, 11)
    with np.errstate(all="ignore"):  # silu(-inf): -inf / inf
        want = _unary.TABLE[activation].numpy(x, {"approximate": "none"})
    monkeypatch.setattr(_unary, "BLOCK_ELEMENTS", 7)
    got = _unary.IN_PLACE[activation](x.copy())
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("activation", ("gelu", "silu", "hardswish"))
@pytest.mark.parametrize("block", (7, 40, 1 << 16))
def test_epilogue_bias_and_activation_by_blocks(monkeypatch, activation, block):
    """The epilogue adds the bias and activates a block at a time (blocks splitting rows and
    columns, a ragged last one): bit for bit the operator on (y + bias), special values in y
    and in the bias, for an NCHW result, a channels-last view of NHWC memory and a GEMM's
    rows (bias along the innermost axis), and a residual added after."""
    from gpucg.ops import _epilogue, _unary
    from gpucg.ops.conv2d import Conv2dAttrs

    monkeypatch.setenv("GPUCG_HOST_C", "0")  # NumPy's blocks (tests/test_host_c.py: C's)
    rng = np.random.default_rng(3)
    special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -90, 90, 1e-40])
    monkeypatch.setattr(_unary, "BLOCK_ELEMENTS", block)
    attrs = Conv2dAttrs(activation=activation)
    for shape, order, bshape in [((2, 5, 3, 4), (0, 1, 2, 3), (1, 5, 1, 1)),
                                 ((2, 3, 4, 5), (0, 3, 1, 2), (1, 5, 1, 1)),
                                 ((9, 13), (0, 1), (13,))]:
        mem = (rng.standard_normal(shape) * 8).astype(np.float32)
        mem.reshape(-1)[:special.size] = special
        y = mem.transpose(order)  # channels last: NHWC memory seen as NCHW
        bias = (rng.standard_normal(bshape) * 4).astype(np.float32)
        bias.reshape(-1)[:2] = [np.nan, -np.inf]
        with np.errstate(all="ignore"):
            want = _unary.TABLE[activation].numpy(y + bias, {"approximate": "none"})
            got = _epilogue.apply(y.copy(order="K"), bias, None, attrs)
            with_res = _epilogue.apply(y.copy(order="K"), bias, y, attrs)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        np.testing.assert_array_equal(with_res, want + y)


@pytest.mark.parametrize("approximate", ("none", "tanh"))
def test_gelu_special_values_as_torch(target, approximate):
    """gelu of NaN, the infinities and the zeros as torch.nn.functional.gelu gives them: NaN
    for NaN and for -inf (-inf * 0 there), inf for inf, zeros for zeros (the finite values
    are checked against the math module above; torch's float32 tails are not that exact)."""
    torch = pytest.importorskip("torch")
    x = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0], np.float32)
    want = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy()
    got = np.asarray(gpucg.ops.gelu(x, approximate=approximate, target=target))
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here


def test_winograd_infinities_are_stated():
    """Winograd's transforms turn an infinite input into NaN where the direct convolution
    gives +-inf (NaN only there), and winograd_mma's float16 tiles overflow for inputs near
    float16's range; every finite output equals the reference's within rounding, and explain
    states it for each Winograd implementation."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float16)
    inf_in = rng.standard_normal((1, 8, 6, 6)).astype(np.float16)
    inf_in[0, 0, 2, 2] = -np.inf
    big = inf_in.copy()
    big[0, :, 1:4, 1:4] = -30000  # transformed tiles leave float16's range
    t = gpucg.tensor((1, 8, 6, 6), "float16"), gpucg.tensor(w.shape, "float16")
    for impl, xs in (("winograd_fused_2x2", (inf_in,)), ("winograd_mma", (inf_in, big))):
        f = gpucg.compile("conv2d", *t, target="opencl", impl=impl, padding=1)
        assert f"numerics of {impl}.opencl: an infinite input" in str(f.explain())
        for x in xs:
            with np.errstate(over="ignore"):
                want = gpucg.ops.conv2d(x, w, padding=1, target="numpy")
            got = f(x, w)
            assert np.isnan(got).any() and not np.isnan(want).any(), impl
            if x is inf_in:
                assert not (np.isnan(got) & np.isfinite(want)).any(), impl
            ok = np.isfinite(got)  # float16 tiles: an error of the scale of the largest output
            scale = float(np.abs(want[ok].astype(np.float32)).max())
            np.testing.assert_allclose(got[ok].astype(np.float32), want[ok].astype(np.float32),
                                       rtol=2e-2, atol=4e-3 * scale)
