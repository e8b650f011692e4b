"""cumsum and cumprod of float16 and bfloat16, accumulated in float32 as torch.cumsum does:
against torch (CPU) and a float64 bound, every implementation forced on PoCL (rows and
columns, inclusive and exclusive, forwards and reversed; the look-back scans once each in the
default tier, PoCL builds them slowly), the dtype argument both ways, special values."""

import numpy as np
import pytest

import gpucg
from gpucg import var
from gpucg.half import numpy_dtype
from conftest import applicable, backend_or_skip

HALVES = ("float16", "bfloat16")
#: ulp of 1 in each dtype: a result is its float32 running value rounded once
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23}


def make(shape, dtype, op, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.97, 1.03, shape) if op == "cumprod" else rng.standard_normal(shape)
    return x.astype(np.float32).astype(numpy_dtype(dtype))


def exact(x, op, axis, exclusive=False, reverse=False):
    """The scan in float64 of the (exactly widened) 16-bit values."""
    return gpucg.get_op(op).reference(x.astype(np.float64), gpucg.get_op(op).make_attrs(
        axis=axis, exclusive=exclusive, reverse=reverse))


def check(got, x, op, axis, out_dtype, tag, **flags):
    """Within one rounding to the output dtype (plus float32's order of summation) of the
    float64 scan: 2 ulp of the running sum of magnitudes, or of the product."""
    assert got.dtype == numpy_dtype(out_dtype), tag
    want = exact(x, op, axis, **flags)
    got = got.astype(np.float64)
    scale = np.abs(want) if op == "cumprod" else \
        exact(np.abs(x.astype(np.float64)), "cumsum", axis, **flags)
    tol = 2 * EPS[out_dtype] * scale + 64 * EPS["float32"] * np.maximum(scale, 1)
    bad = ~(np.abs(got - want) <= tol)
    assert not bad.any(), (tag, got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("op", ("cumsum", "cumprod"))
def test_as_torch(target, op, dtype):
    """The default call equals torch's (float32 accumulation, one rounding) on every target;
    on numpy exactly (the same sequential float32 sums)."""
    torch = pytest.importorskip("torch")
    x = make((3, 2100), dtype, op)
    t = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
    want = getattr(torch, op)(t, dim=1).float().numpy()
    got = getattr(gpucg.ops, op)(x, axis=1, target=target)
    assert got.dtype == x.dtype
    if target == "numpy":
        np.testing.assert_array_equal(got.astype(np.float32), want)
    check(got, x, op, 1, dtype, f"{op} {dtype} {target}")


#: (op, dtype, shape, axis, exclusive, reverse): rows (inner = 1), columns, both flags
CALLS = [("cumsum", "float16", (var("n"), var("m")), 1, False, False),
         ("cumprod", "bfloat16", (var("n"), var("m"), 5), 1, True, True),
         ("cumsum", "bfloat16", (var("n"), var("m")), 1, True, True),
         ("cumprod", "float16", (var("n"), var("m"), 5), 1, False, False)]
SIZES = {2: ((3, 2053), (2, 4001), (17, 300)), 3: ((4, 700, 5), (5, 3, 5))}
#: the PoCL builds the default tier makes: every implementation once, the look-backs once
DEFAULT = {(0, "scan_rows"), (0, "scan_device"), (0, "scan_chunked"), (2, "scan_lookback"),
           (1, "scan_cols"), (1, "scan_cols_lookback"), (3, "scan_chunked")}


def _forced():
    out = []
    for i, call in enumerate(CALLS):
        target = "opencl"
        for impl in applicable(call[0], gpucg.tensor(call[2], call[1]), target=target,
                               axis=call[3]):
            marks = () if (i, impl) in DEFAULT else (pytest.mark.exhaustive,)
            out.append(pytest.param(i, impl, marks=marks, id=f"{call[0]}-{call[1]}-{impl}"))
    return out


@pytest.mark.parametrize("i, impl", _forced())
def test_every_implementation(i, impl):
    backend_or_skip("opencl")
    op, dtype, shape, axis, exclusive, reverse = CALLS[i]
    f = gpucg.compile(op, gpucg.tensor(shape, dtype), target="opencl", impl=impl,
                      axis=axis, exclusive=exclusive, reverse=reverse)
    ran = 0
    for k, size in enumerate(SIZES[len(shape)]):
        x = make(size, dtype, op, k)
        try:
            got = f(x)
        except gpucg.InputError as exc:  # a size the forced implementation's condition rejects
            assert "the forced implementation" in str(exc)
            continue
        check(got, x, op, axis, dtype, f"{impl} {size}", exclusive=exclusive, reverse=reverse)
        assert f.last_impl.startswith(impl)
        ran += 1
    assert ran, impl


def test_dtype_argument_both_ways(target):
    """float16 data summed into float32 or float64 (wider outputs accumulate in themselves),
    float32 data into a float16 or bfloat16 result (summed in float32, rounded once)."""
    x = make((4, 1000), "float16", "cumsum")
    for out in ("float32", "float64"):
        got = gpucg.ops.cumsum(x, axis=1, dtype=out, target=target)
        assert got.dtype == np.dtype(out)
        np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-5,
                                   atol=1e-4)
    y = make((4, 1000), "float32", "cumsum", 1)
    for out in HALVES:
        got = gpucg.ops.cumsum(y, axis=1, dtype=out, target=target)
        want = np.cumsum(y.astype(np.float64), axis=1)
        assert got.dtype == numpy_dtype(out)
        scale = np.cumsum(np.abs(y.astype(np.float64)), axis=1)
        assert (np.abs(got.astype(np.float64) - want) <= 2 * EPS[out] * scale + 1e-4).all()


@pytest.mark.parametrize("dtype", HALVES)
def test_special_values(target, dtype):
    """NaN and infinities carry on from where they enter, as torch's; a sum past the 16-bit
    range becomes inf when stored though float32 holds it."""
    torch = pytest.importorskip("torch")
    x = np.array([[1, np.nan, 2, 3], [np.inf, 1, -np.inf, 5], [60000, 60000, -60000, 1]],
                 np.float32).astype(numpy_dtype(dtype))
    t = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
    for op in ("cumsum", "cumprod"):
        want = getattr(torch, op)(t, dim=1).float().numpy()
        got = getattr(gpucg.ops, op)(x, axis=1, target=target).astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {dtype}")
