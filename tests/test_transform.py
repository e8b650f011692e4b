"""The transform family (concatenate, split, strided_slice, take, flatten, squeeze,
expand_dims) against NumPy on every backend here: every implementation forced, both index
widths, edge shapes (0-size axes, size 1, odd sizes, rank 0 where NumPy allows it), every axis
including negative ones, every dtype, hypothesis-drawn calls and each bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.half import numpy_dtype
from conftest import applicable, backend_or_skip

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64"]
#: the dtypes whose sweeps also force every implementation at both index widths
FORCED = ("float16", "uint64")
INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def make(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    dt = numpy_dtype(dtype)  # bfloat16 through ml_dtypes
    if dt.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def same(got, want, what=""):
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype)
        np.testing.assert_array_equal(g, w, err_msg=str(what))


def check(op, arrays, want, target, forced=True, **attrs):
    """The eager call, then (``forced``) every implementation forced with both index widths,
    against ``want`` (NumPy's own answer). The dtype sweeps run the eager call only: each
    forced compile is a PoCL compile."""
    same(getattr(gpucg.ops, op)(*arrays, target=target, **attrs), want, (op, attrs, "eager"))
    if not forced:
        return
    if op == "concatenate":
        arrays = tuple(arrays[0])
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in arrays]
    gattrs = {("indices_or_sections" if k == "sections" else k): v for k, v in attrs.items()}
    impls = applicable(op, *types, target=target, **gattrs)
    assert impls
    for impl in impls:
        for index in ("int32", "int64"):
            f = gpucg.compile(op, *types, target=target, impl=impl, index=index, **gattrs)
            same(f(*arrays), want, (op, attrs, impl, index))


# -- concatenate and split --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_dtypes(target, dtype):
    a, b = make((3, 4, 5), dtype, 1), make((3, 2, 5), dtype, 2)
    check("concatenate", ([a, b],), np.concatenate([a, b], axis=1), target, dtype in FORCED, axis=1)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concatenate_axes_and_edges(target, axis):
    base = (4, 3, 5)
    shapes = []
    for extra in (2, 0, 1, 7):  # a 0-size piece among them
        s = list(base)
        s[axis] = extra
        shapes.append(tuple(s))
    arrays = [make(s, "float32", i) for i, s in enumerate(shapes)]
    check("concatenate", (arrays,), np.concatenate(arrays, axis=axis), target, axis=axis)
    one = [make((1, 1, 1), "int32")]
    check("concatenate", (one,), np.concatenate(one, axis=axis), target, axis=axis)
    zero = [make((0, 3), "int16"), make((0, 5), "int16")]
    check("concatenate", (zero,), np.concatenate(zero, axis=-1), target, axis=-1)


def test_concatenate_symbolic_sizes(target):
    n = gpucg.var("n")
    f = gpucg.compile("concatenate", gpucg.tensor((n, 3)), gpucg.tensor((n, 5)), axis=1,
                      target=target)
    for rows in (1, 7, 0):
        a, b = make((rows, 3)), make((rows, 5))
        same(f(a, b), np.concatenate([a, b], axis=1))
    with pytest.raises(gpucg.InputError, match=r"arrays_1.shape\[0\] is 4"):
        f(make((3, 3)), make((4, 5)))
    g = gpucg.compile("concatenate", gpucg.tensor((n, 3)), gpucg.tensor((gpucg.var("m"), 5)),
                      axis=1, target=target)
    same(g(make((2, 3)), make((2, 5))), np.concatenate([make((2, 3)), make((2, 5))], axis=1))
    with pytest.raises(gpucg.InputError, match=r"arrays\[1\].shape\[0\] .* is 4 but must be 3"):
        g(make((3, 3)), make((4, 5)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_dtypes(target, dtype):
    x = make((4, 6, 3), dtype)
    check("split", (x,), np.split(x, 3, axis=1), target, dtype in FORCED, indices_or_sections=3, axis=1)


def test_split_points_and_axes(target):
    x = make((6, 10, 4), "float32")
    same(gpucg.ops.split(x, np.array([3, 7]), axis=1, target=target),
         np.split(x, [3, 7], axis=1))  # split points as an array
    for ios, axis in [((2, 5), 1), ((-3,), -2), ((7, 3, 20), 1), ((), 0), (2, -1), (1, 0),
                      ((0, 0), 2), (6, 0)]:
        check("split", (x,), np.split(x, ios, axis=axis), target, indices_or_sections=ios,
              axis=axis)
    empty = make((0, 3), "int32")
    check("split", (empty,), np.split(empty, 2, axis=0), target, indices_or_sections=2, axis=0)


def test_concatenate_and_split_errors():
    a = make((2, 3))
    cases = [
        (lambda: gpucg.ops.concatenate([a, a.astype(np.float64)]), gpucg.DTypeError,
         r"arrays\[1\] has dtype float64 but arrays\[0\] has float32"),
        (lambda: gpucg.ops.concatenate([a, make((2, 3, 1))]), gpucg.InputError,
         r"arrays\[1\] has shape .* \(rank 3\) .* same rank"),
        (lambda: gpucg.ops.concatenate([a, make((3, 3))], axis=1), gpucg.InputError,
         r"arrays\[1\].shape\[0\] .* is 3 but must be 2"),
        (lambda: gpucg.ops.concatenate([a], axis=2), gpucg.InputError,
         r"axis=2 is out of range .* allowed: -2..1"),
        (lambda: gpucg.ops.concatenate([np.asarray(np.float32(1))]), gpucg.InputError, "0-d"),
        (lambda: gpucg.ops.concatenate([a], axis=1.5), gpucg.AttrError, "axis=1.5"),
        (lambda: gpucg.ops.split(a, 2, axis=1), gpucg.InputError,
         r"indices_or_sections=2 does not divide the axis \(size 3\)"),
        (lambda: gpucg.ops.split(a, 0), gpucg.AttrError, "indices_or_sections=0 must be >= 1"),
        (lambda: gpucg.ops.split(a, 1.5), gpucg.AttrError, "indices_or_sections=1.5"),
        (lambda: gpucg.ops.split(a, 1, axis=-3), gpucg.InputError, "axis=-3 is out of range"),
    ]
    for fn, err, match in cases:
        with pytest.raises(err, match=match):
            fn()


# -- strided_slice ----------------------------------------------------------------------------

SLICES = [((1,), (4,), None, None), ((-1,), (-100,), (-1,), None),
          ((0, 1), (100, -1), (2, 3), (2, 0)), ((5, -2), (-9, 1), (-2, -1), None),
          ((3,), (3,), None, (-1,)), ((-100,), (100,), (4,), (1,)),
          ((2,), (0,), (1,), (0,)), ((6,), (-7,), (-3,), (-3,))]


@pytest.mark.parametrize("begin,end,strides,axes", SLICES)
def test_strided_slice_as_python(target, begin, end, strides, axes):
    x = make((7, 6, 5), "float32")
    index = [slice(None)] * 3
    for a, b, e, s in zip(axes or range(len(begin)), begin, end, strides or (1,) * len(begin)):
        index[a] = slice(b, e, s)
    check("strided_slice", (x,), x[tuple(index)], target, begin=begin, end=end, strides=strides,
          axes=axes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_slice_dtypes_and_edges(target, dtype):
    x = make((5, 1, 9), dtype)
    check("strided_slice", (x,), x[::-2, :, 1::3], target, dtype in FORCED, begin=(-1, 1), end=(-10, 10),
          strides=(-2, 3), axes=(0, 2))
    zero = make((0, 4), dtype)
    check("strided_slice", (zero,), zero[:, ::-1], target, dtype in FORCED, begin=(-1,), end=(-5,),
          strides=(-1,), axes=(1,))
    scalar = np.asarray(make((1,), dtype)[0])
    check("strided_slice", (scalar,), scalar.copy(), target, dtype in FORCED, begin=(), end=())


def test_strided_slice_errors():
    x = make((4, 5))
    cases = [(dict(begin=(0,), end=(1,), strides=(0,)), gpucg.AttrError, "a step of 0"),
             (dict(begin=(0, 1), end=(1,)), gpucg.AttrError, r"end=\(1,\) has 1 entries"),
             (dict(begin=(0, 0, 0), end=(1, 1, 1)), gpucg.InputError, "at most 2"),
             (dict(begin=(0,), end=(1,), axes=(2,)), gpucg.InputError,
              r"axes=2 is out of range .* allowed: -2..1"),
             (dict(begin=(0, 0), end=(1, 1), axes=(1, -1)), gpucg.InputError, "axis twice"),
             (dict(begin=(0.5,), end=(1,)), gpucg.AttrError, r"begin\[0\]=0.5")]
    for attrs, err, match in cases:
        with pytest.raises(err, match=match):
            gpucg.ops.strided_slice(x, target="numpy", **attrs)
    with pytest.raises(gpucg.InputError, match="needs a constant size"):
        gpucg.compile("strided_slice", gpucg.tensor((gpucg.var("n"),)), begin=(1,), end=(2,),
                      target="numpy")


# -- take ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_take_index_dtypes(target, index_dtype):
    x = make((6, 5, 7), "float32")
    signed = index_dtype.startswith("int")
    ind = np.array([[0, 3], [-1 if signed else 2, 4], [1, -5 if signed else 0]], index_dtype)
    for axis in (None, 0, 1, 2, -1, -3):
        check("take", (x, ind), np.take(x, ind.astype(np.int64), axis=axis), target, index_dtype in FORCED, axis=axis)


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_dtypes_and_edges(target, dtype):
    x = make((4, 7), dtype)
    check("take", (x, np.array([6, -7, 0], np.int32)), x[:, [6, 0, 0]], target, dtype in FORCED, axis=1)
    check("take", (x, np.array(2)), x[2], target, dtype in FORCED, axis=0)  # 0-d indices drop the axis
    xt = make((7, 4), dtype).T  # a transposed view: the host reads it as it lies
    check("take", (xt, np.array([6, -7, 3], np.int64)), xt[:, [6, 0, 3]], target, dtype in FORCED, axis=1)
    check("take", (x, np.zeros((0, 3), np.int64)), np.zeros((4, 0, 3), dtype), target, dtype in FORCED, axis=1)
    empty = make((0, 3), dtype)
    check("take", (empty, np.zeros((2, 0), np.int32)), np.zeros((2, 0, 3), dtype), target, dtype in FORCED, axis=0)
    scalar = np.asarray(make((1,), dtype)[0])  # a 0-d x: axis None indexes its one element
    check("take", (scalar, np.array([0, -1, 0], np.int16)), np.take(scalar, [0, -1, 0]), target,
          dtype in FORCED)
    same(gpucg.ops.take(x, [[1, -1]], axis=0, target=target), x[[[1, -1]]])  # a list of ids


def test_embedding_lookup(target):
    table = make((1000, 64), "float32")
    ids = np.random.default_rng(5).integers(0, 1000, size=(3, 17)).astype(np.int64)
    check("take", (table, ids), table[ids], target, axis=0)
    src = gpucg.compile("take", gpucg.tensor((1000, 64)), gpucg.tensor((3, 17), "int64"),
                        axis=0, target="opencl").sources["take_gather.opencl/main"]
    assert "t % m" not in src and "i % inner" in src  # a row per index, read contiguously


@pytest.mark.parametrize("index_dtype", ("int64", "uint8"))
def test_take_out_of_range_raises_on_every_target(target, index_dtype):
    """mode="raise" (the default), as np.take: the first index out of range named with the
    axis length, on the device too, where the kernel checks them (and a call whose output is
    empty checks them all the same)."""
    x = make((4, 5))
    with pytest.raises(gpucg.InputError, match=r"indices\[1\] = 5 is out of range for axis=1 "
                                               r"of length 5; allowed: -5..4 \(mode='clip'"):
        gpucg.ops.take(x, np.array([0, 5, 200], index_dtype), axis=1, target=target)
    if index_dtype == "int64":
        with pytest.raises(gpucg.InputError, match=r"indices\[0, 1\] = -21 .* of length 20"):
            gpucg.ops.take(x, np.array([[3, -21]]), target=target)
        with pytest.raises(gpucg.InputError, match=r"indices\[0\] = 9 .* length 5"):
            gpucg.ops.take(make((0, 5)), np.array([9]), axis=1, target=target)


def test_take_checks_indices_on_the_device():
    """Indices that live on the device are checked there: one counted word read back, the
    message from the indices; the output never reads outside x (PoCL would not say, so the
    wrapped ones are checked against NumPy's clip after)."""
    pyopencl_array = pytest.importorskip("pyopencl.array")
    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    queue = get_backend("opencl").queue
    x = make((6, 7))
    good = pyopencl_array.to_device(queue, np.array([[0, -7], [6, 3]], np.int32))
    same(gpucg.ops.take(x, good, axis=1, target="opencl"), np.take(x, [[0, -7], [6, 3]], axis=1))
    bad = pyopencl_array.to_device(queue, np.array([1, 2, -8, 7], np.int32))
    with pytest.raises(gpucg.InputError, match=r"indices\[2\] = -8 is out of range for axis=1 "
                                               "of length 7"):
        gpucg.ops.take(x, bad, axis=1, target="opencl")


@pytest.mark.parametrize("mode", ("clip", "wrap"))
def test_take_modes(target, mode):
    """np.take's clip (negative indices become 0) and wrap (modulo the axis length), every
    index dtype's extremes; unsigned indices compare as unsigned (NumPy casts a uint64 above
    2**63 to a negative intp first: we clip and wrap its value)."""
    x = make((3, 5, 2))
    signed = np.array([7, -1, -6, -100, 2**40, -(2**40), 4, 0], np.int64)
    for ind in (signed, signed.astype(np.int8), np.array([[250, 3], [255, 0]], np.uint8)):
        for axis in (1, None):
            n = x.size if axis is None else x.shape[axis]
            q = ind.astype(np.int64)  # (np.take's own wrap steps by n: hours at -2**40)
            q = q % n if mode == "wrap" else np.clip(q, 0, n - 1)
            want = np.take(x, q, axis=axis)
            if mode == "clip" or np.abs(ind.astype(np.int64)).max() < 1000:
                assert (np.take(x, ind.astype(np.int64), axis=axis, mode=mode) == want).all()
            same(gpucg.ops.take(x, ind, axis=axis, mode=mode, target=target), want,
                 (mode, ind.dtype, axis))
    big = np.array([2**64 - 1, 2**63 + 1], np.uint64)
    n = 5
    pos = big % np.uint64(n) if mode == "wrap" else np.minimum(big, np.uint64(n - 1))
    same(gpucg.ops.take(x, big, axis=1, mode=mode, target=target),
         np.take(x, pos.astype(np.int64), axis=1))
    with pytest.raises(gpucg.AttrError, match=r"take: mode='fill' \(str\) is not allowed; allowed: "
                                              "'raise', 'clip', 'wrap'"):
        gpucg.ops.take(x, signed, mode="fill", target=target)


def test_take_errors():
    x = make((4, 5))
    with pytest.raises(gpucg.DTypeError, match="take: indices dtype 'float32' is not an "
                                               "integer dtype; allowed: int8"):
        gpucg.ops.take(x, np.zeros(2, np.float32), target="numpy")
    with pytest.raises(gpucg.InputError, match="axis=2 is out of range"):
        gpucg.ops.take(x, np.zeros(2, np.int32), axis=2, target="numpy")
    with pytest.raises(gpucg.InputError, match="nothing to take along axis=0"):
        gpucg.ops.take(make((0, 5)), np.zeros(2, np.int32), axis=0, target="numpy")
    with pytest.raises(gpucg.AttrError, match=r"axis=\(0, 1\) \(tuple\) must be None or an int"):
        gpucg.ops.take(x, np.zeros(2, np.int32), axis=(0, 1), target="numpy")


# -- flatten, squeeze, expand_dims --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_reshaping_dtypes(target, dtype):
    x = make((3, 1, 5, 2), dtype)
    check("flatten", (x,), x.reshape(3, 10), target, dtype in FORCED)
    check("squeeze", (x,), x.reshape(3, 5, 2), target, dtype in FORCED)
    check("expand_dims", (x,), x[:, None], target, dtype in FORCED, axis=1)


def test_reshaping_axes_and_edges(target):
    x = make((2, 3, 1, 4), "int32")
    for axis in range(-4, 5):
        a = axis % 4 if axis < 0 else axis
        want = x.reshape(int(np.prod(x.shape[:a])), -1)
        check("flatten", (x,), want, target, axis=axis)
    check("flatten", (make((0, 3, 2)),), np.zeros((0, 6), np.float32), target)
    check("flatten", (np.asarray(np.float32(3)),), np.full((1, 1), 3, np.float32), target,
          axis=0)
    y = make((1, 3, 1, 1), "uint8")
    for axis in (None, 0, -1, (0, 2), (-2, -1, 0)):
        check("squeeze", (y,), np.squeeze(y, axis=axis), target, axis=axis)
    for axis in (0, 3, -1, -5, (0, 5), (-1, 1)):
        check("expand_dims", (x,), np.expand_dims(x, axis), target, axis=axis)
    s = np.asarray(np.int64(4))
    check("expand_dims", (s,), s.reshape(1), target, axis=0)
    check("squeeze", (np.ones((1, 1), bool),), np.asarray(True), target)


def test_reshaping_errors():
    x = make((2, 1, 3))
    cases = [(lambda: gpucg.ops.flatten(x, axis=4), "flatten: axis=4 is out of range for an "
                                                    "input of rank 3; allowed: -3..3"),
             (lambda: gpucg.ops.squeeze(x, axis=0), "names axis 0 of size .*; only axes of size "
                                                    "1 can be squeezed"),
             (lambda: gpucg.ops.squeeze(x, axis=(1, -2)), "names an axis twice"),
             (lambda: gpucg.ops.squeeze(x, axis=3), "axis=3 is out of range"),
             (lambda: gpucg.ops.expand_dims(x, axis=4), "axis=4 is out of range .* rank 4"),
             (lambda: gpucg.ops.expand_dims(x, axis=(0, 0)), "names a position twice"),
             (lambda: gpucg.ops.expand_dims(x, axis=None), "axis=None: the position")]
    for fn, match in cases:
        with pytest.raises(gpucg.InputError, match=match):
            fn()


def test_cuda_sources_compile_with_nvrtc(nvrtc_or_skip):
    """Every kernel of the family rendered for CUDA (conftest compiles them with NVRTC)."""
    n = gpucg.var("n")
    T = gpucg.tensor
    calls = [("concatenate", (T((n, 3), "float16"), T((n, 5), "float16")), dict(axis=1)),
             ("split", (T((6, 4), "uint64"),), dict(indices_or_sections=(1, 4))),
             ("strided_slice", (T((7, 5, 3), "bool"),), dict(begin=(-1,), end=(0,),
                                                             strides=(-2,))),
             ("take", (T((n, 64), "float16"), T((n,), "int32")), dict(axis=0)),
             ("take", (T((3, n, 4), "float64"), T((5,), "uint16")), dict(axis=1)),
             ("take", (T((n, 4), "int8"), T((5, 2), "int64")), {}),
             ("flatten", (T((n, 3, 4), "int16"),), {}),
             ("squeeze", (T((n, 1), "float64"),), {}),
             ("expand_dims", (T((n,), "uint8"),), dict(axis=-1))]
    for op, types, attrs in calls:
        impl = "copy" if op in ("flatten", "squeeze", "expand_dims") else None  # else a view
        sources = gpucg.compile(op, *types, target="cuda", impl=impl, **attrs).sources
        assert sources and all("gpucg_" + op in s for s in sources.values())


# -- hypothesis ---------------------------------------------------------------------------------

shapes = st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple)


def properties(shape, data, target):
    """Every operator of the family on a drawn shape, axis, slice, split points and indices."""
    x = make(shape, "int32")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    b, e = data.draw(st.integers(-8, 8)), data.draw(st.integers(-8, 8))
    step = data.draw(st.integers(-3, 3).filter(bool))
    index = [slice(None)] * len(shape)
    index[axis] = slice(b, e, step)
    same(gpucg.ops.strided_slice(x, (b,), (e,), (step,), (axis,), target=target), x[tuple(index)])
    pieces = data.draw(st.lists(st.integers(-6, 6), max_size=3).map(tuple))
    same(gpucg.ops.split(x, pieces, axis=axis, target=target), np.split(x, pieces, axis=axis))
    part = x[tuple(index)]  # differs from x along axis only
    same(gpucg.ops.concatenate([part, x, part], axis=axis, target=target),
         np.concatenate([part, x, part], axis=axis))
    if shape[axis]:
        ind = np.asarray(data.draw(st.lists(st.integers(-shape[axis], shape[axis] - 1),
                                            max_size=4)), np.int64)
        same(gpucg.ops.take(x, ind, axis=axis, target=target), np.take(x, ind, axis=axis))
    a = axis % len(shape)
    same(gpucg.ops.flatten(x, a, target=target),
         x.reshape(int(np.prod(shape[:a])), int(np.prod(shape[a:]))))
    same(gpucg.ops.expand_dims(x, axis, target=target), np.expand_dims(x, axis))
    if shape[axis] == 1:
        same(gpucg.ops.squeeze(x, axis, target=target), np.squeeze(x, axis))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, data=st.data())
def test_hypothesis_numpy(shape, data):
    properties(shape, data, "numpy")


@settings(max_examples=5, deadline=None)
@given(shape=shapes, data=st.data())
def test_hypothesis_opencl(shape, data):
    """Few examples: each new slice or shape is a new PoCL compile."""
    backend_or_skip("opencl")
    properties(shape, data, "opencl")


def test_broadcast_to_serves_onnx_expand(target):
    """ONNX Expand is NumPy broadcasting of x's shape with ``shape``: broadcast_to of the
    broadcast shape (the ONNX spec's examples); the raw ``shape`` alone, when x is larger
    along an axis, is a clear error rather than a silent wrong answer."""
    x = make((3, 1), "float32")
    for shape in [(2, 1, 6), (3, 4), (1,), (3, 1)]:
        out = np.broadcast_shapes(x.shape, shape)
        same(gpucg.ops.broadcast_to(x, out, target=target), x * np.ones(shape, np.float32))
    with pytest.raises(gpucg.InputError, match=r"axis -2 of \(3, 1\) is 3 but must be 1"):
        gpucg.ops.broadcast_to(x, (2, 1, 6), target=target)
