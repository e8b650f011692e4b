"""The onesweep radix sort (sort_radix) against NumPy's stable sort on numpy and OpenCL (PoCL).

Every key dtype, both directions, both index dtypes, NaN/inf/-0.0 and ties (stability), rows
of several tiles that are no multiple of the tile, batched rows and a non-last axis, and one
long row of many tiles, whose work-groups PoCL runs at once on its threads: that exercises the
look-back's spin-waits, which Oclgrind's one-group-at-a-time simulation never reaches.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg.strategies.sort_radix import CPU_ROWS_MAX, RADIX_SORT_N_MIN, traffic_bound
from test_topk import make, reference, same

ALL = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
       "uint16", "uint32", "uint64"]
N = RADIX_SORT_N_MIN + 1234  # 17 tiles of 2048 (33 of 1024), the last one partial


def data(shape, dtype, rng, ties):
    if dtype == "bfloat16":
        import ml_dtypes

        return make(shape, "float32", rng, ties).astype(ml_dtypes.bfloat16)
    if dtype.startswith("uint"):
        info = np.iinfo(dtype)
        x = rng.integers(0, 6 if ties else info.max, size=shape, dtype=dtype, endpoint=True)
        x.reshape(-1)[:2] = [info.max, 0]
        return x
    return make(shape, dtype, rng, ties)


def check(op, x, target, impl="sort_radix", **attrs):
    kw = {} if target == "numpy" else {"impl": impl}
    f = gpucg.compile(op, gpucg.tensor(x.shape, str(x.dtype)), target=target, **kw, **attrs)
    same(f(x), reference(op, x, **attrs))
    want = np.argsort(x.astype(np.float64) if x.dtype.kind == "f" or str(x.dtype) == "bfloat16"
                      else x, axis=attrs.get("axis", -1), kind="stable")
    if op == "argsort" and attrs.get("is_ascend", True):  # NumPy's own stable argsort
        np.testing.assert_array_equal(np.asarray(f(x)), want)


# CI: the four kinds of key (float, signed, unsigned, 8-bit: one pass), both directions and
# index dtypes once; every dtype, direction and index dtype exhaustive (PoCL takes long to
# build the digit pass kernels: their block scans are emulated warps, barriers in loops)
CI = [("float32", True, "int64"), ("float16", False, "int32"), ("int64", True, "int32"),
      ("uint8", False, "int64")]
EVERY = [(dt, asc, ix) for dt in ALL for asc in (True, False) for ix in ("int32", "int64")
         if (dt, asc, ix) not in CI]


def _dtypes(dtype, asc, index, target):
    rng = np.random.default_rng(ALL.index(dtype))
    for ties in (False, True):
        x = data((2, N), dtype, rng, ties)
        check("argsort", x, target, is_ascend=asc, dtype=index)
        check("topk", x, target, k=0, is_ascend=asc, dtype=index)


@pytest.mark.parametrize("dtype,asc,index", CI)
def test_every_dtype(target, dtype, asc, index):
    _dtypes(dtype, asc, index, target)


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype,asc,index", EVERY)
def test_every_dtype_direction_and_index(target, dtype, asc, index):
    _dtypes(dtype, asc, index, target)


def test_sort_values_and_special_order(target):
    """NaN last ascending and first descending, -inf < -0.0 == 0.0 (index order) < inf."""
    x = np.zeros((3, N), np.float32)
    x[:, ::7] = np.nan
    x[:, 1::7] = -0.0
    x[:, 2::7] = np.inf
    x[:, 3::7] = -np.inf
    x[:, 4::7] = np.float32(-np.nan)
    for asc in (True, False):
        check("sort", x, target, is_ascend=asc)
        check("argsort", x, target, is_ascend=asc)


def test_non_last_axis_and_partial_topk(target):
    rng = np.random.default_rng(3)
    x = make((2, N, 3), "float32", rng, ties=True)
    check("argsort", x, target, axis=1)
    check("topk", make((3, N), "float32", rng), target, k=500, is_ascend=True)


def test_one_row_of_many_tiles(target):
    """64 tiles of one row: PoCL runs many of them at once; each waits for its predecessors."""
    x = make((1, 1 << 17), "float32", np.random.default_rng(5), ties=True)
    check("argsort", x, target)


def test_empty_and_tiny_rows(target):
    check("sort", np.zeros((0, N), np.float32), target)
    m, n = gpucg.var("m"), gpucg.var("n")
    tgt = target if target in ("numpy", "cuda") else "opencl -device=gpu"
    f = gpucg.compile("argsort", gpucg.tensor((m, n), "float32"), target=tgt)
    rng = np.random.default_rng(6)
    for shape, want in [((3, 0), None), ((3, 1), "sort_bitonic"), ((2, N), "sort_radix"),
                        ((2, RADIX_SORT_N_MIN - 1), "sort_merge")]:
        x = make(shape, "float32", rng)
        same(f(x), reference("argsort", x))
        if target != "numpy" and want:
            assert f.last_impl == f"{want}.{tgt.split()[0]}", shape


def test_selected_for_long_rows_only():
    for shape, want in [((64, 4096), "sort_bitonic"), ((64, RADIX_SORT_N_MIN - 1), "sort_merge"),
                        ((64, RADIX_SORT_N_MIN), "sort_radix"), ((1, 1 << 24), "sort_radix")]:
        for op in ("sort", "argsort"):
            sel = gpucg.explain(op, gpucg.tensor(shape, "float32"), target="cuda")
            assert sel.choices[0].impl.name == f"{want}.cuda", (op, shape, str(sel))


def test_cpu_devices_take_it_for_few_rows():
    """On a CPU device (PoCL) the radix sort ranks above the merge path for at most
    CPU_ROWS_MAX rows (measured: 0.15-0.29x the merge path's time on one row of 2^15-2^23,
    1.31x on 256 rows of 2^15)."""
    cpu = next((t for t in gpucg.targets() if t.name == "opencl" and t.usable), None)
    if cpu is None:
        pytest.skip("no OpenCL device")
    for shape, want in [((1, 1 << 20), "sort_radix"), ((CPU_ROWS_MAX, RADIX_SORT_N_MIN), "sort_radix"),
                        ((CPU_ROWS_MAX + 1, RADIX_SORT_N_MIN), "sort_merge"),
                        ((1, RADIX_SORT_N_MIN - 1), "sort_merge")]:
        sel = gpucg.explain("argsort", gpucg.tensor(shape, "float32"), target="opencl")
        assert sel.choices[0].impl.name == f"{want}.opencl", (shape, str(sel))


TRAFFIC = Path(__file__).parent / "resources" / "topk.json"


def test_traffic_within_the_docstring_bound():
    """The figure of the radix sort's small case (Oclgrind's count, tests/resources/topk.json,
    held there by tests/test_oclgrind.py) is within the bound its docstring states."""
    figures = json.loads(TRAFFIC.read_text())["traffic"]
    keys = [k for k in figures if "sort_radix" in k]
    assert keys, f"{TRAFFIC} has no sort_radix traffic figure: run `make resources-json FAMILY=topk`"
    case = next(c for c in gpucg.get_op("sort").representative("small")
                if "onesweep" in c.label)
    (rows, n), dtype = case.inputs[0].shape, case.inputs[0].dtype
    kb = np.dtype(dtype).itemsize
    moved = {}
    for key in keys:
        op = key.split("|")[0]
        moved[op] = figures[key]["loaded"] + figures[key]["stored"]
        # sort wants the values alone: its passes move keys only (no indices anywhere)
        ib = 0 if op == "sort" else 4
        data, words = traffic_bound(rows, n, kb, ib, ib, 8 if kb <= 4 else 4)
        assert moved[op] <= data + words, (key, moved[op], data, words)
    # the keys-only passes of a values-only sort: at least 60% fewer bytes of indices moved
    if "sort" in moved and "argsort" in moved:
        saved = traffic_bound(rows, n, kb, 4, 4, 8)[0] - traffic_bound(rows, n, kb, 0, 0, 8)[0]
        assert moved["argsort"] - moved["sort"] >= 0.6 * saved, moved
