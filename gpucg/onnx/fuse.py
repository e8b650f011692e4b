"""What gpucg fuses, found in the lowered calls (gpucg/onnx/lower.py), in this order:

1. BatchNormalization after a Conv or a Gemm/MatMul with constant weights: folded into the
   weights and the bias (gpucg.ops.fold_batch_norm), no kernel left.
2. The epilogue of dense and conv2d: an Add of a per-channel constant (the bias), an
   activation (relu, exact or tanh GELU, sigmoid, tanh: recognized by what the nodes compute,
   whatever the exporter's decomposition), and a residual Add, before or after the activation.
3. Scaled dot-product attention: MatMul(Q, K^T), times or divided by a constant, plus a mask
   (additive, or a Where with -inf on a causal pattern), Softmax on the last axis, MatMul by V:
   one gpucg.ops.attention.
4. The remaining chains of elementwise nodes: one ``fused`` kernel each.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ops import fold_batch_norm
from ..ops._epilogue import activate
from ..ops._expr import MAX_INPUTS, Expr, evaluate, lift, parse, typecheck
from .graph import Graph, probes, value_at
from .lower import Call

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "sigmoid", "tanh")


class Index:
    """Who produces and who consumes each value, over the current calls."""

    def __init__(self, calls: list, outputs):
        self.calls, self.outputs = calls, set(outputs)
        self.producer = {o: c for c in calls for o in c.outputs}
        self.users: dict[str, list] = {}
        for c in calls:
            for i in c.inputs:
                self.users.setdefault(i, []).append(c)
        self.order = {id(c): k for k, c in enumerate(calls)}

    def only_user(self, value: str):
        """The one call reading ``value`` (None when several, none, or a graph output)."""
        users = self.users.get(value, [])
        return users[0] if len(users) == 1 and value not in self.outputs else None

    def before(self, value: str, call) -> bool:
        """``value`` exists before ``call`` runs (a graph input, or made by an earlier call)."""
        p = self.producer.get(value)
        return p is None or self.order[id(p)] < self.order[id(call)]


def substitute(e: Expr, args) -> Expr:
    """``e`` with its placeholders x0, x1, ... replaced by ``args``."""
    if e.op == "input":
        return args[e.args[0]]
    if e.op == "const":
        return e
    return Expr(e.op, tuple(substitute(a, args) for a in e.args), e.attrs)


def scalar(g: Graph, name: str):
    """A constant of one element as a Python number (infinities as the float32 limits, which
    softmax and max treat alike), or None."""
    c = g.consts.get(name)
    if c is None or c.size != 1:
        return None
    v = c.reshape(-1)[0].item()
    if isinstance(v, float) and not np.isfinite(v):
        return float(np.sign(v) * np.finfo(np.float32).max) if not np.isnan(v) else None
    return v


def _one(c) -> Expr | None:
    return parse(c.attrs["expr"]) if c.op == "fused" else None


# -- 1. batch norms --------------------------------------------------------------------------

def fold_norms(g: Graph, calls: list) -> list:
    ix = Index(calls, g.results)
    for bn in [c for c in calls if c.op == "batch_norm"]:
        p = ix.producer.get(bn.inputs[0])
        if p is None or p.op not in ("conv2d", "dense") or ix.only_user(bn.inputs[0]) is not bn \
                or len(p.inputs) > 3 or not all(i in g.consts for i in p.inputs[1:] + bn.inputs[1:]):
            continue
        w, b = fold_batch_norm(g.consts[p.inputs[1]], g.consts.get(p.inputs[2]) if
                               len(p.inputs) > 2 else None,
                               *(g.consts[i] for i in bn.inputs[1:]), eps=bn.attrs["eps"])
        p.inputs[1:] = [_new(g, w, p.inputs[1] + "*bn"), _new(g, b, bn.inputs[0] + ".bias*bn")]
        p.outputs, p.nodes = bn.outputs, p.nodes + bn.nodes
        p.fusion.append("BatchNormalization folded into the weights and bias")
        calls.remove(bn)
    return calls


def _new(g: Graph, array, name: str) -> str:
    g.consts[name] = np.ascontiguousarray(array)
    return name


# -- 2. epilogues ----------------------------------------------------------------------------

def _bias_of(g: Graph, p, add, value) -> np.ndarray | None:
    e = _one(add)
    if e is None or e.op != "add" or len(add.inputs) != 2 or str(e) != "add(x0, x1)":
        return None
    other = add.inputs[1] if add.inputs[0] == value else add.inputs[0]
    c = g.consts.get(other)
    n = g.type_of(value).shape[1 if p.op == "conv2d" else -1]
    if c is None or not isinstance(n, int) or c.dtype != np.dtype(g.type_of(value).dtype):
        return None
    want = (n, 1, 1) if p.op == "conv2d" else (n,)
    shape = c.shape[-len(want):] if c.ndim >= len(want) else None
    if shape != want or any(d != 1 for d in c.shape[:-len(want)]) or \
            (c.ndim > g.type_of(value).ndim):
        return None
    return c.reshape(-1)


def activation(g: Graph, ix: Index, value: str, limit: int = 12):
    """(name, calls, exit value) when the elementwise calls reading ``value`` compute one of
    the fused activations of it and nothing else leaves them; else None."""
    region, made = [], {value}
    while len(region) < limit:
        users = [c for v in made for c in ix.users.get(v, []) if c not in region]
        if not users or value in ix.outputs:
            return None
        if any(c.op != "fused" for c in users):
            return None
        ready = [c for c in users if all(i in made or scalar(g, i) is not None
                                         for i in c.inputs)]
        if not ready:
            return None
        c = ready[0]
        region.append(c)
        made |= set(c.outputs)
        leaving = [v for v in made if v in ix.outputs or
                   any(u not in region for u in ix.users.get(v, []))]
        if len(leaving) == 1 and leaving[0] != value:
            name = _which(g, ix, region, value, leaving[0])
            if name:
                return name, region, leaving[0]
    return None


def _tree(g: Graph, ix: Index, value: str, leaves: dict, inline) -> Expr:
    """The expression of ``value`` over ``leaves`` (value -> Expr), inlining producers that
    ``inline(call)`` allows; scalars become literals."""
    if value in leaves:
        return leaves[value]
    s = scalar(g, value)
    if s is not None:
        return lift(s)
    p = ix.producer.get(value)
    if p is None or not inline(p):
        leaves[value] = Expr("input", (len(leaves),))
        return leaves[value]
    return substitute(_one(p), [_tree(g, ix, i, leaves, inline) for i in p.inputs])


def _which(g, ix, region, value, exit_value) -> str | None:
    tree = _tree(g, ix, exit_value, {value: Expr("input", (0,))}, lambda c: c in region)
    x = np.linspace(-6.0, 6.0, 97)
    try:
        y = evaluate(typecheck(tree, ("float64",)), [x])
    except Exception:  # noqa: BLE001  not a function of one float
        return None
    for name in ACTIVATIONS:
        if np.allclose(y, activate(x.copy(), name), rtol=1e-6, atol=1e-6):
            return name
    return None


def _residual(g, ix, p, value):
    add = ix.only_user(value)
    e = add and _one(add)
    if e is None or str(e) != "add(x0, x1)" or add.inputs[0] == add.inputs[1]:
        return None
    r = add.inputs[1] if add.inputs[0] == value else add.inputs[0]
    rt, vt = g.type_of(r), g.type_of(value)
    same = rt.dtype == vt.dtype and rt.ndim == vt.ndim and all(
        sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0 for a, b in zip(rt.shape, vt.shape))
    ok = same and r not in g.consts and r not in g.dynamic and ix.before(r, p)
    return (add, r) if ok else None


def epilogues(g: Graph, calls: list) -> list:
    for p in [c for c in calls if c.op in ("dense", "conv2d")]:
        if p.inputs[1] not in g.consts or (p.op == "dense" and g.type_of(p.inputs[0]).ndim < 1):
            continue
        ix = Index(calls, g.results)
        add = ix.only_user(p.outputs[0])
        bias = add and _bias_of(g, p, add, p.outputs[0])
        if bias is not None:
            old = g.consts[p.inputs[2]] if len(p.inputs) > 2 else 0
            p.inputs[2:] = [_new(g, old + bias.astype(g.consts[p.inputs[1]].dtype),
                                 p.outputs[0] + ".bias")]
            _absorb(calls, p, [add], add.outputs[0], "Add (bias)")
            ix = Index(calls, g.results)
        act = activation(g, ix, p.outputs[0])
        res = _residual(g, ix, p, act[2] if act else p.outputs[0])
        where = "after"
        if act is None and res is not None:
            act_after = activation(g, ix, res[0].outputs[0])
            if act_after:
                where, act = "before", act_after
        if act:
            p.attrs["activation"] = act[0]
            _absorb(calls, p, act[1], act[2], f"{act[0]} ({len(act[1])} node(s)) as the "
                                                   "activation")
        if res is not None:
            if len(p.inputs) == 2:
                n = g.consts[p.inputs[1]].shape[0]
                p.inputs.append(_new(g, np.zeros(n, g.consts[p.inputs[1]].dtype),
                                     p.outputs[0] + ".zero_bias"))
            p.inputs.append(res[1])
            p.attrs["residual_position"] = where
            out = res[0].outputs[0] if where == "after" or not act else act[2]
            _absorb(calls, p, [res[0]], out, f"Add (residual, {where} the activation)")
            if where == "before":
                p.outputs = [act[2]]
    return calls


def _absorb(calls: list, p: Call, taken: list, out: str, what: str) -> None:
    for c in taken:
        p.nodes += c.nodes
        calls.remove(c)
    p.outputs = [out]
    p.fusion.append(what)


# -- 3. attention ----------------------------------------------------------------------------

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


def _scores(g: Graph, ix: Index, value: str, user):
    """Walk back from the softmax's input over scale, mask and causal Where calls to the
    MatMul(Q, K^T): (matmul call, scale, mask value, causal, calls taken) or None."""
    scale, mask, causal, taken = 1.0, None, False, []
    for _ in range(3):
        c = ix.producer.get(value)
        e = c and _one(c)
        if e is None or ix.only_user(value) is not user:
            break
        text, ins = str(e), c.inputs
        consts = [scalar(g, i) for i in ins]
        if text in ("multiply(x0, x1)", "divide(x0, x1)") and consts[1] is not None or \
                text == "multiply(x0, x1)" and consts[0] is not None:
            k = 1 - consts.index(next(v for v in consts if v is not None))
            f = float(consts[1 - k])
            scale, value = scale * (1 / f if text.startswith("divide") else f), ins[k]
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
    return mm, scale, mask, causal, taken


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
        mm, scale, mask, causal, taken = found
        q, kt, v = mm.inputs[0], mm.inputs[1], mm2.inputs[1]
        if any(g.type_of(a).ndim != 4 for a in (q, kt, v)) or \
                not isinstance(g.type_of(q).shape[3], int):
            continue
        if mask is not None and (g.type_of(mask).dtype != g.type_of(q).dtype or
                                 g.type_of(mask).ndim > 4):
            continue
        pos = calls.index(mm2)
        kp = ix.producer.get(kt)
        if kp is not None and kp.op == "transpose" and ix.only_user(kt) is mm and \
                kp.attrs.get("axes") is not None:
            axes = list(kp.attrs["axes"])
            axes[2], axes[3] = axes[3], axes[2]
            kp.attrs["axes"] = tuple(axes)
            k = kp.outputs[0] = kt + "^T"
        else:
            k = kt + "^T"
            calls.insert(pos, Call("transpose", {"axes": (0, 1, 3, 2)}, [kt], [k], []))
            pos += 1
        kt_shape = g.type_of(kt).shape
        g.types[k] = type(g.type_of(kt))(kt_shape[:2] + (kt_shape[3], kt_shape[2]),
                                          g.type_of(kt).dtype)
        how = ["MatMul(Q, K^T)"] + [f"scale {scale:.6g}"] + (["additive mask"] if mask else []) \
            + (["causal Where(-inf)"] if causal else []) + ["Softmax", "MatMul(V)"]
        new = Call("attention", {"causal": causal, "scale": scale, "layout": "BHSD"},
                   [q, k, v] + ([mask] if mask else []), mm2.outputs,
                   [n for c in [mm] + taken[::-1] + [sm, mm2] for n in c.nodes],
                   ["attention pattern: " + " -> ".join(how)])
        calls[pos] = new
        for c in [mm, sm] + taken:
            calls.remove(c)
    return calls


# -- 4. elementwise chains -------------------------------------------------------------------

def chains(g: Graph, calls: list, apart: frozenset = frozenset()) -> list:
    """Every elementwise call whose one result feeds one elementwise call only is inlined
    into it: one ``fused`` kernel per chain (at most MAX_INPUTS arrays read)."""
    ix = Index(calls, g.results)
    inline = {id(c) for c in calls if c.op == "fused" and id(c) not in apart and
              len(c.outputs) == 1 and
              (u := ix.only_user(c.outputs[0])) is not None and u.op == "fused"}
    out = []
    for c in calls:
        if id(c) in inline:
            continue
        if c.op != "fused":
            out.append(c)
            continue
        leaves: dict = {}
        members: list = []

        def take(p):
            ok = id(p) in inline
            if ok:
                members.append(p)
            return ok
        tree = substitute(_one(c), [_tree(g, ix, i, leaves, take) for i in c.inputs])
        if len(leaves) > MAX_INPUTS:  # too many arrays for one kernel: keep the nodes apart
            return chains(g, calls, apart | {id(m) for m in members})
        nodes = [n for m in sorted(members, key=lambda m: ix.order[id(m)]) for n in m.nodes]
        fused = Call("fused", {"expr": str(tree)}, list(leaves), c.outputs, nodes + c.nodes,
                     list(c.fusion))
        if members:
            fused.fusion.append(f"{len(members) + 1} elementwise nodes in one kernel")
        out.append(fused)
    return out


def fuse(g: Graph, calls: list) -> list:
    """All the fusions, in order."""
    return chains(g, attention(g, epilogues(g, fold_norms(g, calls))))
