"""The elementwise family against NumPy: every operator on every dtype (a representative set of
dtype pairs by default, all of them with ``-m exhaustive``), NumPy's broadcasting and types,
fused chains as one kernel launch, the data-movement operators, bad input."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.half import ML_DTYPES

rng = np.random.default_rng(3)
DTYPES = list(gpucg.DTYPES)
#: the dtypes NumPy's own ufuncs compute as the kernels do (ml_dtypes' bfloat16 and FP8 ufuncs
#: round every step, the kernels keep float32 between operators: tests/test_bfloat16.py and
#: tests/test_fp8.py cover them)
NUMPY_DTYPES = [d for d in DTYPES if d not in ML_DTYPES]
UNARY = ["exp", "log", "sqrt", "rsqrt", "abs", "negative", "sigmoid", "tanh", "erf", "gelu",
         "relu", "leaky_relu", "clip"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "equal",
          "not_equal", "less", "less_equal", "greater", "greater_equal"]
#: dtype pairs that exercise promotion: mixed signedness, widths, bool, float16 with ints
PAIRS = [("int8", "uint8"), ("int64", "uint64"), ("float16", "int16"), ("bool", "bool"),
         ("uint32", "float32"), ("float64", "int32"), ("uint16", "uint16"), ("float16", "float16")]
UNARY_DTYPES = ["bool", "int8", "uint64", "float16", "float32", "float64"]
erf = np.vectorize(math.erf, otypes=[np.float64])


def sample(shape, dtype):
    if dtype == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    if dtype.startswith("float"):
        return np.asarray(rng.standard_normal(shape) * 3).astype(dtype)
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(max(info.min, -60), min(info.max, 60) + 1, shape)).astype(dtype)


def numpy_op(op, args, attrs):
    """What NumPy computes, written independently of gpucg's NumPy target."""
    x = args[0]
    floaty = lambda v: v.astype(np.result_type(v, np.float16))  # noqa: E731 (exp's types)
    with np.errstate(all="ignore"):
        if op == "rsqrt":
            return 1 / np.sqrt(x)
        if op == "sigmoid":
            return 1 / (1 + np.exp(-floaty(x)))
        if op == "erf":
            return erf(x).astype(floaty(x).dtype)
        if op == "gelu":
            return (0.5 * x * (1 + erf(x / np.sqrt(2)))).astype(floaty(x).dtype)
        if op == "relu":
            return np.maximum(x, np.zeros((), x.dtype))
        if op == "leaky_relu":
            return np.where(x > 0, x, x * 0.01)
        if op == "clip":
            return np.clip(x, *(x.dtype.type(v) for v in (attrs["a_min"], attrs["a_max"])))
        if op == "abs":
            return np.abs(x)
        if op == "where":
            return np.where(*args)
        return getattr(np, op)(*args)


def check(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    if got.dtype.kind == "f":
        tol = {2: 2e-3, 4: 3e-6, 8: 1e-13}[got.dtype.itemsize]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def run_case(target, op, dtypes, shapes):
    args = [sample(s, d) for s, d in zip(shapes, dtypes)]
    if op == "power" and all(a.dtype.kind in "biu" for a in args) and args[1].dtype != bool:
        args[1] = np.abs(args[1]) % 4  # NumPy refuses negative integer powers
    attrs = {"a_min": 1, "a_max": 5} if op == "clip" else {}
    try:
        want = numpy_op(op, args, attrs)
    except (TypeError, ValueError, OverflowError):  # NumPy has no loop: gpucg refuses too
        with pytest.raises(gpucg.DTypeError):
            getattr(gpucg.ops, op)(*args, target=target, **attrs)
        return
    check(getattr(gpucg.ops, op)(*args, target=target, **attrs), want)


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", UNARY_DTYPES)
def test_unary(target, op, dtype):
    run_case(target, op, [dtype], [(3, 4, 5)])


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("pair", PAIRS, ids="-".join)
def test_binary_broadcast_and_promotion(target, op, pair):
    run_case(target, op, pair, [(3, 1, 5), (4, 1)])


@pytest.mark.exhaustive
@pytest.mark.parametrize("op", UNARY + BINARY)
def test_every_dtype_combination(target, op):
    combos = itertools.product(NUMPY_DTYPES, repeat=1 if op in UNARY else 2)
    for dtypes in combos:
        run_case(target, op, dtypes, [(3, 1, 5), (4, 1)][:len(dtypes)])


def test_where_and_scalars(target):
    c = sample((4, 1), "int16")
    a, b = sample((3, 1, 5), "uint8"), sample((5,), "float16")
    check(gpucg.ops.where(c, a, b, target=target), np.where(c, a, b))
    x = sample((6, 7), "int8")
    check(gpucg.ops.multiply(x, 2.5, target=target), x * 2.5)       # weak float: float64
    check(gpucg.ops.add(x, 3, target=target), x + np.int8(3))         # weak int: int8
    h = sample((6,), "float16")
    check(gpucg.ops.subtract(1, h, target=target), 1 - h)             # stays float16
    check(gpucg.ops.where(gpucg.ops.greater(x, 0, target=target), x, 0, target=target),
          np.where(x > 0, x, 0))


def test_zero_d_inputs(target):
    """Every elementwise operator, where and fused on 0-d arrays and NumPy scalars: a 0-d
    result, as NumPy gives (rank 0 once became (1,) between the call and the host run)."""
    for op in UNARY + BINARY:
        for dtype in ("float32", "int16"):
            n = 1 if op in UNARY else 2
            run_case(target, op, [dtype] * n, [()] * n)
    run_case(target, "where", ["bool", "float32", "float32"], [(), (), ()])
    run_case(target, "add", ["float32", "float32"], [(), (3,)])  # 0-d broadcasts
    a, b = np.float32(2), np.float32(3)
    got = gpucg.ops.add(a, b, target=target)
    assert type(got) is np.ndarray and got.shape == () and got == 5
    x, y = gpucg.ops.placeholders(2)
    p, q = sample((), "float32"), sample((), "float64")
    check(gpucg.ops.fused(gpucg.ops.maximum(x * 2.0, y))(p, q, target=target),
          np.maximum(p * np.float32(2), q))


def test_integer_wraparound_and_negative_powers(target):
    a = np.array([127, -128, 100, 3, -1, 1, 0, 2], np.int8)
    b = np.array([1, -1, 2, 5, -3, -4, -2, -1], np.int8)
    check(gpucg.ops.add(a, a, target=target), a + a)
    check(gpucg.ops.multiply(a, b, target=target), a * b)
    check(gpucg.ops.negative(a, target=target), -a)
    check(gpucg.ops.abs(a, target=target), np.abs(a))
    # a negative integer exponent is 1 / a**|b| truncated (NumPy raises): 1, +-1 or 0
    got = gpucg.ops.power(a, b, target=target)
    np.testing.assert_array_equal(got, np.array([127, 0, 16, -13, -1, 1, 0, 0], np.int8))
    big = np.array([-1, 0, 2**62], np.int64)
    ubig = np.array([2**63, 0, 2**62], np.uint64)
    np.testing.assert_array_equal(gpucg.ops.less(big, ubig, target=target), big < ubig)
    np.testing.assert_array_equal(gpucg.ops.equal(big, ubig, target=target), big == ubig)


def test_nan_propagates_as_numpy(target):
    x = np.array([np.nan, 1.0, -2.0, np.inf], np.float32)
    y = np.array([0.0, np.nan, -3.0, 1.0], np.float32)
    for op in ("maximum", "minimum"):
        check(getattr(gpucg.ops, op)(x, y, target=target), getattr(np, op)(x, y))
    check(gpucg.ops.relu(x, target=target), np.maximum(x, np.float32(0)))
    check(gpucg.ops.clip(x, a_min=-1, a_max=0.5, target=target), np.clip(x, -1, 0.5))


def test_fused_chain_is_one_launch(target):
    a, b, c = (sample((300, 7), "float32") for _ in range(3))
    f = gpucg.ops.fused(lambda x, y, z: gpucg.ops.relu(x * y + z))
    assert f.expr == "relu(add(multiply(x0, x1), x2))"
    f(a, b, c, target=target)  # compile first
    before = gpucg.stats()["launches"]
    got = f(a, b, c, target=target)
    launches = gpucg.stats()["launches"] - before
    check(got, np.maximum(a * b + c, 0))
    assert launches == (0 if target == "numpy" else 1)
    # the same chain unfused is three launches
    before = gpucg.stats()["launches"]
    gpucg.ops.relu(gpucg.ops.add(gpucg.ops.multiply(a, b, target=target), c, target=target),
                   target=target)
    assert gpucg.stats()["launches"] - before == (0 if target == "numpy" else 3)


def test_fused_expressions(target):
    x, y, z = gpucg.ops.placeholders(3)
    e = gpucg.ops.where(x > 0, gpucg.ops.sigmoid(y) * 2, -z ** 2)
    a, b, c = sample((5, 1), "int8"), sample((1, 6), "float16"), sample((6,), "float32")
    # a float16 value between two operators of a kernel stays in float32 (the NumPy target
    # rounds it, as NumPy does): both are within float16's rounding
    want = np.where(a > 0, (1 / (1 + np.exp(-b.astype(np.float32)))) * 2, -c ** 2)
    got = gpucg.ops.fused(e)(a, b, c, target=target)
    assert got.dtype == np.float32 and got.shape == (5, 6)
    np.testing.assert_allclose(got, want, rtol=2e-3)
    text = "gelu(clip(subtract(x0, x1), a_min=-1.0, a_max=2.0), approximate='tanh')"
    u, v = sample((4, 9), "float64"), sample((9,), "float64")
    w = np.clip(u - v, -1, 2)
    check(gpucg.ops.fused(text)(u, v, target=target),
          0.5 * w * (1 + np.tanh(np.sqrt(2 / np.pi) * (w + 0.044715 * w ** 3))))
    n = gpucg.var("n")
    f = gpucg.compile("fused", gpucg.tensor((n, 3)), gpucg.tensor((3,)), expr="add(x0, x1)",
                      target=target)
    for rows in (1, 7, 1000):
        p, q = sample((rows, 3), "float32"), sample((3,), "float32")
        check(f(p, q), p + q)


@settings(max_examples=8, deadline=None)
@given(sa=st.lists(st.integers(1, 4), max_size=4), sb=st.lists(st.integers(1, 4), max_size=4),
       ops=st.lists(st.sampled_from(["add", "multiply", "maximum", "subtract"]), min_size=1,
                    max_size=3),
       dtypes=st.tuples(st.sampled_from(NUMPY_DTYPES[1:]), st.sampled_from(NUMPY_DTYPES[1:])),
       index=st.sampled_from(["int32", "int64"]))
def test_hypothesis_broadcast_chains(sa, sb, ops, dtypes, index):
    """Random shapes that broadcast (sizes of 1 sprinkled in, rank 0 among them) and random
    chains, on NumPy and OpenCL."""
    from conftest import backend_or_skip

    _broadcast_chain("numpy", sa, sb, ops, dtypes, index)
    backend_or_skip("opencl")
    _broadcast_chain("opencl", sa, sb, ops, dtypes, index)


def _broadcast_chain(target, sa, sb, ops, dtypes, index):
    shape = [max(p, q) for p, q in itertools.zip_longest(sa[::-1], sb[::-1], fillvalue=1)][::-1]
    sa = [d if d == shape[len(shape) - len(sa) + i] else 1 for i, d in enumerate(sa)]
    sb = [d if d == shape[len(shape) - len(sb) + i] else 1 for i, d in enumerate(sb)]
    a, b = sample(tuple(sa), dtypes[0]), sample(tuple(sb), dtypes[1])
    x, y = gpucg.ops.placeholders(2)
    e, want = x, a
    for op in ops:
        e, want = getattr(gpucg.ops, op)(e, y), numpy_op(op, [want, b], {})
    types = [gpucg.tensor(v.shape, v.dtype.name) for v in (a, b)]
    try:
        f = gpucg.compile("fused", *types, expr=str(e), target=target, index=index)
    except gpucg.DTypeError:
        return  # NumPy has no loop (bool subtract): refused at compile time
    check(f(a, b), want)


@pytest.mark.parametrize("sa,sb", [((7, 300), (300,)), ((5, 1, 260), (3, 1)), ((2, 3, 999), (3, 1)),
                                   ((1000,), ())])
def test_strided_rows(target, sa, sb):
    """Long innermost rows: a work-group takes a piece of one row and decodes its offsets once
    (the other inputs broadcast along or across it)."""
    a, b = sample(sa, "float32"), sample(sb, "int16")
    check(gpucg.ops.subtract(a, b, target=target), a - b)
    check(gpucg.ops.flip(a, axes=(-1,), target=target), a[..., ::-1])


LAYOUT = [  # (operator, input shape, attrs, NumPy)
    ("reshape", (3, 4, 5), {"shape": (5, -1)}, lambda x: x.reshape(5, -1)),
    ("transpose", (3, 4, 5), {"axes": (2, 0, 1)}, lambda x: x.transpose(2, 0, 1)),
    ("transpose", (3, 4), {}, lambda x: x.T),
    ("flip", (3, 4, 5), {"axes": (0, -1)}, lambda x: x[::-1, :, ::-1]),
    ("flip", (6,), {}, lambda x: x[::-1]),
    ("broadcast_to", (3, 1), {"shape": (2, 3, 4)}, lambda x: np.broadcast_to(x, (2, 3, 4))),
    ("sum_to", (2, 3, 4), {"shape": (3, 1)}, lambda x: x.sum(axis=(0, 2)).reshape(3, 1)),
    ("sum_to", (2, 3, 4), {"shape": ()}, lambda x: x.sum()),
]


@pytest.mark.parametrize("op,shape,attrs,fn", LAYOUT)
@pytest.mark.parametrize("dtype", ["int16", "float16", "float64"])
def test_data_movement(target, op, shape, attrs, fn, dtype):
    x = sample(shape, dtype)
    got = getattr(gpucg.ops, op)(x, target=target, **attrs)
    want = np.asarray(fn(x)).astype(dtype)
    if op == "sum_to" and dtype == "float16":
        want = np.asarray(fn(x.astype(np.float32))).astype(dtype)
    check(got, want)


@pytest.mark.parametrize("pad_width", [((1, 2), (0, 3)), ((2, -1, 1), (-1, 1, 2)),
                                       ((-2, -1), (0, 0, 3)), ((0, 0), (-3, -1))])
def test_pad(target, pad_width):
    x = sample((5, 4), "float32")
    lo_hi = []  # the NumPy equivalent: dilate, pad, then crop
    dil = np.full([n + (n - 1) * (p[2] if len(p) == 3 else 0) for n, p in zip(x.shape, pad_width)],
                  7, x.dtype)
    dil[tuple(slice(None, None, (p[2] if len(p) == 3 else 0) + 1) for p in pad_width)] = x
    for lo, hi, *_ in pad_width:
        lo_hi.append((max(lo, 0), max(hi, 0)))
    want = np.pad(dil, lo_hi, constant_values=7)
    want = want[tuple(slice(max(-lo, 0), want.shape[i] - max(-hi, 0))
                      for i, (lo, hi, *_) in enumerate(pad_width))]
    check(gpucg.ops.pad(x, pad_width, value=7, target=target), want)


BAD = [
    (lambda: gpucg.ops.subtract(np.ones(3, bool), np.ones(3, bool), target="numpy"),
     gpucg.DTypeError, "no loop for operand dtypes"),
    (lambda: gpucg.ops.add(np.ones((2, 3)), np.ones(4), target="numpy"), gpucg.InputError,
     "do not broadcast"),
    (lambda: gpucg.ops.clip(np.ones(3, np.uint8), a_min=-1, target="numpy"), gpucg.DTypeError,
     "a_min=-1 is out of the range of uint8"),
    (lambda: gpucg.ops.leaky_relu(np.ones(3), alpha="x", target="numpy"), gpucg.AttrError,
     "alpha='x' must be a number"),
    (lambda: gpucg.ops.gelu(np.ones(3), approximate="fast", target="numpy"), gpucg.AttrError,
     "approximate='fast'"),
    (lambda: gpucg.ops.fused("relu(x0) + __import__('os')"), gpucg.AttrError,
     "is not an elementwise expression"),
    (lambda: gpucg.ops.fused("add(x0)"), gpucg.AttrError, "add takes 2 operand"),
    (lambda: gpucg.ops.fused("add(x0, x1)")(np.ones(3), target="numpy"), gpucg.InputError,
     "reads 2 input"),
    (lambda: gpucg.ops.reshape(np.ones(6), (4, -1), target="numpy"), gpucg.InputError,
     "modulo 4"),
    (lambda: gpucg.ops.transpose(np.ones((2, 3)), (0, 0), target="numpy"), gpucg.InputError,
     "permutation"),
    (lambda: gpucg.ops.broadcast_to(np.ones((2, 3)), (4, 3), target="numpy"), gpucg.InputError,
     "must be 4"),
    (lambda: gpucg.ops.pad(np.ones((2, 3)), ((0, 0),), target="numpy"), gpucg.InputError,
     "pad_width has 1 entries"),
    (lambda: gpucg.ops.pad(np.ones((2, 3)), ((0, 0), (-3, -1)), target="numpy"),
     gpucg.InputError, "axis 1 would have size -1 < 0"),
    (lambda: gpucg.ops.exp(np.ones(3), np.ones(3), target="numpy"), gpucg.AttrError,
     "takes 1 operand"),
]


@pytest.mark.parametrize("call,err,msg", BAD)
def test_bad_input(call, err, msg):
    with pytest.raises(err, match=msg):
        call()


def test_float64_on_a_device_without_it_is_a_clear_error(monkeypatch):
    from conftest import backend_or_skip

    from gpucg.runtime import get_backend

    backend_or_skip("opencl")
    monkeypatch.setattr(get_backend("opencl"), "supports", lambda dt: dt not in ("float16",
                                                                                  "float64"))
    h = np.ones(4, np.float16)
    check(gpucg.compile("exp", gpucg.tensor((4,), "float16"), target="opencl")(h), np.exp(h))
    with pytest.raises(gpucg.DTypeError, match="dtype float64 is not supported by the device"):
        gpucg.compile("exp", gpucg.tensor((4,), "int32"), target="opencl")


def test_selection_and_sources():
    sel = gpucg.explain("add", gpucg.tensor((4, 4)), gpucg.tensor((4,)), target="cuda")
    assert sel.choices[0].impl.name == "ew_strided.cuda"
    excluded = [c for c in sel.candidates if c.verdict == "excluded"]
    assert excluded[0].name == "ew_contiguous.cuda" and "strides" in excluded[0].reason
    sel = gpucg.explain("exp", gpucg.tensor((4, 4)), target="opencl")
    assert sel.choices[0].impl.name == "ew_contiguous.opencl"
    assert gpucg.get_op("relu").pattern is gpucg.OpPattern.INJECTIVE
    assert gpucg.get_op("add").pattern is gpucg.OpPattern.BROADCAST
    src = gpucg.compile("fused", gpucg.tensor((8, 8), "int8"), gpucg.tensor((8,), "float16"),
                        expr="where(less(x0, 0), power(x0, 3), gelu(x1))",
                        target="cuda").sources["ew_strided.cuda/main"]
    assert "gpucg_ipow_int8" in src and "erfc(" in src and "#include" not in src


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_sum(target, axis):
    x = np.arange(2 * 3 * 5, dtype=np.int32).reshape(2, 3, 5)
    got = gpucg.ops.sum(x, axis=axis, target=target)
    np.testing.assert_array_equal(got, np.sum(x, axis=axis))
    assert got.dtype == np.int64


def test_every_cuda_variant_compiles_with_nvrtc(nvrtc_or_skip):
    from gpucg.verify import nvrtc

    n, m = gpucg.var("n"), gpucg.var("m")
    sources = []
    for dtype in NUMPY_DTYPES + ["bfloat16"]:  # 64-bit indexing for three, 32-bit for all (FP8: test_fp8)
        t = gpucg.tensor((n, m), dtype)
        index = "auto" if dtype in ("float16", "int64", "float32") else "int32"
        for op, other in itertools.chain(((op, ()) for op in UNARY),
                                         ((op, (gpucg.tensor((m,), "int64"),)) for op in BINARY)):
            try:
                sources += gpucg.compile(op, t, *other, target="cuda",
                                         index=index).sources.values()
            except gpucg.DTypeError:
                pass
    for op, attrs in (("transpose", {}), ("flip", {"axes": (0,)}), ("pad", {"pad_width": (
            (1, 2, 1), (0, -1))}), ("sum_to", {"shape": (64,)}), ("reshape", {"shape": (-1,)})):
        impl = {"transpose": "ew_strided", "reshape": "ew_contiguous"}.get(op)  # else views
        sources += gpucg.compile(op, gpucg.tensor((n, 64), "float16"), target="cuda", impl=impl,
                                 **attrs).sources.values()
    for arch in ("sm_80", "sm_90"):  # each failure named with its own log
        assert nvrtc.check_sources(sources, arch) == []
    assert len(sources) > 300
