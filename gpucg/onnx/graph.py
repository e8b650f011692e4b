"""Reading an ONNX model into gpucg's terms: nodes, constants, graph inputs whose dim_params
become gpucg vars, and the folding of what needs no kernel: constant subgraphs (evaluated
once, by onnx's reference evaluator) and shape subgraphs (Shape, Gather, Unsqueeze, Concat,
Slice, arithmetic on sizes) computed on SymPy sizes, so that a Reshape's target is known for
every batch and sequence size at once. What depends on the sizes but on no data (a causal mask
sliced to the sequence, ``arange(seq)``) is *size-dependent*: computed on the host once per
new binding of the sizes, never per call.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import sympy

from ..errors import GpucgError, describe
from ..shape import TensorType, var


class OnnxError(GpucgError):
    """A model gpucg.onnx cannot take: unreadable, a shape it cannot follow, bad inputs."""


class UnsupportedError(OnnxError):
    """Nodes with no gpucg operator, every one listed (raised by compile, before any run)."""


def require_onnx():
    """The onnx module, or an error that says how to install it."""
    try:
        import onnx
    except ImportError as exc:
        raise OnnxError("gpucg.onnx needs the onnx package: pip install gpucg[onnx]") from exc
    return onnx


#: ONNX TensorProto element types -> gpucg dtype names
DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
          7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
          16: "bfloat16"}


@dataclasses.dataclass
class Node:
    """One ONNX node: its name (made unique when the model leaves it empty), op type, domain,
    input and output value names ("" for an absent optional input), attributes as Python."""

    name: str
    op: str
    domain: str
    inputs: list
    outputs: list
    attrs: dict
    proto: object = None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.op})"


class Graph:
    """The model's values: constants (NumPy), size vectors (object arrays of ints and SymPy
    expressions), size-dependent values (the node computing each), tensor types (gpucg
    TensorTypes, symbolic), and the nodes still to lower."""

    def __init__(self, proto, dims: dict | None = None):
        onnx = require_onnx()
        self.fixed = dict(dims or {})
        self._fixed_seen: set[str] = set()
        from onnx import numpy_helper

        self.proto = proto
        graph = proto.graph
        self.opset = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t)
                                              for t in graph.initializer}
        self.sizes: dict[str, np.ndarray] = {}
        self.dynamic: dict[str, Node] = {}
        self.types: dict[str, TensorType] = {}
        self.symbols: dict[str, object] = {}
        self.inputs = [i.name for i in graph.input if i.name not in self.consts]
        self.outputs = [o.name for o in graph.output]
        self.alias: dict[str, str] = {}  # Identity and Dropout outputs: the value they pass on
        self.results = list(self.outputs)  # the outputs' values, aliases followed
        for i in graph.input:
            if i.name in self.consts:
                continue
            t = i.type.tensor_type
            if t.elem_type not in DTYPES:
                raise OnnxError(f"graph input {i.name!r} has ONNX element type {t.elem_type}; "
                                f"allowed: {', '.join(sorted(set(DTYPES.values())))}")
            dims = tuple(self._dim(i.name, axis, d) for axis, d in enumerate(t.shape.dim))
            self.types[i.name] = TensorType(dims, DTYPES[t.elem_type])
        unknown = sorted(set(self.fixed) - set(self.symbols) - self._fixed_seen)
        if unknown:
            raise OnnxError(f"dims names {unknown}, which no graph input has; its symbolic "
                            f"sizes: {sorted(set(self.symbols) | self._fixed_seen) or 'none'}")
        self.nodes: list[Node] = []
        seen: set[str] = set()
        for k, n in enumerate(graph.node):
            name = n.name or f"{n.op_type}_{k}"
            while name in seen:
                name += "_"
            seen.add(name)
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            attrs = {k2: (numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else
                          v.decode() if isinstance(v, bytes) else v) for k2, v in attrs.items()}
            self.nodes.append(Node(name, n.op_type, n.domain or "ai.onnx", list(n.input),
                                   list(n.output), attrs, n))
        self.consumers: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                self.consumers.setdefault(i, []).append(n)

    def _dim(self, name: str, axis: int, d):
        if d.HasField("dim_value"):
            return int(d.dim_value)
        label = d.dim_param if d.HasField("dim_param") else f"{name}_{axis}"
        if label in self.fixed:
            self._fixed_seen.add(label)
            return int(self.fixed[label])
        ident = re.sub(r"\W", "_", label)
        ident = ident if ident[:1].isalpha() else "d_" + ident
        return self.symbols.setdefault(label, var(ident))

    def kind(self, name: str) -> str:
        """'const', 'sizes', 'dynamic' or 'tensor'."""
        if name in self.consts:
            return "const"
        if name in self.sizes:
            return "sizes"
        return "dynamic" if name in self.dynamic else "tensor"

    def type_of(self, name: str) -> TensorType:
        if name in self.consts:
            c = self.consts[name]
            return TensorType(tuple(c.shape), c.dtype.name)
        if name in self.dynamic and name not in self.types:
            self.types[name] = dynamic_type(self, name)
        if name not in self.types:
            raise OnnxError(f"value {name!r} is used before a node computes it, or its shape "
                            "depends on data gpucg.onnx cannot follow")
        return self.types[name]


def load(model):
    """An onnx.ModelProto from a path, bytes or a ModelProto; shape inference run on it."""
    onnx = require_onnx()
    if isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise OnnxError(f"model={str(model)!r} is not a file")
        model = onnx.load(str(model))
    elif isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        raise OnnxError(f"model={describe(model)} must be a path, bytes or an onnx.ModelProto")
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001  shapes are computed again by gpucg's type relations
        pass
    return model


# -- folding ---------------------------------------------------------------------------------

def evaluate(node: Node, arrays):
    """A node on NumPy inputs, by onnx's reference evaluator (constant folding)."""
    from onnx.reference import ReferenceEvaluator

    names = [i for i in node.inputs if i]
    feeds = dict(zip(names, arrays))
    return ReferenceEvaluator(node.proto).run(None, feeds)


class NotSymbolic(Exception):
    """A node that the size arithmetic does not cover (it is evaluated per binding instead)."""


def _ints(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64).reshape(-1)


def _plain(x):
    x = sympy.sympify(x)
    return int(x) if x.is_Integer else x


def _slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for k, a in enumerate(axes):
        index[int(a)] = slice(int(starts[k]), int(min(ends[k], 2 ** 62)), int(steps[k]))
    return x[tuple(index)]


def fold_sizes(node: Node, values: list, in_types: list) -> np.ndarray:
    """A size-vector node on object arrays of ints and SymPy sizes (``values``: the inputs,
    None for an absent one; ``in_types``: their TensorTypes where they are tensors)."""
    op, at = node.op, node.attrs
    if op == "Shape":
        dims = np.array(in_types[0].shape, dtype=object)
        start, end = at.get("start", 0), at.get("end", len(dims))
        return dims[start:end]
    x = values[0]
    if op in ("Cast", "Identity"):
        return x
    if op == "Gather":
        return np.take(x, np.asarray(values[1]).astype(np.int64), axis=at.get("axis", 0))
    if op in ("Unsqueeze", "Squeeze"):
        axes = _ints(values[1]) if len(values) > 1 and values[1] is not None else \
            at.get("axes", [])
        if op == "Unsqueeze":
            for a in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
                x = np.expand_dims(x, a)
            return x
        return np.squeeze(x, tuple(int(a) % x.ndim for a in axes)) if len(axes) else \
            np.squeeze(x)
    if op == "Concat":
        return np.concatenate([np.asarray(v, dtype=object) for v in values],
                              axis=at.get("axis", 0))
    if op == "Slice":
        n = len(_ints(values[1]))
        axes = _ints(values[3]) if len(values) > 3 and values[3] is not None else range(n)
        steps = _ints(values[4]) if len(values) > 4 and values[4] is not None else [1] * n
        if any(not isinstance(_plain(v), int) for v in list(values[1]) + list(values[2])):
            raise NotSymbolic(op)
        return _slice(np.asarray(x, dtype=object), _ints(values[1]), _ints(values[2]), axes,
                      steps)
    if op in ("Add", "Sub", "Mul", "Div"):
        a, b = (np.asarray(v, dtype=object) for v in values)
        out = {"Add": a + b, "Sub": a - b, "Mul": a * b}.get(op)
        if out is None:
            out = np.vectorize(lambda p, q: sympy.floor(sympy.sympify(p) / q),
                               otypes=[object])(a, b)
        return np.vectorize(_plain, otypes=[object])(out)
    if op == "Reshape":
        return np.asarray(x, dtype=object).reshape(tuple(int(v) for v in _ints(values[1])))
    raise NotSymbolic(op)


def concrete(sizes: np.ndarray, binding: dict) -> np.ndarray:
    """A size vector with its symbols replaced by their values (int64)."""
    return np.array([int(sympy.sympify(d).subs(binding)) for d in sizes.reshape(-1)],
                    dtype=np.int64).reshape(sizes.shape)


def value_at(g: Graph, name: str, binding: dict, memo: dict) -> np.ndarray:
    """A constant, size vector or size-dependent value for one binding of the symbols
    (symbol -> int), computed on the host; ``memo`` keeps what was computed."""
    if name in g.consts:
        return g.consts[name]
    if name in g.sizes:
        return concrete(g.sizes[name], binding)
    if name not in memo:
        node = g.dynamic[name]
        args = [value_at(g, i, binding, memo) for i in node.inputs if i]
        memo.update(zip(node.outputs, (np.asarray(v) for v in evaluate(node, args))))
    return memo[name]


def size_ones(g: Graph, name: str, dims) -> str:
    """A size-dependent value ``name``: True of sizes ``dims`` (ints and the model's symbols),
    an ONNX ConstantOfShape made on the host once per binding of the sizes (what a symbolic
    Expand broadcasts its input against)."""
    onnx = require_onnx()
    g.sizes[name + "/shape"] = np.array(list(dims), dtype=object)
    proto = onnx.helper.make_node("ConstantOfShape", [name + "/shape"], [name],
                                  value=onnx.numpy_helper.from_array(np.ones(1, bool)))
    g.dynamic[name] = Node(name, "ConstantOfShape", "ai.onnx", [name + "/shape"], [name], {},
                           proto)
    return name


def probes(g: Graph) -> list[dict]:
    """Two bindings of the model's symbols to distinct sizes (13, 17, ... and 19, 23, ...):
    enough to tell a size-dependent value's pattern (a causal mask) and its shape."""
    primes = [13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73]
    syms = list(g.symbols.values())
    return [{s: primes[(k + off) % len(primes)] for k, s in enumerate(syms)}
            for off in (0, len(syms))]


def dynamic_type(g: Graph, name: str) -> TensorType:
    """The type of a size-dependent value: each dim an int, or the symbol whose probe sizes it
    follows (found by computing the value at two probe bindings)."""
    (a, b) = [value_at(g, name, p, {}) for p in probes(g)]
    if a.ndim != b.ndim:
        raise OnnxError(f"value {name!r}: its rank depends on the sizes")
    dims = []
    for da, db in zip(a.shape, b.shape):
        if da == db:
            dims.append(int(da))
            continue
        match = [s for s in g.symbols.values() if probes(g)[0][s] == da and probes(g)[1][s] == db]
        if not match:
            raise OnnxError(f"value {name!r} has a dimension ({da}, then {db}) that is not one "
                            "of the model's symbolic sizes")
        dims.append(match[0])
    return TensorType(tuple(dims), a.dtype.name)
