"""Shared schedules for simple operators: injective, broadcast and reduce.

An operator opts in with ``register_injective_schedule`` and friends (gpucg.op); it only
supplies a C expression (``kernel_info``). Nothing here knows any particular operator.
"""

from __future__ import annotations

from ..autotune.space import ConfigSpace
from ..codegen import Code, KernelSpec
from ..op import get_op
from ..ops.scan import normalize_axis
from ..runtime.base import ceil_div
from ..strategy import Implementation, Strategy

_WG = ConfigSpace({"wg": (64, 128, 256, 512)}, {"wg": 256})


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _run_injective(ctx):
    x, y = ctx.inputs[0], ctx.outputs[0]
    n = _numel(y.shape)
    ctx.kernel("main")(x, y, ctx.size(n), grid=ceil_div(n, ctx.config["wg"]), block=ctx.config["wg"])


def _strides(shape, out_shape):
    """Element strides of a C-contiguous input, 0 where it broadcasts, aligned to out_shape."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(0 if d == 1 else acc)
        acc *= d
    return strides[::-1]


def _run_broadcast(ctx):
    a, b = ctx.inputs
    y = ctx.outputs[0]
    shape = tuple(y.shape)
    n = _numel(shape)
    sa, sb = _strides(a.shape, shape), _strides(b.shape, shape)
    args = []
    for k in range(len(shape)):
        args += [ctx.size(shape[k]), ctx.size(sa[k]), ctx.size(sb[k])]
    ctx.kernel("main")(a, b, y, ctx.size(n), *args, grid=ceil_div(n, ctx.config["wg"]),
                       block=ctx.config["wg"])


def _run_reduce(ctx):
    x, y = ctx.inputs[0], ctx.outputs[0]
    shape = tuple(x.shape)
    axis = normalize_axis(ctx.attrs.axis, len(shape))
    outer, n, inner = _numel(shape[:axis]), shape[axis], _numel(shape[axis + 1:])
    s = ctx.size
    ctx.kernel("main")(x, y, s(outer), s(n), s(inner),
                       grid=ceil_div(outer * inner, ctx.config["wg"]), block=ctx.config["wg"])


_RUN = {"injective": _run_injective, "broadcast": _run_broadcast, "reduce": _run_reduce}


def _params(kind: str, op, inputs, outputs, target) -> dict:
    from ..codegen import dialect_for

    d = dialect_for(target.backend)
    out = outputs[0]
    params = {"in_dtype": inputs[0].dtype, "out_dtype": out.dtype}
    info = op.kernel_info
    if kind == "injective":
        params["expr"] = Code(info["expr"]("v", d.type(out.dtype)))
    elif kind == "broadcast":
        params["rank"] = out.ndim
        params["expr"] = Code(info["expr"]("a[ia]", "b[ib]", d.type(out.dtype)))
    else:
        params["combine"] = Code(info["combine"]("acc", "(" + d.type(out.dtype) + ")x[p]"))
        params["identity"] = Code(info["identity"])
    return params


def make_strategies(op_name: str, kind: str):
    """(gpu strategy, cpu strategy) functions of operator ``op_name`` for a schedule kind."""

    def gpu(attrs, inputs, outputs, target):
        op = get_op(op_name)
        params = _params(kind, op, inputs, outputs, target)

        def kernels(config):
            return {"main": KernelSpec.make(f"schedules/{kind}.j2", f"gpucg_{op.name}_{kind}",
                                            wg=config["wg"], **params)}

        s = Strategy()
        s.add_implementation(Implementation(f"{kind}.{target.kind}", 10, _RUN[kind], kernels,
                                            space=_WG))
        return s

    def cpu(attrs, inputs, outputs, target):
        op = get_op(op_name)

        def run(ctx):
            result = op.reference(*ctx.inputs, ctx.attrs)
            ctx.outputs[0][...] = result

        s = Strategy()
        s.add_implementation(Implementation(f"{kind}.{target.kind}", 10, run))
        return s

    return gpu, cpu
