"""One FX graph compiled by gpucg (:class:`CompiledGraph`): read into gpucg's graph
(gpucg/torch/reader.py), fused (gpucg/graph/fuse.py) and compiled (gpucg/graph/program.py) on
its first call, when the tensors are at hand. The graph's weights are constants of the gpucg
graph (uploaded once, folded and fused as a model file's are) where their data cannot change
behind it: every weight of an inference graph and the buffers of a training graph, each
checked by its version counter and address at every call (a weight changed in place, an
optimizer step outside a training graph, builds the graph again, counted). Parameters being
trained are inputs, kept on the device between calls while their version stays.
"""

from __future__ import annotations

import sympy
import torch

from ..arrays import asarray, to_host
from ..graph.fuse import fuse
from ..graph.program import Program
from ..interop import Framework, ingest
from ..shape import evaluate
from ..target import resolve
from .aten import TABLE as ATEN
from .aten_nn import TABLE as ATEN_NN
from .reader import Reader, TorchGraphError

TABLE = {**ATEN, **ATEN_NN}


class CompiledGraph:
    """An FX graph run by gpucg.

    Attributes:
        kind: "inference", "forward" or "backward" (AOTAutograd's graphs).
        target: the gpucg Target.
        builds: how many times the gpucg graph was built (1, unless a frozen weight changed,
            or ``dynamic=False`` met a new size).
        compiles: the gpucg operators compiled over all builds (gpucg.compile calls).
        fallbacks: (node, why) of the nodes run by torch, of the last build.
    """

    def __init__(self, gm, kind: str, number: int, target=None, dynamic: bool = True,
                 frozen=(), static=()):
        self.gm, self.kind, self.number = gm, kind, number
        self.target = resolve(target)
        self.dynamic = dynamic
        self.frozen, self.static = frozenset(frozen), frozenset(static)
        self.builds = self.compiles = 0
        self.fallbacks: list = []
        self.calls = self.graph = None
        self._programs: dict = {}
        self._versions: dict = {}
        self._device: dict = {}
        self._torch = Framework("torch", torch.empty(0))
        self.nodes = sum(n.op == "call_function" for n in gm.graph.nodes)

    # -- building ----------------------------------------------------------------------------
    def _key(self, args) -> tuple:
        if self.dynamic:
            return ()
        return tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)

    def _build(self, args) -> Program:
        values = [a if k in self.frozen else None for k, a in enumerate(args)]
        fixed = None if self.dynamic else self._fixed(args)
        reader = Reader(self.gm, values, TABLE, fixed, self.target)
        g, calls = reader.run()
        self.graph, self.calls = g, fuse(g, calls)
        self.fallbacks = list(reader.fallbacks)
        self.params = reader.params
        program = Program(g, self.calls, self.target)
        self.builds += 1
        self.compiles += program.compiles
        self._versions = {k: _version(args[k]) for k in self.frozen}
        self._binders = [(k, axis, sym) for k, name in reader.params.items()
                         for axis, sym in _symbols_of(g, name)]
        unbound = sorted(set(g.symbols.values()) - {b[2] for b in self._binders}, key=str)
        if unbound:
            raise TorchGraphError(f"sizes {', '.join(map(str, unbound))} are no input's own "
                                  "dimension (only parts of expressions): gpucg cannot read "
                                  "them from the arguments; torch.compile(..., dynamic=False) "
                                  "gives static sizes")
        return program

    def _fixed(self, args) -> dict:
        """Every size symbol's value in these arguments (``dynamic=False``)."""
        out = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for n, a in zip(placeholders, args):
            val = n.meta.get("val")
            dims = list(zip(val.shape, a.shape)) if isinstance(a, torch.Tensor) else \
                [(val, a)] if isinstance(val, torch.SymInt) else []
            for d, v in dims:
                if isinstance(d, torch.SymInt) and isinstance(d.node.expr, sympy.Symbol):
                    out[d.node.expr.name] = int(v)
        return out

    def program(self, args) -> Program:
        key = self._key(args)
        prog = self._programs.get(key)
        if prog is None or any(_version(args[k]) != v for k, v in self._versions.items()):
            prog = self._programs[key] = self._build(args)
        return prog

    # -- running -----------------------------------------------------------------------------
    def __call__(self, *args):
        prog = self.program(args)
        binding = {}
        for k, axis, sym in self._binders:
            binding[sym] = int(args[k] if axis is None else args[k].shape[axis])
        arrays = {name: self._array(k, args[k]) for k, name in self.params.items()
                  if isinstance(args[k], torch.Tensor)}
        env = prog.execute(binding, arrays)
        return tuple(self._out(prog, env, name, binding) for name in self.graph.outputs)

    def _array(self, k: int, t):
        """Tensor argument ``k`` as an array of the target: a NumPy view of a CPU tensor (no
        copy); on a device, uploaded (a weight: once, while its version stays)."""
        x, kind, _ = ingest(t.detach(), f"argument {k}", "gpucg.torch")
        if kind == self.target.backend:
            return x
        if k in self.static:
            key = _version(t) + (tuple(t.shape), tuple(t.stride()))
            held = self._device.get(k)
            if held is not None and held[0] == key:
                return held[1]
            self._device[k] = (key, asarray(to_host(x), target=self.target))
            return self._device[k][1]
        return asarray(to_host(x), target=self.target)

    def _out(self, prog, env, name, binding):
        """An output as torch's: a tensor by DLPack (no copy from NumPy or CuPy), a size."""
        g = self.graph
        if not isinstance(name, str):  # a number, or None
            return name
        if name in g.sizes:
            return int(evaluate(g.sizes[name].item(), binding))
        value = prog.value(env, name)
        if self.target.backend == "opencl":
            value = to_host(value)
        return self._torch.wrap(value)

    # -- reading -----------------------------------------------------------------------------
    def explain(self) -> str:
        """The graph's nodes as gpucg calls: the implementations each may run, the fusions
        taken, and every node run by torch with the reason."""
        if self.graph is None:
            return f"gpucg.torch graph {self.number} ({self.kind}): not called yet"
        prog = next(iter(self._programs.values()))
        syms = ", ".join(map(str, prog.symbols)) or "none"
        lines = [f"gpucg.torch graph {self.number} ({self.kind}) on {self.target}: "
                 f"{self.nodes} FX nodes, {len(prog.steps)} gpucg calls ({prog.compiles} "
                 f"compiled, for the symbolic sizes {syms}); built {self.builds} time(s), "
                 f"{self.compiles} operators compiled in all",
                 f"weights held as constants (uploaded once): {len(self.frozen)}; inputs at "
                 f"every call: {len(self.params)}"]
        if self.fallbacks:
            lines.append(f"run by torch ({len(self.fallbacks)} node(s), no gpucg operator):")
            lines.extend(f"  {label}: {why}" for label, why in self.fallbacks)
        order = {f"{n.name} ({n.target})": k for k, n in enumerate(self.gm.graph.nodes)}
        return "\n".join(lines + prog.explain_steps(order))

    def dump(self, root) -> list:
        """Every gpucg call's kernels and dispatcher under directory ``root`` (after a call),
        with index.txt; returns the paths written."""
        from ..graph.dump import dump

        if self.graph is None:
            raise TorchGraphError("dump: the graph has not run yet (call the compiled model "
                                  "once first)")
        return dump(self.graph, self.calls, self.target, root,
                    f"gpucg.torch graph {self.number} ({self.kind}) on {self.target}")


def _version(t) -> tuple:
    return (t._version, t.data_ptr()) if isinstance(t, torch.Tensor) else (t,)


def _symbols_of(g, name: str) -> list:
    """(axis, symbol) for each dimension of input ``name`` that is a bare symbol; (None,
    symbol) for a size input that is one."""
    if name in g.sizes:
        v = g.sizes[name].item()
        return [(None, v)] if isinstance(v, sympy.Symbol) else []
    return [(axis, d) for axis, d in enumerate(g.types[name].shape)
            if isinstance(d, sympy.Symbol)]
