"""A compiled ONNX model: one gpucg operator compiled per call for the model's symbolic sizes
(its dispatchers pick the kernels per size at run time), the weights on the device once, and
onnxruntime's way of running it (``model.run(None, {"x": x})``) or a call (``model(x=x)``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import sympy

from .. import compiled as _compiled
from ..arrays import asarray, to_host
from ..runtime import alignment_of, get_backend
from ..shape import pyexpr
from ..strategies.view import reshaped
from ..target import resolve
from .graph import Graph, OnnxError
from .host import value_at
from .lower import Call

_MEMO = 16  # bindings of the sizes whose size-dependent values are kept on the device


def _sizes_fn(symbols, dims):
    """A function of the symbols' values giving ``dims``, printed by the dispatcher's own
    exact integer printer (shape.pyexpr: floor division, no float rounding at any size)."""
    names = {sym: f"_a{i}" for i, sym in enumerate(symbols)}
    body = "".join(pyexpr(sympy.sympify(d), names) + ", " for d in dims)
    return eval(f"lambda {', '.join(names.values())}: ({body})",  # noqa: S307 - our printer
                {"__builtins__": {"max": max, "min": min}})


@dataclasses.dataclass
class Step:
    """One call made runnable: its CompiledOp, or for a reshape to symbolic sizes the function
    giving the sizes for a binding (it runs as gpucg.ops.reshape's shape_view does: a view of
    the same memory, no kernel, nothing compiled for a new size)."""

    call: Call
    op: object = None
    sizes: object = None
    plans: dict = dataclasses.field(default_factory=dict)

    def plan(self, args):
        """The dispatcher's plan for these arrays, memoized by what decides it (dtypes,
        shapes, and a device array's address alignment), as the eager path keeps it: a
        model's many small calls skip the argument checks after the first forward of a size."""
        key = tuple((x.dtype, x.shape) if type(x) is np.ndarray else
                    (type(x), x.dtype, x.shape, alignment_of(x)) for x in args)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= _MEMO * 4:
                self.plans.clear()
            plan = self.plans[key] = self.op.plan(*args)
        return plan


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
        self.graph, self.target = g, resolve(target)
        self.inputs = {n: g.types[n] for n in g.inputs}
        self.outputs = list(g.outputs)
        self.symbols = sorted(g.symbols.values(), key=str)
        self.compiles = 0
        self.steps: list[Step] = []
        self._device: dict = {}
        self._dynamic: dict = {}
        for call in calls:
            if call.view is not None:
                self.steps.append(Step(call, sizes=_sizes_fn(self.symbols, call.view)))
                continue
            types = [g.type_of(i) for i in call.inputs]
            op = _compiled.compile(call.op, *types, target=self.target, **call.attrs)
            self.compiles += 1
            self.steps.append(Step(call, op=op))
            for i in call.inputs:
                if i in g.consts and i not in self._device:
                    self._device[i] = asarray(g.consts[i], target=self.target)
        self._needed = {i for s in self.steps for i in s.call.inputs if i in g.dynamic}
        made = {o for s in self.steps for o in s.call.outputs} | set(self.inputs)
        for name in g.results:
            if name not in made and name not in g.consts and name not in g.dynamic:
                raise OnnxError(f"graph output {name!r} is not computed by any node")
            if name in g.dynamic:
                self._needed.add(name)

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

    def _sized(self, binding: dict) -> dict:
        """The size-dependent values for this binding, on the device (computed once)."""
        key = tuple(sorted((str(s), v) for s, v in binding.items()))
        found = self._dynamic.get(key)
        if found is None:
            memo: dict = {}
            found = {n: asarray(np.ascontiguousarray(value_at(self.graph, n, binding, memo)),
                                target=self.target) for n in sorted(self._needed)}
            if len(self._dynamic) >= _MEMO:
                self._dynamic.pop(next(iter(self._dynamic)))
            self._dynamic[key] = found
        return found

    def run(self, output_names, input_feed: dict, run_options=None) -> list:
        """onnxruntime's InferenceSession.run: the outputs named (None: all), as NumPy arrays
        in a list (``run_options`` is accepted for the same signature, and unused)."""
        names = self.outputs if output_names is None else list(output_names)
        for n in names:
            if n not in self.outputs:
                raise OnnxError(f"output {n!r} is not a graph output; allowed: {self.outputs}")
        binding, arrays = self._bind(dict(input_feed))
        env = dict(self._device)
        env.update(self._sized(binding) if self._needed else {})
        for name, x in arrays.items():  # the only uploads of a call: its inputs
            env[name] = asarray(x, target=self.target)
        sizes = [binding.get(s, 0) for s in self.symbols]
        backend = get_backend(self.target.backend)
        for step in self.steps:
            args = [env[i] for i in step.call.inputs]
            if step.op is None:
                out = reshaped(backend, args[0], tuple(int(d) for d in step.sizes(*sizes)))
            else:
                out = step.op.run(step.plan(args), *args)
            outs = out if isinstance(out, tuple) else (out,)
            env.update(zip(step.call.outputs, outs))
        values = dict(zip(self.outputs, self.graph.results))
        return [np.asarray(to_host(env[values[n]])) if values[n] in env else
                np.asarray(self.graph.consts[values[n]]) for n in names]

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
        for k, s in enumerate(self.steps):
            c = s.call
            c.nodes.sort(key=lambda label: order.get(label, -1))
            attrs = ", ".join(f"{a}={v!r}" for a, v in c.attrs.items())
            lines.append(f"[{k}] {', '.join(c.nodes) or '(added)'}")
            if s.op is None:
                lines.append(f"    -> gpucg.ops.reshape(shape={tuple(c.view)})")
                lines.append("    implementation: shape_view (a view: no kernel)")
            else:
                impls = list(dict.fromkeys(ch.impl.name for ch in s.op.selection.choices))
                lines.append(f"    -> gpucg.ops.{c.op}({attrs})")
                lines.append("    implementation: " + " | ".join(impls) +
                             (" (the dispatcher picks by size)" if len(impls) > 1 else "") +
                             (f"; last run: {s.op.last_impl}" if s.op.last_impl else ""))
            lines.extend(f"    fused: {f}" for f in c.fusion)
        return "\n".join(lines)
