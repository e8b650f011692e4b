"""The gradient of attention (dq, dk, dv), the FlashAttention-2 backward as a composition of
registered operators on the call's target: the forward gives o and the row log-sum-exp, then
for each tile of keys the probabilities are recomputed from q, k and the log-sum-exp
(P = exp(S - lse)), and
    dv_t = P^T do,   dP = do v_t^T,   dS = P * (dP - delta),   delta = rowsum(do * o),
    dq += dS k_t * scale,   dk_t = dS^T q * scale
(soft-capping multiplies dS by 1 - tanh^2 first). Only one tile of the score matrix is held at
a time. Grouped heads: the heads of a group are one batch of G * Sq rows, so dk and dv sum
over the group by the products themselves. The mask gets no gradient.
"""

from __future__ import annotations

import numpy as np

#: keys a tile of the recomputed scores
KEY_TILE = 256


def _host(x) -> np.ndarray:
    get = getattr(x, "get", None)
    return get() if callable(get) else np.asarray(x)


def _bias(mask, causal, shape, k0, k1):
    """The additive float32 bias (0 or -inf) of keys [k0, k1), as (B*Hkv, G*Sq, k1 - k0)."""
    b, hkv, g, sq, skv = shape
    keep = np.ones((b, hkv * g, sq, k1 - k0), bool)
    add = np.zeros(keep.shape, np.float32)
    if mask is not None:
        m = np.broadcast_to(_host(mask), (b, hkv * g, sq, skv))[..., k0:k1]
        if m.dtype == np.bool_:
            keep &= m
        else:
            add += m.astype(np.float32)
    if causal:
        keep &= np.arange(k0, k1)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
    return np.where(keep, add, -np.inf).astype(np.float32).reshape(b * hkv, g * sq, k1 - k0)


def attention_gradient(ctx):
    a, call = ctx.attrs, ctx.call
    q, k, v = ctx.inputs[:3]
    mask = ctx.inputs[3] if len(ctx.inputs) == 4 else None
    do, dlse = (ctx.out_grad if a.return_lse else (ctx.out_grad, None))
    dtype = str(q.dtype)

    def prep(x):
        x = x if a.layout == "BHSD" else call("transpose", x, axes=(0, 2, 1, 3))
        return x if str(x.dtype) == "float32" else call("cast", x, dtype="float32")

    q, k, v, do = (prep(x) for x in (q, k, v, do))
    b, hq, sq, d = (int(s) for s in q.shape)
    hkv, skv = int(k.shape[1]), int(k.shape[2])
    g, bh, rows = hq // hkv, b * hkv, (hq // hkv) * sq
    scale = a.scale if a.scale is not None else 1.0 / float(np.sqrt(d))

    def finish(x, shape):
        x = call("reshape", x, shape=shape)
        x = x if a.layout == "BHSD" else call("transpose", x, axes=(0, 2, 1, 3))
        return x if dtype == "float32" else call("cast", x, dtype=dtype)

    if skv == 0 or b * hq * sq == 0:
        zq = np.zeros((b, hq, sq, d), np.float32)
        zk = np.zeros((b, hkv, skv, d), np.float32)
        return (finish(zq, (b, hq, sq, d)), finish(zk, (b, hkv, skv, d)),
                finish(zk, (b, hkv, skv, d))) + ((None,) if mask is not None else ())
    o, lse = call("attention", q, k, v, *(() if mask is None else (mask,)), causal=a.causal,
                  scale=a.scale, softcap=a.softcap, return_lse=True)
    qg, dog, og = (call("reshape", x, shape=(bh, rows, d)) for x in (q, do, o))
    kk, vv = (call("reshape", x, shape=(bh, skv, d)) for x in (k, v))
    # rows that see no key have P = 0: exp(s - inf)
    lse_h = _host(lse).reshape(bh, rows, 1)
    lse_safe = np.where(np.isfinite(lse_h), lse_h, np.inf).astype(np.float32)
    delta = call("sum", call("fused", dog, og, expr="multiply(x0, x1)"), axis=-1, keepdims=True)
    if dlse is not None:  # d lse / d s = P: dS gains P * dlse
        delta = call("fused", delta, np.asarray(_host(dlse), np.float32).reshape(bh, rows, 1),
                     expr="subtract(x0, x1)")
    cap = a.softcap
    dq, dks, dvs = None, [], []
    for k0 in range(0, skv, KEY_TILE):
        k1 = min(skv, k0 + KEY_TILE)
        kt, vt = (call("strided_slice", x, begin=(0, k0, 0), end=(bh, k1, d)) for x in (kk, vv))
        raw = call("batch_matmul", qg, kt, transpose_b=True)
        if cap:
            th = call("fused", raw, expr=f"tanh(multiply(x0, {scale / cap!r}))")
            s = call("fused", th, expr=f"multiply(x0, {cap!r})")
        else:
            s = call("fused", raw, expr=f"multiply(x0, {scale!r})")
        if mask is not None or a.causal:
            s = call("fused", s, _bias(mask, a.causal, (b, hkv, g, sq, skv), k0, k1),
                     expr="add(x0, x1)")
        p = call("fused", s, lse_safe, expr="exp(subtract(x0, x1))")
        dvs.append(call("batch_matmul", p, dog, transpose_a=True))
        dp = call("batch_matmul", dog, vt, transpose_b=True)
        if cap:
            ds = call("fused", p, dp, delta, th,
                      expr=f"multiply(multiply(x0, subtract(x1, x2)), "
                           f"multiply(subtract(1.0, multiply(x3, x3)), {scale!r}))")
        else:
            ds = call("fused", p, dp, delta,
                      expr=f"multiply(multiply(x0, subtract(x1, x2)), {scale!r})")
        dqt = call("batch_matmul", ds, kt)
        dq = dqt if dq is None else call("fused", dq, dqt, expr="add(x0, x1)")
        dks.append(call("batch_matmul", ds, qg, transpose_a=True))
    dk = dks[0] if len(dks) == 1 else call("concatenate", *dks, axis=1)
    dv = dvs[0] if len(dvs) == 1 else call("concatenate", *dvs, axis=1)
    out = (finish(dq, (b, hq, sq, d)), finish(dk, (b, hkv, skv, d)), finish(dv, (b, hkv, skv, d)))
    return out + ((None,) if mask is not None else ())
