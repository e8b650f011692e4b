"""Reductions against NumPy on every backend here (numpy, OpenCL on PoCL): result dtypes, axes,
keepdims, NaN and ties, empty reductions, every implementation forced, symbolic dispatch."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.op import get_op

OPS = ["sum", "mean", "prod", "max", "min", "argmax", "argmin", "all", "any"]
ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64"]


def make(shape, dtype, rng, op="sum"):
    """Data of a dtype: small integers (ties), the extremes of each integer type, and floats
    that keep products near 1."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = np.asarray(rng.integers(0 if info.min == 0 else -3, 4, size=shape)).astype(dtype)
        flat = x.reshape(-1)
        if flat.size >= 4 and op not in ("sum", "mean", "prod"):
            flat[:2] = [info.min, info.max]
        return x
    if op == "prod":
        return np.asarray(rng.uniform(0.9, 1.1, size=shape)).astype(dtype)
    return np.asarray(rng.standard_normal(shape)).astype(dtype)


def reference(op, x, **attrs):
    """NumPy's answer; float16 through float32 (the kernels reduce float16 in float32, NumPy
    in float16)."""
    o = get_op(op)
    if x.dtype == np.float16:
        want = o.reference(x.astype(np.float32), o.make_attrs(**attrs))
        return want.astype(np.float16) if want.dtype == np.float32 else want
    return o.reference(x, o.make_attrs(**attrs))


def check(got, want, x, tag=""):
    assert isinstance(got, np.ndarray), tag
    assert got.shape == want.shape and got.dtype == want.dtype, \
        (tag, got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind == "f":
        # a tree adds in another order than NumPy's pairwise sum: eps * sqrt(n) * sum |x|
        eps = np.finfo(want.dtype).eps
        scale = float(np.abs(x.astype(np.float64)).sum()) if x.size else 1.0
        np.testing.assert_allclose(got, want, rtol=8 * eps,
                                   atol=8 * eps * max(1.0, scale) * max(1, x.size) ** -0.5,
                                   equal_nan=True, err_msg=tag)
    else:
        np.testing.assert_array_equal(got, want, err_msg=tag)


CASES = [((7,), None, False), ((7,), 0, True), ((3, 5), 1, False), ((3, 5), -2, True),
         ((3, 5), None, True), ((3, 5), (0, 1), False), ((2, 3, 4), (0, 2), False),
         ((2, 3, 4), (-1, 0), True), ((2, 3, 4), (), False), ((4, 1, 5), (0, 2), False),
         ((2, 300, 3), 1, False), ((3, 2100), -1, False), ((0, 4), 1, False), ((), None, False)]
#: what OpenCL runs too (each new kernel costs PoCL a second to compile): the host target
#: checks the semantics on every case, OpenCL the kernels' view of them
DEVICE_CASES = [CASES[i] for i in (4, 6, 8, 12, 13)]
DEVICE_OPS = ["sum", "argmax", "all"]


@pytest.mark.parametrize("op", OPS)
def test_axes_keepdims_and_shapes(target, op):
    if target != "numpy" and op not in DEVICE_OPS:
        pytest.skip("the host target covers this operator's axes; OpenCL runs sum, argmax, all")
    rng = np.random.default_rng(1)
    for shape, axis, keepdims in (CASES if target == "numpy" else DEVICE_CASES):
        if op in ("argmax", "argmin") and isinstance(axis, tuple):
            continue
        x = make(shape, "float32", rng, op)
        got = getattr(gpucg.ops, op)(x, axis=axis, keepdims=keepdims, target=target)
        check(got, reference(op, x, axis=axis, keepdims=keepdims), x, f"{op} {shape} {axis}")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_numpy_result_dtypes(target, dtype):
    """sum/prod widen to int64/uint64, mean gives float64 for integers; every op on every
    dtype equals NumPy's answer (OpenCL: sum and argmin on the dtypes that change the code)."""
    if target != "numpy" and dtype not in ("bool", "int8", "uint64", "float16", "float64"):
        pytest.skip("OpenCL runs the dtypes that change the kernels' code")
    rng = np.random.default_rng(2)
    for op in OPS if target == "numpy" else ["sum", "argmin"]:
        x = make((5, 37), dtype, rng, op)
        check(getattr(gpucg.ops, op)(x, axis=1, target=target), reference(op, x, axis=1), x, op)
    x = make((5, 37), dtype, rng)
    assert gpucg.ops.sum(x, axis=1, target=target).dtype == np.sum(x).dtype
    if dtype != "float16":  # NumPy accumulates float16 in float16; gpucg in float32
        assert gpucg.ops.mean(x, axis=0, target="numpy").dtype == np.mean(x, axis=0).dtype


def test_nan_ties_and_infinities(target):
    nan, inf = np.nan, np.inf
    x = np.array([[1, nan, 3, nan], [2, 2, 1, 0], [-inf, -inf, -inf, -inf], [inf, 1, inf, 0],
                  [0, -0.0, 0, -1]], np.float32)
    for op in OPS if target == "numpy" else ["max", "argmax", "argmin", "sum", "any"]:
        for axis in (0, 1, None) if target == "numpy" else (0, 1):
            check(getattr(gpucg.ops, op)(x, axis=axis, target=target),
                  reference(op, x, axis=axis), x, f"{op} axis={axis}")
    assert gpucg.ops.argmax(x, axis=1, target=target).tolist() == [1, 0, 0, 0, 0]
    assert gpucg.ops.argmin(x, axis=1, target=target).tolist() == [1, 3, 0, 3, 3]


def test_unsigned_extremes(target):
    u = np.array([[2**64 - 1, 2**63 + 5, 3], [1, 2**63, 2**63]], np.uint64)
    for op in ("max", "min", "argmax", "argmin", "sum", "prod") if target == "numpy" \
            else ("max", "argmin"):
        check(getattr(gpucg.ops, op)(u, axis=1, target=target), reference(op, u, axis=1), u, op)


def test_empty_reductions(target):
    z = np.zeros((0, 3), np.float32)
    for op in ("sum", "prod", "mean", "all", "any") if target == "numpy" else ("sum", "mean"):
        check(getattr(gpucg.ops, op)(z, axis=0, target=target), reference(op, z, axis=0), z, op)
    assert np.isnan(gpucg.ops.mean(z, axis=0, target=target)).all()
    assert gpucg.ops.prod(z, axis=0, target="numpy").tolist() == [1, 1, 1]
    assert gpucg.ops.max(z, axis=1, target=target).shape == (0,)  # nothing reduced, no error
    for op in ("max", "min", "argmax", "argmin"):
        with pytest.raises(gpucg.InputError, match=rf"{op}: axis=0 reduces 0 elements: a "
                                                   "zero-size reduction has no"):
            getattr(gpucg.ops, op)(z, axis=0, target=target)
    with pytest.raises(gpucg.InputError, match="reduces 0 elements"):
        gpucg.ops.max(np.zeros((0,), np.float32), target=target)


def _forced(op, x, axis, impl, index="int32", target="opencl -device=gpu"):
    f = gpucg.compile(op, gpucg.tensor(x.shape, x.dtype.name), axis=axis, target=target,
                      impl=impl, index=index)
    got = f(x)
    assert f.last_impl.startswith(impl)
    return got


def test_every_implementation_forced():
    """Each implementation, forced, on shapes its condition accepts: rows short and long,
    columns (split down the columns too), one to three separate runs of axes; 64-bit
    indexing where argmax's indices travel through partial results."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(3)
    plan = {"reduce_warp": [((9, 100), 1)], "reduce_group": [((5, 3001), 1)],
            "reduce_split": [((3, 70001), 1)],
            "reduce_cols": [((5000, 7), 0), ((3, 40, 37), 1), ((4, 9), 1)],
            "reduce_passes": [((6, 5, 7), (0, 2)), ((2, 3, 4, 5, 6), (0, 2, 4)), ((5, 6), 1)]}
    ran = set()
    for op, impls in (("argmax", plan), ("mean", ["reduce_split", "reduce_cols", "reduce_passes"]),
                      ("all", ["reduce_passes"])):
        for impl in impls:
            for shape, axis in plan[impl]:
                if op == "argmax" and isinstance(axis, tuple):
                    continue
                x = make(shape, "float32", rng, op)
                wide = op == "argmax" and impl in ("reduce_split", "reduce_cols")
                for index in ("int32", "int64") if wide else ("int32",):
                    check(_forced(op, x, axis, impl, index), reference(op, x, axis=axis), x,
                          f"{op} {impl} {shape} {index}")
                ran.add(impl)
    assert ran == set(plan)


def test_a_cpu_device_runs_its_own_defaults():
    """On an OpenCL CPU device (PoCL) the kernels run with one work-item a row or column and
    argmax takes each block's maximum, then searches for its index where the block wins."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(4)
    for op, shape, axis in [("argmax", (5, 3001), 1), ("sum", (700, 9), 0),
                            ("argmin", (2, 70001), 1), ("max", (6, 5, 7), (0, 2))]:
        x = make(shape, "float32", rng, op)
        f = gpucg.compile(op, gpucg.tensor(x.shape, "float32"), axis=axis,
                          target="opencl -device=cpu")
        check(f(x), reference(op, x, axis=axis), x, f"{op} {f.last_impl}")
    x = rng.standard_normal((2, 5000)).astype(np.float32)
    x[0, 17] = x[0, 4000] = 50.0  # ties across blocks: the first index
    x[1, 3000] = x[1, 3001] = np.nan  # the first NaN, in a later block
    assert _forced("argmax", x, 1, "reduce_group", target="opencl -device=cpu").tolist() == \
        [17, 3000]
    for shape in [(9, 16400), (2, 70001)]:  # a row a work-group, and rows split in chunks
        x = rng.standard_normal(shape).astype(np.float32)
        check(_forced("sum", x, 1, "reduce_split", target="opencl -device=cpu"), np.sum(x, 1), x)


def test_row_length_decides_at_run_time():
    """A symbolic row length leaves the choice to the dispatcher: a warp for short rows, a
    split for few long rows, a work-group otherwise; a non-last axis reads columns."""
    m, n = gpucg.var("m"), gpucg.var("n")
    rows = gpucg.explain("sum", gpucg.tensor((m, n), "float32"), axis=1, target="cuda")
    assert rows.dynamic
    # each row kernel twice: its 128-bit config where the row and address are aligned, else vw=1
    assert [(c.impl.name, c.config["vw"]) for c in rows.choices] == [
        ("reduce_warp.cuda", 4), ("reduce_warp.cuda", 1), ("reduce_split.cuda", 4),
        ("reduce_split.cuda", 1), ("reduce_group.cuda", 4), ("reduce_group.cuda", 1)]
    assert str(rows.choices[1].condition) == "n <= 512"
    assert str(rows.choices[0].condition) == "(_align0 >= 16) & (n <= 512) & Eq(Mod(n, 4), 0)"
    cols = gpucg.explain("sum", gpucg.tensor((m, n), "float32"), axis=0, target="cuda")
    assert cols.choices[-1].impl.name == "reduce_cols.cuda"
    fixed = gpucg.explain("argmax", gpucg.tensor((4096, 32000), "float32"), axis=1, target="cuda")
    # fixed sizes: only the address's alignment is left to the run (the 128-bit config or vw=1)
    assert [c.impl.name for c in fixed.choices] == ["reduce_group.cuda"] * 2
    f = gpucg.compile("max", gpucg.tensor((m, n), "float32"), axis=1, target="numpy")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert f(x).tolist() == [3, 7, 11]


def test_symbolic_compile_picks_per_call(target):
    m, n = gpucg.var("m"), gpucg.var("n")
    f = gpucg.compile("sum", gpucg.tensor((m, n), "float32"), axis=1,
                      target=target if target in ("numpy", "cuda") else "opencl -device=gpu")
    rng = np.random.default_rng(5)
    for shape in [(7, 100), (3, 20000), (2000, 600)]:
        x = rng.standard_normal(shape).astype(np.float32)
        check(f(x), np.sum(x, axis=1), x, str(shape))


def _hypothesis_case(target, data, dtypes):
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 7, 33, 257, 600]),
                                     min_size=ndim, max_size=ndim)
                            .filter(lambda s: np.prod(s) <= 100_000)))
    op = data.draw(st.sampled_from(OPS))
    if op in ("argmax", "argmin"):
        # a 0-d input also takes axis 0 and -1 here, as np.argmax's does
        axis = data.draw(st.one_of(st.none(), st.integers(-max(ndim, 1), max(ndim, 1) - 1)))
    else:
        axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1) if ndim else st.none(),
                                   st.sets(st.integers(0, ndim - 1)).map(tuple) if ndim
                                   else st.none()))
    keepdims = data.draw(st.booleans())
    dtype = data.draw(st.sampled_from(dtypes))
    x = make(shape, dtype, np.random.default_rng(ndim), op)
    got = getattr(gpucg.ops, op)(x, axis=axis, keepdims=keepdims, target=target)
    want = reference(op, x, axis=axis if ndim else None, keepdims=keepdims)
    check(got, want, x, f"{op} {shape} {axis}")


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_hypothesis_numpy(data):
    _hypothesis_case("numpy", data, ALL_DTYPES)


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_hypothesis_opencl(data):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    _hypothesis_case("opencl", data, ["float32", "int32"])


@pytest.mark.parametrize("op,kwargs,err,match", [
    ("sum", {"axis": (0, 0)}, gpucg.InputError, r"axis=\(0, 0\) names axis 0 twice"),
    ("sum", {"axis": (1, -1)}, gpucg.InputError, "names axis 1 twice"),
    ("mean", {"axis": 2}, gpucg.InputError, r"axis=2 is out of range .* allowed: -2..1"),
    ("max", {"axis": (0, 5)}, gpucg.InputError, "out of range"),
    ("sum", {"axis": 1.0}, gpucg.AttrError, "must be None, an int or a tuple of ints"),
    ("argmax", {"axis": (0, 1)}, gpucg.AttrError, "must be None or an int"),
    ("any", {"keepdims": "yes"}, gpucg.AttrError, "keepdims='yes' .* must be a bool"),
])
def test_bad_input(op, kwargs, err, match):
    with pytest.raises(err, match=match):
        getattr(gpucg.ops, op)(np.ones((2, 3), np.float32), target="numpy", **kwargs)
    with pytest.raises(gpucg.AttrError, match="unknown attribute 'dtype'"):
        gpucg.compile("sum", gpucg.tensor((2, 3), "float32"), dtype="int8", target="numpy")


def test_zero_d(target):
    """0-d inputs as NumPy takes them: every reduction reduces nothing (axis None, or 0 and -1
    for argmax and argmin), an axis np.sum rejects is an InputError naming the rank; scans
    and argsort see the one-element view, sort and softmax have no axis to work along."""
    x = np.array(-2.5, np.float32)
    for op in OPS:
        check(getattr(gpucg.ops, op)(x, target=target), reference(op, x), x, op)
    for axis in (0, -1):
        assert gpucg.ops.argmin(x, axis=axis, target=target).shape == ()
        np.testing.assert_array_equal(gpucg.ops.cumsum(x, axis=axis, target=target), [-2.5])
    np.testing.assert_array_equal(gpucg.ops.argsort(x, target=target), [0])
    with pytest.raises(gpucg.InputError, match=r"sum: axis=0 is out of range for an input of "
                                               r"rank 0; allowed: none \(the input is 0-d"):
        gpucg.ops.sum(x, axis=0, target=target)
    for op in ("sort", "softmax"):
        with pytest.raises(gpucg.InputError, match=r"axis=-1 is out of range for an input of "
                                                   "rank 0"):
            getattr(gpucg.ops, op)(x, target=target)


def test_bad_dtype_names_the_allowed():
    with pytest.raises(gpucg.DTypeError, match="x.dtype='complex64'"):
        gpucg.ops.sum(np.ones(3, np.complex64), target="numpy")


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """Every reduction's CUDA kernels are rendered here, and the session's NVRTC check
    compiles them: each op over columns (the four one-run implementations), the passes, and
    the dtypes that change the code (float16 storage, bool, 8- and 64-bit integers), 64-bit
    indexing where indices travel through partial results."""
    m, n = gpucg.var("m"), gpucg.var("n")
    keys = set()
    for op in OPS:
        f = gpucg.compile(op, gpucg.tensor((m, n), "float32"), axis=0, target="cuda",
                          index="int32")
        keys |= set(f.sources)
        for dtype in ("float16", "bool", "int8", "uint64") if op in ("sum", "argmax") else ():
            f = gpucg.compile(op, gpucg.tensor((m, n), dtype), axis=1, target="cuda",
                              impl="reduce_group", index="int32")
            keys |= set(f.sources)
    f = gpucg.compile("mean", gpucg.tensor((m, 3, n, 2, 4), "float16"), axis=(0, 2, 4),
                      target="cuda", index="int32")
    keys |= set(f.sources)
    f = gpucg.compile("argmax", gpucg.tensor((m, n), "float32"), axis=0, target="cuda",
                      impl="reduce_cols", index="int64")
    keys |= set(f.sources)
    assert {k.split(".")[0] for k in keys} == {"reduce_warp", "reduce_split", "reduce_group",
                                               "reduce_cols", "reduce_passes"}
    assert any(k.endswith("@i64") for k in keys)


def test_explain_on_the_command_line_shows_the_row_length_dispatch(capsys):
    from gpucg.cli import main

    assert main(["explain", "sum", "--input", "m,n:float32", "--attr", "axis=1",
                 "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "dispatch at run time" in out and "reduce_warp.cuda" in out and "n <= 512" in out
    assert main(["explain", "mean", "--input", "m,3,n:float32", "--attr", "axis=[0, 2]",
                 "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "reduce_passes.cuda" in out and "selected" in out and "separate runs" in out


def test_bench_reduce_quick(capsys):
    """The benchmark runs (not a speed test): every row checked, GB/s, the goals' verdicts."""
    from gpucg.cli import main

    assert main(["bench", "reduce", "--quick", "--repeat", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert "np.sum" in out and "np.argmax" in out and "GB/s" in out and "DIFFERS" not in out
    assert "reduce_cols" in out and '"goals"' in out
