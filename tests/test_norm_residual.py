"""rms_norm with a residual (FlashInfer's and vLLM's fused_add_rmsnorm): (rms_norm(h), h) with
h = x + residual rounded to the storage dtype, against torch (h bit for bit, y against float64
from h) on every dtype and backend; every implementation (warp, group, blocks; vector and
scalar configs) forced on the same special values; bad input; the kernels' SASS."""

import numpy as np
import pytest
import torch

import gpucg
from gpucg.verify import resources as res, sass

from conftest import as_dtype

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
rng = np.random.default_rng(5)
GPU = "opencl -device=gpu"
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-13}


def torch_of(a):
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).bfloat16()
    return torch.from_numpy(a)


def want(x, gamma, r, eps=1e-6):
    """(y in float64, h in x's dtype): torch adds in x's dtype (one rounding of the exact sum
    in float32), then the norm of h in float64."""
    h = torch_of(x) + torch_of(r)
    hd = h.double()
    y = hd / torch.sqrt((hd * hd).mean(-1, keepdim=True) + eps) * torch_of(gamma).double()
    hn = h.float().numpy() if h.dtype == torch.bfloat16 else h.numpy()
    return y.numpy(), as_dtype(hn, x.dtype.name)


def same(h, want, what=""):
    """h equals want bit for bit (signed zeros, infinities), a NaN anywhere want has one (its
    payload is the hardware's)."""
    h64, w64 = np.asarray(h, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(h64), np.isnan(w64), err_msg=what)
    ok = ~np.isnan(w64)
    np.testing.assert_array_equal(np.asarray(h)[ok].view(np.uint8),
                                  np.asarray(want)[ok].view(np.uint8), err_msg=what)


def check(got, x, gamma, r):
    y, h = got
    wy, wh = want(x, gamma, r)
    assert y.dtype == h.dtype == x.dtype and y.shape == h.shape == x.shape
    same(h, wh)
    np.testing.assert_allclose(np.asarray(y, np.float64), wy, rtol=RTOL[x.dtype.name],
                               atol=RTOL[x.dtype.name])


def sample(shape, dtype):
    x, r = (as_dtype(rng.standard_normal(shape) * 2, dtype) for _ in range(2))
    return x, as_dtype(rng.uniform(0.5, 1.5, shape[-1]), dtype), r


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32", "float64"))
def test_against_torch(target, dtype):
    # a row for a warp, one for a work-group, rows past a work-group's capacity, 3-D
    for shape in ((5, 40), (3, 1001), (2, 5000), (2, 3, 24)):
        x, g, r = sample(shape, dtype)
        check(gpucg.ops.rms_norm(x, g, residual=r, target=target), x, g, r)


def test_edge_sizes(target):
    for shape in ((0, 8), (1, 1), (4, 0), (7,)):
        x, g, r = sample(shape, "float32")
        y, h = gpucg.ops.rms_norm(x, g, residual=r, target=target)
        assert y.shape == h.shape == shape
        if x.size:
            check((y, h), x, g, r)


def special(dtype, n):
    """Rows (of n) holding NaN, an infinity, sums that overflow the dtype, cancelling sums
    (exact zeros), a row of zeros and a row of huge values."""
    x = rng.standard_normal((6, n)) * 3
    r = rng.standard_normal((6, n)) * 3
    big = float(np.finfo(np.float32 if dtype == "bfloat16" else dtype).max)
    x[0, 3], r[1, n - 1] = np.nan, np.inf
    x[2, :2], r[2, :2] = big, big * 0.75          # sum overflows to inf
    r[3] = -x[3]                                  # h exactly 0: a row of zeros
    x[4, 1], r[4, 1] = -0.0, -0.0                 # -0.0 + -0.0 stays -0.0
    x[5], r[5] = big / 4, big / 8                 # huge, finite sums: scaled squares
    return as_dtype(x, dtype), as_dtype(rng.uniform(0.5, 1.5, n), dtype), as_dtype(r, dtype)


@pytest.mark.parametrize("dtype", ("float32", pytest.param("float16",
                                                           marks=pytest.mark.exhaustive)))
def test_every_implementation_agrees_on_special_values(dtype):
    """norm_warp, norm_group and norm_blocks, each in its vector and scalar config (and the
    CPU's two-pass blocks): h bit for bit (any NaN), y equal to the numpy target's (NaN where
    it has). float16's 128-bit configs run on every small case under Oclgrind too (against
    the reference)."""
    vw = 16 // np.dtype(dtype).itemsize
    for n, impls in ((64, ("norm_warp", "norm_group", "norm_blocks")),
                     (5008, ("norm_blocks",))):
        x, g, r = special(dtype, n)
        with np.errstate(over="ignore"):
            wy, wh = gpucg.ops.rms_norm(x, g, residual=r, target="numpy")
        types = [gpucg.tensor(a.shape, dtype) for a in (x, g, r)]
        runs = [(GPU, impl, c) for impl in impls for c in (1, vw)] + [("opencl", "norm_blocks", 1)]
        for target, impl, v in runs:
            f = gpucg.compile("rms_norm", *types, target=target, impl=impl)
            if v != f.selection.choices[0].config.get("vw", 1):
                space = f.selection.choices[0].impl.space
                f = gpucg.compile("rms_norm", *types, target=target, impl=impl,
                                  config=dict(space.default, vw=v))
            y, h = f(x, g, r)
            what = f"{impl} vw={v} on {target}, n={n}"
            same(h, wh, what)
            np.testing.assert_array_equal(np.isnan(y), np.isnan(wy), err_msg=what)
            ok = ~np.isnan(wy)
            np.testing.assert_allclose(y[ok].astype(np.float64), wy[ok].astype(np.float64),
                                       rtol=RTOL[dtype], atol=RTOL[dtype], err_msg=what)
        # a NaN poisons its row; an infinity makes its own element NaN (inf / inf), the
        # others 0 (finite / inf); a row of zeros stays 0
        assert np.isnan(wy[0]).all() and np.isnan(wy[1, -1]) and (wy[1, :-1] == 0).all()
        assert (wy[3] == 0).all()
        assert np.isinf(wh[2, 0]) and np.signbit(wh[4, 1]) and np.isfinite(wy[5]).all()


@pytest.mark.parametrize("args,error,match", [
    (dict(r=(3, 9)), gpucg.InputError, r"residual has 9 at axis 1, but x has 8"),
    (dict(rdtype="float16"), gpucg.DTypeError, "residual is float16 of rank 2; it must be"),
    (dict(axis=0), gpucg.InputError, "with a residual, axis=0 must be the last axis"),
])
def test_bad_input(args, error, match):
    x = np.ones((3, 8), np.float32)
    r = np.ones(args.get("r", (3, 8)), args.get("rdtype", "float32"))
    g = np.ones(x.shape[args.get("axis", -1)], np.float32)
    with pytest.raises(error, match=match):
        gpucg.ops.rms_norm(x, g, axis=args.get("axis", -1), residual=r, target="numpy")


def test_explain_names_what_the_residual_form_runs_on():
    t = gpucg.tensor((gpucg.var("m"), gpucg.var("n")), "float16")
    text = str(gpucg.explain("rms_norm", t, gpucg.tensor((gpucg.var("n"),), "float16"), t,
                             target="cuda"))
    assert "norm_split.cuda" in text and "a row's sum is stored by the group" in text
    assert "norm_cols.cuda" in text and "norm_group.cuda" in text


@pytest.mark.parametrize("arch", ("sm_90", pytest.param("sm_80", marks=pytest.mark.exhaustive)))
def test_sass_moves_128_bits_and_shuffles(sass_or_skip, arch):
    """norm_group (hidden 4096) and norm_blocks (8192), float16: 128-bit loads of x and the
    residual, 128-bit stores of h and y, lanes meeting by SHFL, no local memory."""
    for n, impl in ((4096, "norm_group"), (8192, "norm_blocks")):
        t = [gpucg.tensor(s, "float16") for s in ((16, n), (n,), (16, n))]
        for r in res.resources("rms_norm", *t, impl=impl, target=f"cuda -arch={arch}",
                               sass=True):
            sass.assert_sass(r.sass, has=("LDG.128", "STG.128", "SHFL"), none=("LDL", "STL"),
                             what=f"rms_norm residual {impl} {arch}")
