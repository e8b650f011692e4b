"""Strategies of batch_norm: one work-item per element on GPUs, NumPy on the host.

bn_direct: x viewed as (outer, C, inner) around the channel axis; work-item i normalizes x[i]
with channel c = i / inner % C: neighbouring work-items read neighbouring elements of x, and
the four per-channel values come from a vector of C that stays in cache.
The numpy target folds the vectors into one scale and shift per channel first.
"""

from __future__ import annotations

import numpy as np

from ..codegen import Code
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.batch_norm import channel_view
from ..runtime.base import ceil_div
from ..shape import normalize_axis
from ..space import ConfigSpace
from ..strategy import Strategy, only


def _geometry(shape, axis):
    a = normalize_axis(axis, len(shape))
    return int(shape[a]), int(np.prod([int(d) for d in shape[a + 1:]], dtype=np.int64))


def _direct_run(ctx, main) -> None:
    y = ctx.outputs[0]
    c, inner = _geometry(ctx.out_shapes[0], ctx.attrs.axis)
    n = int(np.prod([int(d) for d in ctx.out_shapes[0]], dtype=np.int64))
    wg = ctx.config["wg"]
    x, gamma, beta, mean, var = ctx.inputs
    main(x=x, gamma=gamma, beta=beta, mean=mean, var=var, y=y, n=ctx.size(n), C=ctx.size(c),
         inner=ctx.size(inner), grid=ceil_div(n, wg),
         block=wg)


BN_DIRECT = kernel_impl("bn_direct", _direct_run, main=Kernel(
    "batch_norm/bn.j2", doc="one work-item per element"))


def gpu_strategy(attrs, inputs, outputs, target):
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim)
    acc = "float64" if x.dtype == "float64" else "float32"
    eps = repr(attrs.eps) + ("" if acc == "float64" else "f")
    s = Strategy(target)
    s.add(BN_DIRECT, 10, space=ConfigSpace({"wg": (64, 128, 256, 512)}, {"wg": 256}),
          fixed=dict(dtype=(x.dtype,), acc_dtype=acc, eps=Code(eps),
                      INNER1=all(d == 1 for d in x.shape[axis + 1:]),
                      OUTER1=all(d == 1 for d in x.shape[:axis])))
    return s


def _host_run(ctx):
    x, gamma, beta, mean, var = ctx.inputs
    acc = np.float64 if x.dtype == np.float64 else np.float32
    view = channel_view(x.ndim, normalize_axis(ctx.attrs.axis, x.ndim))
    scale = gamma.astype(acc) / np.sqrt(var.astype(acc) + acc(ctx.attrs.eps))
    shift = beta.astype(acc) - mean.astype(acc) * scale
    y = x.astype(acc) * scale.reshape(view)
    y += shift.reshape(view)
    return y.astype(x.dtype, copy=False)


HOST = host_impl("numpy_batch_norm", _host_run)

STRATEGIES = {"batch_norm": {"gpu": gpu_strategy, "cpu": only(HOST)}}
