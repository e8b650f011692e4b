"""128-bit global accesses (gpucg/codegen/vector.py) in the elementwise, reduce and norm kernels:
the vector configs (vw > 1) forced on PoCL against NumPy for every dtype, broadcast rows, odd
sizes (scalar tails), 0-size and 64-bit indexing; offset views take the vw = 1 config on PoCL
and on the CUDA launch stand-in; the Dialect spells the accesses for both languages; the traffic
figures of the norms' rows held in tests/resources/norm.json."""

import json
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg.codegen import CUDA, OPENCL
from gpucg.runtime import use_backend
from gpucg.runtime.cuda_backend import CudaBackend
from gpucg.verify.cupy_standin import StandInCupy

from conftest import backend_or_skip, under_oclgrind
from test_alignment import _view
from test_norm import check, params_for

rng = np.random.default_rng(19)
GPU = "opencl -device=gpu"


def _forced(op, arrays, impl, config, index="auto", **attrs):
    """The op compiled with impl and config forced, on PoCL; (the op, vw of each choice)."""
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in arrays]
    f = gpucg.compile(op, *types, target="opencl", impl=impl, config=config, index=index,
                      **attrs)
    return f, [c.config["vw"] for c in f.selection.choices]


def test_dialects_spell_the_accesses():
    assert CUDA.vload("a", "x", "i", "float32", 4).startswith(
        "const float4 a_w0 = *(const float4*)(x + i);")
    assert OPENCL.vload("a", "x", "i", "float32", 4).startswith(
        "const float4 a_w0 = *(__global const float4*)(x + i);")
    assert "vloada_half8(0, x + i)" in OPENCL.vload("a", "x", "i", "float16", 8)
    assert "make_uint4(" in CUDA.vstore("y", "i", [f"r{k}" for k in range(8)], "bfloat16")
    assert OPENCL.vstore("y", "i", list("abcd"), "float32").startswith("vstore4((float4)(")
    assert CUDA.vload("a", "x", "i", "float64", 4).count("double2") == 4
    assert CUDA.vload("a", "x", "i", "int8", 1) == "const signed char a0 = x[i];"
    with pytest.raises(gpucg.errors.DTypeError, match="not a multiple of 4"):
        CUDA.vstore("y", "i", ["a", "b"], "float32")


EW_CASES = [("add", (4133,), (4133,), "float32"), ("multiply", (3, 1024), (1024,), "float16"),
            ("subtract", (5, 96), (5, 1), "float64"), ("less", (2, 160), (160,), "float32"),
            ("maximum", (777,), (777,), "int8"), ("add", (0,), (0,), "float32"),
            ("add", (2, 48), (48,), "bfloat16")]


@pytest.mark.parametrize("op,sa,sb,dtype", EW_CASES, ids=[f"{c[0]}-{c[3]}-{len(c[1])}d" for c in EW_CASES])
def test_elementwise_vector_configs(op, sa, sb, dtype):
    backend_or_skip("opencl")
    from gpucg.half import numpy_dtype

    nd = numpy_dtype(dtype)
    a = (rng.standard_normal(sa) * 20).astype(nd)
    b = (rng.standard_normal(sb) * 20).astype(nd)
    if a.size > 10 and dtype.startswith("float"):
        a.ravel()[5], b.ravel()[1] = np.nan, np.inf
    impl = "ew_contiguous" if sa == sb else "ew_strided"
    vw = max(16 // a.dtype.itemsize, 16 // np.dtype(getattr(np, "bool_") if op == "less"
                                                      else nd).itemsize)
    want = np.asarray(getattr(gpucg.ops, op)(a, b, target="numpy"))
    for index in ("int32", "int64"):
        f = gpucg.compile(op, gpucg.tensor(sa, dtype), gpucg.tensor(sb, dtype), target="opencl",
                          impl=impl, config=dict(wg=64, items=2, vw=vw), index=index)
        assert [c.config["vw"] for c in f.selection.choices] == [vw, 1]
        assert f.plan(a, b).index == 0
        got = np.asarray(gpucg.to_host(f(a, b)))
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_elementwise_offset_views_take_the_scalar_config():
    cl = backend_or_skip("opencl") or None
    from gpucg.runtime import get_backend

    cl = get_backend("opencl")
    a = rng.standard_normal((3, 64)).astype(np.float32)
    b = rng.standard_normal((64,)).astype(np.float32)
    f = gpucg.compile("add", gpucg.tensor(a.shape), gpucg.tensor(b.shape), target=GPU,
                      records=False)
    assert [c.config["vw"] for c in f.selection.choices] == [4, 1]
    for sa, sb, index in ((0, 0, 0), (1, 0, 1), (0, 2, 1), (4, 4, 0)):
        av, bv = _view(cl, a, sa), _view(cl, b, sb)
        assert f.plan(av, bv).index == index, (sa, sb)
        np.testing.assert_array_equal(f(av, bv).get(), a + b)
    # rows not a multiple of vw: the scalar config alone
    g = gpucg.compile("add", gpucg.tensor((3, 66)), gpucg.tensor((66,)), target=GPU)
    assert [c.config["vw"] for c in g.selection.choices] == [1]


#: (op, dtypes): each dtype on every row kernel (cheap: one compile per config)
REDUCE = [("sum", ("float32", "float16", "int8")), ("argmin", ("float64",)), ("any", ("bool",)),
          ("max", ("float32",))]


@pytest.mark.parametrize("op,dtypes", REDUCE, ids=[r[0] for r in REDUCE])
def test_reduce_vector_configs(op, dtypes):
    backend_or_skip("opencl")
    plan = [((3, 64), "reduce_warp", dict(wg=64, lanes=32, unroll=2, two_pass=False)),
            ((5, 1040), "reduce_group", dict(wg=64, unroll=4, two_pass=False)),
            ((2, 40000), "reduce_split", dict(wg=64, unroll=2, two_pass=False, chunk_items=16,
                                              groups=8))]
    for dtype in dtypes:
        for shape, impl, config in plan + ([((0, 32), "reduce_group", plan[1][2])]
                                           if dtype == "float32" else []):
            x = (rng.standard_normal(shape) * 5).astype(dtype)
            if x.size and dtype.startswith("float"):
                x[-1, 3] = np.nan
            vw = 16 // x.dtype.itemsize
            index = "int64" if impl == "reduce_split" else "int32"  # 64-bit indexing too
            f, vws = _forced(op, [x], impl, dict(config, vw=vw), index=index, axis=1)
            assert vws == [vw, 1] and f.plan(x).index == 0, (op, dtype, impl)
            got = np.asarray(gpucg.to_host(f(x))).astype(np.float64)
            want = np.asarray(getattr(gpucg.ops, op)(x, axis=1, target="numpy")).astype(np.float64)
            tol = 1e-2 if dtype == "float16" else 1e-4
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True,
                                       err_msg=f"{op} {dtype} {impl}")


#: (op, dtype, row_loop values): the norms' cached kernels with 128-bit accesses
NORM = [("softmax", "float32", (1,)), ("log_softmax", "float16", (1,)),
        ("layer_norm", "float32", (1, 8)), ("layer_norm", "bfloat16", (8,)),
        ("rms_norm", "float64", (8,))]


@pytest.mark.parametrize("op,dtype,loops", NORM, ids=[f"{c[0]}-{c[1]}" for c in NORM])
def test_norm_vector_configs(op, dtype, loops):
    backend_or_skip("opencl")
    from gpucg.half import numpy_dtype

    plan = [((11, 200), "norm_warp", dict(wg=64, lanes=32, items=8)),
            ((9, 1032), "norm_group", dict(wg=256, items=16))]
    nd = numpy_dtype(dtype)
    for shape, impl, config in plan:
        x = (rng.standard_normal(shape) * 3).astype(nd)
        x[0, :3] = -np.inf if op in ("softmax", "log_softmax") else 1e4
        params = [p.astype(nd) for p in params_for(op, shape[1], "float32", rng)]
        vw = 16 // x.dtype.itemsize
        for row_loop in loops:
            f, vws = _forced(op, [x, *params], impl, dict(config, vw=vw, row_loop=row_loop),
                             index="int64" if impl == "norm_group" else "int32")
            assert vws == [vw, 1] and f.plan(x, *params).index == 0
            got = np.asarray(gpucg.to_host(f(x, *params)))
            if dtype == "bfloat16":  # check() knows NumPy's dtypes: compare in float32
                x, params, got = x.astype(np.float32), [p.astype(np.float32) for p in params], \
                    got.astype(np.float32)
                want = np.asarray(getattr(gpucg.ops, op)(x, *params, target="numpy"))
                np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2, equal_nan=True)
                continue
            check(op, got, x, params, tag=f"{impl} {dtype} row_loop={row_loop}")


def test_reduce_and_norm_offset_views_on_pocl():
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    cl = get_backend("opencl")
    x = rng.standard_normal((6, 256)).astype(np.float32)
    g = rng.uniform(0.5, 1.5, 256).astype(np.float32)
    s = gpucg.compile("sum", gpucg.tensor(x.shape), target=GPU, axis=1)
    r = gpucg.compile("rms_norm", gpucg.tensor(x.shape), gpucg.tensor(g.shape), target=GPU)
    for f in (s, r):
        assert [c.config["vw"] for c in f.selection.choices] == [4, 1]
    for off, index in ((0, 0), (1, 1), (2, 1), (4, 0)):
        xv = _view(cl, x, off)
        assert s.plan(xv).index == index
        np.testing.assert_allclose(np.asarray(gpucg.to_host(s(xv))), x.sum(axis=1), rtol=1e-5,
                                   atol=1e-4)
        assert r.plan(xv, _view(cl, g, 0)).index == index
        assert r.plan(x, _view(cl, g, off)).index == index
        check("rms_norm", np.asarray(gpucg.to_host(r(xv, g))), x, [g])


def test_cuda_launches_check_the_pointers(nvrtc_or_skip):
    """The CUDA launch stand-in: an aligned pointer runs the vw > 1 kernels (their sources move
    float4), a pointer 4 bytes off the vw = 1 ones."""
    cupy = StandInCupy("sm_90")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        calls = [("add", [(4, 256), (256,)], {}), ("sum", [(4, 256)], {"axis": 1}),
                 ("softmax", [(4, 256)], {}), ("layer_norm", [(4, 1024), (1024,), (1024,)], {})]
        for op, shapes, attrs in calls:
            f = gpucg.compile(op, *[gpucg.tensor(s) for s in shapes], target="cuda", **attrs)
            args = [cupy.empty(s, "float32") for s in shapes]
            big = cupy.empty((shapes[0][0] + 1,) + shapes[0][1:], "float32")
            for x, vector in ((big.view_at(0, shapes[0]), True), (big.view_at(4, shapes[0]), False)):
                f(x, *args[1:])
                assert ("float4" in cupy.launches[-1].source) == vector, (op, vector)


#: the longest row one work-group holds in registers (norm_group: 256 work-items x 16)
LONGEST_HELD_ROW = 4096


def _row_bytes(key: str) -> int:
    """One element of each row a traffic key's case reduces ("op|small i|impl"): rows * itemsize."""
    op, case, _ = key.split("|", 2)
    kind, i = case.split()
    c = gpucg.get_op(op).representative(kind)[int(i)]
    x = c.inputs[0]
    return int(np.prod(x.shape)) // x.shape[c.attrs.get("axis", -1)] * np.dtype(x.dtype).itemsize


def test_norm_traffic_figures():
    """The checked-in Oclgrind traffic of the norms (tests/resources/norm.json, regenerated
    with their vector configs): rows one warp or work-group holds at most 1.1x the compulsory
    bytes; rows split over work-groups and non-last axes at most 1.5x, every op (layer_norm's
    with one element a row more: its shift)."""
    figures = json.loads((Path(__file__).parent / "resources" / "norm.json").read_text())["traffic"]
    held = {k: v for k, v in figures.items() if "norm_warp" in k or "norm_group" in k}
    assert len(held) >= 8
    for key, f in held.items():
        assert f["ratio"] <= 1.1, (key, f)
    for key, f in figures.items():
        if key.startswith(("softmax", "log_softmax")) and "norm_cols" in key:
            assert f["ratio"] <= 1.5, (key, f)
    # rows split over work-groups and non-last axes, every op (issue 19): x read at most twice,
    # gamma and beta once, the chunks' statistics combined once
    spread = {k: v for k, v in figures.items() if "norm_split" in k or "norm_cols" in k}
    assert {(k.split("|")[0], k.split("|")[2].split(".")[0]) for k in spread} == {
        (op, impl) for op in ("softmax", "log_softmax", "layer_norm", "rms_norm")
        for impl in ("norm_split", "norm_cols")}
    for key, f in spread.items():
        # layer_norm's shifted sums read each row's first element once more, as the shift K
        # (templates/norm/_gather.j2): one element a row beyond the two passes
        shift = _row_bytes(key) if key.startswith("layer_norm") else 0
        assert f["loaded"] + f["stored"] <= 1.5 * f["compulsory"] + shift, (key, f, shift)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_gemv_reads_eight_at_a_time(dtype):
    """The small-M GEMM's 16-bit vector path (vw = 8, the GPU default) on PoCL against float64:
    rows of K a multiple of 8 (128-bit loads) and not (the scalar path), every m up to 16, a
    bias and relu epilogue, and an offset view, which takes vw = 1."""
    backend_or_skip("opencl")
    from gpucg.half import numpy_dtype
    from gpucg.runtime import get_backend

    cl, nd = get_backend("opencl"), numpy_dtype(dtype)
    for m, k, n in [(1, 64, 33), (5, 136, 70), (16, 40, 9), (3, 27, 20)]:
        x = rng.standard_normal((m, k)).astype(nd)
        w = rng.standard_normal((n, k)).astype(nd)
        b = rng.standard_normal(n).astype(nd)
        f = gpucg.compile("dense", *(gpucg.tensor(a.shape, dtype) for a in (x, w, b)), target=GPU,
                          impl="gemv", activation="relu")
        assert {c.config["vw"] for c in f.selection.choices} == {8, 1}
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        want = np.maximum(x64 @ w64.T + b.astype(np.float64), 0)
        tol = 1e-2 if dtype == "float16" else 6e-2
        for xs in (x, _view(cl, x, 2)):
            got = np.asarray(f(xs, w, b)).astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(k),
                                       err_msg=f"{dtype} {m}x{k}x{n}")


_HALF_GEMV = """
import json
import numpy as np
import gpucg
rng = np.random.default_rng(3)
err = []
for m, k, n in [(3, 40, 9), (16, 27, 5)]:
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.standard_normal((n, k)).astype(np.float16)
    f = gpucg.compile("dense", gpucg.tensor(x.shape, "float16"), gpucg.tensor(w.shape, "float16"),
                      target="opencl -device=gpu", impl="gemv")
    assert f.selection.choices[0].config["vw"] == 8
    want = x.astype(np.float64) @ w.astype(np.float64).T
    err.append(float(np.max(np.abs(np.asarray(f(x, w)).astype(np.float64) - want))))
print(json.dumps(err))
"""


def test_half_gemv_under_oclgrind(oclgrind_or_skip, tmp_path):
    """The 16-bit gemv's 8-wide path (K = 40) and its scalar path (K = 27) on Oclgrind: no
    out-of-bounds accesses, no races, and the products right."""
    done, reports = under_oclgrind(_HALF_GEMV, tmp_path)
    assert max(json.loads(done.stdout.strip().splitlines()[-1])) < 5e-2
    assert not reports, "\n\n".join(r.text for r in reports)
