"""rotary_embedding against a float64 torch implementation of vLLM's and FlashInfer's RoPE
(neox halves, gptj interleaved pairs, dims past rotary_dim unchanged) on every dtype and
backend; the vector and scalar configs forced on the same values, special ones included;
out-of-range positions an InputError on every target, and under Oclgrind no read outside cos
and sin; bad input; the CUDA kernel's SASS."""

import math

import numpy as np
import pytest
import torch

import gpucg
from gpucg.verify import resources as res, sass

from conftest import as_dtype, under_oclgrind

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (gpucg[bfloat16])")
rng = np.random.default_rng(7)
GPU = "opencl -device=gpu"
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-6, "float64": 1e-13}


def caches(p, r, dtype, base=10000.0):
    """cos and sin of LLaMA's angles p * base^(-2i / r), (p, r // 2)."""
    theta = base ** (-np.arange(0, r, 2) / r)
    ang = np.arange(p)[:, None] * theta[None, :]
    return as_dtype(np.cos(ang), dtype), as_dtype(np.sin(ang), dtype)


def want(x, cos, sin, pos, style, r):
    """The rotation in float64 from the stored values, written as vLLM's forward_native."""
    t = torch.from_numpy(np.asarray(x, np.float64))
    c = torch.from_numpy(np.asarray(cos, np.float64))[pos][:, None, :]
    s = torch.from_numpy(np.asarray(sin, np.float64))[pos][:, None, :]
    rot, rest = t[..., :r], t[..., r:]
    if style == "neox":
        x1, x2 = rot[..., :r // 2], rot[..., r // 2:]
        out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
    return torch.cat([out, rest], -1).numpy()


def check(got, x, cos, sin, pos, style, r):
    w = want(x, cos, sin, pos, style, r)
    assert got.dtype == x.dtype and got.shape == x.shape
    g = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_allclose(g[ok], w[ok], rtol=TOL[x.dtype.name], atol=TOL[x.dtype.name])
    # the dims past r are the input's bits
    np.testing.assert_array_equal(np.asarray(got)[..., r:].view(np.uint8),
                                  np.asarray(x)[..., r:].view(np.uint8))


#: (T, H, D, rotary_dim, x dtype, cos dtype, positions dtype)
SHAPES = [(5, 3, 64, 64, "float16", "float32", "int64"),
          (4, 2, 128, 128, "bfloat16", "bfloat16", "int32"),
          (3, 2, 80, 64, "float32", "float32", "int64"),
          (4, 3, 10, 6, "float64", "float64", "int32"),
          (2, 5, 96, 32, "float16", "float16", "int64")]


#: every shape in the neox style, the partial and the 16-bit cache ones in the gptj style (the
#: rest -m exhaustive)
TORCH_CASES = [pytest.param(style, shape, id=f"{style}-{'-'.join(map(str, shape))}",
                            marks=() if style == "neox" or i in (1, 2) else pytest.mark.exhaustive)
               for style in ("neox", "gptj") for i, shape in enumerate(SHAPES)]


@pytest.mark.parametrize("style,shape", TORCH_CASES)
def test_against_torch(target, style, shape):
    t, h, d, r, dt, cdt, pdt = shape
    x = as_dtype(rng.standard_normal((t, h, d)), dt)
    cos, sin = caches(50, r, cdt)
    pos = rng.integers(0, 50, t).astype(pdt)
    got = gpucg.ops.rotary_embedding(x, cos, sin, pos, style=style, rotary_dim=r, target=target)
    check(got, x, cos, sin, pos, style, r)


def test_edge_sizes(target):
    cos, sin = caches(8, 16, "float32")
    for t, h in ((0, 4), (3, 0), (1, 1)):
        x = rng.standard_normal((t, h, 16)).astype(np.float32)
        pos = np.arange(t, dtype=np.int64) % 8
        check(gpucg.ops.rotary_embedding(x, cos, sin, pos, target=target), x, cos, sin, pos,
              "neox", 16)
    # rotary_dim None is the head size; positions at the ends of the cache
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    pos = np.array([0, 7], np.int32)
    check(gpucg.ops.rotary_embedding(x, cos, sin, pos, style="gptj", target=target), x, cos,
          sin, pos, "gptj", 16)


@pytest.mark.parametrize("style", ("neox", "gptj"))
def test_every_config_agrees_on_special_values(style):
    """NaN, infinities and signed zeros in x and in the caches, through the 128-bit and the
    scalar config (forced; wg 32 makes a row of 48 scalar units loop), and the numpy target:
    the same NaNs, values within rounding, the copied dims bit for bit."""
    r, d = 64, 80
    x = rng.standard_normal((4, 3, d)).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, 1, 8:12] = [1e30, -1e30, 0.0, -0.0]
    x[2, 0, 76:] = [np.nan, np.inf, -0.0, 3.0]
    cos, sin = caches(6, r, "float32")
    cos[5, 3] = np.inf
    pos = np.array([0, 5, 3, 1], np.int64)
    t = [gpucg.tensor(a.shape, a.dtype.name) for a in (x, cos, sin, pos)]
    for wg, items, vw in ((64, 1, 1), (64, 2, 4), (32, 2, 1)):
        f = gpucg.compile("rotary_embedding", *t, target=GPU, impl="rope", style=style,
                          config={"wg": wg, "items": items, "vw": vw}, rotary_dim=r)
        check(f(x, cos, sin, pos), x, cos, sin, pos, style, r)
    check(gpucg.ops.rotary_embedding(x, cos, sin, pos, style=style, rotary_dim=r,
                                     target="numpy"), x, cos, sin, pos, style, r)


def test_misaligned_caches_take_the_scalar_path():
    cos, sin = caches(9, 32, "float32")
    buf = np.concatenate([np.zeros(1, np.float32), cos.reshape(-1)])
    cos_view = buf[1:].reshape(cos.shape)  # 4 bytes past a 16-byte boundary
    x = rng.standard_normal((3, 2, 32)).astype(np.float32)
    pos = np.array([8, 0, 4], np.int64)
    check(gpucg.ops.rotary_embedding(x, cos_view, sin, pos, target=GPU), x, cos, sin, pos,
          "neox", 32)


@pytest.mark.parametrize("bad", (-1, 9, 2**40))
def test_out_of_range_positions_raise_on_every_target(target, bad):
    cos, sin = caches(9, 8, "float32")
    x = rng.standard_normal((4, 2, 8)).astype(np.float32)
    pos = np.array([1, 2, bad, 3], np.int64)
    with pytest.raises(gpucg.InputError, match=rf"positions\[2\] = {bad} is out of range: cos "
                                               r"and sin have 9 positions \(allowed: 0 to 8"):
        gpucg.ops.rotary_embedding(x, cos, sin, pos, target=target)


OOB = """
import numpy as np, gpucg
cos = sin = np.ones((9, 4), np.float32)
x = np.ones((4, 2, 8), np.float32)
for style in ("neox", "gptj"):
    for pos in ([1, -1, 2, 3], [9, 0, 10**6, 2]):
        try:
            gpucg.ops.rotary_embedding(x, cos, sin, np.array(pos, np.int32), style=style,
                                       target="opencl")
        except gpucg.InputError as e:
            assert "is out of range" in str(e), e
        else:
            raise SystemExit("no error")
print("ok")
"""


def test_out_of_range_positions_read_nothing_outside_under_oclgrind(oclgrind_or_skip, tmp_path):
    done, reports = under_oclgrind(OOB, tmp_path)
    assert "ok" in done.stdout and not reports, [r.title for r in reports]


@pytest.mark.parametrize("args,error,match", [
    (dict(x=(3, 2, 8), cos=(5, 4), rotary_dim=6), gpucg.InputError,
     r"cos and sin have 4 columns; rotary_dim=6 needs 3"),
    (dict(x=(3, 2, 8), cos=(5, 4), rotary_dim=7), gpucg.AttrError, "positive even int"),
    (dict(x=(3, 2, 8), cos=(5, 8), rotary_dim=16), gpucg.InputError,
     "rotary_dim=16 must be even and at most x's head size 8"),
    (dict(x=(3, 16), cos=(5, 8)), gpucg.InputError, r"x has shape \(3, 16\); it must be"),
    (dict(x=(3, 2, 8), cos=(5, 4), pos=(4,)), gpucg.InputError,
     "positions has 4 entries but x has 3 tokens"),
    (dict(x=(3, 2, 8), cos=(5, 4), sin=(6, 4)), gpucg.InputError, "sin has 6 rows but cos has 5"),
    (dict(x=(3, 2, 8), cos=(5, 4), pdtype="float32"), gpucg.DTypeError,
     "positions dtype 'float32' is not supported"),
    (dict(x=(3, 2, 8), cos=(5, 4), cdtype="int32"), gpucg.DTypeError, "cos and sin dtypes"),
    (dict(x=(3, 2, 8), cos=(5, 4), style="llama"), gpucg.AttrError, "style='llama'"),
])
def test_bad_input(args, error, match):
    x = np.ones(args["x"], np.float32)
    cos = np.ones(args["cos"], args.get("cdtype", "float32"))
    sin = np.ones(args.get("sin", args["cos"]), args.get("cdtype", "float32"))
    pos = np.zeros(args.get("pos", args["x"][:1]), args.get("pdtype", "int64"))
    with pytest.raises(error, match=match):
        gpucg.ops.rotary_embedding(x, cos, sin, pos, style=args.get("style", "neox"),
                                   rotary_dim=args.get("rotary_dim"), target="numpy")


def test_symbolic_head_size_is_refused():
    n = gpucg.var("n")
    with pytest.raises(gpucg.InputError, match="must be a constant"):
        gpucg.compile("rotary_embedding", gpucg.tensor((4, 2, n)), gpucg.tensor((9, 4)),
                      gpucg.tensor((9, 4)), gpucg.tensor((4,), "int64"), target="numpy",
                      rotary_dim=8)


@pytest.mark.parametrize("arch", ("sm_90", pytest.param("sm_80", marks=pytest.mark.exhaustive)))
def test_sass_moves_128_bits(sass_or_skip, arch):
    """Both styles, float16 x with float32 caches: 128-bit loads and stores, no local memory."""
    t = [gpucg.tensor(s, dt) for s, dt in (((16, 32, 128), "float16"), ((4096, 64), "float32"),
                                          ((4096, 64), "float32"), ((16,), "int64"))]
    for style in ("neox", "gptj"):
        for r in res.resources("rotary_embedding", *t, impl="rope", style=style,
                               target=f"cuda -arch={arch}", sass=True):
            sass.assert_sass(r.sass, has=("LDG.128", "STG.128"), none=("LDL", "STL"),
                             what=f"rope {style} {arch}")
            assert not math.isnan(r.occupancy)
