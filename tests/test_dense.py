"""dense, matmul and batch_matmul against NumPy in float64 on every backend here, every
implementation forced (gemv, split-K, tiled), the tile's knobs (vector loads, double
buffering) forced with config=, the fused epilogue, bad input, the run-time dispatch
on m, and NVRTC for every CUDA variant."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg

erf = np.vectorize(math.erf, otypes=[np.float64])

rng = np.random.default_rng(7)
TOL = {"float16": 3e-3, "float32": 2e-5, "float64": 1e-12}


def act(y, activation):
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "gelu":
        return 0.5 * y * (1 + erf(y / np.sqrt(2)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    if activation == "sigmoid":
        return 1 / (1 + np.exp(-y))
    if activation == "tanh":
        return np.tanh(y)
    return y


def want_dense(x, w, b=None, r=None, activation=None, alpha=1.0, beta=1.0, position="after"):
    """The float64 epilogue, written out independently of gpucg's."""
    z = alpha * (x.astype(np.float64) @ w.astype(np.float64).T)
    if b is not None:
        z = z + b.astype(np.float64)
    if r is not None and position == "before":
        return act(z + beta * r.astype(np.float64), activation)
    y = act(z, activation)
    return y if r is None else y + beta * r.astype(np.float64)


def close(got, want, dtype, scale):
    """``got`` equals ``want`` within the dtype's rounding of the sums' size ``scale``."""
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.size:
        err = np.abs(got.astype(np.float64) - want)
        bound = TOL[dtype] * (scale + np.abs(want) + 1)
        assert (err <= bound).all(), f"max error {err.max():.3g}"


def arrays(dtype, *shapes):
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def impls(op, *types, target, **attrs):
    from conftest import applicable

    return [None] if target == "numpy" else applicable(op, *types, target=target, **attrs)


SHAPES = [(1, 7, 5), (5, 33, 70), (16, 40, 2300), (17, 130, 65), (40, 100, 2100),
          (130, 67, 33), (3, 5, 0), (0, 4, 3), (4, 0, 3)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_dense_every_implementation(target, m, n, k, dtype):
    x, w, b = arrays(dtype, (m, k), (n, k), (n,))
    types = [gpucg.tensor(a.shape, dtype) for a in (x, w, b)]
    for impl in impls("dense", *types, target=target, activation="gelu"):
        f = gpucg.compile("dense", *types, target=target, impl=impl, activation="gelu")
        got = f(x, w, b)
        assert got.dtype == np.dtype(dtype)
        close(got, want_dense(x, w, b, activation="gelu"), dtype,
              np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)
        if impl is not None:
            assert f.last_impl == f"{impl}.{target}"


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "sigmoid", "tanh"])
@pytest.mark.parametrize("position", ["after", "before"])
def test_dense_epilogue(target, activation, position):
    x, w, b, r = arrays("float32", (19, 23), (29, 23), (29,), (19, 29))
    attrs = dict(activation=activation, alpha=0.75, beta=-1.5, residual_position=position)
    got = gpucg.ops.dense(x, w, b, residual=r, target=target, **attrs)
    want = want_dense(x, w, b, r, activation, 0.75, -1.5, position)
    close(got, want, "float32", np.abs(x) @ np.abs(w).T + np.abs(r))
    # a residual without a bias: the eager function passes a zero bias
    got = gpucg.ops.dense(x, w, residual=r, target=target, activation=activation)
    close(got, want_dense(x, w, None, r, activation), "float32", np.abs(x) @ np.abs(w).T)


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "float64"])
def test_dense_out_dtype_and_float16(target, out_dtype):
    x, w, b = arrays("float16", (20, 300), (33, 300), (33,))
    r = rng.standard_normal((20, 33)).astype(out_dtype)
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in (x, w, b, r)]
    for impl in impls("dense", *types, target=target, out_dtype=out_dtype):
        got = gpucg.compile("dense", *types, target=target, impl=impl, out_dtype=out_dtype,
                            activation="relu")(x, w, b, r)
        assert got.dtype == np.dtype(out_dtype)
        close(got, want_dense(x, w, b, r, "relu"), "float16",
              np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)


MATMUL = [((7,), (7,)), ((7,), (7, 3)), ((4, 7), (7,)), ((3, 1, 5, 7), (2, 7, 4)),
          ((2, 5, 7), (7, 4)), ((5, 0), (0, 3)), ((0, 4), (4, 2)), ((2, 3, 20, 33), (3, 33, 17)),
          ((1, 9), (9, 300)), ((20, 2500), (2500, 5)), ((6, 2, 1, 4, 5), (2, 3, 5, 6))]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul_numpy_semantics(target, sa, sb):
    for dtype in ("float32", "float64"):
        a, b = arrays(dtype, sa, sb)
        types = [gpucg.tensor(s, dtype) for s in (sa, sb)]
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        for impl in impls("matmul", *types, target=target):
            got = gpucg.compile("matmul", *types, target=target, impl=impl)(a, b)
            assert got.dtype == np.dtype(dtype)
            close(got, want, dtype, np.matmul(np.abs(a), np.abs(b)))


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("batches", [(3, 3), (1, 4), (2, 1)])
def test_batch_matmul(target, ta, tb, batches):
    m, n, k = 9, 21, 13
    a = rng.standard_normal((batches[0],) + ((k, m) if ta else (m, k))).astype(np.float32)
    b = rng.standard_normal((batches[1],) + ((n, k) if tb else (k, n))).astype(np.float32)
    want = np.matmul(np.swapaxes(a, 1, 2) if ta else a, np.swapaxes(b, 1, 2) if tb else b)
    types = [gpucg.tensor(x.shape) for x in (a, b)]
    for impl in impls("batch_matmul", *types, target=target, transpose_a=ta, transpose_b=tb):
        got = gpucg.compile("batch_matmul", *types, target=target, impl=impl, transpose_a=ta,
                            transpose_b=tb)(a, b)
        close(got, want.astype(np.float64), "float32", np.abs(want) * k)


def _forced(op, arrays_, impl, config, **attrs):
    """Run ``impl`` on OpenCL with ``config`` instead of its default."""
    types = [gpucg.tensor(x.shape, x.dtype.name) for x in arrays_]
    f = gpucg.compile(op, *types, target="opencl", impl=impl, config=config, **attrs)
    assert f.selection.choices[0].config == config
    return f(*arrays_)


#: conflict_free: the conflict-free local layouts (padding / XOR swizzle, 128-bit fragment reads) or not
#: (the two in the default tier take each knob both ways; the other two under -m exhaustive)
TILES = [pytest.param(dict(bm=128, bn=128, bk=8, tm=8, tn=8, vw=4, double_buffer=True,
                           conflict_free=True), marks=pytest.mark.exhaustive),
         dict(bm=64, bn=64, bk=16, tm=4, tn=4, vw=2, double_buffer=True, conflict_free=False),
         dict(bm=32, bn=64, bk=16, tm=2, tn=4, vw=2, double_buffer=False, conflict_free=True),
         pytest.param(dict(bm=16, bn=32, bk=32, tm=1, tn=2, vw=1, double_buffer=True,
                           conflict_free=True), marks=pytest.mark.exhaustive)]


@pytest.mark.parametrize("config", TILES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_tile_knobs(config):
    """The GPU defaults (vector loads, double buffering) run on PoCL too, on rows whose
    length is and is not a multiple of the vector width."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    for (m, n, k), dtype, impl in (((130, 67, 36), "float32", "gemm_tiled"),
                                   ((17, 130, 65), "float64", "gemm_tiled"),
                                   ((40, 100, 2100), "float32", "gemm_splitk")):
        x, w, b = arrays(dtype, (m, k), (n, k), (n,))
        got = _forced("dense", [x, w, b], impl, config, activation="tanh")
        close(got, want_dense(x, w, b, activation="tanh"), dtype, np.abs(x) @ np.abs(w).T)
        a = rng.standard_normal((2, k, m)).astype(dtype)
        got = _forced("batch_matmul", [a, w.T[None].copy()], impl, config, transpose_a=True)
        close(got, np.matmul(np.swapaxes(a, 1, 2), w.T).astype(np.float64), dtype,
              np.matmul(np.abs(np.swapaxes(a, 1, 2)), np.abs(w.T)))


@pytest.mark.parametrize("config", [dict(wg=64, k_slices=64, cols=8, vw=4, shuffle=False),
                                    pytest.param(dict(wg=256, k_slices=32, cols=1, vw=2,
                                                      shuffle=False), marks=pytest.mark.exhaustive),
                                    pytest.param(dict(wg=128, k_slices=8, cols=2, vw=1,
                                                      shuffle=False), marks=pytest.mark.exhaustive),
                                    # the slices added by warp shuffles (the OpenCL emulation):
                                    # two warps' sums through local memory, one warp's alone
                                    # (B along K), 2 slices 16 lanes apart then 4 warps (along P)
                                    dict(wg=64, k_slices=64, cols=8, vw=4, shuffle=True),
                                    dict(wg=256, k_slices=32, cols=1, vw=2, shuffle=True),
                                    dict(wg=128, k_slices=8, cols=2, vw=1, shuffle=True)], ids=str)
def test_gemv_knobs(config):
    """Both mappings of the small-m kernel: B along K (dense; vector loads when K allows)
    and B along the columns (matmul; scalar loads); the slices added in local memory or by
    warp shuffles."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    for m, n, k in ((3, 70, 66), (16, 9, 401), (5, 33, 64)):
        x, w = arrays("float32", (m, k), (n, k))
        close(_forced("dense", [x, w], "gemv", config), want_dense(x, w), "float32",
              np.abs(x) @ np.abs(w).T)
        b = rng.standard_normal((k, n)).astype(np.float32)
        close(_forced("matmul", [x, b], "gemv", dict(config, vw=1)), (x @ b).astype(np.float64),
              "float32", np.abs(x) @ np.abs(b))


@settings(max_examples=12, deadline=None)
@given(m=st.integers(0, 40), n=st.integers(0, 40), k=st.integers(0, 70), bias=st.booleans(),
       index=st.sampled_from(["int32", "int64"]))
def test_hypothesis_dense(m, n, k, bias, index):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    x, w, b = arrays("float32", (m, k), (n, k), (n,))
    ins = [x, w, b] if bias else [x, w]
    types = [gpucg.tensor(a.shape) for a in ins]
    for target in ("numpy", "opencl"):
        for impl in impls("dense", *types, target=target, activation="relu"):
            got = gpucg.compile("dense", *types, target=target, impl=impl, index=index,
                                activation="relu")(*ins)
            close(got, want_dense(x, w, b if bias else None, activation="relu"), "float32",
                  np.abs(x) @ np.abs(w).T)


def test_symbolic_m_dispatches_at_run_time(target):
    m = gpucg.var("m")
    f = gpucg.compile("dense", gpucg.tensor((m, 2048)), gpucg.tensor((64, 2048)), target=target)
    if target == "numpy":
        assert not f.selection.dynamic
        return
    assert f.selection.dynamic
    assert "if m <= 16:" in f.dispatcher_source
    w = rng.standard_normal((64, 2048)).astype(np.float32)
    for rows, want in ((1, "gemv"), (16, "gemv"), (17, "gemm_splitk"), (4100, "gemm_tiled")):
        x = rng.standard_normal((rows, 2048)).astype(np.float32)
        close(f(x, w), want_dense(x, w), "float32", np.abs(x) @ np.abs(w).T)
        assert f.last_impl == f"{want}.{target}"


def test_explain_shows_the_small_m_specialization():
    m = gpucg.var("m")
    sel = gpucg.explain("dense", gpucg.tensor((m, 4096)), gpucg.tensor((4096, 4096)),
                        target="cuda")
    text = str(sel)
    assert sel.dynamic and "gemv.cuda" in text and "m <= 16" in text
    # each with vector loads where both operands' addresses are aligned, else vw = 1
    assert [(c.impl.short_name, c.config["vw"]) for c in sel.choices] == [
        ("gemv", 4), ("gemv", 1), ("gemm_splitk", 4), ("gemm_splitk", 1), ("gemm_tiled", 4),
        ("gemm_tiled", 1)]
    static = gpucg.explain("dense", gpucg.tensor((8, 4096)), gpucg.tensor((4096, 4096)),
                           target="cuda")
    assert [c.impl.short_name for c in static.choices] == ["gemv", "gemv"]
    assert str(static.choices[0].condition) == "(_align0 >= 16) & (_align1 >= 16)"
    assert static.choices[1].condition is None and static.choices[1].config["vw"] == 1


BAD = [  # (op, shapes, dtypes, attrs, error, message)
    ("dense", [(3, 4), (5, 6)], None, {}, gpucg.InputError, "inner dimensions do not match"),
    ("dense", [(), (5, 4)], None, {}, gpucg.InputError, r"data has shape \(\); allowed: rank >= 1"),
    ("dense", [(3, 4), (2, 5, 4)], None, {}, gpucg.InputError,
     r"weight has shape \(2, 5, 4\); allowed: rank 2"),
    ("dense", [(2, 3, 4), (5, 6)], None, {}, gpucg.InputError,
     r"data has 4 along k but weight has 6 \(shapes \(2, 3, 4\) and \(5, 6\)\)"),
    ("dense", [(3, 4), (5, 4), (6,)], None, {}, gpucg.InputError, r"bias must have shape \(5,\)"),
    ("dense", [(3, 4), (5, 4), (5,), (3, 4)], None, {}, gpucg.InputError, "residual must have"),
    ("dense", [(3, 4), (5, 4)], None, {"activation": "swish"}, gpucg.AttrError,
     "activation='swish' is not allowed"),
    ("dense", [(3, 4), (5, 4)], ["float32", "float64"], {}, gpucg.DTypeError, "mixed dtypes"),
    ("dense", [(3, 4), (5, 4)], ["int32", "int32"], {}, gpucg.DTypeError, "not supported"),
    ("dense", [(3, 4), (5, 4), (5,)], ["float32", "float32", "float16"], {}, gpucg.DTypeError,
     "bias dtype float16"),
    ("dense", [(3, 4), (5, 4)], None, {"alpha": "x"}, gpucg.AttrError, "alpha='x'"),
    ("dense", [(3, 4), (5, 4)], None, {"residual_position": "middle"}, gpucg.AttrError,
     "residual_position='middle'"),
    ("matmul", [(3, 4), (5, 6)], None, {}, gpucg.InputError, "inner dimensions do not match"),
    ("matmul", [(2, 3, 4), (3, 4, 6)], None, {}, gpucg.InputError, "do not broadcast"),
    ("matmul", [(), (3,)], None, {}, gpucg.InputError, "rank >= 1"),
    ("batch_matmul", [(2, 3, 4), (3, 4, 5)], None, {}, gpucg.InputError, "do not broadcast"),
    ("batch_matmul", [(4,), (3, 4, 5)], None, {}, gpucg.InputError,
     r"a has shape \(4,\); allowed for batch_matmul: rank >= 2"),
    ("matmul", [(4,), (4, 5)], None, {"transpose_a": True}, gpucg.InputError,
     r"a has shape \(4,\); allowed for transpose_a=True: rank >= 2"),
    ("matmul", [(2, 3, 4), (3, 5, 4)], None, {"transpose_b": True}, gpucg.InputError,
     r"batch dimensions of a \(shape \(2, 3, 4\)\) and b \(shape \(3, 5, 4\)\) do not "
     r"broadcast: \(2,\) against \(3,\)"),
    ("batch_matmul", [(2, 3, 4), (2, 3, 5)], None, {"transpose_b": True}, gpucg.InputError,
     r"a has 4 along k but b has 5 \(shapes \(2, 3, 4\) and \(2, 3, 5\)\)"),
    ("matmul", [(3, 4), (4, 5)], None, {"alpha": float("nan")}, gpucg.AttrError, "alpha=nan"),
    ("batch_matmul", [(3, 4), (4, 5)], None, {"alpha": "2"}, gpucg.AttrError, "alpha='2'"),
    ("batch_matmul", [(2, 3, 4), (2, 3, 5)], None, {"transpose_b": 1}, gpucg.AttrError,
     "transpose_b=1"),
]


@pytest.mark.parametrize("op,shapes,dtypes,attrs,err,msg", BAD)
def test_bad_input(op, shapes, dtypes, attrs, err, msg):
    dtypes = dtypes or ["float32"] * len(shapes)
    with pytest.raises(err, match=msg):
        gpucg.compile(op, *[gpucg.tensor(s, d) for s, d in zip(shapes, dtypes)], target="numpy",
                      **attrs)


def test_symbolic_inner_mismatch_is_checked_by_the_dispatcher():
    k1, k2 = gpucg.var("k1"), gpucg.var("k2")
    f = gpucg.compile("dense", gpucg.tensor((3, k1)), gpucg.tensor((5, k2)), target="numpy")
    with pytest.raises(gpucg.InputError, match="data has 4 along k but weight has 6"):
        f(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32))
    assert f(np.ones((3, 4), np.float32), np.ones((5, 4), np.float32)).shape == (3, 5)


def test_empty_inner_dimension_gives_the_epilogue_of_zero(target):
    b = np.arange(4, dtype=np.float32)
    got = gpucg.ops.dense(np.ones((3, 0), np.float32), np.ones((4, 0), np.float32), b,
                          activation="relu", target=target)
    np.testing.assert_array_equal(got, np.tile(b, (3, 1)))
    assert gpucg.ops.matmul(np.ones((0, 2), np.float32), np.ones((2, 3), np.float32),
                            target=target).shape == (0, 3)


def test_every_cuda_variant_compiles_with_nvrtc(nvrtc_or_skip):
    from gpucg.verify import nvrtc

    m, n, k, b = (gpucg.var(s) for s in "mnkb")
    sources = {}
    for dtype in ("float16", "float32", "float64"):
        t = lambda *s: gpucg.tensor(s, dtype)  # noqa: E731
        calls = [("dense", [t(m, k), t(n, k), t(n), t(m, n)],
                  dict(activation="gelu", alpha=2.0, beta=0.5, residual_position="before")),
                 ("dense", [t(m, k), t(n, k)], dict(out_dtype="float32", activation="sigmoid")),
                 ("matmul", [t(b, 1, m, k), t(3, k, n)], {}),
                 ("matmul", [t(k), t(b, k, n)], {}),
                 ("batch_matmul", [t(b, k, m), t(b, n, k)], dict(transpose_a=True,
                                                                  transpose_b=True)),
                 ("dense", [t(b, m, k), t(n, k), t(n)], {}),
                 ("matmul", [t(b, 1, k, m), t(3, n, k)], dict(transpose_a=True,
                                                              transpose_b=True, alpha=0.5)),
                 ("batch_matmul", [t(b, 12, m, k), t(1, 12, n, k)], dict(transpose_b=True,
                                                                         alpha=0.125))]
        for op, types, attrs in calls:
            f = gpucg.compile(op, *types, target="cuda -arch=sm_90", **attrs)
            sources.update({src: f"{op} {dtype} {key}" for key, src in f.sources.items()})
    keys = list(sources.values())
    for arch in ("sm_80", "sm_90"):
        failures = nvrtc.check_sources(list(sources), arch)
        assert not failures, [(keys[i], exc.log) for i, exc in failures[:3]]
    assert len(sources) >= 60


GEMV_OCLGRIND = """
import json, numpy as np, gpucg
rng = np.random.default_rng(3)
errors = []
for op, (m, k, n), config in (("dense", (3, 70, 33), dict(wg=64, k_slices=32, cols=2, vw=1, shuffle=True)),
                              ("dense", (2, 66, 9), dict(wg=64, k_slices=64, cols=1, vw=2, shuffle=True)),
                              ("matmul", (5, 40, 20), dict(wg=64, k_slices=4, cols=1, vw=1, shuffle=True))):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if op == "dense" else (k, n)).astype(np.float32)
    f = gpucg.compile(op, gpucg.tensor(x.shape), gpucg.tensor(w.shape), target="opencl",
                      impl="gemv", config=config, records=False)
    want = x.astype(np.float64) @ (w.T if op == "dense" else w).astype(np.float64)
    errors.append(float(np.abs(f(x, w) - want).max()))
print(json.dumps(errors))
"""


def test_gemv_shuffles_under_oclgrind(oclgrind_or_skip, tmp_path):
    """The emulated shuffles of the small-m kernel: no races, no out-of-bounds accesses."""
    import json

    from conftest import under_oclgrind

    done, reports = under_oclgrind(GEMV_OCLGRIND, tmp_path)
    assert max(json.loads(done.stdout.strip().splitlines()[-1])) < 1e-4
    assert not reports, "\n\n".join(r.text for r in reports)


@pytest.mark.parametrize("m,n,dtype,tile", [
    (3, 9, "float64", (16, 32)),     # 64 x 64 of padding cut to the smallest tile that covers it
    (16, 4096, "float32", (16, 64)),  # rows cut, columns kept
    (40, 100, "float32", (64, 64)),   # neither half covers: the default stays
])
def test_split_k_tile_fits_a_small_output(m, n, dtype, tile):
    """gemm_splitk runs where the outputs are few: its default tile halves bm, then bn, while
    the half still covers the output (down to the space's 16 x 32), so less of each K slice
    is spent on padding; it matches NumPy on PoCL forced with that default."""
    a, b = gpucg.tensor((m, 2049), dtype), gpucg.tensor((n, 2049), dtype)
    f = gpucg.compile("dense", a, b, target="cuda", impl="gemm_splitk")
    c = f.selection.choices[0].config
    assert (c["bm"], c["bn"]) == tile, dict(c)
    assert c["bm"] * c["bn"] // (c["tm"] * c["tn"]) >= 16
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, 2049)).astype(dtype)
    w = rng.standard_normal((n, 2049)).astype(dtype)
    g = gpucg.compile("dense", a, b, target="opencl -device=gpu", impl="gemm_splitk")
    assert g.selection.choices[0].config == c
    close(g(x, w), want_dense(x, w), dtype, np.abs(x) @ np.abs(w).T)
