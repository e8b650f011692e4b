"""A graph's calls made runnable: one gpucg operator compiled per call for the graph's symbolic
sizes (its dispatchers pick the kernels per size at run time), the constants on the device
once, size-dependent values computed once per binding of the sizes, views as views, and the
front end's host calls where gpucg lacks an operator. Front ends wrap a :class:`Program` in
their own way of being called (gpucg.onnx's Model: onnxruntime's; gpucg.torch: a torch.compile
back end).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import sympy

from .. import compiled as _compiled
from ..arrays import asarray, to_host
from ..runtime import alignment_of, get_backend
from ..runtime.host_memory import keep_freed_memory
from ..shape import pyexpr
from ..strategies.view import reshaped
from ..target import resolve
from .host import value_at
from .ir import Call, Graph

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
    the same memory, no kernel, nothing compiled for a new size), or neither for a call the
    front end runs itself (``call.fn``)."""

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


def compile_calls(g: Graph, calls: list, target) -> list:
    """(call, CompiledOp or None) for every call: gpucg.compile on the calls' symbolic types
    (views and host calls compile nothing). Nothing runs, so a CUDA target needs no GPU."""
    return [(c, None if c.view is not None or c.fn is not None else _compiled.compile(
        c.op, *(g.type_of(i) for i in c.inputs), target=target, **c.attrs)) for c in calls]


class Program:
    """The calls of graph ``g`` compiled for ``target``.

    Attributes:
        target: the gpucg Target it runs on.
        symbols: the symbols the sizes are written in (sorted by name).
        steps: the calls it runs, in order (``step.call``: operator, attributes, the front
            end's nodes and fusions; ``step.op``: the CompiledOp).
        compiles: how many operators were compiled (gpucg.compile); a new size never adds one.
    """

    def __init__(self, g: Graph, calls: list, target=None):
        self.graph, self.target = g, resolve(target)
        if self.target.backend == "numpy":  # a model's arrays reuse mapped pages a call
            keep_freed_memory()
        self.symbols = sorted(g.symbols.values(), key=str)
        self.compiles = 0
        self.steps: list[Step] = []
        self._device: dict = {}
        self._dynamic: dict = {}
        for call, op in compile_calls(g, calls, self.target):
            if call.view is not None:
                self.steps.append(Step(call, sizes=_sizes_fn(self.symbols, call.view)))
                continue
            self.compiles += op is not None
            self.steps.append(Step(call, op=op))
            for i in call.inputs:
                if i in g.consts and i not in self._device:
                    self._device[i] = asarray(g.consts[i], target=self.target)
        # size-dependent values, and the size vectors a host call reads
        self._needed = {i for s in self.steps for i in s.call.inputs if i in g.dynamic or
                        s.call.fn is not None and i in g.sizes}
        made = {o for s in self.steps for o in s.call.outputs} | set(g.inputs)
        for name in g.results:
            if not isinstance(name, str):  # a front end's literal result (None, a number)
                continue
            if name not in made and g.kind(name) == "tensor":
                raise g.error(f"graph output {name!r} is not computed by any node")
            if name in g.dynamic:
                self._needed.add(name)

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

    def execute(self, binding: dict, arrays: dict) -> dict:
        """Every value the steps make, for graph inputs ``arrays`` (name -> an array of the
        target, as gpucg.asarray makes it) whose sizes bind the symbols as ``binding`` says
        (symbol -> int): a dict of the values by name (constants and the inputs among them)."""
        env = dict(self._device)
        env.update(self._sized(binding) if self._needed else {})
        env.update(arrays)
        sizes = [binding.get(s, 0) for s in self.symbols]
        backend = get_backend(self.target.backend)
        for step in self.steps:
            args = [env[i] for i in step.call.inputs]
            if step.op is not None:
                out = step.op.run(step.plan(args), *args)
            elif step.call.on == "target":
                out = tuple(step.call.fn(*args))
            elif step.call.fn is not None:
                host = step.call.fn(*(np.asarray(to_host(a)) for a in args))
                out = tuple(asarray(np.ascontiguousarray(h), target=self.target) for h in host)
            else:
                out = reshaped(backend, args[0], tuple(int(d) for d in step.sizes(*sizes)))
            outs = out if isinstance(out, tuple) else (out,)
            env.update(zip(step.call.outputs, outs))
        return env

    def value(self, env: dict, name: str):
        """Value ``name`` of a run's ``env``: an array of the target (a constant never made
        on the device: NumPy)."""
        return env[name] if name in env else self.graph.consts[name]

    def explain_steps(self, order=None) -> list:
        """A few lines a step: the nodes it computes (sorted by ``order``: label -> position),
        the gpucg call, the implementations it may run (the one the last run chose), and the
        fusions taken."""
        lines = []
        for k, s in enumerate(self.steps):
            c = s.call
            if order:
                c.nodes.sort(key=lambda label: order.get(label, -1))
            attrs = ", ".join(f"{a}={v!r}" for a, v in c.attrs.items())
            lines.append(f"[{k}] {', '.join(c.nodes) or '(added)'}")
            if c.fn is not None:
                how = "on the host" if c.on == "host" else "gpucg operators called eagerly"
                lines.append(f"    -> run by the front end ({how}): {c.why}")
            elif s.op is None:
                lines.append(f"    -> gpucg.ops.reshape(shape={tuple(c.view)})")
                lines.append("    implementation: shape_view (a view: no kernel)")
            else:
                impls = list(dict.fromkeys(ch.impl.name for ch in s.op.selection.choices))
                lines.append(f"    -> gpucg.ops.{c.op}({attrs})")
                lines.append("    implementation: " + " | ".join(impls) +
                             (" (the dispatcher picks by size)" if len(impls) > 1 else "") +
                             (f"; last run: {s.op.last_impl}" if s.op.last_impl else ""))
            lines.extend(f"    fused: {f}" for f in c.fusion)
        return lines
