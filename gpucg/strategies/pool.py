"""Strategies of pooling: one kernel for windows, and the reductions' kernels for the global
pools (a global pool is a mean or maximum over height and width).

pool_direct (every target with kernels): one work-item per output element, the window's taps
in an unrolled loop; NCHW neighbours take neighbouring columns and NHWC neighbours neighbouring
channels, so loads are coalesced in both layouts. The global pools dispatch among the
reduction implementations: NCHW reduces rows (n = H * W), NHWC reduces columns (inner = C).
The host target runs NumPy: a strided window view of the padded input.
"""

from __future__ import annotations

import numpy as np

from ..half import half_format
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.pool import hw_axes, lowest, out_hw, pads_for
from ..runtime.base import ceil_div
from ..strategy import Strategy, only
from .reduce import gpu_strategy_for


def _direct_run(ctx, main) -> None:
    x, y = ctx.inputs[0], ctx.outputs[0]
    attrs = ctx.attrs
    n, a, b, c = (int(v) for v in x.shape)
    (h, w, ch) = (b, c, a) if attrs.layout == "NCHW" else (a, b, c)
    pt, pl, pb, pr = pads_for(attrs, h, w)
    oh, ow = out_hw(attrs, h, w)
    s = ctx.size
    wg = ctx.config["wg"]
    main(x, y, s(n), s(ch), s(h), s(w), s(oh), s(ow), np.int32(pt), np.int32(pl), np.int32(pb),
         np.int32(pr), grid=ceil_div(n * ch * oh * ow, wg), block=wg)


POOL_DIRECT = kernel_impl("pool_direct", _direct_run, main=Kernel(
    "pool/pool2d.j2", doc="one work-item per output element"))


def gpu_strategy(kind: str):
    def strategy(attrs, inputs, outputs, target):
        x = inputs[0]
        half = half_format(x.dtype)
        acc = ("float64" if x.dtype == "float64" else "float32") if kind == "avg" or half \
            or x.dtype.startswith("float") else x.dtype
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilation
        params = dict(kind=kind, dtype="float32" if half else x.dtype, acc_dtype=acc, half=half,
                      layout=attrs.layout, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                      count_include_pad=attrs.count_include_pad)
        s = Strategy(target)
        s.add(POOL_DIRECT, 10, params=params,
              space=ConfigSpace({"wg": (32, 64, 128, 256, 512)}, {"wg": 256}))
        return s
    return strategy


def numpy_pool(kind: str, x: np.ndarray, attrs) -> np.ndarray:
    """Pooling by NumPy: pad, take a strided window view, reduce each window."""
    xs = x if attrs.layout == "NCHW" else x.transpose(0, 3, 1, 2)
    h, w = xs.shape[2:]
    pt, pl, pb, pr = pads_for(attrs, h, w)
    oh, ow = out_hw(attrs, h, w)
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    span_h, span_w = attrs.span
    # ceil_mode windows may reach past the padding: pad on to the end of the last window
    eh = max(0, (oh - 1) * sh + span_h - (h + pt + pb))
    ew = max(0, (ow - 1) * sw + span_w - (w + pl + pr))
    pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))

    def windows(a):
        view = np.lib.stride_tricks.sliding_window_view(a, (span_h, span_w), axis=(2, 3))
        return view[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]

    if kind == "max":
        y = windows(np.pad(xs, pads, constant_values=lowest(x.dtype))).max(axis=(-2, -1))
    else:
        acc = np.float64 if x.dtype == np.float64 else np.float32
        total = windows(np.pad(xs.astype(acc, copy=False), pads)).sum(axis=(-2, -1))
        ones = np.ones((1, 1, h, w), acc)
        if attrs.count_include_pad:
            mask = np.pad(np.pad(ones, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=1),
                          ((0, 0), (0, 0), (0, eh), (0, ew)))
        else:
            mask = np.pad(ones, pads)
        y = (total / windows(mask).sum(axis=(-2, -1))).astype(x.dtype)
    return y if attrs.layout == "NCHW" else y.transpose(0, 2, 3, 1)


NUMPY_POOL = host_impl("numpy_pool", lambda ctx: numpy_pool(ctx.info, ctx.inputs[0], ctx.attrs))


def host_strategy(kind: str):
    return only(NUMPY_POOL, info=kind)


def _global_host_run(ctx):
    op, x = ctx.info, ctx.inputs[0]
    axes = hw_axes(ctx.attrs.layout)
    if op == "max":
        return np.max(x, axis=axes, keepdims=True)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    return np.mean(x, axis=axes, keepdims=True, dtype=acc).astype(x.dtype)


NUMPY_GLOBAL_POOL = host_impl("numpy_global_pool", _global_host_run)


def global_host_strategy(op: str):
    return only(NUMPY_GLOBAL_POOL, info=op)


def _hw(attrs, x):
    return hw_axes(attrs.layout)


STRATEGIES = {
    "max_pool2d": {"gpu": gpu_strategy("max"), "cpu": host_strategy("max")},
    "avg_pool2d": {"gpu": gpu_strategy("avg"), "cpu": host_strategy("avg")},
    "global_max_pool2d": {"gpu": gpu_strategy_for("max", _hw), "cpu": global_host_strategy("max")},
    "global_avg_pool2d": {"gpu": gpu_strategy_for("mean", _hw),
                          "cpu": global_host_strategy("mean")},
}
