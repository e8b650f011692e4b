"""The lowered calls as a graph: who makes and who reads each value (:class:`Index`), and the
elementwise expression of a ``fused`` call, for the fusion passes (gpucg/graph/fuse.py,
gpucg/graph/attention.py)."""

from __future__ import annotations

import numpy as np

from ..ops._expr import Expr, parse
from .ir import Graph


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


def expr_of(c) -> Expr | None:
    """The expression of a ``fused`` call (over x0, x1, ...), None for other calls."""
    return parse(c.attrs["expr"]) if c.op == "fused" else None
