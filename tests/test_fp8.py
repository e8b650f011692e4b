"""The FP8 dtypes float8_e4m3fn and float8_e5m2 end to end, bit for bit against ml_dtypes:
every code decoded, the rounding of every special float32 (NaN of both signs, infinities, the
overflow thresholds and their neighbours, ties, subnormals, -0.0) on numpy and OpenCL, cast
between FP8 and every dtype, the elementwise family's promotion and arithmetic (float32
between operators, one rounding at the store), 128-bit accesses, moves that keep NaN
payloads, torch float8 tensors in and out, and the CUDA spellings through NVRTC."""

import math

import numpy as np
import pytest

import gpucg
from conftest import backend_or_skip
from gpucg.arch import ARCHS
from gpucg.codegen.fp8 import FORMATS, NATIVE_CUDA_ARCH

ml_dtypes = pytest.importorskip("ml_dtypes", reason="FP8 needs ml_dtypes (gpucg[bfloat16])")
FP8 = ["float8_e4m3fn", "float8_e5m2"]
NP = {name: np.dtype(getattr(ml_dtypes, name)) for name in FP8}
CODES = np.arange(256, dtype=np.uint8)


def specials() -> np.ndarray:
    """float32 bit patterns where rounding to FP8 is delicate, both signs."""
    b = [0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x00000001, 0x007FFFFF, 0x00800000]
    for f in FORMATS.values():
        for v in (f.max_value, f.min_normal, f.min_subnormal, f.min_subnormal / 2,
                  f.min_subnormal * 1.5, f.min_subnormal * 2.5, f.min_normal * (1 - 2.0 ** -9)):
            bits = int(np.array(v, np.float32).view(np.uint32))
            b += [bits - 1, bits, bits + 1]
        b += [f.overflow_bits - 1, f.overflow_bits, f.overflow_bits + 1]
    # every float32 near the top binades and ties in the normal range (step: 2**12 ulps)
    b += list(range(0x43000000, 0x47800000, 0x1000)) + list(range(0x3F800000, 0x3F900000, 0x1001))
    bits = np.array(b, np.uint32)
    return np.concatenate([bits, bits | 0x80000000]).view(np.float32)


def test_formats_match_ml_dtypes():
    for name, f in FORMATS.items():
        info = ml_dtypes.finfo(NP[name])
        assert (f.max_value, f.min_normal, f.min_subnormal) == (
            float(info.max), float(info.smallest_normal), float(info.smallest_subnormal))
        want = CODES.view(NP[name]).astype(np.float64)
        got = np.array([f.value(int(c)) for c in CODES])
        np.testing.assert_array_equal(got, want)
    # the CUDA guard is the first architecture whose capability record has native FP8
    first = min(a.compute_capability for a in ARCHS.values() if a.native("fp8"))
    assert NATIVE_CUDA_ARCH == first[0] * 100 + first[1] * 10


def same_bits(got, want, what):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got.view(np.uint8), want.view(np.uint8)
    bad = np.nonzero(g != w)[0]
    assert not bad.size, f"{what}: {bad.size} differ, first at {bad[:5]}: {g[bad[:5]]} != {w[bad[:5]]}"


@pytest.mark.parametrize("name", FP8)
def test_every_code_decodes_and_special_floats_round_as_ml_dtypes(target, name):
    x = CODES.view(NP[name])
    got = gpucg.ops.cast(x, "float32", target=target)
    want = x.astype(np.float32)
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 and the NaNs' signs
    f = specials()
    with np.errstate(invalid="ignore", over="ignore"):
        want8 = f.astype(NP[name])
    same_bits(gpucg.ops.cast(f, name, target=target), want8, f"float32 -> {name} on {target}")


OTHERS = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bfloat16"]
PAIRS = [(a, b) for f in FP8 for o in OTHERS + FP8 for a, b in ((f, o), (o, f)) if a != b]
#: what the default run compiles on PoCL: each FP8 format from and to a few kinds of dtype
SAMPLED = [("float8_e4m3fn", "int8"), ("uint16", "float8_e4m3fn"), ("float8_e5m2", "bfloat16"),
           ("float64", "float8_e5m2"), ("float8_e4m3fn", "float8_e5m2"), ("bool", "float8_e5m2")]


def check_cast(src, dst, target):
    from gpucg.half import numpy_dtype

    v = np.array([0, 1, 2, 3, 0.5, -1, 7, 96, 100, 127, -128, 255, 300, 448], np.float64)
    if src == "bool":
        x = (np.arange(14) % 3 == 0)
    else:
        s = numpy_dtype(src)
        keep = v if s.kind == "f" or src in ("bfloat16",) + tuple(FP8) else v[(v == np.trunc(v))]
        if s.kind in "iu":
            info = np.iinfo(s)
            keep = keep[(keep >= info.min) & (keep <= info.max)]
        if src in FP8:
            keep = np.concatenate([keep, [np.nan, -0.0, -np.inf if src == "float8_e5m2" else 1]])
        with np.errstate(invalid="ignore", over="ignore"):
            x = keep.astype(np.float32).astype(s)
    d = numpy_dtype(dst)
    if src in FP8 and d.kind in "iu" and target != "numpy":
        # the kernels' rule (tests/test_cast.py): NaN is 0, out of range saturates
        info = np.iinfo(d)
        w = np.nan_to_num(x.astype(np.float64), nan=0.0)
        want = np.clip(np.trunc(w), int(info.min), int(info.max)).astype(d)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            want = x.astype(d)
    got = gpucg.ops.cast(x, dst, target=target)
    assert got.dtype == want.dtype
    if d.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst} on {target}")
    else:
        same_bits(got.view(np.uint8), want.view(np.uint8), f"{src} -> {dst} on {target}")


@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_every_pair_on_numpy(src, dst):
    check_cast(src, dst, "numpy")


@pytest.mark.parametrize("src,dst", SAMPLED)
def test_cast_pairs_on_opencl(src, dst):
    backend_or_skip("opencl")
    check_cast(src, dst, "opencl")


@pytest.mark.exhaustive
@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_every_pair_on_opencl(src, dst):
    backend_or_skip("opencl")
    check_cast(src, dst, "opencl")


def test_promotion():
    t = gpucg.tensor
    cases = {("float8_e4m3fn", "float8_e4m3fn"): "float8_e4m3fn",
             ("float8_e5m2", "int8"): "float8_e5m2", ("uint8", "float8_e4m3fn"): "float8_e4m3fn",
             ("float8_e4m3fn", "bool"): "float8_e4m3fn", ("float8_e4m3fn", "float32"): "float32",
             ("float8_e5m2", "float64"): "float64", ("float8_e4m3fn", "int16"): "float32",
             ("float8_e4m3fn", "float8_e5m2"): "float16", ("float8_e4m3fn", "float16"): "float16",
             ("bfloat16", "float8_e5m2"): "bfloat16"}
    for (a, b), want in cases.items():
        f = gpucg.compile("add", t((3,), a), t((3,), b), target="numpy")
        assert f.output_types[0].dtype == want, (a, b)
        ours = _ml_promotion(a, b)
        assert ours in (None, want), (a, b, ours)  # as ml_dtypes, where it promotes
    assert gpucg.compile("less", t((3,), "float8_e5m2"), t((3,), "float8_e5m2"),
                         target="numpy").output_types[0].dtype == "bool"
    with pytest.raises(gpucg.DTypeError, match="allowed: bool, .*float64, bfloat16$"):
        gpucg.compile("sum", t((3,), "float8_e4m3fn"), target="numpy")


def _ml_promotion(a, b):
    try:
        return np.result_type(NP.get(a, a), NP.get(b, b)).name
    except TypeError:
        return None


def fp8_sample(name, shape, rng):
    x = (rng.standard_normal(shape) * 8).astype(np.float32).astype(NP[name])
    flat = x.reshape(-1)
    flat[:6] = np.array([np.nan, -0.0, 0.0, FORMATS[name].min_subnormal, FORMATS[name].max_value,
                         -FORMATS[name].max_value], np.float32).astype(NP[name])
    return x


@pytest.mark.parametrize("name", FP8)
def test_elementwise_computes_in_float32_and_rounds_once(target, name):
    rng = np.random.default_rng(8)
    a, b = fp8_sample(name, (5, 37), rng), fp8_sample(name, (37,), rng)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        cases = {"float8_e4m3fn": [("multiply", (a, b), a32 * b32),
                                   ("relu", (a,), np.where(a32 > 0, a32, np.where(np.isnan(a32), a32, 0)))],
                 "float8_e5m2": [("exp", (a,), np.exp(a32)), ("add", (a, np.int8(100)), a32 + 100)]}
        for op, args, want32 in cases[name]:
            got = getattr(gpucg.ops, op)(*args, target=target)
            same_bits(got, want32.astype(NP[name]), f"{op} {name} on {target}")
        # a fused chain keeps float32 between its operators: one rounding at the end
        e = gpucg.ops.fused("greater(add(multiply(x0, x1), x0), x1)")(a, b, target=target)
        np.testing.assert_array_equal(e, a32 * b32 + a32 > b32)


def test_vector_config_moves_sixteen_elements_an_access():
    backend_or_skip("opencl")
    rng = np.random.default_rng(9)
    a = fp8_sample("float8_e4m3fn", (3, 64), rng)
    b = fp8_sample("float8_e4m3fn", (64,), rng)
    t = gpucg.tensor
    f = gpucg.compile("multiply", t(a.shape, "float8_e4m3fn"), t(b.shape, "float8_e4m3fn"),
                      target="opencl", impl="ew_strided", config=dict(wg=64, items=1, vw=16))
    assert f.plan(a, b).index == 0
    with np.errstate(all="ignore"):
        want = (a.astype(np.float32) * b.astype(np.float32)).astype(a.dtype)
    same_bits(gpucg.to_host(f(a, b)), want, "multiply, 16 values a 128-bit access")


def test_moves_keep_every_bit(target):
    """concatenate and take (and a same-dtype cast: copy.j2's raw path, as concatenate's)
    copy bits: e5m2's NaN payloads stay."""
    x = CODES.view(NP["float8_e5m2"]).reshape(16, 16)
    y = gpucg.ops.concatenate([x, x[:3]], axis=0, target=target)
    same_bits(y, np.concatenate([x, x[:3]]), "concatenate")
    idx = np.array([15, 0, 3, 3], np.int64)
    same_bits(gpucg.ops.take(x, idx, axis=1, target=target), np.take(x, idx, axis=1), "take")


def test_torch_float8_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    for name in FP8:
        tt = getattr(torch, name)
        x = (torch.randn(4, 33) * 30).to(tt)
        y = gpucg.ops.relu(x, target="numpy")
        assert isinstance(y, torch.Tensor) and y.dtype == tt
        assert torch.equal(y.view(torch.uint8), x.float().relu().to(tt).view(torch.uint8))
        z = gpucg.ops.cast(x, "float32", target="numpy")
        assert z.dtype == torch.float32 and torch.equal(z, x.float())
    # in range, torch rounds as ml_dtypes; beyond it, torch 2.13's CPU conversion saturates
    # to +-448 where ml_dtypes (and gpucg) give NaN: gpucg documents ml_dtypes' rule
    v = torch.tensor([1.0, 17.0, 300.0, 464.0, -0.001, 470.0, math.inf])
    ours = gpucg.ops.cast(v.numpy(), "float8_e4m3fn", target="numpy").view(np.uint8)
    theirs = v.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(ours[:5], theirs[:5])
    assert list(ours[5:]) == [0x7F, 0x7F] and list(theirs[5:]) == [0x7E, 0x7E]


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """CUDA builds: integer conversions below sm_89, the PTX cvt instructions from it (PTX of
    sm_80 and sm_90 compared); conftest compiles every rendered source for both at the end."""
    from gpucg.verify import nvrtc

    n = gpucg.var("n")
    for src_dtype, dst_dtype, want in (("float32", "float8_e4m3fn", "cvt.rn.satfinite.e4m3x2.f32"),
                                       ("float8_e5m2", "float32", "cvt.rn.f16x2.e5m2x2")):
        f = gpucg.compile("cast", gpucg.tensor((n,), src_dtype), dtype=dst_dtype, target="cuda")
        for src in f.sources.values():
            ptx80, ptx90 = (nvrtc.compile_to_ptx(src, arch) for arch in ("sm_80", "sm_90"))
            text80, text90 = (p.decode() if isinstance(p, bytes) else p for p in (ptx80, ptx90))
            assert want not in text80 and want in text90
