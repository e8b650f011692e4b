"""What gpucg fuses, found in the lowered calls (gpucg/onnx/lower.py), in this order:

1. BatchNormalization after a Conv or a Gemm/MatMul with constant weights: folded into the
   weights and the bias (gpucg.ops.fold_batch_norm), no kernel left.
2. The epilogue of dense and conv2d: an Add of a per-channel constant (the bias), an
   activation (relu, exact or tanh GELU, sigmoid, tanh, SiLU, HardSwish: recognized by what
   the nodes compute, whatever the exporter's decomposition), and a residual Add, before or after the activation.
3. Scaled dot-product attention: MatMul(Q, K^T), times or divided by a constant, plus a mask
   (additive, or a Where with -inf on a causal pattern), Softmax on the last axis, MatMul by V:
   one gpucg.ops.attention (gpucg/onnx/attention.py).
4. The remaining chains of elementwise nodes: one ``fused`` kernel each.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ops import fold_batch_norm
from ..ops._epilogue import ACTIVATIONS as _EPILOGUE, activate
from ..ops._expr import MAX_INPUTS, Expr, evaluate, lift, typecheck
from .attention import attention
from .graph import Graph
from .index import Index, expr_of, scalar, substitute
from .lower import Call

#: the activations an epilogue takes (gpucg/ops/_unary.py's ACTIVATIONS)
ACTIVATIONS = tuple(a for a in _EPILOGUE if a)


# -- 1. batch norms --------------------------------------------------------------------------

def fold_norms(g: Graph, calls: list) -> list:
    ix = Index(calls, g.results)
    for bn in [c for c in calls if c.op == "batch_norm"]:
        p = ix.producer.get(bn.inputs[0])
        if p is None or p.op not in ("conv2d", "dense") or ix.only_user(bn.inputs[0]) is not bn \
                or len(p.inputs) > 3 or \
                not all(i in g.consts for i in p.inputs[1:] + bn.inputs[1:]):
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
    e = expr_of(add)
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
        ready = [c for c in users if all(i in made or literal(g, c, k) is not None
                                         for k, i in enumerate(c.inputs))]
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


def literal(g: Graph, call, k: int):
    """Input ``k`` of ``call`` as a Python number, when it is a constant of one element whose
    rank the call's other inputs reach (so the result's shape stays), else None."""
    c = g.consts.get(call.inputs[k])
    room = max([g.type_of(j).ndim for m, j in enumerate(call.inputs) if m != k] or [0])
    if c is None or c.ndim > room:
        return None
    e = expr_of(call)
    if k == 2 and str(e) == "where(x0, x1, x2)" and literal(g, call, 1) is not None:
        return None  # two weak numbers would choose float64: one stays an array of its dtype
    return scalar(g, call.inputs[k])


def _args(g: Graph, ix: Index, call, leaves: dict, inline) -> list:
    values = [literal(g, call, k) for k in range(len(call.inputs))]
    return [lift(v) if v is not None else _tree(g, ix, i, leaves, inline)
            for i, v in zip(call.inputs, values)]


def _tree(g: Graph, ix: Index, value: str, leaves: dict, inline) -> Expr:
    """The expression of ``value`` over ``leaves`` (value -> Expr), inlining producers that
    ``inline(call)`` allows; constants of one element become literals."""
    if value in leaves:
        return leaves[value]
    p = ix.producer.get(value)
    if p is None or not inline(p):
        leaves[value] = Expr("input", (len(leaves),))
        return leaves[value]
    return substitute(expr_of(p), _args(g, ix, p, leaves, inline))


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
    e = add and expr_of(add)
    if e is None or str(e) != "add(x0, x1)" or add.inputs[0] == add.inputs[1]:
        return None
    r = add.inputs[1] if add.inputs[0] == value else add.inputs[0]
    rt, vt = g.type_of(r), g.type_of(value)
    same = rt.dtype == vt.dtype and rt.ndim == vt.ndim and all(
        sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0
        for a, b in zip(rt.shape, vt.shape))
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
            _absorb(calls, p, [add], add.outputs[0], "Add (bias) in the epilogue")
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
            _absorb(calls, p, [res[0]], out, "Add (residual) in the epilogue" +
                    (f", {where} the activation" if act else ""))
            if where == "before":
                p.outputs = [act[2]]
    return calls


def _absorb(calls: list, p: Call, taken: list, out: str, what: str) -> None:
    for c in taken:
        p.nodes += c.nodes
        calls.remove(c)
    p.outputs = [out]
    p.fusion.append(what)


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
        tree = substitute(expr_of(c), _args(g, ix, c, leaves, take))
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
