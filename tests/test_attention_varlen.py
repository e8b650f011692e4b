"""attention_varlen against torch SDPA run on each sequence alone (float64, explicit masks),
on numpy and opencl (varlen_simt and varlen_flash, the tensor-core kernel's twin, forced;
numpy_varlen): float16/bfloat16/float32, D in {64,
80, 128, 256}, GQA 32/8 and MQA, causal, window, ALiBi, softcap, empty sequences, queries
shorter than their keys (chunked prefill); bad cumulative lengths named by the error from host
and device arrays; the result equals attention on each sequence padded nowhere."""

import functools
import itertools

import numpy as np
import pytest

import gpucg
from gpucg import var
from attention_torch import check, dtype_of, make, sdpa
from conftest import opencl_arrays

IMPLS = {"numpy": ("numpy_varlen",), "opencl": ("varlen_simt", "varlen_flash")}


@functools.lru_cache(maxsize=None)
def _compiled(target, impl, dtype, hq, hkv, d, attrs):
    tq, tk, b = var("tq"), var("tk"), var("b")
    t = gpucg.tensor
    return gpucg.compile("attention_varlen", t((tq, hq, d), dtype), t((tk, hkv, d), dtype),
                         t((tk, hkv, d), dtype), t((b,), "int32"), t((b,), "int32"),
                         target=target, impl=impl, **dict(attrs))


def run(target, q, k, v, cq, ck, impl=None, **attrs):
    f = _compiled(target, impl or IMPLS[target][0], dtype_of(q), q.shape[1], k.shape[1],
                  q.shape[2], tuple(sorted(attrs.items())))
    return f(q, k, v, cq, ck)


def want(q, k, v, cq, ck, **attrs):
    out = np.zeros(q.shape)
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        o, _ = sdpa(q[qs].transpose(1, 0, 2), k[ks].transpose(1, 0, 2), v[ks].transpose(1, 0, 2),
                    **attrs)
        out[qs] = o.transpose(1, 0, 2)
    return out


#: (label, dtype, Hq, Hkv, D, query lengths, key lengths, attributes)
CASES = [
    ("GQA 32/8 float16 D=64 causal, an empty sequence, chunked prefill", "float16", 32, 8, 64,
     (5, 0, 37, 1), (5, 0, 60, 9), {"causal": True}),
    ("MQA bfloat16 D=128 window, ALiBi", "bfloat16", 4, 1, 128, (20, 7), (20, 31),
     {"window": 6, "alibi_slopes": (0.5, 0.25, 0.125, 0.0625)}),
    ("float32 D=80 softcap, scale, not causal", "float32", 2, 2, 80, (3, 17), (30, 2),
     {"softcap": 5.0, "scale": 0.2}),
]


def _case(target, case, impls=None):
    label, dtype, hq, hkv, d, lq, lk, attrs = case
    rng = np.random.default_rng(0)
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q, k, v = (make((n, h, d), dtype, rng) for n, h in ((cq[-1], hq), (ck[-1], hkv), (ck[-1], hkv)))
    ref = want(q, k, v, cq, ck, **attrs)
    for impl in impls or IMPLS[target]:
        got = run(target, q, k, v, cq, ck, impl, **attrs)
        assert got.shape == q.shape and dtype_of(got) == dtype
        check(got, ref, dtype, f"{target} {impl} {label}")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_torch_per_sequence(target, case):
    """Each implementation; the tensor-core one (its OpenCL twin) on the 16-bit cases with
    the window and ALiBi."""
    impls = IMPLS[target] if case[1] == "bfloat16" else IMPLS[target][:1]
    _case(target, case, impls)


@pytest.mark.exhaustive
@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("dtype,d,heads,causal", list(itertools.product(
    ("float16", "bfloat16", "float32"), (64, 80, 128, 256), ((32, 8), (8, 1)), (False, True))))
def test_varlen_matrix(target, dtype, d, heads, causal):
    impls = IMPLS[target][:1] if dtype == "float32" else IMPLS[target]
    _case(target, ("matrix", dtype, heads[0], heads[1], d, (1, 4, 0, 70), (9, 4, 3, 70),
                   {"causal": causal}), impls)


def test_equals_attention_on_each_sequence():
    """The ragged batch gives what attention gives each sequence padded nowhere (gpucg's own
    dense kernels, same target)."""
    rng = np.random.default_rng(4)
    lens = (6, 11)
    q, k, v = (make((sum(lens), 4, 32), "float32", rng) for _ in range(3))
    cu = np.array([0, 6, 17], np.int32)
    got = gpucg.ops.attention_varlen(q, k, v, cu, cu, causal=True, target="numpy")
    for a, b in zip(cu[:-1], cu[1:]):
        one = gpucg.ops.attention(q[None, a:b], k[None, a:b], v[None, a:b], causal=True,
                                  layout="BSHD", target="numpy")
        np.testing.assert_allclose(got[a:b], one[0], rtol=1e-6, atol=1e-6)


BAD = [([0, 3, 2, 5], r"cu_seqlens_q\[2\] = 2 is below cu_seqlens_q\[1\] = 3"),
       ([0, 3, 4, 6], r"cu_seqlens_q\[3\] = 6, its last entry, must equal the rows it indexes "
                      r"\(5\)"),
       ([1, 3, 4, 5], r"cu_seqlens_q\[0\] = 1 must be 0")]


@pytest.mark.parametrize("where", ["numpy", "opencl", "device"])
@pytest.mark.parametrize("cu,message", BAD, ids=["decreasing", "past the end", "not from 0"])
def test_bad_cumulative_lengths_name_the_entry(where, cu, message):
    q = np.ones((5, 2, 64), np.float16)
    args = (q, q, q, np.asarray(cu, np.int32), np.array([0, 2, 4, 5], np.int32))
    if where == "device":
        backend, cla = opencl_arrays()
        args = tuple(cla.to_device(backend.queue, a) for a in args)
    with pytest.raises(gpucg.InputError, match=message):
        gpucg.ops.attention_varlen(*args, target=None if where == "device" else where)
    with pytest.raises(gpucg.InputError, match="cu_seqlens_k has 3 entries, but cu_seqlens_q "
                                                "has 4"):
        gpucg.ops.attention_varlen(q, q, q, [0, 2, 4, 5], [0, 2, 5], target="numpy")


def test_special_values_through_the_kernels():
    """A NaN in q makes its row NaN, a +inf score its rows NaN (key 24 of sequence 1: inside
    every row's window; torch's math adds a masked key's -inf bias to its score, so a +inf
    key outside some row's window would make that row NaN there too, where the kernels leave
    it out), a -inf score drops its key: both kernels agree with torch's math."""
    label, dtype, hq, hkv, d, lq, lk, attrs = CASES[1]
    rng = np.random.default_rng(6)
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q, k, v = (make((n, h, d), dtype, rng) for n, h in ((cq[-1], hq), (ck[-1], hkv), (ck[-1], hkv)))
    q[:, :, 0] = np.abs(q[:, :, 0].astype(np.float32)) + 0.5
    q[2, 1, 5] = np.nan                       # sequence 0, row 2, head 1
    k[ck[1] + 24, 0, 0] = np.inf              # sequence 1's key 24: in every row's window
    k[ck[1] + 26, 0, 0] = -np.inf             # key 26: dropped by the rows that see it
    ref = want(q, k, v, cq, ck, **attrs)
    assert np.isnan(ref[2, 1]).all() and np.isnan(ref[cq[1] + 6]).all()
    for impl in IMPLS["opencl"]:
        got = run("opencl", q, k, v, cq, ck, impl, **attrs).astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=impl)
        check(np.nan_to_num(got), np.nan_to_num(ref), dtype, impl)
