"""Scaled dot-product attention found in the lowered calls: matmul(Q, K^T), times or divided
by a constant (or Q and K^T each scaled, by the square root of the scale as torch's dynamo
exporter writes it: the scale is the product), plus a mask (additive, or a where with -inf on
a causal pattern, checked on the mask's values at two probe sizes), softmax on the last axis,
matmul by V: one gpucg.ops.attention (gpucg/graph/fuse.py runs this pass third)."""

from __future__ import annotations

import numpy as np

from .host import probes, value_at
from .index import Index, expr_of, scalar
from .ir import Call, Graph


def _causal(g: Graph, cond: str, masked_when: bool) -> bool:
    """The size-dependent ``cond`` lets query i see key j exactly when j <= i, at two probe
    sizes (``masked_when``: the value of cond that masks)."""
    if cond not in g.dynamic and cond not in g.consts:
        return False
    for binding in probes(g):
        c = np.asarray(value_at(g, cond, binding, {}))
        if c.ndim < 2 or c.shape[-1] != c.shape[-2]:
            return False
        tril = np.tril(np.ones(c.shape[-2:], bool))
        if not np.array_equal(np.broadcast_to(c.astype(bool) != masked_when, c.shape),
                              np.broadcast_to(tril, c.shape)):
            return False
    return True


def _leads(g: Graph, ix: Index, value: str, depth: int = 4) -> bool:
    """``value`` comes from a matmul through at most ``depth`` elementwise calls."""
    p = ix.producer.get(value)
    if p is None or depth == 0:
        return False
    if p.op == "matmul":
        return True
    return p.op == "fused" and any(_leads(g, ix, i, depth - 1) for i in p.inputs
                                   if scalar(g, i) is None)


def _scaled(g: Graph, c):
    """(the input, the factor) of a call multiplying or dividing by a one-element constant,
    else None."""
    e = c and expr_of(c)
    if e is None:
        return None
    text, ins = str(e), c.inputs
    consts = [scalar(g, i) for i in ins]
    if text in ("multiply(x0, x1)", "divide(x0, x1)") and consts[1] is not None or \
            text == "multiply(x0, x1)" and consts[0] is not None:
        k = 1 - consts.index(next(v for v in consts if v is not None))
        f = float(consts[1 - k])
        return ins[k], (1 / f if text.startswith("divide") else f)
    return None


def _scores(g: Graph, ix: Index, value: str, user):
    """Walk back from the softmax's input over scale, mask and causal Where calls to the
    MatMul(Q, K^T), and from there over a scale of Q and of K^T each: (matmul call, its two
    operands before their scales, the scale (the product of all), mask value, causal, calls
    taken) or None."""
    scale, mask, causal, taken = 1.0, None, False, []
    for _ in range(3):
        c = ix.producer.get(value)
        e = c and expr_of(c)
        if e is None or ix.only_user(value) is not user:
            break
        text, ins = str(e), c.inputs
        scaled = _scaled(g, c)
        if scaled is not None:
            value, f = scaled
            scale *= f
        elif text == "add(x0, x1)" and mask is None and (_leads(g, ix, ins[0]) or
                                                         _leads(g, ix, ins[1])):
            k = 0 if _leads(g, ix, ins[0]) else 1
            mask, value = ins[1 - k], ins[k]
        elif text == "where(x0, x1, x2)" and not causal:
            low = [scalar(g, i) for i in ins[1:]]
            side = next((k for k, v in enumerate(low) if v is not None and v <= -1e30), None)
            if side is None or not _causal(g, ins[0], masked_when=side == 0):
                break
            causal, value = True, ins[2 - side]
        else:
            break
        taken.append(c)
        user = c
    mm = ix.producer.get(value)
    if mm is None or mm.op != "matmul" or mm.attrs or ix.only_user(value) is not user:
        return None
    operands = list(mm.inputs)
    for k, name in enumerate(mm.inputs):  # Q and K^T each scaled (by sqrt(scale): dynamo's)
        scaled = _scaled(g, ix.producer.get(name))
        if scaled is not None and ix.only_user(name) is mm:
            operands[k], f = scaled
            scale *= f
            taken.append(ix.producer[name])
    return mm, operands, scale, mask, causal, taken


def _merged(g: Graph, ix: Index, kt: str, readers: list):
    """(K, the calls) where ``kt`` is Reshape(Transpose(Reshape(K, (B*H, S, D)), (0, 2, 1)),
    (B, H, D, S)), each step read only by the next (torch's dynamo exporter's K^T), else None."""
    chain, value = [], kt
    for op in ("reshape", "transpose", "reshape"):
        c = ix.producer.get(value)
        if c is None or c.op != op or not any(ix.only_user(value) is r for r in readers):
            return None
        chain.append(c)
        readers, value = [c], c.inputs[0]
    k, mid = g.type_of(value).shape, g.type_of(chain[2].outputs[0]).shape
    if len(k) != 4 or len(mid) != 3 or tuple(mid[1:]) != tuple(k[2:]) or \
            tuple(chain[1].attrs.get("axes") or ()) != (0, 2, 1) or \
            tuple(g.type_of(kt).shape) != (k[0], k[1], k[3], k[2]):
        return None
    return value, chain


def attention(g: Graph, calls: list) -> list:
    for sm in [c for c in calls if c.op == "softmax"]:
        ix = Index(calls, g.results)
        x = sm.inputs[0]
        t = g.type_of(x)
        mm2 = ix.only_user(sm.outputs[0])
        if t.ndim != 4 or sm.attrs.get("axis", -1) % 4 != 3 or mm2 is None or \
                mm2.op != "matmul" or mm2.attrs or mm2.inputs[0] != sm.outputs[0]:
            continue
        found = _scores(g, ix, x, sm)
        if found is None:
            continue
        mm, (q, kt), scale, mask, causal, taken = found
        v = mm2.inputs[1]
        if any(g.type_of(a).ndim != 4 for a in (q, kt, v)) or \
                not isinstance(g.type_of(q).shape[3], int):
            continue
        if mask is not None and (g.type_of(mask).dtype != g.type_of(q).dtype or
                                 g.type_of(mask).ndim > 4):
            continue
        pos = calls.index(mm2)
        kp = ix.producer.get(kt)
        merged = _merged(g, ix, kt, [mm] + taken)
        k, chain = merged or (kt + "^T", [])
        if merged is not None:
            pass  # K itself: the views that made K^T go
        elif kp is not None and kp.op == "transpose" and \
                any(ix.only_user(kt) is c for c in [mm] + taken) and \
                kp.attrs.get("axes") is not None:
            axes = list(kp.attrs["axes"])
            axes[2], axes[3] = axes[3], axes[2]
            kp.attrs["axes"] = tuple(axes)
            kp.outputs[0] = k
        else:
            calls.insert(pos, Call("transpose", {"axes": (0, 1, 3, 2)}, [kt], [k], []))
            pos += 1
        kt_shape = g.type_of(kt).shape
        g.types.setdefault(k, type(g.type_of(kt))(kt_shape[:2] + (kt_shape[3], kt_shape[2]),
                                                   g.type_of(kt).dtype))
        how = ["MatMul(Q, K^T)"] + [f"scale {scale:.6g}"] + (["additive mask"] if mask else []) \
            + (["causal Where(-inf)"] if causal else []) + ["Softmax", "MatMul(V)"]
        new = Call("attention", {"causal": causal, "scale": scale, "layout": "BHSD"},
                   [q, k, v] + ([mask] if mask else []), mm2.outputs,
                   [n for c in chain[::-1] + [mm] + taken[::-1] + [sm, mm2] for n in c.nodes],
                   ["attention pattern: " + " -> ".join(how)] +
                   (["K^T as Reshape, Transpose, Reshape: K read as it is"] if chain else []))
        calls[pos] = new
        for c in [mm, sm] + taken + chain:
            calls.remove(c)
        _in_place(g, calls, new)
    for att in [c for c in calls if c.op == "attention" and len(c.outputs) == 1 and
                c.attrs.get("layout", "BHSD") == "BHSD"]:  # a front end's own attention
        _in_place(g, calls, att)
    return calls


HEADS = (0, 2, 1, 3)  # (B, S, H, D) <-> (B, H, S, D)


def _in_place(g: Graph, calls: list, att: Call) -> None:
    """Q, K and V made (B, H, S, D) by Transposes of (B, S, H, D) tensors that only the
    attention reads: it reads those tensors in place (layout BSHD) and the Transposes, copies
    on a device, go; its (B, S, H, D) result feeds the Transpose back, or stands for it."""
    moves = []
    for name in att.inputs[:3]:
        p = next((c for c in calls if name in c.outputs), None)
        if p is None or p.op != "transpose" or tuple(p.attrs.get("axes") or ()) != HEADS or \
                [c for c in calls if name in c.inputs] != [att] or name in g.results:
            return
        moves.append(p)
    att.inputs[:3] = [p.inputs[0] for p in moves]
    att.attrs["layout"] = "BSHD"
    att.nodes[:0] = [n for p in moves for n in p.nodes]
    for p in moves:
        calls.remove(p)
    out = att.outputs[0]
    users = [c for c in calls if out in c.inputs]
    if len(users) == 1 and users[0].op == "transpose" and out not in g.results and \
            tuple(users[0].attrs.get("axes") or ()) == HEADS:
        att.outputs, att.nodes = users[0].outputs, att.nodes + users[0].nodes
        calls.remove(users[0])
    else:
        t = g.type_of(out)
        att.outputs = [out + "#BSHD"]
        g.types[att.outputs[0]] = type(t)(tuple(t.shape[a] for a in HEADS), t.dtype)
        calls.insert(calls.index(att) + 1, Call("transpose", {"axes": HEADS}, att.outputs,
                                                [out], []))
    att.fusion.append("layout BSHD: the heads' Transposes are read in place")
