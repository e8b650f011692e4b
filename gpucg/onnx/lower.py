"""Each ONNX node as gpucg operator calls on gpucg's graph (gpucg/graph/: the
:class:`~gpucg.graph.ir.Call` s a :class:`~gpucg.graph.build.Builder` makes), their output types
from the operators' own type relations (SymPy sizes), constants and size subgraphs folded on the
way.

A node is, by its inputs: a constant (all inputs constant: evaluated once), a size vector
(shape arithmetic: :data:`ONNX` maps it onto gpucg/graph/sizes.py's operators, on symbolic
sizes), size-dependent (no tensor input, not foldable on symbols: computed on the host per
binding of the sizes, gpucg/graph/host.py), or a tensor node lowered by its handler
(gpucg/onnx/nodes.py, whose :data:`TABLE` is the operator coverage docs/onnx.md prints).
gpucg/graph/fuse.py then joins chains of elementwise calls into one kernel and into the
epilogues of dense and conv2d.
"""

from __future__ import annotations

import numpy as np

from ..errors import GpucgError
from ..graph import sizes
from ..graph.build import Builder
from ..graph.host import dynamic_type
from .graph import DTYPES, Graph, Node, OnnxError, UnsupportedError
from .nodes import TABLE


#: ONNX ops on size vectors -> the gpucg operator sizes.fold computes
ONNX = {"Shape": "shape", "Identity": "identity", "Cast": "cast", "Gather": "take",
        "GatherND": "gather_nd", "Unsqueeze": "expand_dims", "Squeeze": "squeeze",
        "Concat": "concatenate", "Slice": "strided_slice", "Add": "add", "Sub": "subtract",
        "Mul": "multiply", "Div": "floor_divide", "Mod": "mod", "Max": "maximum",
        "Min": "minimum", "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal",
        "Greater": "greater", "GreaterOrEqual": "greater_equal", "And": "logical_and",
        "Or": "logical_or", "Xor": "logical_xor", "Not": "logical_not", "Neg": "negative",
        "Abs": "abs", "Where": "where", "Reshape": "reshape", "Expand": "broadcast_to",
        "ReduceProd": "prod", "ReduceSum": "sum", "ConstantOfShape": "full", "Range": "arange"}
_BOOL = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not")


def _size_attrs(n: Node, values: list) -> dict:
    """The attributes sizes.fold takes for node ``n`` (axes given as inputs in newer opsets)."""
    at = dict(n.attrs)
    if n.op in ("Unsqueeze", "Squeeze", "ReduceProd", "ReduceSum"):
        axes = values[1] if len(values) > 1 and values[1] is not None else at.get("axes")
        at["axes"] = None if axes is None else [int(a) for a in sizes.ints(axes)]
        at["keepdims"] = bool(at.get("keepdims", 1))
    if n.op == "Cast":
        at["dtype"] = DTYPES.get(at["to"], "float32")
    if n.op == "ConstantOfShape":
        at["value"] = at.get("value", np.zeros(1, np.float32)).reshape(-1)[0]
    return at


class Lowering(Builder):
    """Walks the nodes in order: folds what needs no kernel, lowers the rest to calls."""

    def __init__(self, g: Graph):
        super().__init__(g)
        self.unsupported = []
        g.dynamic_type = dynamic_type

    def run(self) -> list:
        failed: set = set()  # values of nodes that could not be lowered
        for node in self.g.nodes:
            if any(self.ref(i) in failed for i in node.inputs if i):
                failed.update(node.outputs)  # downstream of one listed: its types are unknown
                if not self.known(node):
                    self.unsupported.append((node, ""))
                continue
            try:
                self.node(node)
            except GpucgError as exc:  # a supported op type used in a way gpucg cannot run
                self.unsupported.append((node, str(exc).splitlines()[0]))
            except Exception as exc:  # noqa: BLE001  a crash: say where it happened
                ins = ", ".join(f"{i} {self._described(i)}" for i in node.inputs if i)
                raise OnnxError(f"lowering {node.label} failed: {type(exc).__name__}: {exc}; "
                                f"inputs: {ins or 'none'}") from exc
            if self.unsupported and self.unsupported[-1][0] is node:
                failed.update(node.outputs)
        if self.unsupported:
            lines = "\n".join(f"  {n.label} domain {n.domain!r}{': ' + why if why else ''}"
                              for n, why in self.unsupported)
            raise UnsupportedError(f"{len(self.unsupported)} node(s) have no gpucg operator:\n"
                                   f"{lines}\n(supported: {', '.join(sorted(TABLE))})")
        self.g.results = [self.ref(o) for o in self.g.outputs]
        return self.calls

    def known(self, n: Node) -> bool:
        """An op type the lowering takes in some form (a handler, size folding, a constant)."""
        return n.domain in ("ai.onnx", "") and (n.op in TABLE or n.op in ONNX or
                                                n.op == "Constant")

    def _described(self, name: str) -> str:
        g = self.g
        if name in g.consts:
            return f"(constant {g.consts[name].dtype} {g.consts[name].shape})"
        if name in g.sizes:
            return f"(sizes {list(g.sizes[name].reshape(-1))})"
        t = g.types.get(name)
        return f"({g.kind(name)} {t})" if t is not None else f"({g.kind(name)})"

    def node(self, n: Node) -> None:
        g = self.g
        present = [self.ref(i) for i in n.inputs if i]
        kinds = [g.kind(i) for i in present]
        if n.domain not in ("ai.onnx", ""):
            self.unsupported.append((n, ""))
            return
        if n.op == "Constant":
            g.consts[n.outputs[0]] = np.asarray(n.compute([])[0])
            return
        if present and all(k == "const" for k in kinds):
            for name, value in zip(n.outputs, n.compute([g.consts[i] for i in present])):
                g.consts[name] = np.asarray(value)
            return
        if n.op == "Shape" and kinds[0] == "sizes":
            g.consts[n.outputs[0]] = np.array(g.sizes[present[0]].shape, np.int64)
            return
        if n.op in ONNX and (n.op == "Shape" or
                             (all(k in ("const", "sizes") for k in kinds) and "sizes" in kinds)):
            if self.fold(n):
                return
        if present and all(k != "tensor" for k in kinds):
            for name in n.outputs:  # size-dependent: computed once per binding of the sizes
                g.dynamic[name] = n
            return
        handler = TABLE.get(n.op)
        if handler is None:
            self.unsupported.append((n, ""))
            return
        handler(self, n, [self.ref(i) if i else "" for i in n.inputs])

    def fold(self, n: Node) -> bool:
        """Node ``n`` computed on size vectors (True), or left to the host (False)."""
        g = self.g
        names = [self.ref(i) if i else "" for i in n.inputs]
        values = [g.sizes.get(i, g.consts.get(i)) if i else None for i in names]
        try:
            if n.op in ("Max", "Min") and len(values) > 2:
                out = values[0]
                for v in values[1:]:
                    out = sizes.fold(ONNX[n.op], [out, v], {})
            else:
                shapes = g.type_of(names[0]).shape if n.op == "Shape" else None
                out = sizes.fold(ONNX[n.op], values, _size_attrs(n, values), shapes)
        except sizes.NotSymbolic:
            return False
        out = np.asarray(out, dtype=object)
        dtype = _out_dtype(n, values)
        symbolic = any(getattr(v, "free_symbols", None) for v in out.reshape(-1))
        if not symbolic:
            g.consts[n.outputs[0]] = np.array(
                [bool(v) if dtype == "bool" else int(v) if np.dtype(dtype).kind in "iu" else
                 float(v) for v in out.reshape(-1)], dtype=dtype).reshape(out.shape)
        elif np.dtype(dtype).kind in "iu":
            g.sizes[n.outputs[0]] = out
            g.size_dtypes[n.outputs[0]] = dtype
        else:
            return False
        return True


def _out_dtype(n: Node, values: list) -> str:
    """The dtype of a folded node's output, as ONNX gives it."""
    if n.op in _BOOL:
        return "bool"
    if n.op in ("Shape", "Size"):
        return "int64"
    if n.op == "Cast":
        return DTYPES.get(n.attrs.get("to"), "float32")
    if n.op == "ConstantOfShape":
        return np.asarray(n.attrs.get("value", np.zeros(1, np.float32))).dtype.name
    data = values[1:] if n.op == "Where" else values[:1]
    for v in data:
        if isinstance(v, np.ndarray) and v.dtype != object:
            return v.dtype.name
    return "int64"
