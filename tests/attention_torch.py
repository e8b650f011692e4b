"""torch references of the serving attention operators (decode, paged, varlen): torch's
scaled_dot_product_attention in float64 with an explicit additive mask (bottom-right causal,
window, ALiBi), soft-capping spelled out, rows that see no key set to zero (SDPA gives NaN).
torch is imported at first use (its import is seconds of every collection)."""

import numpy as np
import pytest

from gpucg.half import ml_dtypes


class _Torch:
    def __getattr__(self, name):
        return getattr(pytest.importorskip("torch"), name)


torch = _Torch()
TOL = {"float32": 3e-5, "float16": 3e-3, "bfloat16": 2e-2}


def make(shape, dtype, rng, scale=1.0):
    x = rng.standard_normal(shape) * scale
    return x.astype(ml_dtypes().bfloat16 if dtype == "bfloat16" else dtype)


def dtype_of(x) -> str:
    return "bfloat16" if "bfloat16" in str(x.dtype) else x.dtype.name


def sdpa(q, k, v, *, causal=False, window=None, alibi_slopes=None, scale=None, softcap=None):
    """float64 (o, lse) of q (Hq, Sq, D) over k, v (Hkv, Skv, D), NumPy in and out: query i
    sits at key position i + Skv - Sq."""
    q, k, v = (torch.from_numpy(np.asarray(x).astype(np.float64)) for x in (q, k, v))
    hq, sq, d = q.shape
    skv, g = k.shape[1], hq // max(k.shape[0], 1)
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    scale = 1 / np.sqrt(d) if scale is None else scale
    pos = torch.arange(sq)[:, None] + (skv - sq)
    j = torch.arange(skv)[None, :]
    keep = torch.ones(sq, skv, dtype=torch.bool)
    if causal or window is not None:
        keep = keep & (j <= pos)
    if window is not None:
        keep = keep & (j >= pos - window)
    bias = torch.zeros(hq, sq, skv, dtype=torch.float64)
    if alibi_slopes is not None:
        bias = bias - torch.tensor(alibi_slopes, dtype=torch.float64)[:, None, None] * (pos - j).abs()
    bias = torch.where(keep, bias, -torch.inf)
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    lse = torch.logsumexp(s + bias, -1) if skv else torch.full((hq, sq), -torch.inf)
    if softcap is None and skv:
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                                             scale=scale)
    else:
        o = torch.softmax(s + bias, -1) @ v if skv else torch.zeros(q.shape, dtype=torch.float64)
    o = torch.where((lse == -torch.inf)[..., None], 0.0, o)  # NaN stays NaN
    return o.numpy(), lse.numpy()


def check(got, want, dtype, tag):
    tol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=tol, atol=tol,
                               err_msg=tag)
