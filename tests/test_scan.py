"""cumsum/cumprod against NumPy on every backend here (numpy, OpenCL on PoCL)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.op import get_op

OPS = {"cumsum": gpucg.ops.cumsum, "cumprod": gpucg.ops.cumprod}


def make(shape, dtype, op, rng):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if op == "cumprod":
        return rng.uniform(0.95, 1.05, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def reference(op, x, axis, dtype=None, exclusive=False):
    return get_op(op).reference(x, get_op(op).make_attrs(axis=axis, dtype=dtype, exclusive=exclusive))


def check(got, want, x, op):
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        # parallel scans add in another order: allow eps * (sum of magnitudes so far)
        eps = np.finfo(want.dtype).eps
        bound = np.cumsum(np.abs(x.astype(np.float64)).ravel()).max() if x.size else 0
        scale = max(1.0, bound) if op == "cumsum" else max(1.0, np.abs(want).max() if want.size else 1)
        np.testing.assert_allclose(got, want, rtol=64 * eps, atol=64 * eps * scale * max(1, x.size) ** 0.5)


CASES = [((10,), None), ((10,), 0), ((10,), -1), ((3, 5), 0), ((3, 5), 1), ((3, 5), None),
         ((2, 3, 4), 1), ((2, 3, 4), -3), ((5000,), 0), ((3, 5000), 1), ((70000,), 0),
         ((1, 1), 0), ((1,), 0), ((0,), 0), ((0, 4), 1), ((4, 0), 0), ((2, 40000), 0),
         ((3, 1000, 2), 1), ((), None)]


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("shape,axis", CASES)
def test_float32_cases(target, op, shape, axis):
    rng = np.random.default_rng(1)
    x = make(shape, "float32", op, rng)
    for exclusive in (False, True):
        got = OPS[op](x, axis=axis, exclusive=exclusive, target=target)
        check(got, reference(op, x, axis, exclusive=exclusive), x, op)


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_dtypes_and_default_out_dtype(target, dtype, op):
    rng = np.random.default_rng(2)
    x = make((7, 300), dtype, op, rng)
    got = OPS[op](x, axis=1, target=target)
    want = getattr(np, op)(x, axis=1)  # NumPy itself decides the default dtype
    assert got.dtype == want.dtype
    check(got, want, x, op)


@pytest.mark.parametrize("out", ["int32", "float64", np.float32])
def test_dtype_argument(target, out):
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    got = gpucg.ops.cumsum(x, axis=0, dtype=out, target=target)
    np.testing.assert_array_equal(got, np.cumsum(x, axis=0, dtype=out))
    assert got.dtype == np.dtype(out)


def test_integer_overflow_wraps_like_numpy(target):
    x = np.full(50, 7, np.int32)
    got = gpucg.ops.cumprod(x, dtype="int32", target=target)
    np.testing.assert_array_equal(got, np.cumprod(x, dtype=np.int32))


def test_non_contiguous_input(target):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    for x in (base[:, ::2], base.T, base[::-1]):
        for axis in (0, 1, None):
            np.testing.assert_allclose(gpucg.ops.cumsum(x, axis=axis, target=target),
                                       np.cumsum(x, axis=axis), rtol=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hypothesis_shapes_axes_dtypes(target, data):
    from conftest import capped

    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 17, 64, 129, 700, 4097]),
                                     min_size=ndim, max_size=ndim)))
    shape = capped(shape, 300_000)
    # a 0-d input scans as its one-element view with axis 0 or -1, as np.cumsum does
    axis = data.draw(st.one_of(st.none(), st.integers(-max(ndim, 1), max(ndim, 1) - 1)))
    dtype = data.draw(st.sampled_from(["bool", "int32", "int64", "float32", "float64"]))
    op = data.draw(st.sampled_from(["cumsum", "cumprod"]))
    exclusive = data.draw(st.booleans())
    x = make(shape, dtype, op, np.random.default_rng(len(shape)))
    got = OPS[op](x, axis=axis, exclusive=exclusive, target=target)
    check(got, reference(op, x, axis if ndim else None, exclusive=exclusive), x, op)


def test_every_opencl_implementation_and_the_wide_variants():
    """Force each implementation that applies (and its 64-bit-index kernels) on OpenCL."""
    from conftest import applicable, backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(3)
    ran = set()
    for device in ("gpu", "cpu"):  # both plevel orders
        target = f"opencl -device={device}"
        for shape, axis in [((3, 9000), 1), ((5, 300), 1), ((40, 3000), 0), ((2, 5000, 3), 1)]:
            x = rng.standard_normal(shape).astype(np.float32)
            t = gpucg.tensor(shape, "float32")
            for impl in applicable("cumsum", t, target=target, axis=axis):
                for index in ("int32", "int64"):
                    f = gpucg.compile("cumsum", t, axis=axis, target=target, impl=impl, index=index)
                    check(f(x), np.cumsum(x, axis=axis), x, "cumsum")
                ran.add(impl)
    assert ran == {"scan_rows", "scan_lookback", "scan_device", "scan_cols", "scan_cols_lookback",
                   "scan_chunked"}


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_all_candidates_agree(device):
    """Each implementation a symbolic compile may dispatch to gives NumPy's answer, on a shape
    its condition accepts (all five run)."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    n, m = gpucg.var("n"), gpucg.var("m")
    target = f"opencl -device={device}"
    typ = gpucg.tensor((n, m), "float32")
    names = [c.name for c in gpucg.explain("cumsum", typ, axis=1, target=target).candidates
             if c.verdict != "excluded"]
    assert len(names) == 5
    rng = np.random.default_rng(4)
    for name in names:
        f = gpucg.compile("cumsum", typ, axis=1, target=target, impl=name)
        for shape in [(33, 5000), (3, 100), (40000, 3)]:
            x = rng.standard_normal(shape).astype(np.float32)
            try:
                got = f(x)
            except gpucg.InputError as exc:  # the forced implementation's condition
                assert "the forced implementation" in str(exc)
                continue
            check(got, np.cumsum(x, axis=1), x, "cumsum")
            assert f.last_impl == name
            break
        else:
            raise AssertionError(f"{name} ran on none of the shapes")


def test_symbolic_compile_serves_many_sizes_without_recompiling(target):
    n = gpucg.var("n")
    f = gpucg.compile("cumsum", gpucg.tensor((n, 64), "float32"), axis=1, target=target)
    f(np.ones((2, 64), np.float32))  # compile once
    before = gpucg.stats()["compiles"]
    for rows in range(1, 21):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        check(f(x), np.cumsum(x, axis=1), x, "cumsum")
    assert gpucg.stats()["compiles"] == before


def test_eager_calls_compile_a_handful_not_one_per_length(target):
    gpucg.ops.cumsum(np.ones(5, np.float32), target=target)
    gpucg.ops.cumsum(np.ones(1, np.float32), target=target)
    before = gpucg.stats()["compiles"]
    for length in range(2, 22):
        x = np.arange(length, dtype=np.float32)
        np.testing.assert_array_equal(gpucg.ops.cumsum(x, target=target), np.cumsum(x))
    assert gpucg.stats()["compiles"] - before <= 2


def test_wide_index_is_chosen_by_the_dispatcher():
    n, m = gpucg.var("n"), gpucg.var("m")
    f = gpucg.compile("cumsum", gpucg.tensor((n, m), "float32"), axis=1, target="cuda")
    line = [ln for ln in f.dispatcher_source.splitlines() if "_wide =" in ln][0]
    expr = line.split("=", 1)[1]
    assert eval(expr, {"n": 2**16, "m": 2**15}) is True
    assert eval(expr, {"n": 2**16, "m": 2**14}) is False
    src = f.sources["scan_rows.cuda/scan@i64"]
    assert "const long long n" in src and "const int n" in f.sources["scan_rows.cuda/scan"]


def test_device_arrays_stay_on_device():
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    import pyopencl.array as cla

    from gpucg.runtime import get_backend

    be = get_backend("opencl")
    x = np.arange(100, dtype=np.float32)
    xd = cla.to_device(be.queue, x)
    y = gpucg.ops.cumsum(xd)
    assert isinstance(y, cla.Array)
    np.testing.assert_array_equal(y.get(), np.cumsum(x))
    with pytest.raises(gpucg.InputError, match="opencl array but the target is numpy"):
        gpucg.ops.cumsum(xd, target="numpy")


@pytest.mark.parametrize("kwargs,err,match", [
    ({"axis": 2}, gpucg.InputError, r"axis=2 is out of range .* allowed: -2..1"),
    ({"axis": -3}, gpucg.InputError, "out of range"),
    ({"axis": 1.0}, gpucg.AttrError, "axis=1.0 .* must be an int or None"),
    ({"axis": True}, gpucg.AttrError, "must be an int or None"),
    ({"exclusive": 1}, gpucg.AttrError, "exclusive=1 .* must be a bool"),
    ({"dtype": "bool"}, gpucg.DTypeError, "dtype='bool' is not supported; allowed: int32"),
    ({"dtype": "complex64"}, gpucg.DTypeError, "not supported"),
    ({"target": "tpu"}, gpucg.TargetError, "unknown kind 'tpu'"),
])
def test_bad_input(kwargs, err, match):
    with pytest.raises(err, match=match):
        gpucg.ops.cumsum(np.ones((2, 3), np.float32), **kwargs)


def test_bad_data():
    with pytest.raises(gpucg.InputError, match=r"data=\[1, 2\] \(list\) must be a numpy.ndarray"):
        gpucg.ops.cumsum([1, 2])
    assert gpucg.ops.cumsum(np.ones(3, np.float16), target="numpy").dtype == np.float16
    with pytest.raises(gpucg.DTypeError, match="data.dtype='complex128'"):
        gpucg.ops.cumsum(np.ones(3, np.complex128), target="numpy")
    # as np.cumsum: a 0-d input scans as its one-element view along axis 0 or -1, no other
    assert gpucg.ops.cumsum(np.ones((), np.float32), axis=0, target="numpy").tolist() == [1.0]
    with pytest.raises(gpucg.InputError, match="rank 0"):
        gpucg.ops.cumsum(np.ones((), np.float32), axis=1, target="numpy")


def test_type_relation_symbolic_flatten():
    n = gpucg.var("n")
    op = get_op("cumsum")
    (out,) = op.infer((gpucg.tensor((n, 4), "int32"),), op.make_attrs(axis=None))
    assert out.shape == (4 * n,) and out.dtype == "int64"


# -- the single-pass scan (decoupled look-back) ------------------------------------------------

def _lookback(typ, impl="scan_lookback", config=None, op="cumsum", **attrs):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    return gpucg.compile(op, typ, target="opencl", impl=impl, records=False, config=config,
                         **attrs)


#: (op, input dtype, output dtype or None, exclusive, reverse): every dtype, combine and flag
_LOOKBACK_CALLS = [("cumsum", "bool", None, False, False), ("cumprod", "int32", None, True, True),
                   ("cumsum", "int32", "int32", True, False), ("cumsum", "uint8", None, False, True),
                   ("cumprod", "int64", None, False, False), ("cumsum", "float32", None, True, True),
                   ("cumprod", "float32", None, False, True), ("cumsum", "float64", None, False, False),
                   ("cumsum", "float32", "float64", True, False)]


#: the calls CI runs on each look-back scan (a 1-byte, a 32-bit integer product with both
#: flags, a widening float sum); the others are the exhaustive tier (PoCL builds each in 5-25 s)
_LOOKBACK_CI = {0, 1, 8}


@pytest.mark.parametrize("impl", ["scan_lookback", "scan_cols_lookback"])
@pytest.mark.parametrize("op,dtype,out,exclusive,reverse", [
    c if i in _LOOKBACK_CI else pytest.param(*c, marks=pytest.mark.exhaustive)
    for i, c in enumerate(_LOOKBACK_CALLS)])
def test_lookback_every_dtype_reverse_and_exclusive(impl, op, dtype, out, exclusive, reverse):
    """The look-back scans forced, one symbolic compile a call: rows (columns) of length 0, 1,
    a tile and a bit, many tiles."""
    n = gpucg.var("n")
    rng = np.random.default_rng(5)
    rows = impl == "scan_lookback"
    f = _lookback(gpucg.tensor((3, n) if rows else (2, n, 5), dtype), impl=impl, op=op,
                  axis=1, dtype=out, exclusive=exclusive, reverse=reverse)
    for length in (0, 1, 2053, 9003) if rows else (0, 1, 65, 700):
        x = make((3, length) if rows else (2, length, 5), dtype, op, rng)
        attrs = get_op(op).make_attrs(axis=1, dtype=out, exclusive=exclusive, reverse=reverse)
        check(f(x), get_op(op).reference(x, attrs), x, op)
        assert f.last_impl == f"{impl}.opencl"


@pytest.mark.parametrize("index", ["int32", pytest.param("int64", marks=pytest.mark.exhaustive)])
def test_lookback_many_work_groups_at_once_on_pocl(index):
    """Tiles of 64 elements: a 1-D scan of 2^20 + 3 (16385 work-groups) and 6 rows of 70001,
    PoCL running the groups on all its threads at once, so the look-back spins on
    predecessors still running; the window walks back over many tiles of aggregates."""
    rng = np.random.default_rng(6)
    for shape, axis in (((1 << 20) + 3,), 0), ((6, 70001), 1):
        for config in ({"wg": 64, "items": 1, "vw": 1}, {"wg": 64, "items": 4, "vw": 4}):
            f = _lookback(gpucg.tensor(shape, "int32"), axis=axis, dtype="int32",
                          index=index, config=config)
            x = rng.integers(-3, 4, size=shape).astype(np.int32)
            np.testing.assert_array_equal(f(x), np.cumsum(x, axis=axis, dtype=np.int32))


def test_lookback_vectors_only_where_aligned():
    """float32 tiles read 4 at a time (vw=4) where x is 16-byte aligned and every row starts
    on a vector; an offset view, rows of an odd length or a reverse scan of one takes vw=1."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    import pyopencl.array as cla

    from gpucg.runtime import get_backend

    cl = get_backend("opencl")
    rng = np.random.default_rng(7)
    n = gpucg.var("n")
    for rows, reverse in ((1, False), (3, False), (1, True)):
        f = _lookback(gpucg.tensor((rows, n), "float32"), axis=1, reverse=reverse)
        assert [c.config["vw"] for c in f.selection.choices] == [4, 1]
        for length, start, vector in ((4096, 0, True), (4096, 1, False), (4099, 0, rows == 1 and not reverse)):
            x = rng.standard_normal((rows, length)).astype(np.float32)
            flat = np.zeros(x.size + 8, np.float32)
            flat[start:start + x.size] = x.ravel()
            xv = cla.to_device(cl.queue, flat)[start:start + x.size].reshape(x.shape)
            assert f.plan(xv).index == (0 if vector else 1), (rows, reverse, length, start)
            want = np.flip(np.cumsum(np.flip(x, 1), axis=1), 1) if reverse else np.cumsum(x, axis=1)
            check(f(xv).get(), want, x, "cumsum")


def test_lookback_kernels_on_the_gpu_path():
    """A GPU (plevels, Oclgrind's device) scans long rows and 1-D inputs with scan_lookback,
    short rows of many with scan_rows; the multi-pass scan_device is still forceable."""
    n, m = gpucg.var("n"), gpucg.var("m")
    sel = gpucg.explain("cumsum", gpucg.tensor((n, m), "float32"), axis=1, target="cuda")
    names = [c.name for c in sel.candidates]
    assert names[:2] == ["scan_rows.cuda", "scan_lookback.cuda"] and "scan_device.cuda" in names
    one = gpucg.explain("cumsum", gpucg.tensor((1 << 24,), "float32"), axis=0, target="cuda")
    assert one.choices[0].impl.name == "scan_lookback.cuda"
    assert dict(one.choices[0].config) == {"wg": 256, "items": 8, "vw": 4}


def test_single_pass_traffic_is_the_compulsory_bytes():
    """The checked-in Oclgrind figures (tests/test_oclgrind.py holds them to the simulator)
    of what a GPU selects for a 1-D scan of several tiles, long rows and long columns: the
    look-back scans, at most 1.1x the bytes of one read and one write, status included
    (the multi-pass scans they replace moved 1.51-1.58x on these cases); and every other
    scan figure too (columns of one chunk take no status: the (2, 7, 3) case moved 1.107x
    with its flags)."""
    import json
    from pathlib import Path

    figures = json.loads((Path(__file__).parent / "resources" / "scan.json").read_text())["traffic"]
    labels = {"1-D, several tiles": "scan_lookback", "long rows, reverse": "scan_lookback",
              "long columns": "scan_cols_lookback"}
    cases = get_op("cumsum").representative("small")
    for op in ("cumsum", "cumprod"):
        for i, case in enumerate(cases):
            if case.label in labels:
                assert f"{op}|small {i}|{labels[case.label]}.opencl" in figures, (op, case.label)
    assert len(figures) >= 2 * len(cases)
    for key, got in figures.items():
        # OpenCL's status pair is two 32-bit words, its flag cleared before a replacing
        # value and read again after it (codegen/memsync.py): 1.099x on the long columns
        # (CUDA's one 64-bit word moves less)
        assert got["loaded"] + got["stored"] <= 1.1 * got["compulsory"], (key, got)
