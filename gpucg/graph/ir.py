"""The graph both front ends lower into: values and the gpucg operator calls between them.

A value is a name. What is known of it decides its *kind*:

- ``const``: a NumPy array known at compile time (weights a model file carries, folded
  subgraphs);
- ``sizes``: a size vector, an object array of ints and SymPy expressions over the graph's
  symbols (shape arithmetic, gpucg/graph/sizes.py);
- ``dynamic``: a value that depends on the sizes but on no data (a causal mask sliced to the
  sequence, ``arange(seq)``), computed on the host once per binding of the sizes by the
  :class:`HostNode` (or the front end's node) that makes it (gpucg/graph/host.py);
- ``tensor``: data, made by a :class:`Call` at run time; graph inputs are tensors, and those in
  ``weights`` hold the same data from call to call (a module's parameters), so a front end may
  keep them on the device.

Every tensor has a gpucg TensorType whose sizes are ints or SymPy expressions over
``symbols`` (positive-integer symbols, gpucg.var's): one compiled graph serves every size.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GpucgError
from ..shape import TensorType


class GraphError(GpucgError):
    """A graph gpucg cannot take: a value it cannot follow, bad inputs at run time."""


@dataclasses.dataclass
class Call:
    """One step: gpucg operator ``op`` with ``attrs`` on value names ``inputs`` (constants among
    them) giving ``outputs``; ``nodes``: labels of the front end's nodes it computes;
    ``fusion``: what was fused into it; ``view``: for a reshape to symbolic sizes, the target
    sizes (it runs as a view); ``fn``: a function the front end runs instead of a gpucg
    operator, ``why`` saying why: on the host (``on="host"``: NumPy arrays in, a tuple of
    arrays out: a node gpucg lacks), or on the target's arrays (``on="target"``: gpucg
    operators called eagerly, as a registered gradient is)."""

    op: str
    attrs: dict
    inputs: list
    outputs: list
    nodes: list
    fusion: list = dataclasses.field(default_factory=list)
    view: tuple | None = None
    fn: object = None
    on: str = "host"
    why: str = ""


@dataclasses.dataclass
class HostNode:
    """A size-dependent value made on the host: ``fn`` of the NumPy values of ``inputs``
    (constants, size vectors, other size-dependent values) gives ``outputs``; ``op`` names
    what it computes (explain prints it)."""

    name: str
    op: str
    inputs: list
    outputs: list
    fn: object

    @property
    def label(self) -> str:
        return f"{self.name} ({self.op})"

    def compute(self, arrays: list) -> list:
        out = self.fn(*arrays)
        return list(out) if isinstance(out, (tuple, list)) else [out]


class Graph:
    """The values of one model: constants, size vectors, size-dependent values (the node
    computing each), tensor types, the symbols the sizes are written in, the inputs (names,
    in order), the outputs and the values they are (``results``: aliases followed).

    ``error`` is the exception class the front end raises (a GraphError subclass);
    ``dynamic_type(graph, name)``, where a front end sets it, finds a size-dependent value's
    type on first use (gpucg.graph.host.dynamic_type: by probing sizes)."""

    error: type = GraphError

    def __init__(self):
        self.consts: dict[str, np.ndarray] = {}
        self.sizes: dict[str, np.ndarray] = {}
        self.size_dtypes: dict[str, str] = {}  # a size vector's integer dtype (int64 unless cast)
        self.dynamic: dict[str, object] = {}
        self.types: dict[str, TensorType] = {}
        self.symbols: dict[str, object] = {}
        self.dynamic_type = None
        self.inputs: list[str] = []
        self.weights: set[str] = set()
        self.outputs: list[str] = []
        self.alias: dict[str, str] = {}  # pass-throughs: the value they stand for
        self.results: list[str] = []

    def kind(self, name: str) -> str:
        """'const', 'sizes', 'dynamic' or 'tensor'."""
        if name in self.consts:
            return "const"
        if name in self.sizes:
            return "sizes"
        return "dynamic" if name in self.dynamic else "tensor"

    def is_weight(self, name: str) -> bool:
        """The value holds the same data at every call: a constant or a weight."""
        return name in self.consts or name in self.weights

    def type_of(self, name: str) -> TensorType:
        if name in self.consts:
            c = self.consts[name]
            return TensorType(tuple(c.shape), c.dtype.name)
        if name in self.dynamic and name not in self.types and self.dynamic_type:
            self.types[name] = self.dynamic_type(self, name)
        if name not in self.types:
            raise self.error(f"value {name!r} is used before a node computes it, or its shape "
                             "depends on data gpucg cannot follow")
        return self.types[name]
