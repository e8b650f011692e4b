"""Reading an ONNX model into gpucg's graph (gpucg/graph/ir.py): nodes, constants, graph
inputs whose dim_params become gpucg vars. The lowering (gpucg/onnx/lower.py) then sorts the
values into the graph's kinds: constants (folded once, by onnx's reference evaluator), size
vectors (shape subgraphs computed on SymPy sizes: gpucg/graph/sizes.py), size-dependent values
(computed on the host once per binding of the sizes: gpucg/graph/host.py, each node by onnx's
reference evaluator) and tensors (gpucg operator calls).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from ..errors import describe
from ..graph.ir import Graph as Base, GraphError
from ..shape import TensorType, var


class OnnxError(GraphError):
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

    def compute(self, arrays: list) -> list:
        """The node on NumPy inputs, by onnx's reference evaluator (constant folding, and a
        size-dependent value at one binding of the sizes)."""
        from onnx.reference import ReferenceEvaluator

        feeds = dict(zip([i for i in self.inputs if i], arrays))
        return ReferenceEvaluator(self.proto, new_ops=_overrides()).run(None, feeds)


_OVERRIDES: list = []


def _overrides() -> list:
    """NumPy kernels for the reference evaluator's ops that fail on real graphs: its
    GatherElements goes through np.choose, which takes at most 64 choices (BERT's position
    buffer gathers from 512)."""
    if not _OVERRIDES:
        from onnx.reference.op_run import OpRun

        class GatherElements(OpRun):
            op_domain = ""

            def _run(self, data, indices, axis=0):
                idx = np.where(indices < 0, indices + data.shape[axis], indices)
                return (np.take_along_axis(data, idx.astype(np.int64), axis=axis),)

        _OVERRIDES.append(GatherElements)
    return _OVERRIDES


class Graph(Base):
    """The model's values (gpucg.graph.ir.Graph's tables), read from the ONNX proto, and the
    ONNX nodes still to lower."""

    error = OnnxError

    def __init__(self, proto, dims: dict | None = None):
        onnx = require_onnx()
        super().__init__()
        self.fixed = dict(dims or {})
        self._fixed_seen: set[str] = set()
        from onnx import numpy_helper

        self.proto = proto
        graph = proto.graph
        self.opset = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
        self.consts.update((t.name, numpy_helper.to_array(t)) for t in graph.initializer)
        self.inputs = [i.name for i in graph.input if i.name not in self.consts]
        self.outputs = [o.name for o in graph.output]
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
