"""paged_attention and kv_cache_write against torch (each sequence's tokens gathered from the
paged cache, then SDPA with an explicit mask in float64), on numpy and opencl, every
implementation forced (paged_decode, paged_prefill; numpy_paged): float16/bfloat16/float32,
D in {64, 80, 128, 256}, block sizes 1, 16 and 32, sequences ending mid-block, empty ones,
Sq 1 and 4 (and 19 on the multi-query kernel), GQA 32/8 and MQA, window, ALiBi, softcap,
two splits of the keys (D = 256 in tests/test_attention_decode.py: the same kernel); special values through the kernels; bad block tables, seq_lens and
slots named by the error (host and device arrays); the writes in place; the dispatch by Sq."""

import functools
import itertools

import numpy as np
import pytest

import gpucg
from gpucg import var
from attention_torch import check, dtype_of, make, sdpa
from conftest import opencl_arrays

IMPLS = {"numpy": ("numpy_paged",), "opencl": ("paged_decode", "paged_prefill")}


@functools.lru_cache(maxsize=None)
def _compiled(target, impl, dtype, hq, hkv, d, attrs):
    b, sq, nb, bs, mb = (var(n) for n in ("b", "sq", "nb", "bs", "mb"))
    t = gpucg.tensor
    return gpucg.compile("paged_attention", t((b, sq, hq, d), dtype), t((nb, bs, hkv, d), dtype),
                         t((nb, bs, hkv, d), dtype), t((b, mb), "int32"), t((b,), "int32"),
                         target=target, impl=impl, **dict(attrs))


def run(target, impl, q, kc, vc, bt, sl, **attrs):
    f = _compiled(target, impl, dtype_of(q), q.shape[2], kc.shape[2], q.shape[3],
                  tuple(sorted(attrs.items())))
    return f(q, kc, vc, bt, sl)


def build(rng, dtype, lens, sq, hq, hkv, d, bs, spare=3):
    """A cache of shuffled blocks holding sequences of ``lens`` tokens; table entries past a
    sequence's blocks hold -7: never read, so never an error (vLLM pads tables with
    garbage)."""
    need = [-(-n // bs) for n in lens]
    nb = sum(need) + spare
    kc, vc = make((nb, bs, hkv, d), dtype, rng), make((nb, bs, hkv, d), dtype, rng)
    ids = rng.permutation(nb)
    bt = np.full((len(lens), max(need + [1]) + 1), -7, np.int32)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = ids[at:at + n]
        at += n
    q = make((len(lens), sq, hq, d), dtype, rng)
    return q, kc, vc, bt, np.asarray(lens, np.int32)


def want(q, kc, vc, bt, sl, **attrs):
    """(B, Sq, Hq, D): each sequence's tokens gathered, then torch SDPA (causal)."""
    out = np.zeros(q.shape)
    bs = kc.shape[1]
    for b, n in enumerate(sl):
        j = np.arange(n)
        k, v = (c[bt[b, j // bs], j % bs].transpose(1, 0, 2) for c in (kc, vc))
        out[b] = sdpa(q[b].transpose(1, 0, 2), k, v, causal=True, **attrs)[0].transpose(1, 0, 2)
    return out


#: (label, dtype, Hq, Hkv, D, block size, Sq, sequence lengths, attributes)
CASES = [
    ("GQA 32/8 float16 D=64 block 16, Sq 1, an empty sequence", "float16", 32, 8, 64, 16, 1,
     (0, 17, 300), {}),
    ("MQA bfloat16 D=128 block 1, Sq 4, window and ALiBi", "bfloat16", 8, 1, 128, 1, 4,
     (4, 37, 3), {"window": 9, "alibi_slopes": tuple(0.5 ** np.arange(1, 9))}),
    ("float32 D=80 block 32, Sq 1, softcap, 1100 tokens: two splits", "float32", 4, 2, 80, 32,
     1, (1100, 5), {"softcap": 20.0, "scale": 0.3}),
]


def _check_case(target, case, impls=None):
    label, dtype, hq, hkv, d, bs, sq, lens, attrs = case
    rng = np.random.default_rng(0)
    args = build(rng, dtype, lens, sq, hq, hkv, d, bs)
    ref = want(*args, **attrs)
    for impl in impls or IMPLS[target]:
        check(run(target, impl, *args, **attrs), ref, dtype, f"{target} {impl} {label}")


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_paged_attention_against_torch(target, case):
    """The decode kernel on each case (the multi-query one on its own below: its kernels
    compile once, for CASES[0]'s types)."""
    _check_case(target, case, IMPLS[target][:1])


@pytest.mark.parametrize("target", ["numpy", "opencl"])
def test_multi_query_chunk(target):
    """Sq = 19 (chunked prefill) on the multi-query kernel, causal within the chunk, and Sq = 1
    on it too."""
    label, dtype, hq, hkv, d, bs, *_ = CASES[0]
    for sq, lens in ((19, (19, 40, 23)), (1, (0, 17, 300))):
        _check_case(target, (f"Sq {sq}", dtype, hq, hkv, d, bs, sq, lens, {}), IMPLS[target][-1:])


@pytest.mark.exhaustive
@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("dtype,d,bs,sq,heads", list(itertools.product(
    ("float16", "bfloat16", "float32"), (64, 80, 128, 256), (1, 16, 32), (1, 4),
    ((32, 8), (8, 1)))))
def test_paged_attention_matrix(target, dtype, d, bs, sq, heads):
    _check_case(target, ("matrix", dtype, heads[0], heads[1], d, bs, sq, (0, 33, 70), {}))


def test_special_values_through_the_kernels():
    """A NaN in q makes its row NaN, a +inf key makes its rows NaN (torch's softmax: inf -
    inf), a -inf score drops its key: the kernels agree with torch's math."""
    rng = np.random.default_rng(3)
    label, dtype, hq, hkv, d, bs, sq, lens, attrs = CASES[0]
    q, kc, vc, bt, sl = build(rng, dtype, lens, sq, hq, hkv, d, bs)
    q[1, 0, 5, 3] = np.nan
    q[2, 0, :, 0] = np.abs(q[2, 0, :, 0]) + 0.5  # a +inf or -inf in dim 0: that sign of score
    kc[bt[2, 0], 3, 1, 0] = np.inf  # sequence 2, token 3, KV head 1: its 4 query heads
    kc[bt[2, 1], 2, 2, 0] = -np.inf  # token 18, KV head 2: a key its query heads drop
    ref = want(q, kc, vc, bt, sl, **attrs)
    assert np.isnan(ref[1, 0, 5]).all() and np.isnan(ref[2, 0, 4:8]).all()
    for impl in IMPLS["opencl"]:
        got = run("opencl", impl, q, kc, vc, bt, sl).astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=impl)
        check(np.nan_to_num(got), np.nan_to_num(ref), dtype, impl)


BAD = [
    ("seq_lens longer than the table", [[0, 1, 2], [3, 4, 5]], [40, 49],
     r"seq_lens\[1\] = 49 is out of range; a sequence holds 0 to max_blocks \* block_size = "
     r"3 \* 16 = 48"),
    ("a block id past the cache", [[0, 1, 2], [3, 9, 5]], [40, 20],
     r"block_table\[1, 1\] = 9 is out of range; block ids are 0 to num_blocks - 1 = 5"),
    ("a negative block id", [[0, -1, 2], [3, 4, 5]], [20, 2], r"block_table\[0, 1\] = -1"),
    ("a negative length", [[0, 1, 2], [3, 4, 5]], [-1, 3], r"seq_lens\[0\] = -1"),
]


@pytest.mark.parametrize("where", ["numpy", "opencl", "device"])
@pytest.mark.parametrize("bad", BAD, ids=[b[0] for b in BAD])
def test_bad_tables_name_the_entry(where, bad):
    _, table, lens, message = bad
    q = np.ones((2, 1, 4, 64), np.float16)
    kc = np.zeros((6, 16, 2, 64), np.float16)
    args = (q, kc, kc, np.asarray(table, np.int32), np.asarray(lens, np.int32))
    if where == "device":
        backend, cla = opencl_arrays()
        args = tuple(cla.to_device(backend.queue, a) for a in args)
    with pytest.raises(gpucg.InputError, match=message):
        gpucg.ops.paged_attention(*args, target=None if where == "device" else where)


def test_bad_input_types():
    q = np.ones((1, 1, 2, 64), np.float32)
    kc = np.ones((2, 16, 1, 64), np.float32)
    with pytest.raises(gpucg.DTypeError, match="block_table dtype 'float32'"):
        gpucg.ops.paged_attention(q, kc, kc, np.zeros((1, 2), np.float32), [1], target="numpy")
    with pytest.raises(gpucg.InputError, match="q's heads .2. must be a multiple of the "
                                                "caches' heads .3."):
        kc3 = np.ones((2, 16, 3, 64), np.float32)
        gpucg.ops.paged_attention(q, kc3, kc3, np.zeros((1, 2), np.int32), [1], target="numpy")
    with pytest.raises(gpucg.InputError, match="alibi_slopes has 3 values, but q has 2 heads"):
        gpucg.ops.paged_attention(q, kc, kc, np.zeros((1, 2), np.int32), [1], target="numpy",
                                  alibi_slopes=[1.0, 2.0, 3.0])
    with pytest.raises(gpucg.AttrError, match="window=-2 is not allowed"):
        gpucg.ops.paged_attention(q, kc, kc, np.zeros((1, 2), np.int32), [1], window=-2)


# -- kv_cache_write ---------------------------------------------------------------------------

WRITES = [("float16", 16, 2, 64, "int32"), ("bfloat16", 1, 1, 128, "int64"),
          ("float32", 3, 2, 36, "int32")]  # D = 36 float32: element copies (not 16 bytes)


@pytest.mark.parametrize("target", ["numpy", "opencl"])
@pytest.mark.parametrize("dtype,bs,hkv,d,slot", WRITES, ids=[w[0] for w in WRITES])
def test_kv_cache_write_in_place(target, dtype, bs, hkv, d, slot):
    rng = np.random.default_rng(1)
    nb, t = 9, 7
    kc, vc = make((nb, bs, hkv, d), dtype, rng), make((nb, bs, hkv, d), dtype, rng)
    k, v = make((t, hkv, d), dtype, rng), make((t, hkv, d), dtype, rng)
    slots = rng.permutation(nb * bs)[:t].astype(slot)
    slots[2] = -1
    before_k, before_v = kc.copy(), vc.copy()
    out = gpucg.ops.kv_cache_write(k, v, kc, vc, slots, target=target)
    assert out[0] is kc and out[1] is vc
    ek, ev = before_k.reshape(nb * bs, hkv, d), before_v.reshape(nb * bs, hkv, d)
    keep = slots >= 0
    ek[slots[keep]], ev[slots[keep]] = k[keep], v[keep]
    np.testing.assert_array_equal(kc.reshape(ek.shape).view(np.uint8), ek.view(np.uint8))
    np.testing.assert_array_equal(vc.reshape(ev.shape).view(np.uint8), ev.view(np.uint8))


def test_kv_cache_write_then_attend_on_device():
    """The decode step of a server: write the new token at its slot, attend over the cache,
    all on device arrays (the caches written in place)."""
    backend, cla = opencl_arrays()
    rng = np.random.default_rng(2)
    q, kc, vc, bt, sl = build(rng, "float16", (5, 20), 1, 4, 2, 64, 16)
    k, v = make((2, 2, 64), "float16", rng), make((2, 2, 64), "float16", rng)
    slots = np.array([bt[b, (n - 1) // 16] * 16 + (n - 1) % 16 for b, n in enumerate(sl)],
                     np.int32)
    dev = {n: cla.to_device(backend.queue, a) for n, a in
           dict(q=q, kc=kc, vc=vc, bt=bt, sl=sl, k=k, v=v, slots=slots).items()}
    out = gpucg.ops.kv_cache_write(dev["k"], dev["v"], dev["kc"], dev["vc"], dev["slots"])
    assert out[0] is dev["kc"]
    got = gpucg.ops.paged_attention(dev["q"], dev["kc"], dev["vc"], dev["bt"], dev["sl"])
    gpucg.ops.kv_cache_write(k, v, kc, vc, slots, target="numpy")
    check(got.get(), want(q, kc, vc, bt, sl), "float16", "write then attend")


@pytest.mark.parametrize("where", ["numpy", "opencl", "device"])
def test_a_bad_slot_writes_nothing(where):
    k = np.ones((3, 1, 8), np.float32)
    kc = np.zeros((3, 4, 1, 8), np.float32)
    vc = kc.copy()
    slots = np.array([0, 5, 12], np.int32)
    if where == "device":
        backend, cla = opencl_arrays()
        k, kc, vc, slots = (cla.to_device(backend.queue, a) for a in (k, kc, vc, slots))
    with pytest.raises(gpucg.InputError, match=r"slot_mapping\[2\] = 12 is out of range; slots "
                                                r"are -1 \(skip the token\) or 0 to "
                                                r"num_blocks \* block_size - 1 = 11"):
        gpucg.ops.kv_cache_write(k, k, kc, vc, slots,
                                 target=None if where == "device" else where)
    got = kc.get() if where == "device" else kc
    assert not got.any()


def test_a_view_cannot_be_written_in_place():
    backend, cla = opencl_arrays()
    kc = cla.to_device(backend.queue, np.zeros((3, 4, 2, 8), np.float32))[:, :, :1]
    k = cla.to_device(backend.queue, np.ones((1, 1, 8), np.float32))
    with pytest.raises(gpucg.InputError, match="k_cache is a view that is not contiguous"):
        gpucg.ops.kv_cache_write(k, k, kc, kc, cla.to_device(backend.queue,
                                                             np.zeros(1, np.int32)))


def test_explain_shows_decode_and_multi_query_by_sq(capsys):
    from gpucg.cli import main

    assert main(["explain", "paged_attention", "--input", "b,sq,32,128:float16",
                 "--input", "nb,16,8,128:float16", "--input", "nb,16,8,128:float16",
                 "--input", "b,mb:int32", "--input", "b:int32", "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "paged_decode.cuda" in out and "dispatch 1 if sq <= 16" in out, out
    assert "paged_prefill.cuda" in out and "fallback" in out, out
