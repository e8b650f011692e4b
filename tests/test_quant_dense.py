"""dense_int4 and dense_int8 against torch (the weights dequantized in float64, then a float64
matmul) on float16, bfloat16 and float32 activations, m in {1, 3, 16, 17, 64} (the GEMV and
the GEMM), K past the tiles, with and without zero points and bias; every implementation and
config (128-bit and scalar accesses) forced on the same inputs, NaN and infinities included;
bad shapes, dtypes and group sizes; the kernels' SASS."""

import numpy as np
import pytest
import torch

import gpucg
from gpucg.verify import resources as res, sass

from conftest import as_dtype

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
rng = np.random.default_rng(6)
GPU = "opencl -device=gpu"
#: relative to the output's largest magnitude: the output's rounding, float32 sums of K terms
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6}


def xs(shape, dtype):
    return as_dtype(rng.standard_normal(shape), dtype)


def int4_weights(n, k, g, zeros=True, sdtype="float16"):
    qw = rng.integers(0, 256, (n, k // 2)).astype(np.uint8)
    scales = rng.uniform(0.005, 0.05, (n, k // g)).astype(sdtype)
    z = rng.integers(0, 16, (n, k // g)).astype(np.uint8) if zeros else None
    return qw, scales, z


def torch_int4(x, qw, scales, zeros, g, bias=None):
    """y in float64: nibbles unpacked (even k low), (q - zero) * scale, x @ W^T + bias."""
    q = torch.from_numpy(qw.astype(np.int64))
    q = torch.stack([q & 15, q >> 4], -1).flatten(1).double()
    z = 8.0 if zeros is None else \
        torch.from_numpy(zeros.astype(np.float64)).repeat_interleave(g, 1)
    s = torch.from_numpy(scales.astype(np.float64)).repeat_interleave(g, 1)
    return _matmul(x, (q - z) * s, bias)


def torch_int8(x, qw, scales, bias=None):
    w = torch.from_numpy(qw.astype(np.float64)) * torch.from_numpy(scales.astype(np.float64))[:, None]
    return _matmul(x, w, bias)


def _matmul(x, w, bias):
    y = torch.from_numpy(np.asarray(x, np.float64)) @ w.T
    if bias is not None:
        y = y + torch.from_numpy(np.asarray(bias, np.float64))
    return y.numpy()


def check(got, want, dtype, what=""):
    g = np.asarray(got, np.float64)
    assert got.dtype == as_dtype(0, dtype).dtype, what
    assert g.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=what)
    ok = np.isfinite(want)
    np.testing.assert_array_equal(g[~ok & ~np.isnan(want)], want[~ok & ~np.isnan(want)],
                                  err_msg=what)
    scale = max(np.abs(want[ok]).max(initial=0.0), 1e-30)
    np.testing.assert_allclose(g[ok], want[ok], rtol=0, atol=RTOL[dtype] * scale, err_msg=what)


#: one activation dtype a weight format in the default tier (test_every_implementation_agrees
#: runs float32 through every kernel); the rest with -m exhaustive
def _dtypes(default):
    return [d if d == default else pytest.param(d, marks=pytest.mark.exhaustive)
            for d in ("float16", "bfloat16", "float32")]


@pytest.mark.parametrize("dtype", _dtypes("float16"))
def test_int4_against_torch(target, dtype):
    """K = 160: two groups of 32 past a GEMV step of 1024 and a GEMM step of 32 and 64."""
    n, k, g = 37, 160, 32
    qw, scales, z = int4_weights(n, k, g)
    bias = xs((n,), dtype)
    for m in (1, 3, 16, 17, 64):
        x = xs((m, k), dtype)
        got = gpucg.ops.dense_int4(x, qw, scales, z, group_size=g, bias=bias, target=target)
        check(got, torch_int4(x, qw, scales, z, g, bias), dtype, f"m={m}")
    # no zero points (8), no bias, leading dimensions, float32 scales
    qw, scales, _ = int4_weights(n, k, g, zeros=False, sdtype="float32")
    x = xs((2, 3, k), dtype)
    check(gpucg.ops.dense_int4(x, qw, scales, group_size=g, target=target),
          torch_int4(x, qw, scales, None, g), dtype, "(2, 3, K), no zeros")


@pytest.mark.parametrize("dtype", _dtypes("bfloat16"))
def test_int8_against_torch(target, dtype):
    n, k = 29, 176
    qw = rng.integers(-128, 128, (n, k)).astype(np.int8)
    scales = rng.uniform(0.005, 0.05, n).astype(np.float16)
    bias = xs((n,), dtype)
    for m in (1, 3, 16, 17, 64):
        x = xs((m, k), dtype)
        check(gpucg.ops.dense_int8(x, qw, scales, bias=bias, target=target),
              torch_int8(x, qw, scales, bias), dtype, f"m={m}")


IMPLS = [("quant_gemv", {"wg": 64, "cols": 2, "unroll": 2, "vec": True}),
         ("quant_gemv", {"wg": 32, "cols": 1, "unroll": 1, "vec": False}),
         ("quant_gemm", {"bm": 16, "bn": 32, "bk": 32, "tm": 2, "tn": 2, "vec": True,
                         "conflict_free": True}),
         ("quant_gemm", {"bm": 16, "bn": 32, "bk": 16, "tm": 2, "tn": 2, "vec": False,
                         "conflict_free": False})]


@pytest.mark.parametrize("op", ("dense_int4", "dense_int8"))
def test_every_implementation_agrees(op):
    """Both kernels, each with 128-bit and with scalar accesses (small tiles and groups: ragged
    in every direction), on PoCL with GPU configs, and the numpy target: NaN and infinities of
    x reach exactly the outputs torch gives them."""
    m, n, k = 5, 41, 96
    x = xs((m, k), "float32")
    x[1, 7], x[3, 0] = np.nan, np.inf
    if op == "dense_int4":
        qw, scales, z = int4_weights(n, k, 32)
        bias = xs((n,), "float32")
        args, attrs = (x, qw, scales, bias, z), {"group_size": 32}
        want = torch_int4(x, qw, scales, z, 32, bias)
    else:
        qw = rng.integers(-128, 128, (n, k)).astype(np.int8)
        scales = rng.uniform(0.005, 0.05, n).astype(np.float32)
        args, attrs = (x, qw, scales), {}
        want = torch_int8(x, qw, scales)
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in args]
    for impl, config in IMPLS:
        f = gpucg.compile(op, *types, target=GPU, impl=impl, config=config, **attrs)
        check(f(*args), want, "float32", f"{impl} {config}")
    check(gpucg.compile(op, *types, target="numpy", **attrs)(*args), want, "float32", "numpy")


def test_edge_sizes(target):
    qw, scales, z = int4_weights(8, 64, 32)
    for shape in ((0, 64), (1, 64)):
        x = xs(shape, "float32")
        got = gpucg.ops.dense_int4(x, qw, scales, z, group_size=32, target=target)
        assert got.shape == (shape[0], 8)
        check(got, torch_int4(x, qw, scales, z, 32), "float32")


def _int4_args(**over):
    a = {"x": ((3, 64), "float16"), "qw": ((8, 32), "uint8"), "s": ((8, 2), "float16"),
         "z": ((8, 2), "uint8"), "g": 32, **over}
    arr = {k: np.ones(*v) for k, v in a.items() if k != "g" and v is not None}
    return arr, a["g"]


@pytest.mark.parametrize("over,error,match", [
    (dict(qw=((8, 32), "int8")), gpucg.DTypeError, "qweight dtype 'int8' is not supported"),
    (dict(qw=((8, 30), "uint8")), gpucg.InputError, "qweight has 30 columns; x's K = 64 needs"),
    (dict(s=((8, 3), "float16")), gpucg.InputError, "scales has 3 columns; K = 64 with"),
    (dict(s=((8, 2), "int32")), gpucg.DTypeError, "scales dtype 'int32'"),
    (dict(z=((8, 1), "uint8")), gpucg.InputError, "zeros has 1 columns; scales has 2"),
    (dict(z=((7, 2), "uint8")), gpucg.InputError, "zeros has 7 rows; qweight has N = 8"),
    (dict(x=((3, 64), "float64")), gpucg.DTypeError, "x dtype 'float64' is not supported"),
    (dict(g=48), gpucg.InputError, "K = 64 is not a multiple of group_size=48"),
    (dict(g=7), gpucg.AttrError, "group_size=7 .* must be a positive even int"),
    (dict(g=0), gpucg.AttrError, "group_size=0"),
])
def test_bad_input(over, error, match):
    arr, g = _int4_args(**over)
    with pytest.raises(error, match=match):
        gpucg.ops.dense_int4(arr["x"], arr["qw"], arr["s"], arr["z"], group_size=g,
                             target="numpy")


def test_int8_bad_input():
    x = np.ones((2, 16), np.float32)
    with pytest.raises(gpucg.InputError, match="scales has 3 rows; qweight has N = 4"):
        gpucg.ops.dense_int8(x, np.ones((4, 16), np.int8), np.ones(3, np.float16))
    with pytest.raises(gpucg.InputError, match="scales has shape .*; it must have rank 1"):
        gpucg.ops.dense_int8(x, np.ones((4, 16), np.int8), np.ones((4, 1), np.float16))


def test_explain_picks_the_gemv_by_rows():
    m = gpucg.var("m")
    t = [gpucg.tensor(s, dt) for s, dt in (((m, 4096), "float16"), ((4096, 2048), "uint8"),
                                          ((4096, 32), "float16"))]
    text = str(gpucg.explain("dense_int4", *t, target="cuda"))
    assert "quant_gemv.cuda" in text and "m <= 16" in text and "quant_gemm.cuda" in text


@pytest.mark.parametrize("arch,op", [
    ("sm_90", "dense_int4"), pytest.param("sm_90", "dense_int8", marks=pytest.mark.exhaustive),
    *(pytest.param("sm_80", op, marks=pytest.mark.exhaustive)
      for op in ("dense_int4", "dense_int8"))])
def test_sass_reads_128_bits_and_shuffles(sass_or_skip, arch, op):
    """The GEMV (decoding, m = 1) and the GEMM (m = 512), float16: 128-bit loads of the packed
    weights, the GEMV's lanes meeting by SHFL, no local memory."""
    k, n = 4096, 4096
    shapes = {"dense_int4": (((n, k // 2), "uint8"), ((n, k // 128), "float16")),
              "dense_int8": (((n, k), "int8"), ((n,), "float16"))}
    qshape, sshape = shapes[op]
    for m, impl, has in ((1, "quant_gemv", ("LDG.128", "SHFL")),
                         (512, "quant_gemm", ("LDG.128", "BAR"))):
        t = [gpucg.tensor((m, k), "float16"), gpucg.tensor(*qshape), gpucg.tensor(*sshape)]
        for r in res.resources(op, *t, impl=impl, target=f"cuda -arch={arch}", sass=True):
            sass.assert_sass(r.sass, has=has, none=("LDL", "STL"), what=f"{op} {impl} {arch}")


def test_bench_quant_quick(capsys):
    from gpucg.benchmarks.quant import main

    assert main(["--quick", "--repeat", "1", "--targets", "numpy", "--json"]) == 0
    out = capsys.readouterr().out
    assert "gpucg numpy int4 [numpy_quant_dense.numpy]" in out and "weights" in out
    assert "m=128 (GEMM)" in out and "not measured on a GPU" in out
