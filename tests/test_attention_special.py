"""Special values through every attention implementation, forced, against torch's math
backend (scaled_dot_product_attention with SDPBackend.MATH, float64): NaN and infinities in
q, k, v and an additive mask, causal and not, GQA, decoding-length keys (so split-KV decoding
runs too). A NaN or +inf score makes its row NaN, a -inf one weighs 0, a weight of 0 still
multiplies its v (0 * inf is NaN), as torch's. The special values sit where every row sees
them (key 0 under causal: ops/attention.py's docstring names what is left to the tiling
above the diagonal). Also: empty heads give empty outputs, no k/v heads or D = 0 an
InputError, on symbolic sizes too."""

import numpy as np
import pytest

import gpucg
from gpucg import var
from test_attention import applies, run
from test_attention_mma import DEEP, compiled
from test_attention_wgmma import compiled as wgmma_twin

B, HQ, HKV, SQ, SKV, D = 1, 2, 1, 4, 1030, 64
IMPLS = {"numpy": ("numpy_attention",),
         "opencl": ("attention_simt", "attention_split", "attention_decode", "flash_mma",
                    "flash_wgmma")}


def _base():
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in
               ((B, HQ, SQ, D), (B, HKV, SKV, D), (B, HKV, SKV, D)))
    return q, k, v, np.zeros((1, 1, SQ, SKV), np.float32)


def _set(name, i, value):
    def edit(arrays):
        arrays[name][i] = value
    return edit


#: label -> the edits of the inputs; every case runs with causal and without (then with the
#: additive mask, zero where nothing is set)
CASES = {
    "NaN in q": [_set("q", (0, 0, 1, 3), np.nan)],
    "inf row of q": [_set("q", (0, 1, 2), np.inf)],
    "+inf in k": [_set("k", (0, 0, 0, 2), np.inf)],
    "-inf in k": [_set("k", (0, 0, 0, 4), -np.inf)],
    "NaN in k": [_set("k", (0, 0, 0, 1), np.nan)],
    "infinities in v": [_set("v", (0, 0, 0, 1), np.inf), _set("v", (0, 0, 0, 2), -np.inf)],
    "NaN in v": [_set("v", (0, 0, 0, 3), np.nan)],
    "inf in the last key's v": [_set("v", (0, 0, SKV - 1, 5), np.inf)],
    "mask +inf, NaN and -inf": [_set("m", (0, 0, 1, 0), np.inf), _set("m", (0, 0, 2, 7), np.nan),
                                _set("m", (0, 0, 3, 9), -np.inf)],
}
#: the cases that put a value above some row's diagonal (left to the tiling under causal)
NOT_CAUSAL = ("inf in the last key's v", "mask +inf, NaN and -inf")


def torch_math(q, k, v, bias):
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    t = [torch.from_numpy(x.astype(np.float64)) for x in (q, k, v, bias)]
    with sdpa_kernel([SDPBackend.MATH]):
        return torch.nn.functional.scaled_dot_product_attention(
            t[0], t[1], t[2], attn_mask=t[3], enable_gqa=True).numpy()


def _op(target, impl, causal):
    if impl == "flash_mma":  # causal: the compile test_attention_mma's causal test makes
        if causal:
            return compiled("float16", D, None, tuple(sorted(DEEP.items())), causal=True,
                            return_lse=True)
        # the twin's default config (one warp): PoCL took over ten minutes to build DEEP's
        # two-warp program with an additive mask from a cold cache (a minute for this one)
        return compiled("float16", D, ((1, 1, SQ, SKV), "float32"), return_lse=True)
    if impl == "flash_wgmma" and causal:  # test_attention_wgmma's compile, shared (no mask)
        return wgmma_twin("float16", D, causal=True, return_lse=True)
    return None


def _run(target, impl, causal, q, k, v, m):
    op = _op(target, impl, causal)
    args = (q, k, v) if causal else (q, k, v, m)
    if op is not None:
        return op(*args)
    return run(target, impl, *args, causal=causal, return_lse=True)


def _same(got, want, tag):
    got = np.asarray(got).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=tag + ": NaN")
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=tag + ": inf")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-3, atol=2e-3, err_msg=tag)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=tag + ": signs")


@pytest.mark.parametrize("causal", (True, False), ids=("causal", "mask"))
def test_special_values_as_torch_math(target, causal):
    for label, edits in CASES.items():
        if causal and label in NOT_CAUSAL:
            continue
        q, k, v, m = _base()
        arrays = {"q": q, "k": k, "v": v, "m": m}
        for edit in edits:
            edit(arrays)
        bias = np.where(np.arange(SKV)[None, :] <= np.arange(SQ)[:, None] + SKV - SQ, 0,
                        -np.inf)[None, None] if causal else m
        want = torch_math(q, k, v, bias)
        assert np.isnan(want).any() or np.isinf(want).any() or label.startswith("-inf")
        for impl in IMPLS[target]:
            if not causal and not applies(target, impl, q, k, v, m):  # decode takes no mask
                continue
            out, lse = _run(target, impl, causal, q, k, v, m)
            tag = f"{label}, {impl}, {'causal' if causal else 'mask'}"
            _same(out, want, tag)
            # the log-sum-exp is NaN exactly for the rows that are NaN throughout
            np.testing.assert_array_equal(np.isnan(lse), np.isnan(want).all(axis=-1),
                                          err_msg=tag + ": lse")


@pytest.mark.parametrize("hq, hkv, d, error", [
    (0, 0, 8, None), (0, 2, 8, None), (2, 0, 8, "heads but q has 2|multiple of k's"),
    (2, 2, 0, "the head dim D is 0; allowed: D >= 1")])
def test_empty_heads_and_head_dim(target, hq, hkv, d, error):
    q, kv = np.zeros((1, hq, 3, d), np.float32), np.zeros((1, hkv, 5, d), np.float32)
    sym = gpucg.tensor((1, var("hq"), 3, 8), "float32"), gpucg.tensor((1, var("hkv"), 5, 8),
                                                                      "float32")
    calls = [lambda: gpucg.ops.attention(q, kv, kv, return_lse=True, target=target)]
    if d:  # heads symbolic: the dispatcher checks them (and divides by none)
        f = gpucg.compile("attention", sym[0], sym[1], sym[1], target=target, return_lse=True)
        calls.append(lambda: f(q, kv, kv))
    for call in calls:
        if error:
            with pytest.raises(gpucg.InputError, match=error):
                call()
            continue
        out, lse = call()
        assert out.shape == q.shape and lse.shape == (1, hq, 3)
