"""topk, sort and argsort against NumPy on every backend here (numpy, OpenCL on PoCL).

The reference is the op's own: a stable argsort of the row (reversed for descending), then
the first k. Ascending sort/argsort are also checked against NumPy's stable sort directly.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.op import get_op

DTYPES = ["float16", "float32", "float64", "int32", "int64"]


def make(shape, dtype, rng, ties=False):
    """Random data with the awkward values: NaN, +-inf, -0.0 beside 0.0, and ties."""
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        x = rng.integers(-5, 6, size=shape) if ties else rng.integers(info.min, info.max, size=shape,
                                                                       endpoint=True)
        x = np.asarray(x).astype(dtype)
        if x.size >= 4:
            flat = x.reshape(-1)
            flat[:2] = [info.min, info.max]
        return x
    x = (rng.integers(-4, 5, size=shape) / 2 if ties else rng.standard_normal(shape)).astype(dtype)
    flat = x.reshape(-1)
    if flat.size >= 12:
        pos = rng.choice(flat.size, 12, replace=False)
        flat[pos] = [np.nan, np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, -np.nan, 0.0, -0.0, 1.0, 1.0]
    return x


def reference(op, x, **attrs):
    o = get_op(op)
    return o.reference(x, o.make_attrs(**attrs))


def same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        # bit-exact: the same elements, -0.0 and NaN payloads included
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))


CASES = [  # (shape, axis, k): covers every GPU implementation and the edge shapes
    ((5, 100), -1, 3), ((3, 1000), 1, 10), ((2, 5000), -1, 200), ((1, 20000), 1, 300),
    ((4, 3000), -1, 0), ((2, 9000), -1, 0), ((7, 40), 1, 40), ((1, 100000), -1, 50),
    ((3, 1, 5), 1, 1), ((6, 7, 8), 0, 2), ((6, 7, 8), -2, 7), ((6, 7, 8), -3, 0), ((1,), 0, 1),
    ((17,), 0, 16), ((0, 10), 1, 3), ((4, 0), 1, 0), ((2, 3), 0, -1), ((33, 129), 1, 128),
    ((3, 4097), 1, 129), ((2, 300, 3), 1, 150)]


@pytest.mark.parametrize("shape,axis,k", CASES)
@pytest.mark.parametrize("is_ascend", [False, True])
def test_topk_cases(target, shape, axis, k, is_ascend):
    x = make(shape, "float32", np.random.default_rng(len(shape) + k))
    got = gpucg.ops.topk(x, k=k, axis=axis, is_ascend=is_ascend, target=target)
    same(got, reference("topk", x, k=k, axis=axis, is_ascend=is_ascend))


def exhaustive_case(params) -> bool:
    """The cases of default-tier tests that run with -m exhaustive only (conftest), on OpenCL:
    int64 indices out of keys other than float32 (the index dtype only changes the stores of
    the indices, and test_sort_and_argsort_equal_numpy_stable_sort writes int64 indices for
    every key dtype), and a non-last axis of (6, 300) for keys other than float32 and int64
    (the axis is the keys' own nowhere; every dtype sorts along the last one)."""
    if params.get("target") != "opencl" or params.get("dtype") in ("float32", None):
        return False
    return params.get("index_dtype") == "int64" or (
        params.get("shape") == (6, 300) and params.get("axis") == 0 and params["dtype"] != "int64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("ties", [False, True])
def test_topk_dtypes_ties_nan(target, dtype, index_dtype, ties):
    rng = np.random.default_rng(7)
    for shape, k in [((9, 700), 20), ((3, 9000), 300), ((5, 64), 0)]:
        x = make(shape, dtype, rng, ties)
        for asc in (False, True):
            got = gpucg.ops.topk(x, k=k, is_ascend=asc, dtype=index_dtype, target=target)
            same(got, reference("topk", x, k=k, is_ascend=asc, dtype=index_dtype))


@pytest.mark.parametrize("ret_type", ["values", "indices"])
def test_ret_type(target, ret_type):
    x = make((4, 50), "float64", np.random.default_rng(1))
    got = gpucg.ops.topk(x, k=5, ret_type=ret_type, target=target)
    same(got, reference("topk", x, k=5, ret_type=ret_type))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((6, 300), 1), ((6, 300), 0), ((2, 5000), -1), ((3, 4, 5), -2)])
def test_sort_and_argsort_equal_numpy_stable_sort(target, dtype, shape, axis):
    x = make(shape, dtype, np.random.default_rng(3), ties=True)
    same(gpucg.ops.sort(x, axis=axis, target=target), np.sort(x, axis=axis, kind="stable"))
    same(gpucg.ops.argsort(x, axis=axis, target=target),
         np.argsort(x, axis=axis, kind="stable").astype(np.int32))
    same(gpucg.ops.sort(x, axis=axis, is_ascend=False, target=target),
         reference("sort", x, axis=axis, is_ascend=False))
    same(gpucg.ops.argsort(x, axis=axis, is_ascend=False, dtype="int64", target=target),
         reference("argsort", x, axis=axis, is_ascend=False, dtype="int64"))


def test_reference_rules_by_hand():
    """The rules themselves, on a row small enough to check by eye."""
    x = np.array([1.0, np.nan, -0.0, 3.0, 0.0, 3.0, np.nan, -np.inf], np.float32)
    v, i = reference("topk", x, k=5)
    np.testing.assert_array_equal(i, [1, 6, 3, 5, 0])  # NaN first (index order), then the 3s
    v, i = reference("topk", x, k=4, is_ascend=True)
    np.testing.assert_array_equal(i, [7, 2, 4, 0])  # -0.0 and 0.0 tie: index order
    assert reference("argsort", x, is_ascend=False).tolist() == [1, 6, 3, 5, 0, 2, 4, 7]


def _hypothesis_case(target, data):
    from conftest import capped

    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 17, 64, 129, 257, 2100, 5000]),
                                     min_size=ndim, max_size=ndim)))
    shape = capped(shape, 200_000)
    axis = data.draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))
    n = shape[axis] if ndim else 1
    k = data.draw(st.one_of(st.just(0), st.integers(1, n)))
    dtype = data.draw(st.sampled_from(DTYPES))
    op = data.draw(st.sampled_from(["topk", "sort", "argsort"]))
    asc = data.draw(st.booleans())
    x = make(shape, dtype, np.random.default_rng(sum(shape)), ties=data.draw(st.booleans()))
    if ndim == 0:  # as NumPy: argsort sorts the one-element view, sort has no axis -1
        if op == "argsort":
            same(gpucg.ops.argsort(x, axis=axis, is_ascend=asc, target=target),
                 np.zeros(1, np.int32))
        else:
            with pytest.raises(gpucg.InputError, match="out of range for an input of rank 0"):
                getattr(gpucg.ops, op)(x, axis=axis, target=target)
        return
    if op == "topk":
        ret = data.draw(st.sampled_from(["both", "values", "indices"]))
        got = gpucg.ops.topk(x, k=k, axis=axis, ret_type=ret, is_ascend=asc, target=target)
        want = reference("topk", x, k=k, axis=axis, ret_type=ret, is_ascend=asc)
    else:
        got = getattr(gpucg.ops, op)(x, axis=axis, is_ascend=asc, target=target)
        want = reference(op, x, axis=axis, is_ascend=asc)
    same(got, want)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_hypothesis_numpy(data):
    _hypothesis_case("numpy", data)


# each new (dtype, k, direction) compiles kernels on PoCL (about a second each): fewer examples
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_hypothesis_opencl(data):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    _hypothesis_case("opencl", data)


def test_non_contiguous_input(target):
    base = make((40, 60), "float32", np.random.default_rng(5))
    for x in (base[:, ::2], base.T, base[::-1]):
        for axis in (0, 1):
            same(gpucg.ops.topk(x, k=7, axis=axis, target=target), reference("topk", x, k=7, axis=axis))


# -- every implementation, forced -------------------------------------------------------------

@pytest.mark.parametrize("device", ["gpu", "cpu", pytest.param("gpu, both directions",
                                                               marks=pytest.mark.exhaustive)])
def test_every_opencl_implementation_and_the_wide_variants(device):
    """Each implementation that applies, forced on OpenCL: on the GPU configs with 32-bit
    indexing and with 64-bit on the first shape each takes, the direction alternating over the
    shapes (both directions and both widths on each with -m exhaustive); the CPU configs (other
    work-group shapes) once each, as the index width and direction change the same lines of
    code on either."""
    from conftest import applicable, backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(11)
    gpu, both = device.startswith("gpu"), device.endswith("directions")
    target = f"opencl -device={device.split(',')[0]}"
    ran, wide = set(), set()
    for i, (shape, k, dtype) in enumerate([
            ((3, 40), 5, "float32"), ((2, 3000), 200, "float64"), ((1, 20000), 300, "float16"),
            ((5, 1000), 0, "int64"), ((2, 9000), 100, "int32"), ((2, 9000), 1000, "float32")]):
        x = make(shape, dtype, rng, ties=True)
        t = gpucg.tensor(shape, dtype)
        for asc in (False, True) if both else (gpu and bool(i % 2),):
            for impl in applicable("topk", t, k=k, is_ascend=asc, target=target):
                widths = ("int32", "int64") if both or (gpu and impl not in wide) else ("int32",)
                for index in widths:
                    f = gpucg.compile("topk", t, k=k, is_ascend=asc, target=target, impl=impl,
                                      index=index)
                    same(f(x), reference("topk", x, k=k, is_ascend=asc))
                ran.add(impl)
                wide.update([impl] if "int64" in widths else [])
    assert ran == {"topk_warp", "topk_group", "topk_radix", "sort_bitonic", "sort_merge"}
    assert wide == (ran if gpu else set())


@pytest.mark.parametrize("impl", ["sort_bitonic", "sort_merge"])
def test_block_sorts_run_to_their_rows_span(impl):
    """A block sorts only its first span pairs (its length rounded up to a power of two):
    rows of every length near a power of two, and sort_merge's last, partial blocks, against
    NumPy's stable argsort, with ties and the special values."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    rng = np.random.default_rng(12)
    lengths = [1, 2, 3, 4, 5, 63, 64, 65, 1023, 2049, 4095, 4096]
    if impl == "sort_merge":
        lengths += [4097, 4096 + 63, 3 * 4096 + 2]
    for n in lengths:
        for ties in (False, True):
            x = make((3, n), "float32", rng, ties=ties)
            f = gpucg.compile("argsort", gpucg.tensor(x.shape, "float32"),
                              target="opencl -device=gpu", impl=impl)
            same(f(x), reference("argsort", x))


# -- selection and dispatch -------------------------------------------------------------------

@pytest.mark.parametrize("shape,k,want", [
    ((4096, 1024), 8, "topk_warp"),      # small k: lists in registers, warp shuffle merge
    ((1, 1 << 24), 10, "topk_warp"),     # one long row: split over warps, then merged
    ((4096, 1024), 100, "sort_bitonic"),  # 16 < k on short rows: no spilling lists on a GPU
    ((1, 1 << 24), 100, "topk_radix"),   # 16 < k on a long row: the radix select
    ((64, 65536), 17, "topk_radix"),
    ((1, 1 << 24), 1000, "topk_radix"),  # large k on a long row
    ((256, 262144), 256, "topk_radix"),
    ((16, 3000), 500, "topk_radix"),     # few rows: radix even on shorter rows
    ((4096, 1024), 500, "sort_bitonic"),  # many short rows: sort each in one work-group
    ((64, 4096), 4096, "sort_bitonic"),  # a full sort of rows that fit
    ((64, 20000), 0, "sort_merge"),      # rows longer than a block
    ((8, 100), 100, "sort_bitonic"),     # k == n
    ((8, 10), 8, "topk_warp"),           # n < 2K: a warp's few shuffles, not a sort
    ((8, 20), 20, "sort_bitonic"),       # k > 16, n < 2K: group selection would not pay
])
def test_selection_by_shape(shape, k, want):
    sel = gpucg.explain("topk", gpucg.tensor(shape, "float32"), k=k, target="cuda")
    # (topk_warp's configs differ by the data's alignment, checked at run time)
    assert {c.impl.name for c in sel.choices} == {f"{want}.cuda"}, str(sel)


def test_sort_selection_and_64bit_block():
    for dtype, n, want in [("float32", 4096, "sort_bitonic"), ("float64", 4096, "sort_merge"),
                           ("float64", 2048, "sort_bitonic"), ("int32", 4097, "sort_merge")]:
        sel = gpucg.explain("argsort", gpucg.tensor((3, n), dtype), target="cuda")
        assert sel.choices[0].impl.name == f"{want}.cuda", (dtype, n, str(sel))


def test_symbolic_compile_dispatches_at_run_time(target):
    m, n = gpucg.var("m"), gpucg.var("n")
    tgt = target if target in ("numpy", "cuda") else "opencl -device=gpu"
    f = gpucg.compile("topk", gpucg.tensor((m, n), "float32"), k=300, target=tgt)
    if target == "numpy":
        assert not f.selection.dynamic
    else:
        assert f.selection.dynamic
        names = [c.impl.name for c in f.selection.choices]
        assert names == [f"{i}.{tgt.split()[0]}" for i in
                         ("topk_radix", "sort_bitonic", "sort_radix", "sort_merge")]
        assert "if n >= 2048 and (n >= 8192 or m <= 32):" in f.dispatcher_source
        assert "if n < 300:" in f.dispatcher_source  # the k <= n constraint
    rng = np.random.default_rng(2)
    compiles = None
    for shape, want in [((3, 9000), "topk_radix"), ((40, 3000), "sort_bitonic"),
                        ((8, 3000), "topk_radix"), ((40, 5000), "sort_merge"), ((2, 300), "sort_bitonic")]:
        x = make(shape, "float32", rng)
        same(f(x), reference("topk", x, k=300))
        if target != "numpy":
            assert f.last_impl == f"{want}.{tgt.split()[0]}", shape
        if compiles is None:
            compiles = gpucg.stats()["compiles"]
    with pytest.raises(gpucg.InputError, match=r"k=300 is larger than the length 200 of axis -1"):
        f(np.ones((2, 200), np.float32))


def test_eager_calls_share_compiled_ops(target):
    rng = np.random.default_rng(9)
    gpucg.ops.topk(make((3, 50), "float32", rng), k=4, target=target)
    before = gpucg.stats()["compiles"]
    for n in range(20, 40):
        x = make((3, n), "float32", rng)
        same(gpucg.ops.topk(x, k=4, target=target), reference("topk", x, k=4))
    assert gpucg.stats()["compiles"] - before <= 4


def test_device_arrays_stay_on_device():
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    import pyopencl.array as cla

    from gpucg.runtime import get_backend

    be = get_backend("opencl")
    x = make((5, 300), "float32", np.random.default_rng(0))
    v, i = gpucg.ops.topk(cla.to_device(be.queue, x), k=9)
    assert isinstance(v, cla.Array) and isinstance(i, cla.Array)
    same((v.get(), i.get()), reference("topk", x, k=9))


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,err,match", [
    ({"k": 11}, gpucg.InputError, r"k=11 is larger than the length 10 of axis -1 \(data.shape\[1\]\)"),
    ({"k": 2, "axis": 0}, gpucg.InputError, r"k=2 is larger than the length 1 of axis 0"),
    ({"ret_type": "both_"}, gpucg.AttrError, r"ret_type='both_' \(str\) is not allowed; allowed: 'both', 'values', 'indices'"),
    ({"dtype": "float32"}, gpucg.DTypeError, r"dtype.*float32.*allowed: int32, int64"),
    ({"axis": 2}, gpucg.InputError, r"axis=2 is out of range for an input of rank 2; allowed: -2..1"),
    ({"axis": -3}, gpucg.InputError, r"axis=-3 is out of range"),
    ({"k": 1.5}, gpucg.AttrError, r"k=1.5 .*must be an int"),
    ({"is_ascend": "yes"}, gpucg.AttrError, r"is_ascend='yes' .*must be a bool"),
])
def test_bad_attributes(target, kwargs, err, match):
    with pytest.raises(err, match=match):
        gpucg.ops.topk(np.ones((1, 10), np.float32), target=target, **kwargs)


def test_bad_attributes_at_compile_time():
    with pytest.raises(gpucg.InputError, match=r"k=11 is larger than the length 10"):
        gpucg.compile("topk", gpucg.tensor((4, 10), "float32"), k=11, target="cuda")


@pytest.mark.parametrize("dtype", ["bool", "complex64"])  # every integer width is supported
def test_unsupported_input_dtype(target, dtype):
    with pytest.raises(gpucg.DTypeError, match=r"(not supported|allowed)"):
        gpucg.ops.sort(np.ones(4, dtype), target=target)


def test_zero_size_axis(target):
    x = np.ones((3, 0), np.float64)
    v, i = gpucg.ops.topk(x, k=0, target=target)
    assert v.shape == (3, 0) and v.dtype == np.float64 and i.shape == (3, 0) and i.dtype == np.int32
    assert gpucg.ops.argsort(x, dtype="int64", target=target).dtype == np.int64
    with pytest.raises(gpucg.InputError, match=r"k=1 is larger than the length 0 of axis -1"):
        gpucg.ops.topk(x, k=1, target=target)
