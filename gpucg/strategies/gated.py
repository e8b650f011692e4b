"""Strategies of silu_and_mul and gelu_and_mul: one kernel (templates/gated/act_and_mul.j2) on
GPUs, NumPy on the host.

act_and_mul: x viewed as (rows, 2d); a work-group takes a chunk of one row's d outputs (the
row and the chunk from its group index: no division per element), each work-item ``items``
runs of ``vw`` neighbouring outputs, reading the gate and the up half by 128-bit loads
(all of them issued before any arithmetic) and storing 128 bits. The vector config needs d a
multiple of vw and x 16-byte aligned (the dispatcher checks both; else vw = 1). The chunk's
tail goes element by element.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..codegen import Code, dialect_for
from ..codegen.vector import lanes
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops._unary import TABLE, Lit
from ..ops.gated import ACTIVATION, act_attrs
from ..runtime.base import ceil_div
from ..shape import alignment
from ..space import ConfigSpace
from ..strategy import Strategy, only


def _run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    d = int(y.shape[-1]) if y.ndim else 0
    rows = int(np.prod(y.shape[:-1], dtype=np.int64))
    c = ctx.config
    chunk = c["wg"] * c["items"] * c["vw"]
    grid = rows * ceil_div(d, chunk)
    if grid:
        main(x=x, y=y, d=ctx.size(d), grid=grid, block=c["wg"])


ACT_AND_MUL = kernel_impl("act_and_mul", _run, main=Kernel(
    "gated/act_and_mul.j2", doc="act(gate) * up, 128-bit accesses, a chunk of a row a group"))


def gpu_strategy(op: str):
    def strategy(attrs, inputs, outputs, target):
        (x,) = inputs
        d = dialect_for(target.backend)
        act = ACTIVATION[op]
        vw = lanes(x.dtype)
        half = sympy.floor(sympy.sympify(x.shape[-1]) / 2)

        def needs(config):
            if config["vw"] == 1:
                return None
            return sympy.And(alignment(0) >= 16, sympy.Eq(sympy.Mod(half, vw), 0)), {"vw": 1}

        # PoCL (a loaded 2-core machine, (512, 2 * 11008) float32): 128-bit accesses ran 2-4x
        # faster than scalar ones, larger groups a little faster
        default = {"wg": 256 if target.on_cpu else 128, "items": 2, "vw": vw}
        s = Strategy(target)
        s.add(ACT_AND_MUL, 10, needs=needs,
              space=ConfigSpace({"wg": (64, 128, 256, 512), "items": (1, 2, 4),
                                 "vw": tuple(sorted({1, vw}))}, default),
              fixed=dict(dtype=x.dtype, act=act, text=Code(f"{act}(gate) * up"),
                         acc_dtype="float64" if x.dtype == "float64" else "float32",
                         expr=Code(TABLE[act].c("x", Lit(x.dtype, d), act_attrs(op, attrs)))))
        return s
    return strategy


HOST = host_impl("numpy_act_and_mul", lambda ctx: ctx.compiled.op.reference(
    ctx.inputs[0], ctx.attrs))
STRATEGIES = {op: {"gpu": gpu_strategy(op), "cpu": only(HOST)} for op in ACTIVATION}
