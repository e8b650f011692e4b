"""Building a graph's calls: what a front end's handlers use to turn its nodes into gpucg
operator calls (:class:`Builder`), each output's type from the operator's own type relation
(SymPy sizes). Elementwise nodes become one-node ``fused`` calls (an expression over x0, x1,
...) that gpucg/graph/fuse.py joins into chains and epilogues.
"""

from __future__ import annotations

import numpy as np

from ..op import get_op
from ..ops._expr import node as ew_node, placeholders
from ..shape import TensorType
from .host import size_ones
from .ir import Call, Graph


class Builder:
    """Appends calls to ``calls`` over the values of graph ``g``; ``alias`` maps a
    pass-through's name to the value it stands for (followed by :meth:`ref`)."""

    def __init__(self, g: Graph):
        self.g, self.calls, self.alias = g, [], g.alias
        self._count = 0

    def ref(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def fresh(self, hint: str) -> str:
        """A value name not used before, from ``hint``."""
        self._count += 1
        return f"{hint}~{self._count}"

    def const(self, array, hint: str) -> str:
        name = self.fresh(hint)
        self.g.consts[name] = np.ascontiguousarray(array)
        return name

    def emit(self, node, op: str, inputs, outputs=None, **attrs) -> list:
        """A call of ``op`` for ``node`` (a front end's node: its ``label`` and ``name``); its
        output types inferred (names made up when not given)."""
        inputs = [self.ref(i) for i in inputs]
        o = get_op(op)
        types = o.infer(tuple(self.g.type_of(i) for i in inputs), o.make_attrs(**attrs))
        if outputs is None:
            self._count += 1
            outputs = [f"{node.name}/{op}#{self._count}_{k}" for k in range(len(types))]
        for name, t in zip(outputs, types):
            self.g.types[name] = t
        self.calls.append(Call(op, attrs, inputs, list(outputs), [node.label]))
        return outputs

    def view(self, node, x: str, dims: tuple, output: str) -> None:
        """A reshape of ``x`` to symbolic sizes ``dims``: a view, no kernel."""
        self.g.types[output] = TensorType(dims, self.g.type_of(x).dtype)
        self.calls.append(Call("reshape", {}, [x], [output], [node.label], view=dims))

    def broadcast(self, node, x: str, shape, output: str) -> None:
        """``x`` broadcast to ``shape`` (ints and symbolic sizes, NumPy's rules): broadcast_to
        where the sizes are ints, else a ``where`` against True of the sizes it grows to,
        made on the host once per size and fused with what reads it."""
        have = self.g.type_of(x).shape
        rank = max(len(have), len(shape))
        have, shape = (1,) * (rank - len(have)) + tuple(have), \
            (1,) * (rank - len(shape)) + tuple(shape)
        if any(a != 1 and b != 1 and a != b for a, b in zip(have, shape)):
            raise self.g.error(f"{node.label}: the input's shape {have} does not broadcast to "
                               f"{shape}")
        out = tuple(a if b == 1 else b for a, b in zip(have, shape))
        if all(isinstance(d, int) for d in out):
            self.emit(node, "broadcast_to", [x], [output], shape=out)
            return
        ones = size_ones(self.g, f"{node.name}/ones",
                         [b if a == 1 else 1 for a, b in zip(have, shape)])
        self.emit(node, "fused", [x, ones], [output], expr="where(x1, x0, x0)")

    def elementwise(self, node, op: str, inputs, output=None, **attrs) -> list:
        """Elementwise operator ``op`` as a one-node fused expression."""
        tree = ew_node(op, placeholders(len(inputs)), attrs)
        return self.expression(node, tree, inputs, output)

    def expression(self, node, expr, inputs, output=None) -> list:
        """An elementwise node as a fused expression (an Expr over x0, x1, ...)."""
        return self.emit(node, "fused", inputs, [output or node.outputs[0]], expr=str(expr))

    def host(self, node, fn, inputs, types, why: str, outputs=None, on="host") -> list:
        """A node run by the front end's own function ``fn`` on the data path (``why`` says
        why): on the host (NumPy arrays in, a tuple of arrays out), or with ``on="target"`` on
        the target's arrays; ``types``: its outputs' TensorTypes."""
        inputs = [self.ref(i) for i in inputs]
        if outputs is None:
            outputs = [self.fresh(f"{node.name}/host") for _ in types]
        for name, t in zip(outputs, types):
            self.g.types[name] = t
        self.calls.append(Call(on, {}, inputs, list(outputs), [node.label], fn=fn, on=on,
                               why=why))
        return outputs
