"""dense_fp8 against a float64 reference of the scaled product (written here, independently of
the operator's own), within the bound gpucg/ops/dense_fp8.py documents: every scale
granularity (per tensor, per row / column, DeepGEMM's blockwise) and format pair, bias, every
output dtype, ragged sizes (k and n not multiples of the blocks or tiles, leading dimensions),
zero sizes, NaN and infinities, the vector-load config; torch._scaled_mm beside it; bad calls."""

import numpy as np
import pytest

import gpucg
from conftest import backend_or_skip

ml_dtypes = pytest.importorskip("ml_dtypes", reason="FP8 needs ml_dtypes (gpucg[bfloat16])")
E4, E5 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24}


def expand(scale, shape, block, axis_block):
    """A scale array widened to one value an element of an operand of ``shape`` (rows, k)."""
    s = np.asarray(scale, np.float64)
    rows, k = shape
    if block is None:
        return np.broadcast_to(s.reshape(-1, 1), (rows, k)) if s.size > 1 else \
            np.full((rows, k), float(s.reshape(-1)[0]))
    s = s.reshape(-1, s.shape[-1])
    s = np.repeat(s, axis_block, axis=0)[:rows]
    return np.repeat(s, block[1], axis=1)[:, :k]


def scaled_product(x, w, xs, ws, bias, block):
    """(y, bound of |y| terms): the float64 product of the dequantized operands, + bias."""
    k = x.shape[-1]
    x2 = x.astype(np.float64).reshape(int(np.prod(x.shape[:-1])), k)
    w2 = w.astype(np.float64)
    sx = expand(xs, x2.shape, block, 1)
    sw = expand(ws, w2.shape, block, block[0] if block else 1)
    with np.errstate(all="ignore"):
        y = (x2 * sx) @ (w2 * sw).T
        mag = np.abs(x2 * sx) @ np.abs(w2 * sw).T
    if bias is not None:
        y = y + bias.astype(np.float64)
    out = tuple(x.shape[:-1]) + (w.shape[0],)
    return y.reshape(out), mag.reshape(out)


def check(got, x, w, xs, ws, bias=None, block=None, out="bfloat16"):
    assert got.dtype == np.dtype(getattr(ml_dtypes, out, out))
    y, mag = scaled_product(x, w, xs, ws, bias, block)
    g = np.asarray(got).astype(np.float64)
    assert g.shape == y.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(y))
    inf = np.isinf(y)
    np.testing.assert_array_equal(g[inf], y[inf])
    fin = np.isfinite(y)
    tol = (x.shape[-1] + 4) * 2.0 ** -24 * mag + UNIT[out] * np.abs(y) + 2.0 ** -24
    with np.errstate(invalid="ignore"):
        err = np.abs(g - y)
    assert np.all(err[fin] <= tol[fin]), float(np.max((err - tol)[fin]))


def fp8(shape, dtype, rng, spread=4.0):
    return (rng.standard_normal(shape) * spread).astype(np.float32).astype(dtype)


#: (x shape, n, formats, scale kinds, block_size, bias dtype, out dtype)
CASES = [((3, 5, 40), 19, (E4, E5), ("tensor", "col"), None, "bfloat16", "bfloat16"),
         ((15, 33), 45, (E5, E5), ("row", "tensor"), None, None, "float16"),
         ((9, 200), 33, (E4, E5), ("block", "block"), (16, 128), "float32", "float32"),
         ((7, 64), 20, (E4, E4), ("row", "col"), None, None, "float32")]


def make(case, rng):
    xshape, n, (fx, fw), kinds, block, bias_dt, out = case
    k = xshape[-1]
    x, w = fp8(xshape, fx, rng), fp8((n, k), fw, rng)
    lead = xshape[:-1]
    kb = -(-k // block[1]) if block else 1
    shapes = {"tensor": (1,), "row": lead, "col": (n,),
              "block": (lead + (kb,), (-(-n // block[0]) if block else 1, kb))}
    xs_shape = shapes["block"][0] if kinds[0] == "block" else shapes[kinds[0]]
    ws_shape = shapes["block"][1] if kinds[1] == "block" else shapes[kinds[1]]
    xs = rng.uniform(0.01, 0.1, xs_shape).astype(np.float32)
    ws = rng.uniform(0.01, 0.1, ws_shape).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32).astype(
        getattr(ml_dtypes, bias_dt, bias_dt)) if bias_dt else None
    return x, w, xs, ws, bias, block, out


@pytest.mark.parametrize("case", CASES, ids=[f"{c[3][0]}-{c[3][1]}-{c[6]}" for c in CASES])
def test_scale_granularities(target, case):
    x, w, xs, ws, bias, block, out = make(case, np.random.default_rng(3))
    got = gpucg.ops.dense_fp8(x, w, xs, ws, bias=bias, out_dtype=out, block_size=block,
                              target=target)
    check(got, x, w, xs, ws, bias, block, out)


def test_special_values_and_deepgemm_blocks(target):
    """DeepGEMM's 1 x 128 / 128 x 128 blocks with k and n not multiples of 128; NaN in x and w,
    an infinity in an e5m2 w: NaN rows and columns, as the reference."""
    rng = np.random.default_rng(4)
    x, w = fp8((6, 300), E4, rng), fp8((130, 300), E5, rng)
    x[2, 7] = np.nan
    w[5, 0] = np.nan
    w[9, 1] = np.inf
    xs = rng.uniform(0.5, 1, (6, 3)).astype(np.float32)
    ws = rng.uniform(0.5, 1, (2, 3)).astype(np.float32)
    got = gpucg.ops.dense_fp8(x, w, xs, ws, block_size=(128, 128), out_dtype="float32",
                              target=target)
    check(got, x, w, xs, ws, None, (128, 128), "float32")
    assert np.isnan(got[2]).all() and np.isnan(got[:, 5]).all()


def test_zero_sizes(target):
    rng = np.random.default_rng(5)
    bias = rng.standard_normal(4).astype(np.float32)
    for m, n, k in ((0, 4, 8), (3, 0, 8), (3, 4, 0)):
        x, w = fp8((m, k), E4, rng), fp8((n, k), E4, rng)
        got = gpucg.ops.dense_fp8(x, w, np.ones(1, np.float32), np.ones(1, np.float32),
                                  bias=bias[:n], out_dtype="float32", target=target)
        assert got.shape == (m, n)
        np.testing.assert_array_equal(got, np.broadcast_to(bias[:n], (m, n)))


def test_vector_loads_config():
    """vw = 4: four FP8 values a 32-bit load (rows of k a multiple of 4, 4-byte aligned)."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(6)
    x, w = fp8((20, 256), E4, rng), fp8((40, 256), E4, rng)
    xs = rng.uniform(0.5, 1, (20, 2)).astype(np.float32)
    ws = rng.uniform(0.5, 1, (1, 2)).astype(np.float32)
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in (x, w, xs, ws)]
    f = gpucg.compile("dense_fp8", *types, target="opencl", block_size=(128, 128),
                      impl="fp8_tiled", config=dict(bm=32, bn=32, bk=16, tm=4, tn=4, vw=4,
                                                    double_buffer=True, conflict_free=True))
    assert f.plan(x, w, xs, ws).index == 0
    assert "gpucg_fp8x4_e4m3(" in f.source(0, "gemm")
    check(gpucg.to_host(f(x, w, xs, ws)), x, w, xs, ws, None, (128, 128))


def test_beside_torch_scaled_mm():
    torch = pytest.importorskip("torch")
    scaled_mm = getattr(torch, "_scaled_mm", None)  # torch's FP8 GEMM (cuBLASLt on GPUs)
    if scaled_mm is None:
        pytest.skip("this torch has no _scaled_mm")
    rng = np.random.default_rng(7)
    a = torch.from_numpy(rng.standard_normal((32, 64)).astype(np.float32)).to(torch.float8_e4m3fn)
    b = torch.from_numpy(rng.standard_normal((48, 64)).astype(np.float32)).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    try:
        want = scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    except RuntimeError as exc:  # a torch build without the CPU kernel
        pytest.skip(f"torch._scaled_mm: {exc}")
    got = gpucg.ops.dense_fp8(a, b, sa.reshape(1), sb.reshape(1), out_dtype="float32",
                              target="numpy")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


T = gpucg.tensor
X, W = T((8, 64), "float8_e4m3fn"), T((16, 64), "float8_e4m3fn")
ONE = T((1,), "float32")


@pytest.mark.parametrize("types,attrs,err,msg", [
    ((T((8, 64), "float32"), W, ONE, ONE), {}, gpucg.DTypeError,
     "x dtype 'float32' is not supported; allowed: float8_e4m3fn, float8_e5m2"),
    ((X, W, T((1,), "float16"), ONE), {}, gpucg.DTypeError, "x_scale dtype 'float16'"),
    ((X, T((16, 32), "float8_e4m3fn"), ONE, ONE), {}, gpucg.InputError,
     r"differ along k \(64 and 32\)"),
    ((X, T((2, 16, 64), "float8_e4m3fn"), ONE, ONE), {}, gpucg.InputError, "w \\(n, k\\)"),
    ((X, W, T((7,), "float32"), ONE), {}, gpucg.InputError,
     r"x_scale has shape \(7,\), which fits no scale granularity .* allowed: x_scale \(\) or "
     r"\(1,\) \(per tensor\) or \(8,\) or \(8, 1\) \(per row\)"),
    ((X, W, ONE, T((16, 2), "float32")), {}, gpucg.InputError, r"w_scale has shape \(16, 2\)"),
    ((X, W, T((8, 2), "float32"), T((1, 1), "float32")), {"block_size": (128, 128)},
     gpucg.InputError, r"x_scale has shape \(8, 2\).* with block_size=\(128, 128\): x_scale "
                       r"\(8, 1\)"),
    ((X, W, T((8, 1), "float32"), T((1, 2), "float32")), {"block_size": (128, 128)},
     gpucg.InputError, r"w_scale has shape \(1, 2\).* w_scale \(1, 1\)"),
    ((X, W, ONE, ONE), {"block_size": (128,)}, gpucg.AttrError, r"block_size=\(128,\) \(tuple\) must be None or \(bn, bk\)"),
    ((X, W, ONE, ONE), {"out_dtype": "int8"}, gpucg.DTypeError, "out_dtype='int8'"),
    ((X, W, ONE, ONE, T((15,), "float32")), {}, gpucg.InputError,
     r"bias has shape \(15,\); allowed: \(16,\)"),
    ((X, W, ONE, ONE, T((16,), "float64")), {}, gpucg.DTypeError, "bias dtype 'float64'"),
])
def test_bad_calls(types, attrs, err, msg):
    with pytest.raises(err, match=msg):
        gpucg.compile("dense_fp8", *types, target="numpy", **attrs)


def test_symbolic_rows_check_the_scales_at_run_time():
    m = gpucg.var("m")
    f = gpucg.compile("dense_fp8", T((m, 64), "float8_e4m3fn"), W, T((m,), "float32"), ONE,
                      target="numpy")
    rng = np.random.default_rng(8)
    x, w = fp8((5, 64), E4, rng), fp8((16, 64), E4, rng)
    check(f(x, w, np.ones(5, np.float32), np.ones(1, np.float32)), x, w, np.ones(5),
          np.ones(1))
    with pytest.raises(gpucg.InputError, match=r"x_scale.shape\[0\] is 4, but .* needs m = 5"):
        f(x, w, np.ones(4, np.float32), np.ones(1, np.float32))
    # a size of its own for the scales: the rule is the operator's, checked at run time
    g = gpucg.compile("dense_fp8", T((m, 64), "float8_e4m3fn"), W, T((gpucg.var("r"),), "float32"),
                      ONE, target="numpy")
    with pytest.raises(gpucg.InputError, match="dense_fp8: x_scale: 4 where 5 is needed"):
        g(x, w, np.ones(4, np.float32), np.ones(1, np.float32))
