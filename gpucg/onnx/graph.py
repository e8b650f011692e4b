"""Reading an ONNX model into gpucg's terms: nodes, constants, graph inputs whose dim_params
become gpucg vars, and the kinds of value the lowering tells apart: constants (folded once, by
onnx's reference evaluator), size vectors (shape subgraphs computed on SymPy sizes:
gpucg/onnx/sizes.py), size-dependent values (computed on the host once per binding of the
sizes: gpucg/onnx/host.py) and tensors (gpucg operator calls: gpucg/onnx/lower.py).
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
        self.size_dtypes: dict[str, str] = {}  # a size vector's integer dtype (int64 unless cast)
        self.dynamic: dict[str, Node] = {}
        self.types: dict[str, TensorType] = {}
        self.symbols: dict[str, object] = {}
        self.dynamic_type = None  # (graph, name) -> a size-dependent value's type (host.py's)
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
        if name in self.dynamic and name not in self.types and self.dynamic_type:
            self.types[name] = self.dynamic_type(self, name)
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
