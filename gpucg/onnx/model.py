"""A compiled ONNX model: gpucg's compiled graph (gpucg/graph/program.py: one gpucg operator
compiled per call for the model's symbolic sizes, the weights on the device once) run as
onnxruntime runs a model (``model.run(None, {"x": x})``) or by a call (``model(x=x)``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..arrays import asarray, to_host
from ..graph.program import Program
from .graph import Graph, OnnxError


class Model:
    """An ONNX model compiled by :func:`gpucg.onnx.compile`.

    Attributes:
        target: the gpucg Target it runs on.
        inputs: graph input name -> gpucg.TensorType (dim_params as gpucg vars).
        outputs: the graph's output names, in order.
        steps: the calls it runs, in order (``step.call``: operator, attributes, ONNX nodes
            and fusions; ``step.op``: the CompiledOp).
        compiles: how many operators were compiled (gpucg.compile); a new batch or sequence
            size never adds one.
    """

    def __init__(self, g: Graph, calls: list, target=None):
        self.graph = g
        self.program = Program(g, calls, target)
        self.target, self.steps = self.program.target, self.program.steps
        self.compiles, self.symbols = self.program.compiles, self.program.symbols
        self.inputs = {n: g.types[n] for n in g.inputs}
        self.outputs = list(g.outputs)

    # -- running ---------------------------------------------------------------------------
    def _bind(self, feeds: dict) -> tuple[dict, dict]:
        unknown = sorted(set(feeds) - set(self.inputs))
        missing = [n for n in self.inputs if n not in feeds]
        if unknown or missing:
            wrong = "; ".join(p for p in (f"{unknown} are not graph inputs" if unknown else "",
                                          f"{missing} are missing" if missing else "") if p)
            raise OnnxError(f"inputs: {wrong}; the model takes "
                            f"{', '.join(f'{n}: {t}' for n, t in self.inputs.items())}")
        binding, arrays = {}, {}
        for name, t in self.inputs.items():
            x = feeds[name]
            x = x if isinstance(x, np.ndarray) else np.asarray(to_host(x))
            if x.dtype.name != t.dtype or x.ndim != t.ndim:
                raise OnnxError(f"input {name!r} is {x.dtype.name} of shape {x.shape}; the "
                                f"model needs {t}")
            for axis, (d, want) in enumerate(zip(x.shape, t.shape)):
                if isinstance(want, int) and d != want or binding.setdefault(want, d) != d:
                    must = want if isinstance(want, int) else f"{want} = {binding[want]} " \
                        "(as an earlier input gave it)"
                    raise OnnxError(f"input {name!r} has shape {x.shape}: dimension {axis} "
                                    f"must be {must}")
            arrays[name] = x
        return binding, arrays

    def run(self, output_names, input_feed: dict, run_options=None) -> list:
        """onnxruntime's InferenceSession.run: the outputs named (None: all), as NumPy arrays
        in a list (``run_options`` is accepted for the same signature, and unused)."""
        names = self.outputs if output_names is None else list(output_names)
        for n in names:
            if n not in self.outputs:
                raise OnnxError(f"output {n!r} is not a graph output; allowed: {self.outputs}")
        binding, arrays = self._bind(dict(input_feed))
        # the only uploads of a call: its inputs
        env = self.program.execute(binding, {name: asarray(x, target=self.target)
                                             for name, x in arrays.items()})
        values = dict(zip(self.outputs, self.graph.results))
        return [np.asarray(to_host(self.program.value(env, values[n]))) for n in names]

    def __call__(self, **inputs):
        """The outputs for keyword inputs: one array, or a tuple in graph output order."""
        out = self.run(None, inputs)
        return out[0] if len(out) == 1 else tuple(out)

    # -- reading ---------------------------------------------------------------------------
    def explain(self) -> str:
        """Each ONNX node's gpucg operator, the implementations it may run (the one the last
        run chose) and the fusions taken."""
        nodes = sum(len(s.call.nodes) for s in self.steps)
        syms = ", ".join(map(str, self.symbols)) or "none"
        lines = [f"gpucg.onnx model on {self.target}: {len(self.graph.proto.graph.node)} ONNX "
                 f"nodes, {nodes} of them run as {len(self.steps)} gpucg calls ({self.compiles}"
                 f" compiled, for the symbolic sizes {syms})",
                 "inputs: " + ", ".join(f"{n} {t}" for n, t in self.inputs.items())]
        ran = {label for s in self.steps for label in s.call.nodes}
        per_size = {n.label for n in self.graph.dynamic.values()}
        for what, keep in (("folded at compile time (constants, sizes, pass-throughs)",
                            lambda n: n.label not in per_size),
                           ("computed on the host once per new size", lambda n: n.label in
                            per_size)):
            ops = Counter(n.op for n in self.graph.nodes if n.label not in ran and keep(n))
            if ops:
                lines.append(f"{what}: " + ", ".join(f"{op} x{k}" for op, k in ops.items()))
        order = {n.label: k for k, n in enumerate(self.graph.nodes)}
        return "\n".join(lines + self.program.explain_steps(order))
