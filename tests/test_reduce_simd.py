"""argmax/argmin's two-pass search by vectors (simd > 1: OpenCL's float8, where the target's
capability record lists "simd"): each block's extreme by 32-byte vectors with a NaN probe
(their sum), then the block's first index of it. Forced on PoCL against NumPy on the special
values (the first NaN wins, ties take the lowest index, -0.0 equals +0.0, infinities, a probe
that overflows or meets both infinities without a NaN), rows shorter than a vector, at and
across block edges, float64 (4 lanes) and integers (no probe); under Oclgrind with zero
reports; absent from CUDA's space, whose dialect has no vector arithmetic. The CPU's column
kernels step unroll_rows rows at a time (their loads in flight together), kept in row order."""

import json

import numpy as np
import pytest

import gpucg
from gpucg.codegen.dialect import CUDA, OPENCL

from conftest import backend_or_skip, under_oclgrind

CPU = "opencl -device=cpu"
#: row lengths: a vector's tail only, one short of a stride, a block, across blocks
LENGTHS = (1, 7, 31, 1024, 1025, 2100)


def _rows(n: int, dtype: str) -> np.ndarray:
    """Rows of length n that each probe one rule (random where a row has no special values)."""
    rng = np.random.default_rng(n)
    kind = np.dtype(dtype).kind
    base = rng.integers(-3, 4, (12, n)) if kind in "iu" else rng.standard_normal((12, n))
    x = base.astype(dtype)
    last = n - 1
    if kind == "f":
        big = np.finfo(dtype).max
        x[0, last // 2] = np.nan  # a NaN, maybe in a later block
        x[0, last] = np.nan
        x[1, :] = -np.inf  # every value the identity
        x[2, :] = 0.0
        x[2, last // 3:] = -0.0  # -0.0 equals +0.0: the first zero
        x[3, 0] = np.inf  # both infinities, no NaN: the probe is NaN, the search finds none
        x[3, last] = -np.inf
        x[4, :] = big * np.where(np.arange(n) % 2, 1, -1)  # sums overflow both ways
        x[5, :] = np.nan  # all NaN
        x[6, last] = 100.0  # the extreme at the end
        x[7, 0] = 100.0
        x[7, last] = 100.0  # ties across blocks: the first
        x[8, last] = -100.0  # argmin's extreme at the end
    else:
        info = np.iinfo(dtype)
        x[1, :] = info.min
        x[2, :] = info.max
        x[3, last] = info.max
        x[4, last] = info.min
    return x


def _check(op, x, impl, config=None, target=CPU):
    f = gpucg.compile(op, gpucg.tensor(x.shape, x.dtype.name), axis=1, target=target,
                      impl=impl, config=config, records=False)
    got = f(x)
    want = getattr(np, op)(x, axis=1)
    assert f.last_impl.startswith(impl)
    assert got.tolist() == want.tolist(), (op, impl, config, x.dtype, x.shape)
    return f


def test_cpu_defaults_search_by_vectors():
    backend_or_skip("opencl")
    f = gpucg.compile("argmax", gpucg.tensor((256, 32000), "float32"), axis=-1, target=CPU)
    config = f.selection.choices[0].config
    assert (config["simd"], config["two_pass"], config["wg"]) == (8, True, 1), dict(config)
    d = gpucg.compile("argmax", gpucg.tensor((4, 9), "float64"), axis=1, target=CPU)
    assert d.selection.choices[0].config["simd"] == 4  # 32 bytes of float64
    # sum keeps its own space: no simd knob
    s = gpucg.compile("sum", gpucg.tensor((256, 32000), "float32"), axis=-1, target=CPU)
    assert "simd" not in s.selection.choices[0].config


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_special_values_every_length(dtype):
    backend_or_skip("opencl")
    for n in LENGTHS:
        x = _rows(n, dtype)
        for op in ("argmax", "argmin"):
            _check(op, x, "reduce_group")


def test_blocks_across_work_items_and_chunks():
    """Several work-items a row (each takes whole blocks, then their results meet), and a row
    split in chunks whose partial results carry value and index to the merge."""
    backend_or_skip("opencl")
    x = np.concatenate([_rows(16500, "float32"), _rows(16500, "float32")[:, ::-1]])
    _check("argmax", x, "reduce_group", dict(wg=64, unroll=2, two_pass=True, vw=1, simd=8))
    y = np.random.default_rng(9).standard_normal((3, 140000)).astype(np.float32)
    y[0, 100000] = y[0, 120000] = np.nan  # blocks of a later round of the 64 work-items
    y[1, 70000] = y[1, 139999] = 50.0
    _check("argmax", y, "reduce_group", dict(wg=64, unroll=2, two_pass=True, vw=1, simd=8))
    _check("argmin", x, "reduce_split", dict(wg=1, unroll=4, two_pass=True, vw=1, simd=8,
                                             chunk_items=16, groups=4096))


def test_columns_rows_a_step():
    """reduce_cols with unroll_rows > 1: a tail of rows, whole and partial column blocks,
    ties and NaN down a column (the first index), rows split in chunks."""
    backend_or_skip("opencl")
    x = _rows(7, "float32").T.copy()  # (7, 12): columns of the special rows
    y = np.random.default_rng(2).standard_normal((1031, 130)).astype(np.float32)
    y[5, 3] = y[900, 3] = 40.0
    y[600, 129] = np.nan
    whole = dict(tx=1, ty=1, vec=128, vw=1, chunk_items=256, groups=8, unroll_rows=4)
    split = dict(tx=1, ty=4, vec=16, vw=1, chunk_items=16, groups=4096, unroll_rows=8)
    for op, data, config in [("argmax", x, whole), ("argmin", x, whole), ("argmax", y, whole),
                             ("sum", y, whole), ("argmin", y, split)]:
        f = gpucg.compile(op, gpucg.tensor(data.shape), axis=0, target=CPU, impl="reduce_cols",
                          config=config, records=False)
        want = getattr(np, op)(data, axis=0)
        if op == "sum":
            np.testing.assert_allclose(f(data), want, rtol=1e-5, atol=1e-4)
        else:
            assert f(data).tolist() == want.tolist(), (op, config, data.shape)


def test_cuda_has_no_simd():
    f = gpucg.compile("argmax", gpucg.tensor((256, 32000), "float32"), axis=-1, target="cuda")
    assert "simd" not in f.selection.choices[0].config
    with pytest.raises(gpucg.InputError, match="simd"):
        gpucg.compile("argmax", gpucg.tensor((256, 32000), "float32"), axis=-1, target="cuda",
                      impl="reduce_split", config=dict(simd=8))
    with pytest.raises(gpucg.DTypeError, match="backend 'cuda' has no vector arithmetic"):
        CUDA.simd.type("float", 8)
    assert OPENCL.simd.type("float", 8) == "float8"


OCLGRIND = """
import json, numpy as np, gpucg
rng = np.random.default_rng(5)
x = rng.standard_normal((3, 16400)).astype(np.float32)
x[0, 9000] = np.nan
x[1, 3] = x[1, 12000] = -9.0
x[2, :] = -0.0
out = []
for op, impl, config in [
        ("argmax", "reduce_group", dict(wg=64, unroll=2, two_pass=True, vw=1, simd=8)),
        ("argmin", "reduce_split", dict(wg=1, unroll=4, two_pass=True, vw=1, simd=8,
                                        chunk_items=16, groups=4096))]:
    f = gpucg.compile(op, gpucg.tensor(x.shape), axis=1, target="opencl", impl=impl,
                      config=config, records=False)
    out.append(f(x).tolist() == getattr(np, op)(x, axis=1).tolist())
c = x[:, :41].T.copy()
f = gpucg.compile("argmax", gpucg.tensor(c.shape), axis=0, target="opencl", impl="reduce_cols",
                  config=dict(tx=1, ty=4, vec=16, vw=1, chunk_items=16, groups=8, unroll_rows=4),
                  records=False)
out.append(f(c).tolist() == np.argmax(c, axis=0).tolist())
print(json.dumps(out))
"""


def test_vector_search_under_oclgrind(oclgrind_or_skip, tmp_path):
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, True, True]
    assert not reports, "\n\n".join(r.text for r in reports)
