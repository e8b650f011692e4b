"""attention's decode kernel (attention_decode), window and ALiBi on every attention
implementation here (flash_mma: its OpenCL twin), against torch SDPA with explicit masks in float64, on numpy and opencl:
GQA 32/8 and MQA, Sq 1 and 4, D 80, 128 and 256 (64 in test_paged_attention.py: the same
kernel), both layouts, two splits of the keys and their log-sum-exps, Skv = 0, arrays not
16-byte aligned (element copies), special values; the traffic figures of decode at most 1.1x
the compulsory bytes for GQA and MQA, dense and paged cache."""

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg import var
from attention_torch import check, dtype_of, make, sdpa
from conftest import opencl_arrays


@functools.lru_cache(maxsize=None)
def _compiled(target, impl, dtype, hq, hkv, d, attrs):
    attrs = dict(attrs)
    b, sq, skv = var("b"), var("sq"), var("skv")
    bshd = attrs.get("layout") == "BSHD"
    qs, ks = ((b, sq, hq, d), (b, skv, hkv, d)) if bshd else ((b, hq, sq, d), (b, hkv, skv, d))
    t = gpucg.tensor
    return gpucg.compile("attention", t(qs, dtype), t(ks, dtype), t(ks, dtype), target=target,
                         impl=impl, **attrs)


def run(target, impl, q, k, v, **attrs):
    h = 2 if attrs.get("layout") == "BSHD" else 1
    f = _compiled(target, impl, dtype_of(q), q.shape[h], k.shape[h], q.shape[3],
                  tuple(sorted(attrs.items())))
    return f(q, k, v)


def want(q, k, v, layout="BHSD", return_lse=False, **attrs):
    """torch per batch row: (o in q's layout, lse (B, Hq, Sq))."""
    tr = (lambda x: x) if layout == "BHSD" else (lambda x: x.transpose(1, 0, 2))
    outs = [sdpa(tr(q[b]), tr(k[b]), tr(v[b]), **attrs) for b in range(q.shape[0])]
    return np.stack([tr(o) for o, _ in outs]), np.stack([lse for _, lse in outs])


#: (label, B, Hq, Hkv, Sq, Skv, D, dtype, attributes, other implementations run on it)
CASES = [
    ("GQA 32/8 float16 D=128, Skv 1100: two splits, window, ALiBi, lse", 2, 32, 8, 1, 1100, 128,
     "float16", {"window": 1050, "alibi_slopes": tuple(0.5 ** np.arange(1, 33) * 8),
                 "return_lse": True}, ("attention_split",)),
    ("MQA bfloat16 D=80 BSHD, Sq 4, causal, window, ALiBi", 1, 4, 1, 4, 300, 80, "bfloat16",
     {"layout": "BSHD", "causal": True, "window": 37, "alibi_slopes": (0.5, 0.25, 0.1, 0.05)},
     ("attention_simt", "flash_mma")),
    ("float32 D=256, Sq 4, causal, softcap", 2, 4, 2, 4, 70, 256, "float32",
     {"causal": True, "softcap": 5.0}, ()),
]


def _check(target, impls, case, skv=None, seed=5):
    label, b, hq, hkv, sq, skv0, d, dtype, attrs, _ = case
    skv = skv0 if skv is None else skv
    rng = np.random.default_rng(seed)
    bshd = attrs.get("layout") == "BSHD"
    qs, ks = ((b, sq, hq, d), (b, skv, hkv, d)) if bshd else ((b, hq, sq, d), (b, hkv, skv, d))
    q, k, v = make(qs, dtype, rng), make(ks, dtype, rng), make(ks, dtype, rng)
    o, lse = want(q, k, v, **attrs)
    for impl in impls:
        got = run(target, impl, q, k, v, **attrs)
        if attrs.get("return_lse"):
            got, got_lse = got
            check(got_lse, lse, "float32", f"{target} {impl} {label} lse")
        assert got.shape == q.shape and dtype_of(got) == dtype
        check(got, o, dtype, f"{target} {impl} {label}")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_torch(target, case):
    impls = ("numpy_attention",) if target == "numpy" else ("attention_decode",) + case[9]
    _check(target, impls, case)


def test_no_keys_and_unaligned_arrays():
    """Skv = 0 gives zeros (same compiled kernel); pyopencl views at an odd offset take the
    element-by-element copies (vec = 0) and give the same result."""
    backend, cla = opencl_arrays()
    case = CASES[2]
    _check("opencl", ("attention_decode",), case, skv=0)
    rng = np.random.default_rng(1)
    q, k, v = (make(s, "float32", rng) for s in ((2, 4, 4, 256), (2, 2, 9, 256), (2, 2, 9, 256)))
    o, _ = want(q, k, v, **case[8])

    def view(x):  # the same values one float past a 16-byte boundary
        flat = cla.to_device(backend.queue, np.concatenate([[0.0], x.ravel()]).astype(x.dtype))
        return flat[1:].reshape(x.shape)
    got = run("opencl", "attention_decode", view(q), view(k), view(v), **case[8])
    check(got.get(), o, "float32", "unaligned")


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype,d,sq,heads,layout", list(itertools.product(
    ("float16", "bfloat16", "float32"), (64, 80, 128, 256), (1, 4), ((32, 8), (8, 1)),
    ("BHSD", "BSHD"))))
def test_decode_matrix(dtype, d, sq, heads, layout):
    case = ("matrix", 2, heads[0], heads[1], sq, 600, d, dtype,
            {"layout": layout, "causal": True}, ())
    _check("opencl", ("attention_decode",), case)


def test_special_values_match_torch():
    """A NaN in q gives a NaN row; an infinite key's score is capped (softcap: tanh), so its
    rows stay finite: as torch's math."""
    label, b, hq, hkv, sq, skv, d, dtype, attrs, _ = CASES[2]
    rng = np.random.default_rng(2)
    q, k, v = (make(s, dtype, rng) for s in ((b, hq, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)))
    q[0, 1, 2, 7] = np.nan
    q[1, :, :, 0] = np.abs(q[1, :, :, 0]) + 0.5  # a +inf or -inf in dim 0: that sign of score
    k[1, 0, 5, 0] = np.inf  # capped to softcap: the rows of KV head 0 favour key 5
    k[1, 1, 9, 0] = -np.inf  # capped to -softcap
    o, _ = want(q, k, v, **attrs)
    got = run("opencl", "attention_decode", q, k, v, **attrs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(o))
    assert np.isnan(o[0, 1, 2]).all() and np.isfinite(o[1]).all()
    check(np.nan_to_num(got), np.nan_to_num(o), dtype, "finite rows")


RESOURCES = Path(__file__).parent / "resources"
#: the decode cases of the checked-in Oclgrind traffic (tests/test_oclgrind.py measures
#: each against them, 1% of slack): dense and paged cache, GQA and MQA
TRAFFIC = [("attention", "MQA, one query", "attention_decode"),
           ("attention", "split-KV decode, causal", "attention_decode"),
           ("attention", "decode GQA 8/2", "attention_decode"),
           ("paged_attention", "decode GQA 8/2, block 16", "paged_decode"),
           ("paged_attention", "decode MQA, block 1", "paged_decode")]


@pytest.mark.parametrize("op,label,impl", TRAFFIC, ids=[t[1] for t in TRAFFIC])
def test_decode_reads_the_cache_once(op, label, impl):
    """At most 1.08x the compulsory bytes in the figures, so at most 1.1x measured."""
    figures = json.loads((RESOURCES / f"{op}.json").read_text())["traffic"]
    labels = [c.label for c in gpucg.get_op(op).representative("small")]
    row = figures[f"{op}|small {labels.index(label)}|{impl}.opencl"]
    assert row["loaded"] + row["stored"] <= 1.08 * row["compulsory"], row


def test_bench_decode_quick(capsys):
    from gpucg.benchmarks.decode import main, paged_copy

    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, 3, 37, 8)).astype(np.float32)
    kc, vc, bt, sl = paged_copy(k, k, rng)
    assert kc.shape == (6, 16, 3, 8) and sl.tolist() == [37, 37]
    np.testing.assert_array_equal(kc[bt[1, 2], 4], k[1, :, 36])  # token 36 of sequence 1
    assert main(["--quick", "--repeat", "1", "--json", "--targets", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "torch SDPA (cpu, dense cache)" in out and "gpucg numpy paged [numpy_paged]" in out
    assert "tokens/s" in out and "GB/s of the KV cache read" in out
    from gpucg.benchmarks.lowp import gpu_present
    assert gpu_present() or "FlashInfer decode (paged)                  not measured on a GPU" in out
