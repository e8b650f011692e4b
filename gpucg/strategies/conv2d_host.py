"""conv2d on the host (the NumPy target): the shapes models are made of each take the path
that touches memory least, in blocks that stay in cache.

- 1x1, stride 1, one group (the pointwise layers of MobileNets, EfficientNets, ResNet's
  bottlenecks): one (o x c) @ (c x h*w) GEMM per image, straight from the input into the
  output; no padding, no im2col copy.
- depthwise (one input channel a group, one output a channel): a multiply-add per kernel tap,
  a block of channels of one image at a time, through one scratch buffer, so that the output
  block and the taps stay in cache (the whole-output passes it replaces wrote every tap's
  product to fresh memory).
- the rest: im2col by a strided window view, one matmul per group.
The bias, activation and residual then run in the epilogue (gpucg.ops.conv2d.epilogue).
"""

from __future__ import annotations

import numpy as np

from ..ops.conv2d import epilogue, from_nchw, host_view, to_nchw

def acc_dtype(dtype) -> np.dtype:
    """float32 sums for float16, bfloat16 and float32 data, float64 for float64."""
    return np.dtype(np.float32) if np.dtype(dtype).itemsize <= 4 else np.dtype(dtype)


#: the most bytes of im2col columns made at once (see numpy_conv2d)
IM2COL_BYTES = 8 << 20
#: the output bytes of one depthwise block (a few channels of one image): L2-sized
DEPTHWISE_BYTES = 128 << 10


def numpy_conv2d(data, weight, bias, attrs, out_dtype, residual=None) -> np.ndarray:
    """conv2d on the host (see the module docstring for the paths)."""
    acc = acc_dtype(data.dtype)
    x, w, (pt, pl, pb, pr), oh, ow = host_view(data, weight, attrs, acc)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g = attrs.groups
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    res = None if residual is None else to_nchw(residual, attrs.data_layout)
    if i == 1 and g > 1 and o == g:
        y = _depthwise(x, w, (pt, pl, pb, pr), oh, ow, (sh, sw), (dh, dw), acc)
        return from_nchw(epilogue(y, bias, attrs.activation, out_dtype, res, attrs),
                         attrs.data_layout)
    if pt or pl or pb or pr:
        xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), acc)
        xp[:, :, pt:pt + h, pl:pl + wd] = x
    else:
        xp = x
    if kh == kw == 1 and sh == sw == 1 and g == 1 and not (pt or pl or pb or pr):
        y = np.empty((n, o, oh, ow), acc)
        np.matmul(w.reshape(o, c), np.ascontiguousarray(x).reshape(n, c, h * wd),
                  out=y.reshape(n, o, oh * ow))
    elif i == 1 and g > 1:
        y = _depthwise_multiplier(xp, w, n, c, oh, ow, (sh, sw), (dh, dw), acc)
    else:
        y = _im2col(xp, w, n, g, oh, ow, (sh, sw), (dh, dw), acc)
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype, res, attrs),
                     attrs.data_layout)


def _depthwise(x, w, pads, oh, ow, strides, dilation, acc):
    """Depthwise by taps over blocks of channels. Stride 1 reads each tap as one contiguous
    run of the padded plane (rows computed across the padded width, the extra columns dropped
    at the end): long rows, where a strided tap of a 14x14 plane is 14-element rows."""
    (sh, sw), (dh, dw) = strides, dilation
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    pt, pl, pb, pr = pads
    hp, wp = h + pt + pb, wd + pl + pr
    flat = sh == sw == 1
    rows = wp if flat else ow  # the width the block computes
    xp = np.zeros((n, c, hp + flat, wp), acc)  # one more row: the last tap's run ends there
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    y = np.empty((n, c, oh, ow), acc)
    block = max(1, min(c, DEPTHWISE_BYTES // max(1, acc.itemsize * oh * rows)))
    out = np.empty((block, oh, rows), acc)
    scratch = np.empty((block, oh, rows), acc)
    wt = w.reshape(c, kh, kw)
    for b in range(n):
        for c0 in range(0, c, block):
            c1 = min(c, c0 + block)
            yb, tmp = out[:c1 - c0], scratch[:c1 - c0]
            plane = xp[b, c0:c1].reshape(c1 - c0, -1)
            for r in range(kh):
                for q in range(kw):
                    if flat:
                        start = r * dh * wp + q * dw
                        tap = plane[:, start:start + oh * wp].reshape(c1 - c0, oh, wp)
                    else:
                        tap = xp[b, c0:c1, r * dh: r * dh + (oh - 1) * sh + 1: sh,
                                 q * dw: q * dw + (ow - 1) * sw + 1: sw]
                    k = wt[c0:c1, r, q, None, None]
                    if r == q == 0:
                        np.multiply(tap, k, out=yb)
                    else:
                        np.multiply(tap, k, out=tmp)
                        yb += tmp
            y[b, c0:c1] = yb[:, :, :ow]
    return y


def _depthwise_multiplier(xp, w, n, c, oh, ow, strides, dilation, acc):
    """Depthwise with several outputs a channel: a multiply-add per tap over the output."""
    (sh, sw), (dh, dw) = strides, dilation
    o, _, kh, kw = w.shape
    y = np.zeros((n, c, o // c, oh, ow), acc)
    wd_ = w.reshape(c, o // c, kh, kw)
    for r in range(kh):
        for q in range(kw):
            tap = xp[:, :, r * dh: r * dh + (oh - 1) * sh + 1: sh,
                     q * dw: q * dw + (ow - 1) * sw + 1: sw]
            y += tap[:, :, None] * wd_[None, :, :, r, q, None, None]
    return y.reshape(n, o, oh, ow)


def _im2col(xp, w, n, g, oh, ow, strides, dilation, acc):
    (sh, sw), (dh, dw) = strides, dilation
    o, i, kh, kw = w.shape
    win = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1),
                                                   axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]  # (n, c, oh, ow, kh, kw)
    wm = w.reshape(g, o // g, i * kh * kw)
    y = np.empty((n, o, oh, ow), acc)
    # a few images at a time: their columns stay below IM2COL_BYTES, so the buffers come
    # from the heap again instead of fresh pages (whose first touch cost more than the copy)
    step = max(1, min(n, IM2COL_BYTES // max(1, acc.itemsize * i * kh * kw * oh * ow)))
    for n0 in range(0, n, step):
        nb = min(step, n - n0)
        # im2col as (g, i*kh*kw, nb*oh*ow): the copy runs along output rows (5x faster than
        # the transposed order), then one (o/g x K) @ (K x nb*oh*ow) matmul per group
        cols = win[n0:n0 + nb].reshape(nb, g, i, oh, ow, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4)
        cols = cols.reshape(g, i * kh * kw, nb * oh * ow)
        if nb == 1 and g == 1:  # straight into the output, a 2-D GEMM
            np.matmul(wm[0], cols[0], out=y[n0].reshape(o, oh * ow))
        else:
            y[n0:n0 + nb] = np.matmul(wm, cols).reshape(o, nb, oh, ow).transpose(1, 0, 2, 3)
    return y
