"""gpucg: a GPU-first operator code generator.

Quick start::

    import numpy as np, gpucg
    y = gpucg.ops.cumsum(np.arange(10), axis=0)               # eager, default target
    n = gpucg.var("n")
    f = gpucg.compile("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="opencl")
    print(f.dispatcher_source); print(f.sources)              # what runs
    print(gpucg.explain("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="cuda"))
"""

__version__ = "0.1.0"

from .errors import (AttrError, BackendUnavailableError, CompileError, ConditionError,  # noqa: E402
                     DTypeError, GpucgError, InputError, LaunchError, OpError, ResourceError,
                     SignatureError, StrategyError, TargetError, TargetUnavailableError)
from .shape import DTYPES, TensorType, tensor, var  # noqa: E402
from .condition import SpecializedCondition  # noqa: E402
from .target import Target, default_target, register_target_kind, targets  # noqa: E402
from .generic_func import GenericFunc  # noqa: E402
from .strategy import Implementation, Strategy  # noqa: E402
from .op import (OpPattern, get_op, list_ops, register_broadcast_schedule,  # noqa: E402
                 register_injective_schedule, register_op, register_reduce_schedule,
                 register_schedule, register_strategy)
from .api import CompiledOp, compile, explain  # noqa: E402,A004
from . import ops  # noqa: E402


def stats(reset: bool = False) -> dict:
    """Counters since start (or the last reset): compiles, memory_hits, disk_hits, launches,
    renders, dispatches."""
    from .runtime import stats as _stats

    return _stats.snapshot(reset)


__all__ = [
    "AttrError", "BackendUnavailableError", "CompileError", "CompiledOp", "ConditionError",
    "DTYPES", "DTypeError", "GenericFunc", "GpucgError", "Implementation", "InputError",
    "LaunchError", "OpError", "OpPattern", "ResourceError", "SignatureError",
    "SpecializedCondition", "Strategy", "StrategyError", "Target", "TargetError",
    "TargetUnavailableError", "TensorType", "compile", "default_target", "explain", "get_op",
    "list_ops", "ops", "register_broadcast_schedule", "register_injective_schedule",
    "register_op", "register_reduce_schedule", "register_schedule", "register_strategy",
    "register_target_kind", "stats", "targets", "tensor", "var",
]
