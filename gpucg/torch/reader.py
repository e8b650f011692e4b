"""An FX graph (aten IR, as torch.compile's AOTAutograd hands it over) read into gpucg's graph
(gpucg/graph/): placeholders become graph inputs whose SymInt sizes (SymPy expressions of
torch's ShapeEnv) are written over gpucg vars of the same names, SymInt nodes become sizes,
and each call_function node is, by its inputs:

- a constant (every input constant, no symbol): run by torch once, at compile time;
- size-dependent (no data input: ``arange(seq)``, a mask of the sizes, RoPE's cosines): run
  by torch on the host once per binding of the sizes (gpucg/graph/host.py);
- on data: lowered to gpucg operators by its handler (gpucg/torch/aten.py, aten_nn.py), or,
  where gpucg lacks the operator or the handler cannot take these arguments, run by torch on
  the host in its place (a host call; explain lists each with the reason).
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import sympy
import torch

from ..errors import GpucgError
from ..graph.build import Builder
from ..graph.ir import Graph, GraphError, HostNode
from ..shape import TensorType, evaluate, simplify_dim, var


class TorchGraphError(GraphError):
    """An FX graph gpucg cannot read, or bad arguments at run time."""


class Ref(str):
    """A value name among a node's arguments (plain strings are string arguments)."""


@dataclasses.dataclass
class Node:
    """What a handler knows of an FX node: its name, its label for explain, its output value
    names with their TensorTypes (torch's: the handler's must match), and which outputs are
    read (by position)."""

    name: str
    label: str
    outputs: list
    types: list = dataclasses.field(default_factory=list)
    used: set = dataclasses.field(default_factory=set)


def dtype_of(t) -> str:
    """gpucg's name of a torch dtype."""
    return str(t).removeprefix("torch.")


def size(x, fixed: dict | None = None):
    """A SymInt, int or SymPy size as an int or a SymPy expression over gpucg vars (the
    symbols named in ``fixed`` replaced by their values)."""
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    expr = x.node.expr if isinstance(x, torch.SymInt) else x
    return simplify_dim(_convert(sympy.sympify(expr), fixed or {}))


_FUNCS = {"FloorDiv": lambda a, b: sympy.floor(a / b), "CleanDiv": lambda a, b: a / b,
          "CeilDiv": lambda a, b: sympy.ceiling(a / b), "PythonMod": sympy.Mod,
          "Mod": sympy.Mod, "Max": sympy.Max, "Min": sympy.Min, "Identity": lambda a: a,
          "ModularIndexing": lambda a, d, m: sympy.Mod(sympy.floor(a / d), m)}


def _convert(e, fixed: dict):
    """torch's size functions (torch.utils._sympy.functions) as SymPy's own."""
    if e.is_Symbol:
        if e.name in fixed:
            return sympy.Integer(fixed[e.name])
        if not e.is_positive:
            raise TorchGraphError(f"size {e} is not a positive size symbol (a value read from "
                                  "data); gpucg needs sizes known from the inputs' shapes")
        return var(e.name)
    if e.is_Number or not e.args:
        return e
    args = [_convert(a, fixed) for a in e.args]
    name = type(e).__name__
    if name in _FUNCS:
        return _FUNCS[name](*args)
    if isinstance(e, (sympy.Add, sympy.Mul, sympy.Pow)):
        return e.func(*args)
    raise TorchGraphError(f"size expression {e} uses {name}, which gpucg does not read")


def type_of(val, fixed: dict | None = None) -> TensorType:
    """The gpucg type of a (fake) tensor."""
    return TensorType(tuple(size(d, fixed) for d in val.shape), dtype_of(val.dtype))


def _is_size(val) -> bool:
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool)


class Reader(Builder):
    """Reads ``gm`` (inputs: ``values``, one per placeholder: a torch tensor whose data are
    the graph's constant, or None for an input given at every call) into a gpucg graph;
    ``fixed``: size symbols to take as these ints (else they stay symbolic); ``target``: the
    gpucg target the graph will run on."""

    def __init__(self, gm, values: list, table: dict, fixed: dict | None = None,
                 target=None):
        super().__init__(Graph())
        self.g.error = TorchGraphError
        self.gm, self.table, self.fixed, self.target = gm, table, fixed or {}, target
        self.fallbacks: list = []  # (label, why)
        self.params: dict = {}  # placeholder position -> input name
        self.hints = _hints(gm)  # the example's sizes: symbol -> int
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for k, (n, v) in enumerate(zip(placeholders, values)):
            val = n.meta.get("val")
            if v is not None:
                self.g.consts[n.name] = v.detach().cpu().numpy()
            elif isinstance(val, torch.Tensor):
                self.g.types[n.name] = type_of(val, self.fixed)
                self.g.inputs.append(n.name)
                self.params[k] = n.name
            elif _is_size(val):
                self.g.sizes[n.name] = np.array(size(val, self.fixed), dtype=object)
                self.params[k] = n.name
            else:
                raise TorchGraphError(f"placeholder {n.name} holds {type(val).__name__}; "
                                      "gpucg takes tensors and SymInts")
            dims = list(getattr(val, "shape", [])) + ([val] if _is_size(val) else [])
            for d in dims:
                for sym in sympy.sympify(size(d, self.fixed)).free_symbols:
                    self.g.symbols[sym.name] = sym

    # -- arguments ---------------------------------------------------------------------------
    def arg(self, x):
        """An FX argument in gpucg's terms: a node as a :class:`Ref` (a size node as its
        expression), lists element by element, dtypes by name, the rest as it is."""
        if isinstance(x, torch.fx.Node):
            name = self.ref(x.name)
            return simplify_dim(self.g.sizes[name].item()) if self.g.kind(name) == "sizes" \
                and self.g.sizes[name].ndim == 0 else Ref(name)
        if isinstance(x, (list, tuple)):
            return type(x)(self.arg(v) for v in x)
        if isinstance(x, torch.dtype):
            return dtype_of(x)
        return x

    def args(self, node) -> dict:
        """The node's arguments by their schema's names, defaults filled in."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return {k: self.arg(v) for k, v in enumerate(node.args)}
        out = {}
        for k, a in enumerate(schema.arguments):
            v = node.args[k] if k < len(node.args) else node.kwargs.get(
                a.name, a.default_value if a.has_default_value() else None)
            out[a.name] = self.arg(v)
        return out

    # -- the walk ----------------------------------------------------------------------------
    def run(self) -> tuple[Graph, list]:
        g = self.g
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                value = getattr(self.gm, node.target)
                g.consts[node.name] = value.detach().cpu().numpy()
            elif node.op == "output":
                (outs,) = node.args
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                g.outputs = [Ref(self.ref(o.name)) if isinstance(o, torch.fx.Node) else o
                             for o in outs]
                g.results = list(g.outputs)
            else:
                self.node(node)
        return g, self.calls

    def node(self, node) -> None:
        g = self.g
        val = node.meta.get("val")
        if node.target is operator.getitem:
            base, k = node.args
            self.alias[node.name] = f"{self.ref(base.name)}#{k}"
            return
        if _is_size(val):
            g.sizes[node.name] = np.array(size(val, self.fixed), dtype=object)
            return
        if isinstance(val, (torch.SymBool, torch.SymFloat, bool, float)):
            return  # a guard's value: nothing reads it at run time
        refs = _refs(node)
        kinds = {g.kind(self.ref(r.name)) for r in refs}
        outs = self.outputs_of(node)
        handler = self.table.get(_key(node.target))
        info = Node(node.name, self.label(node), outs,
                    [None if t is None else type_of(t, self.fixed) for t in _vals(val)],
                    _used(node))
        if getattr(handler, "shape_only", False):  # the data's values are not read
            handler(self, info, self.args(node))
            return
        if kinds <= {"const"} and not self._symbolic(info.types):
            for name, v in zip(outs, self.torch_fn(node, refs)(
                    *(g.consts[self.ref(r.name)] for r in refs))):
                g.consts[name] = v
            return
        if "tensor" not in kinds:
            fn = self.torch_fn(node, refs)
            host = HostNode(node.name, str(node.target), [self.ref(r.name) for r in refs],
                            outs, fn)
            for name, t in zip(outs, info.types):
                g.dynamic[name] = host
                if t is not None:
                    g.types[name] = t
            return
        why = f"gpucg has no operator for {_key(node.target)}"
        if handler is not None:
            mark = len(self.calls)
            try:
                handler(self, info, self.args(node))
                self.conform(info, mark)
                return
            except (GpucgError, NotImplementedError) as exc:
                del self.calls[mark:]
                why = str(exc).splitlines()[0].removeprefix(f"{info.label}: ")
        self.fallback(node, info, refs, why)

    def fallback(self, node, info: Node, refs, why: str) -> None:
        """Node run by torch on the host, on the data path."""
        for name in info.outputs:
            self.alias.pop(name, None)
        self.fallbacks.append((info.label, why))
        if any(t is None for t in info.types):
            raise TorchGraphError(f"{info.label} gives a {type(node.meta['val']).__name__} "
                                  f"gpucg cannot hold ({why})")
        self.host(info, self.torch_fn(node, refs), [r.name for r in refs], info.types, why,
                  info.outputs)

    def conform(self, info: Node, mark: int) -> None:
        """The handler's outputs as torch's: the same dtype (a cast where NumPy's promotion
        chose another) and the same shape, or an error (the node then runs in torch)."""
        for k, (name, want) in enumerate(zip(info.outputs, info.types)):
            if want is None or (k not in info.used and len(info.outputs) > 1):
                continue
            got = self.g.type_of(self.ref(name))
            if tuple(want.shape) != tuple(got.shape):
                # gpucg's sizes and torch's (its ShapeEnv's canonical form, under its guards)
                # are both right for every size admitted, and equal at the example's: the
                # values read on take torch's, so that sizes compare equal downstream
                if len(want.shape) != len(got.shape) or self.ref(name) in self.g.inputs or \
                        any(evaluate(a, self.hints) != evaluate(b, self.hints)
                            for a, b in zip(want.shape, got.shape)):
                    raise TorchGraphError(f"{info.label}: gpucg's result is {got}, torch's "
                                          f"{want}")
                self.g.types[self.ref(name)] = got = type(got)(want.shape, got.dtype)
            if want.dtype == got.dtype:
                continue
            src = self.ref(name)
            if src != name:  # an alias: cast the value it stands for
                self.alias.pop(name)
            else:  # made by the handler's calls: they make it under another name
                src = self.fresh(name)
                for c in self.calls[mark:]:
                    c.outputs = [src if o == name else o for o in c.outputs]
                    c.inputs = [src if i == name else i for i in c.inputs]
                self.g.types[src] = got
            self.emit(info, "cast", [src], [name], dtype=want.dtype)

    # -- helpers -----------------------------------------------------------------------------
    def outputs_of(self, node) -> list:
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            return [f"{node.name}#{k}" for k in range(len(val))]
        return [node.name]

    def label(self, node) -> str:
        return f"{node.name} ({_key(node.target)})"

    def _symbolic(self, types) -> bool:
        return any(not isinstance(d, int) for t in types if t is not None for d in t.shape)

    def torch_fn(self, node, refs: list):
        """A function of the NumPy values of ``refs`` running the node's own torch operator,
        returning its outputs as NumPy arrays."""
        sizes = {r.name for r in refs if _is_size(r.meta.get("val"))}
        target, args, kwargs = node.target, node.args, node.kwargs

        def fn(*arrays):
            values = {}
            for r, a in zip(refs, arrays):
                values[r.name] = int(np.asarray(a).item()) if r.name in sizes else \
                    torch.from_numpy(a if a.flags.writeable else a.copy())
            pick = lambda n: values[n.name]  # noqa: E731
            with torch.no_grad():
                out = target(*torch.fx.node.map_arg(args, pick),
                             **torch.fx.node.map_arg(kwargs, pick))
            return [o.detach().numpy() if isinstance(o, torch.Tensor) else o
                    for o in (out if isinstance(out, (tuple, list)) else (out,))]
        return fn


def _hints(gm) -> dict:
    """The sizes of the example torch traced with, by gpucg var (its ShapeEnv's values)."""
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        for d in list(getattr(val, "shape", [])) + ([val] if _is_size(val) else []):
            if isinstance(d, torch.SymInt):
                env = d.node.shape_env
                values = getattr(env, "backed_var_to_val", None) or env.var_to_val
                return {var(s.name): int(v) for s, v in values.items() if s.is_positive}
    return {}


def _key(target) -> str:
    """A handler's key: the aten overload's name ("aten.add.Tensor"), or the packet's."""
    return str(target)


def _refs(node) -> list:
    """The FX nodes among a node's arguments, each once, in order."""
    found: dict = {}
    torch.fx.node.map_arg((node.args, node.kwargs), lambda n: found.setdefault(n.name, n))
    return list(found.values())


def _vals(val) -> list:
    """A node's outputs: tensors, None in the place of anything else."""
    return [v if isinstance(v, torch.Tensor) else None
            for v in (val if isinstance(val, (list, tuple)) else [val])]


def _used(node) -> set:
    """The positions of a node's outputs that other nodes read (0 for a single output)."""
    if not isinstance(node.meta.get("val"), (list, tuple)):
        return {0} if node.users else set()
    return {u.args[1] for u in node.users if u.target is operator.getitem}
