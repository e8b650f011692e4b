"""What the attention operators share (attention, paged_attention, attention_varlen): the
window and ALiBi attributes, the float64 reference of one batch of sequences, and the checks of
the index arrays that say where a sequence's keys are.

Positions are bottom-right aligned: query i of Sq sits at key position i' = i + Skv - Sq.
- causal: query i sees key j when j <= i';
- window w: query i sees key j when i' - w <= j <= i' (a window bounds both sides);
- ALiBi: the score gains -slope_h * |i' - j| (FlashAttention's convention), slope_h of query
  head h.
A row that sees no key gives zeros and a log-sum-exp of -inf.
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from ..errors import AttrError, DTypeError, InputError, describe, require_int


def window_attr(value) -> int | None:
    """The ``window`` attribute: None or an int >= 0 (keys i' - w .. i')."""
    if value is None:
        return None
    w = require_int("window", value)
    if w < 0:
        raise AttrError(f"window={w} is not allowed; it must be an int >= 0 (query i sees keys "
                        "i' - window .. i') or None")
    return w


def slopes_attr(value) -> tuple | None:
    """The ``alibi_slopes`` attribute: None or one finite float per query head, as a tuple
    (a list, a tuple or a 1-D array of them)."""
    if value is None:
        return None
    get = getattr(value, "get", None)
    if callable(get) and not isinstance(value, (dict, tuple, list)):  # a device array
        value = get()
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AttrError(f"alibi_slopes={describe(value)} must be a 1-D sequence of floats "
                        "(one a query head) or None") from None
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
        raise AttrError(f"alibi_slopes={describe(value)} must be a non-empty 1-D sequence of "
                        "finite floats (one a query head) or None")
    return tuple(float(x) for x in arr)


def check_slopes(slopes, hq, op: str) -> None:
    """InputError unless there is one slope a query head (when the head count is known)."""
    if slopes is not None and isinstance(hq, (int, np.integer)) and len(slopes) != int(hq):
        raise InputError(f"{op}: alibi_slopes has {len(slopes)} values, but q has {hq} heads; "
                         "give one slope a query head")


def need(op: str, name: str, t, ndim: int, dtypes, what: str, like=None) -> None:
    """InputError unless ``t`` has rank ``ndim`` (``what`` says its axes), DTypeError unless
    its dtype is one of ``dtypes`` (and ``like``'s, when given)."""
    if t.ndim != ndim:
        raise InputError(f"{op}: {name} has rank {t.ndim} (shape {t.shape}); it must be "
                         f"{ndim}-D, {what}")
    if t.dtype not in dtypes:
        raise DTypeError(f"{op}: {name} dtype {t.dtype!r} is not supported; allowed: "
                         f"{', '.join(dtypes)}")
    if like is not None and t.dtype != like[1]:
        raise DTypeError(f"{op}: {name} dtype {t.dtype} must equal {like[0]}'s ({like[1]})")


def head_constraints(op: str, hq, hkv, slopes, kv: str = "k's and v's") -> list:
    """The rules on head counts: Hq a multiple of Hkv (``kv``: whose heads those are), one
    ALiBi slope a query head."""
    from ..op import Constraint

    out = []
    if sympy.sympify(hkv) != 0:  # (printed, a remainder by a size 0 at run time is no error)
        out.append(Constraint(sympy.Eq(sympy.Mod(sympy.sympify(hq), sympy.sympify(hkv)), 0),
                              f"{op}: q's heads ({{}}) must be a multiple of {kv} heads ({{}}) "
                              "(grouped-query attention)", (hq, hkv)))
    if slopes is not None:
        out.append(Constraint(sympy.Eq(sympy.sympify(hq), len(slopes)),
                              f"{op}: q has {{}} heads, but alibi_slopes has {len(slopes)} "
                              "values (one a query head)", (hq,)))
    return out


def attend64(q, k, v, *, scale: float, softcap=None, causal=False, window=None, slopes=None,
             mask=None):
    """(o, lse) in float64 of q (B, Hq, Sq, D) over k, v (B, Hkv, Skv, D): the whole score
    matrix, the obvious way. ``mask`` (broadcast to (B, Hq, Sq, Skv)): bool (True takes part)
    or additive."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // max(hkv, 1), axis=1)
    v = np.repeat(v, hq // max(hkv, 1), axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    keep = np.ones(s.shape, bool)
    if mask is not None:
        m = np.broadcast_to(mask, s.shape)
        if m.dtype == np.bool_:
            keep &= m
        else:
            s = s + m.astype(np.float64)
    pos = np.arange(sq)[:, None] + (skv - sq)  # i'
    j = np.arange(skv)[None, :]
    if causal or window is not None:
        keep &= j <= pos
    if window is not None:
        keep &= j >= pos - window
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[None, :, None, None] * np.abs(pos - j)
    s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mx = s.max(axis=-1, keepdims=True) if skv else np.full(s.shape[:3] + (1,), -np.inf)
        safe = np.where(np.isfinite(mx), mx, 0.0)
        e = np.exp(s - safe)
        total = e.sum(axis=-1, keepdims=True)
        o = np.where(total > 0, (e @ v) / np.where(total > 0, total, 1), 0.0)
        lse = np.where(total > 0, np.log(np.where(total > 0, total, 1)) + safe, -np.inf)[..., 0]
    return o, lse


def default_scale(scale, d) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(int(d))


def check_tables(block_table, seq_lens, num_blocks: int, block_size: int, op: str) -> None:
    """InputError naming the first bad entry: a seq_lens entry below 0 or past the table's
    capacity (max_blocks * block_size), or a block id of a sequence's tokens outside
    0..num_blocks - 1. Entries past a sequence's last block are not read."""
    bt, sl = np.asarray(block_table), np.asarray(seq_lens)
    cap = bt.shape[1] * block_size
    for b, n in enumerate(sl.tolist()):
        if n < 0 or n > cap:
            raise InputError(f"{op}: seq_lens[{b}] = {n} is out of range; a sequence holds 0 to "
                             f"max_blocks * block_size = {bt.shape[1]} * {block_size} = {cap} "
                             "tokens (the block table's row)")
        used = bt[b, :-(-n // block_size)] if n else bt[b, :0]
        bad = np.flatnonzero((used < 0) | (used >= num_blocks))
        if bad.size:
            j = int(bad[0])
            raise InputError(f"{op}: block_table[{b}, {j}] = {int(used[j])} is out of range; "
                             f"block ids are 0 to num_blocks - 1 = {num_blocks - 1} (sequence "
                             f"{b} holds {n} tokens, so its first {-(-n // block_size)} entries "
                             "are read)")


def check_slots(slot_mapping, num_slots: int, op: str) -> None:
    """InputError naming the first slot_mapping entry outside -1..num_slots - 1 (-1: skip)."""
    sm = np.asarray(slot_mapping)
    bad = np.flatnonzero((sm < -1) | (sm >= num_slots))
    if bad.size:
        t = int(bad[0])
        raise InputError(f"{op}: slot_mapping[{t}] = {int(sm[t])} is out of range; slots are -1 "
                         f"(skip the token) or 0 to num_blocks * block_size - 1 = {num_slots - 1}")


def check_cu_seqlens(cu, total: int, name: str, op: str) -> None:
    """InputError unless ``cu`` starts at 0, never decreases and ends at ``total``."""
    c = np.asarray(cu).astype(np.int64)
    if c.size == 0 or c[0] != 0:
        raise InputError(f"{op}: {name}[0] = {int(c[0]) if c.size else None} must be 0 "
                         "(sequence i is rows cu[i]..cu[i+1])")
    drop = np.flatnonzero(np.diff(c) < 0)
    if drop.size:
        i = int(drop[0])
        raise InputError(f"{op}: {name}[{i + 1}] = {int(c[i + 1])} is below {name}[{i}] = "
                         f"{int(c[i])}; cumulative lengths never decrease")
    if c[-1] != total:
        raise InputError(f"{op}: {name}[{c.size - 1}] = {int(c[-1])}, its last entry, must "
                         f"equal the rows it indexes ({total})")
