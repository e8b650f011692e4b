"""What gpucg fuses, found in a front end's lowered calls (gpucg operators on the values of a
gpucg/graph/ir.py graph), in this order:

0. Calls whose results nothing reads go; a dense over rows a reshape flattened, reshaped back
   after it, reads and writes the unflattened data (the reshapes go).
1. batch_norm after a conv2d or a dense with constant weights: folded into the weights and the
   bias (gpucg.ops.fold_batch_norm), no kernel left.
2. The epilogue of dense and conv2d (weights constant or the model's): an add of a
   per-channel constant (the bias), an activation (relu, exact or tanh GELU, sigmoid, tanh,
   SiLU, HardSwish: recognized by what the elementwise calls compute, whatever the model's
   decomposition), and a residual add, before or after the activation; then a multiply by a
   per-channel constant of a dense or conv2d without activation, through transposes of its
   result (ConvNeXt's layer scale): folded into the weights and the bias.
3. Scaled dot-product attention: matmul(Q, K^T), times or divided by a constant, plus a mask
   (additive, or a where with -inf on a causal pattern), softmax on the last axis, matmul by V:
   one gpucg.ops.attention (gpucg/graph/attention.py).
4. The remaining chains of elementwise calls: one ``fused`` kernel each.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ops import fold_batch_norm
from ..ops._epilogue import ACTIVATIONS as _EPILOGUE, activate
from ..ops._expr import MAX_INPUTS, Expr, evaluate, lift, typecheck
from .attention import attention
from .index import Index, expr_of, scalar, substitute
from .ir import Call, Graph
from .sizes import same

#: the activations an epilogue takes (gpucg/ops/_unary.py's ACTIVATIONS)
ACTIVATIONS = tuple(a for a in _EPILOGUE if a)


# -- 0. dead calls and views ------------------------------------------------------------------

def prune(g: Graph, calls: list) -> list:
    """The calls some result needs, in order (the others compute what nothing reads)."""
    needed, keep = set(g.results), []
    for c in reversed(calls):
        if any(o in needed for o in c.outputs):
            keep.append(c)
            needed.update(c.inputs)
    return keep[::-1]


def views(g: Graph, calls: list) -> list:
    """dense on (rows, k) made by reshaping (..., k), its (rows, n) result reshaped to
    (..., n): dense on the (..., k) data itself, which gives (..., n) (no reshape left, so
    what follows can join its epilogue)."""
    for p in [c for c in calls if c.op == "dense"]:
        ix = Index(calls, g.results)
        src, back = ix.producer.get(p.inputs[0]), ix.only_user(p.outputs[0])
        if src is None or back is None or src.op != "reshape" or back.op != "reshape":
            continue
        xs, ys = g.type_of(src.inputs[0]).shape, g.type_of(back.outputs[0]).shape
        flat, out = g.type_of(p.inputs[0]).shape, g.type_of(p.outputs[0]).shape
        if len(flat) != 2 or not xs or len(xs) != len(ys) or not same(xs[-1], flat[-1]) or \
                not same(ys[-1], out[-1]) or not all(same(a, b) for a, b in
                                                     zip(xs[:-1], ys[:-1])):
            continue
        p.inputs[0] = src.inputs[0]
        p.nodes = src.nodes + p.nodes + back.nodes
        p.outputs = back.outputs
        p.fusion.append("the reshapes to rows and back: the data read and written as they are")
        calls.remove(back)
        if ix.users.get(src.outputs[0]) == [p] and src.outputs[0] not in ix.outputs:
            calls.remove(src)
    return calls


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
        p.fusion.append("batch_norm folded into the weights and bias")
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
        if not g.is_weight(p.inputs[1]) or (p.op == "dense" and g.type_of(p.inputs[0]).ndim < 1):
            continue
        ix = Index(calls, g.results)
        add = ix.only_user(p.outputs[0])
        consts = all(i in g.consts for i in p.inputs[1:])
        bias = add and consts and _bias_of(g, p, add, p.outputs[0])
        if bias is not None and bias is not False:
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
                w = g.type_of(p.inputs[1])
                p.inputs.append(_new(g, np.zeros(w.shape[0], w.dtype),
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


# -- 2b. per-channel scales ------------------------------------------------------------------

def fold_scales(g: Graph, calls: list) -> list:
    """A Mul by a constant per output channel (or one number) of a dense or conv2d with
    constant weights and no activation or residual, directly or through transposes of its
    result: folded into the weights and the bias, no pass left."""
    for p in [c for c in calls if c.op in ("dense", "conv2d")]:
        if len(p.inputs) > 3 or p.attrs.get("activation") or \
                not all(i in g.consts for i in p.inputs[1:]):
            continue
        ix = Index(calls, g.results)
        value, views = p.outputs[0], []
        axis = 1 if p.op == "conv2d" else g.type_of(value).ndim - 1
        user = ix.only_user(value)
        while user is not None and user.op == "transpose" and user.attrs.get("axes"):
            axis, value = list(user.attrs["axes"]).index(axis), user.outputs[0]
            views.append(user)
            user = ix.only_user(value)
        w = g.consts[p.inputs[1]]
        out = 0 if p.op == "dense" or p.attrs.get("kernel_layout", "OIHW") == "OIHW" else 3
        s = user and _channel_scale(g, user, value, axis, w.shape[out])
        if s is None or not np.isfinite(s).all():  # inf or NaN factors: kept as the Mul
            continue
        shape = [1] * w.ndim
        shape[out] = -1
        p.inputs[1] = _new(g, (w * s.reshape(shape)).astype(w.dtype), p.inputs[1] + "*scale")
        if len(p.inputs) > 2:
            b = g.consts[p.inputs[2]]
            p.inputs[2] = _new(g, (b * s).astype(b.dtype), p.inputs[2] + "*scale")
        last = views[-1] if views else p
        last.outputs, last.nodes = user.outputs, last.nodes + user.nodes
        p.fusion.append("Mul by a per-channel constant folded into the weights and bias")
        calls.remove(user)
    return calls


def _channel_scale(g: Graph, call, value: str, axis: int, n: int):
    """The (n,) factors of ``call`` when it multiplies ``value`` by a constant that varies
    along ``axis`` only (or not at all), else None."""
    e, vt = expr_of(call), g.type_of(value)
    if e is None or e.op != "multiply" or value not in call.inputs:
        return None
    k = call.inputs.index(value)
    if str(e) == "multiply(x0, x1)" and len(call.inputs) == 2:
        c = g.consts.get(call.inputs[1 - k])
        if c is None or c.dtype != np.dtype(vt.dtype) or c.ndim > vt.ndim:
            return None
        at = axis - (vt.ndim - c.ndim)  # the axis in c's own dims (right-aligned)
        if any(d != 1 for a, d in enumerate(c.shape) if a != at) or \
                (0 <= at < c.ndim and c.shape[at] not in (1, n)):
            return None
        return np.broadcast_to(c.reshape(-1), (n,)).astype(np.float64)
    number = [a.args[0] for a in e.args if a.op == "const"]
    if len(call.inputs) == 1 and len(number) == 1 and isinstance(number[0], float):
        return np.full(n, number[0])
    return None


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
    calls = views(g, prune(g, calls))
    return chains(g, attention(g, fold_scales(g, epilogues(g, fold_norms(g, calls)))))
