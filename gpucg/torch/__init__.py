"""gpucg.torch: gpucg as a torch.compile back end.

    import torch, gpucg.torch
    fast = torch.compile(model, backend="gpucg", dynamic=True,
                         options={"target": "opencl"})   # "numpy", "cuda"; dynamic: True
    y = fast(x)                                  # any batch and sequence size, one gpucg compile
    print(gpucg.torch.explain())                 # each graph: nodes, gpucg calls, fallbacks

torch.compile hands the back end an FX graph whose dynamic sizes are SymPy expressions of its
ShapeEnv; gpucg writes them over its own symbols, so one compiled graph serves every size the
guards admit (each operator's dispatcher picks its kernel per size). The graph is lowered to
gpucg operators on gpucg's graph layer (gpucg/graph/: the same fusions as gpucg.onnx's), nodes
gpucg lacks run in torch (explain lists them and why), weights stay on the device, outputs come
back as torch tensors through DLPack. Training runs through AOTAutograd: the backward graph is
compiled the same way. The back end is registered under the name "gpucg" by the package's
``torch_dynamo_backends`` entry point, or by importing this module. See docs/torch.md.
"""

from __future__ import annotations

from .backend import GRAPHS, OPTIONS, backend
from .graph import CompiledGraph
from .reader import TorchGraphError

__all__ = ["CompiledGraph", "OPTIONS", "TorchGraphError", "backend", "explain", "graphs",
           "reset"]


def graphs() -> list:
    """The graphs compiled since the last :func:`reset`, in order (CompiledGraph objects:
    ``explain()``, ``dump(dir)``, ``builds``, ``compiles``, ``fallbacks``)."""
    return list(GRAPHS)


_BASE: dict = {}


def _dynamo() -> dict:
    from torch._dynamo.utils import counters as dyn

    return {"dynamo_frames": int(dyn["frames"]["ok"]),
            "dynamo_graphs": int(dyn["stats"]["unique_graphs"]),
            "dynamo_recompiles": int(sum(dyn["recompiles"].values()))}


def reset() -> None:
    """Forget the graphs compiled so far, gpucg's and dynamo's (torch._dynamo.reset(): the
    next call of a compiled model compiles again), and count compiles from here."""
    import torch._dynamo

    torch._dynamo.reset()
    GRAPHS.clear()
    _BASE.update(_dynamo())


def counters() -> dict:
    """Compiles since the last :func:`reset`: dynamo's (frames compiled, graphs, recompiles:
    torch._dynamo's counters) and gpucg's (graphs, builds, operators compiled)."""
    out = {k: v - _BASE.get(k, 0) for k, v in _dynamo().items()}
    return dict(out, gpucg_graphs=len(GRAPHS), gpucg_builds=sum(g.builds for g in GRAPHS),
                gpucg_compiles=sum(g.compiles for g in GRAPHS))


def explain() -> str:
    """Every graph compiled since the last reset, explained, under a line of compile counts
    (dynamo's frames, graphs and recompiles; gpucg's builds and operators compiled)."""
    c = counters()
    head = (f"gpucg.torch: {c['gpucg_graphs']} graph(s); torch._dynamo compiled "
            f"{c['dynamo_frames']} frame(s), {c['dynamo_graphs']} graph(s), "
            f"{c['dynamo_recompiles']} recompile(s); gpucg built {c['gpucg_builds']} time(s) "
            f"and compiled {c['gpucg_compiles']} operator(s)")
    return "\n\n".join([head] + [g.explain() for g in GRAPHS])


def _register() -> None:
    """Register "gpucg" with torch._dynamo, unless the installed package's entry point will
    (torch loads it on first use of the name, and refuses a name registered twice)."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends import registry

    if "gpucg" in registry._COMPILER_FNS or any(
            ep.name == "gpucg" for ep in entry_points(group="torch_dynamo_backends")):
        return
    registry.register_backend(backend, name="gpucg")


_register()
