"""Strategies of pooling: one kernel for windows, and the reductions' kernels for the global
pools (a global pool is a mean or maximum over height and width).

pool_direct (every target with kernels): one work-item per output element, the window's taps
in an unrolled loop; NCHW neighbours take neighbouring columns and NHWC neighbours neighbouring
channels, so loads are coalesced in both layouts. The global pools dispatch among the
reduction implementations: NCHW reduces rows (n = H * W), NHWC reduces columns (inner = C).
The host target runs NumPy: one ufunc call per window tap over strided views (no padding
copy, no per-window loop).
"""

from __future__ import annotations

import numpy as np

from ..codegen.literals import lowest_value
from ..half import half_format
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl
from ..ops.pool import hw_axes, out_hw, pads_for
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
    main(x=x, y=y, N=s(n), C=s(ch), H=s(h), W=s(w), OH=s(oh), OW=s(ow), pt=np.int32(pt),
         pl=np.int32(pl), pb=np.int32(pb), pr=np.int32(pr), grid=ceil_div(n * ch * oh * ow, wg),
         block=wg)


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
        s.add(POOL_DIRECT, 10, fixed=params,
              space=ConfigSpace({"wg": (32, 64, 128, 256, 512)}, {"wg": 256}))
        return s
    return strategy


def _tap_slices(offset: int, stride: int, size: int, out: int):
    """(output slice, input slice) along one axis for the tap at ``offset`` from the window's
    start (padding subtracted): the outputs o with o * stride + offset in [0, size) and the
    inputs they read; None when the tap lands on no input."""
    lo = max(0, -(offset // stride))  # ceil(-offset / stride)
    hi = min(out, max(0, -((offset - size) // stride)))  # ceil((size - offset) / stride)
    if hi <= lo:
        return None
    first = lo * stride + offset
    return slice(lo, hi), slice(first, first + (hi - lo - 1) * stride + 1, stride)


def _divisor(out: int, k: int, stride: int, dil: int, pad_lo: int, lo: int, hi: int):
    """Per output position along one axis, how many taps of its window lie in [lo, hi) (the
    padded input, or the input alone), positions counted on the input."""
    tap = np.arange(out)[:, None] * stride - pad_lo + np.arange(k)[None, :] * dil
    return ((tap >= lo) & (tap < hi)).sum(axis=1)


def _fold_axis(x, axis: int, taps, out: int, fold, acc, dtype):
    """Along ``axis``: out[o] = fold over the window's taps of x[o * stride + offset], the
    taps given as (offset, stride) pairs; acc (the dtype's lowest value or zeros) where no
    tap lands, in ``dtype``. One ufunc call per tap over strided views."""
    shape = list(x.shape)
    shape[axis] = out
    y = np.full(shape, acc, dtype)
    out_ix, in_ix = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for offset, stride in taps:
        sl = _tap_slices(offset, stride, x.shape[axis], out)
        if sl is None:
            continue
        out_ix[axis], in_ix[axis] = sl
        dst = y[tuple(out_ix)]
        fold(dst, x[tuple(in_ix)], out=dst)
    return y


def numpy_pool(kind: str, x: np.ndarray, attrs) -> np.ndarray:
    """Pooling by NumPy without a per-window loop, separably: the window's rows folded into
    an intermediate of the output's height and the input's width, then its columns (kh + kw
    ufunc calls over strided views instead of kh * kw over the output: ResNet's 3x3 max pool
    reads the input three times instead of nine).

    The padding is never materialized: the outputs a tap lands on along one axis form one
    slice, so max pooling folds ``np.maximum`` starting from the dtype's lowest value (padding
    never wins; NaN propagates as in np.maximum), and avg pooling adds in float32 (float64 for
    float64) and divides by the taps counted per output, a product of one count per axis.
    """
    ah, aw = hw_axes(attrs.layout)
    h, w = x.shape[ah], x.shape[aw]
    pt, pl, pb, pr = pads_for(attrs, h, w)
    oh, ow = out_hw(attrs, h, w)
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilation
    big = kind == "max"
    acc_dtype = x.dtype if big else np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    start = lowest_value(x.dtype) if big else 0
    fold = np.maximum if big else np.add
    rows = _fold_axis(x, ah, [(r * dh - pt, sh) for r in range(kh)], oh, fold, start, acc_dtype)
    acc = _fold_axis(rows, aw, [(s * dw - pl, sw) for s in range(kw)], ow, fold, start,
                     acc_dtype)
    if big:
        return acc
    pad = attrs.count_include_pad
    count = np.outer(_divisor(oh, kh, sh, dh, pt, -pt if pad else 0, h + pb if pad else h),
                     _divisor(ow, kw, sw, dw, pl, -pl if pad else 0, w + pr if pad else w))
    count = count.astype(acc_dtype)
    count = count if attrs.layout == "NCHW" else count[:, :, None]
    np.divide(acc, count, out=acc)
    return acc.astype(x.dtype, copy=False)


NUMPY_POOL = host_impl("numpy_pool", lambda ctx: numpy_pool(ctx.info, ctx.inputs[0], ctx.attrs))


def host_strategy(kind: str):
    return only(NUMPY_POOL, info=kind)


def _global_host_run(ctx):
    op, x = ctx.info, ctx.inputs[0]
    axes = hw_axes(ctx.attrs.layout)
    if op == "max":
        return np.max(x, axis=axes, keepdims=True)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    nhwc = x if ctx.attrs.layout == "NHWC" else x.transpose(0, 2, 3, 1)
    if x.dtype == acc and x.size and nhwc.flags.c_contiguous:
        # channels innermost (channels-last data: a MobileNet's or EfficientNet's squeeze and
        # excite): np.mean adds rows of c channels, a short inner loop a pixel (10x a GEMV's
        # time at 16 channels); one ones-vector product per image sums them in BLAS instead
        n, h, w, c = nhwc.shape
        s = np.matmul(np.ones(h * w, acc), nhwc.reshape(n, h * w, c))
        s /= acc(h * w)
        return s.reshape((n, 1, 1, c) if ctx.attrs.layout == "NHWC" else (n, c, 1, 1))
    return np.mean(x, axis=axes, keepdims=True, dtype=acc).astype(x.dtype)


NUMPY_GLOBAL_POOL = host_impl("numpy_global_pool", _global_host_run, strided=True)


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
