"""gpucg: a GPU-first operator code generator.

Quick start::

    import numpy as np, gpucg
    y = gpucg.ops.cumsum(np.arange(10), axis=0)               # eager, default target
    n = gpucg.var("n")
    f = gpucg.compile("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="opencl")
    print(f.dispatcher_source); print(f.sources)              # what runs
    print(gpucg.explain("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="cuda"))
    w = gpucg.asarray(np.ones((1024, 1024), np.float32), target="opencl")  # stays on the device
    gpucg.to_host(gpucg.ops.sum(w, axis=1))                   # back as NumPy
"""

from .version import __version__
from . import counters as _counters
from .errors import (AttrError, BackendUnavailableError, CompileError, ConditionError,
                     DTypeError, GpucgError, InputError, LaunchError, OpError, RecordsError,
                     ResourceError, SignatureError, StrategyError, TargetError,
                     TargetUnavailableError, TuneError)
from .shape import DTYPES, TensorType, tensor, var
from .condition import SpecializedCondition
from .target import Target, default_target, register_target_kind, targets
from .generic_func import GenericFunc
from .implementation import (Excluded, Implementation, Kernel, host_impl, kernel_impl,
                             view_impl)
from .strategy import Strategy
from .op import (Case, KernelInfo, OpPattern, get_op, list_ops, register_gradient, register_op,
                 register_strategies, register_strategy)
from .compiled import CompiledOp, compile, explain  # noqa: A004
from .arrays import asarray, to_host
from .autodiff import grad
from . import builtin as _builtin
from .strategies.generic import (register_broadcast_schedule, register_injective_schedule,
                                 register_reduce_schedule)
from . import ops

_builtin.load()


#: subpackages loaded on first use, as SciPy's are: ``import gpucg`` stays light (it imports
#: neither onnx nor the tuner) and ``gpucg.onnx.compile(...)`` still works after it
SUBPACKAGES = ("autotune", "benchmarks", "codegen", "graph", "onnx", "records", "runtime",
               "strategies", "torch", "verify")


def __getattr__(name):
    # the resource report and the tuner load on first use: ``import gpucg`` stays light
    if name == "resources":
        from .verify.resources import resources
        return resources
    if name == "tune":
        from .autotune.tuner import tune
        return tune
    if name in SUBPACKAGES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpucg' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBPACKAGES) | {"resources", "tune"})


def stats(reset: bool = False) -> dict:
    """Counters since start (or the last reset): compiles, memory_hits, disk_hits, launches,
    renders, runs (operator calls run), uploads/downloads (host-device copies), borrowed/mapped
    (host memory used in place of a copy), fast_calls (eager calls served by the fast path),
    replays (calls whose kernel launches were replayed: docs/arrays.md)."""
    return _counters.snapshot(reset)


__all__ = [
    "AttrError", "BackendUnavailableError", "Case", "CompileError", "CompiledOp", "ConditionError",
    "DTYPES", "DTypeError", "Excluded", "GenericFunc", "GpucgError", "Implementation",
    "InputError", "Kernel", "KernelInfo", "LaunchError", "OpError", "OpPattern", "RecordsError",
    "ResourceError",
    "SignatureError", "SpecializedCondition", "Strategy", "StrategyError", "Target",
    "TargetError", "TargetUnavailableError", "TensorType", "TuneError", "__version__", "asarray",
    "compile",
    "default_target", "explain", "get_op", "grad", "host_impl", "kernel_impl", "list_ops", "ops",
    "view_impl",
    "register_broadcast_schedule", "register_gradient", "register_injective_schedule",
    "register_op",
    "register_reduce_schedule", "register_strategies", "register_strategy",
    "register_target_kind", "resources", "stats", "targets", "tensor", "to_host", "tune", "var",
]
