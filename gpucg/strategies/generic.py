"""Shared schedules for simple operators: injective, broadcast and reduce.

An operator opts in by declaring a :class:`gpucg.KernelInfo` (a C expression, or a combine
and an identity) and taking these strategies: :func:`schedule_strategies` for a built-in
family's STRATEGIES table, ``register_injective_schedule`` and friends from outside. Nothing
here knows any particular operator. The host target runs the operator's NumPy reference.
"""

from __future__ import annotations

from ..space import ConfigSpace
from ..codegen import Code, dialect_for
from ..errors import OpError
from ..implementation import Kernel, host_impl, kernel_impl
from ..op import get_op, register_strategies
from ..runtime.base import ceil_div
from ..shape import product, split_axis
from ..strategy import Strategy

_WG = ConfigSpace({"wg": (64, 128, 256, 512)}, {"wg": 256})


def _injective_run(ctx, main):
    x, y = ctx.inputs[0], ctx.outputs[0]
    n = product(y.shape)
    main(x=x, y=y, n=ctx.size(n), grid=ceil_div(n, ctx.config["wg"]), block=ctx.config["wg"])


def _strides(shape, out_shape):
    """Element strides of a C-contiguous input, 0 where it broadcasts, aligned to out_shape."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(0 if d == 1 else acc)
        acc *= d
    return strides[::-1]


def _broadcast_run(ctx, main):
    a, b = ctx.inputs
    y = ctx.outputs[0]
    shape = tuple(y.shape)
    n = product(shape)
    sa, sb = _strides(a.shape, shape), _strides(b.shape, shape)
    dims = {}
    for k in range(len(shape)):
        dims.update({f"s{k}": ctx.size(shape[k]), f"as{k}": ctx.size(sa[k]),
                     f"bs{k}": ctx.size(sb[k])})
    main(a=a, b=b, y=y, n=ctx.size(n), **dims, grid=ceil_div(n, ctx.config["wg"]), block=ctx.config["wg"])


def _reduce_run(ctx, main):
    x, y = ctx.inputs[0], ctx.outputs[0]
    outer, n, inner = split_axis(x.shape, ctx.attrs.axis)
    s = ctx.size
    main(x=x, y=y, outer=s(outer), n=s(n), inner=s(inner), grid=ceil_div(outer * inner, ctx.config["wg"]),
         block=ctx.config["wg"])


INJECTIVE = kernel_impl("injective", _injective_run, main=Kernel(
    "schedules/injective.j2", doc="one work-item per element"))
BROADCAST = kernel_impl("broadcast", _broadcast_run, main=Kernel(
    "schedules/broadcast.j2", doc="one work-item per output element, NumPy broadcasting"))
REDUCE = kernel_impl("reduce", _reduce_run, main=Kernel(
    "schedules/reduce.j2", doc="one work-item per output element, a loop over the reduced axis"))
HOST = host_impl("numpy_reference", lambda ctx: ctx.info(*ctx.inputs, ctx.attrs))

_DECLS = {"injective": INJECTIVE, "broadcast": BROADCAST, "reduce": REDUCE}


def _params(kind: str, info, inputs, outputs, target) -> dict:
    d = dialect_for(target.backend)
    out = outputs[0]
    params = {"in_dtype": inputs[0].dtype, "out_dtype": out.dtype}
    if kind == "injective":
        params["expr"] = Code(info.expr("v", d.type(out.dtype)))
    elif kind == "broadcast":
        params["rank"] = out.ndim
        params["expr"] = Code(info.expr("a[ia]", "b[ib]", d.type(out.dtype)))
    else:
        params["combine"] = Code(info.combine("acc", "(" + d.type(out.dtype) + ")x[p]"))
        params["identity"] = Code(info.identity)
    return params


def schedule_strategies(op_name: str, kind: str) -> dict:
    """{"gpu": strategy, "cpu": strategy} of a shared schedule ("injective", "broadcast" or
    "reduce") for operator ``op_name``; the operator's KernelInfo supplies the C."""
    if kind not in _DECLS:
        raise OpError(f"schedule kind {kind!r} is unknown; known: {', '.join(_DECLS)}")

    def gpu(attrs, inputs, outputs, target):
        info = get_op(op_name).kernel_info
        s = Strategy(target)
        s.add(_DECLS[kind], 10, space=_WG, fixed=_params(kind, info, inputs, outputs, target))
        return s

    def cpu(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(HOST, 10, info=get_op(op_name).reference)
        return s

    return {"gpu": gpu, "cpu": cpu}


def _check(op_name: str, kind: str) -> None:
    info = get_op(op_name).kernel_info
    needs = {"injective": ("expr",), "broadcast": ("expr",), "reduce": ("combine", "identity")}
    missing = [f for f in needs.get(kind, ()) if getattr(info, f) is None]
    if missing:
        raise OpError(f"{op_name}: the {kind} schedule needs KernelInfo({', '.join(missing)}=...)")


def _register(op_name: str, kind: str, override: bool) -> None:
    _check(op_name, kind)
    register_strategies({op_name: schedule_strategies(op_name, kind)}, override=override)


def register_injective_schedule(op_name: str, override: bool = False) -> None:
    """Give an elementwise operator the shared injective kernel on every target.

    The operator's ``KernelInfo.expr`` is a function ``(x: str, ctype: str) -> C expr``.
    """
    _register(op_name, "injective", override)


def register_broadcast_schedule(op_name: str, override: bool = False) -> None:
    """Give a binary operator the shared NumPy-broadcasting kernel on every target.

    The operator's ``KernelInfo.expr`` is ``(a: str, b: str, ctype: str) -> C expr``.
    """
    _register(op_name, "broadcast", override)


def register_reduce_schedule(op_name: str, override: bool = False) -> None:
    """Give a one-axis reduction the shared reduce kernel on every target.

    The operator's ``KernelInfo`` holds ``combine`` ``(a, b) -> C expr`` and ``identity``
    (a C literal); its attrs have ``axis``.
    """
    _register(op_name, "reduce", override)
