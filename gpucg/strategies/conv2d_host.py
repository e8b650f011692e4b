"""conv2d on the host (the NumPy target): the shapes models are made of each take the path
that touches memory least, in blocks that stay in cache.

- 1x1, stride 1, one group (the pointwise layers of MobileNets, EfficientNets, ResNet's
  bottlenecks): one (o x c) @ (c x h*w) GEMM per image, straight from the input into the
  output; no padding, no im2col copy. Channels-last data: one (h*w x c) @ (c x o) GEMM, the
  result channels last too.
- depthwise (one input channel a group, one output a channel): the padded input split into
  its stride phases (stride 2: four, each a plain stride-1 grid), so that every tap is a
  contiguous run. Channels last (NHWC phases), every tap of a phase is one ``np.einsum`` over
  a few output rows at a time (multiply and sum in one pass, inner runs of a whole row of
  channels): 2-3.5x the per-tap passes on MobileNet, EfficientNet and ConvNeXt layers
  (benchmarks/results/*depthwise*); the result stays channels last (an NCHW-shaped view of
  NHWC memory), which the next pointwise or depthwise layer, the pools, the elementwise
  operators and a transpose to NHWC (ConvNeXt's) read without a copy. NCHW data with large
  planes and small kernels (56x56 and up, 3x3), where the transposes cost more than they
  save, and dilated kernels stay NCHW: a multiply-add per tap over a block of channels of one
  image, through one scratch buffer (the output block stays in cache). Many channels (480 at
  stride 1, 64 at stride 2), where a row of channels is a long run already: no phases, one
  einsum a block of output rows over a window view of the padded NHWC input.
- few taps a column (a stem's 3x3 over 3 channels, a 4x4 patchify): im2col by runs, each
  tap's columns one contiguous run of its stride phase, then a GEMM a group per image (one
  group and 32 outputs or more: the result channels last, so the layers after a stem never
  transpose).
- the rest: im2col by a strided window view, one matmul per group.
The bias, activation and residual then run in the epilogue (gpucg.ops.conv2d.epilogue); the
depthwise phase paths add the bias as they store their rows (one pass over the output fewer).
"""

from __future__ import annotations

import numpy as np

from ..ops.conv2d import epilogue, from_nchw, host_view, to_nchw
from .conv2d_c import RUNS_K, conv2d_c, padded


def acc_dtype(dtype) -> np.dtype:
    """float32 sums for float16, bfloat16 and float32 data, float64 for float64."""
    return np.dtype(np.float32) if np.dtype(dtype).itemsize <= 4 else np.dtype(dtype)


#: the most bytes of im2col columns made at once (see numpy_conv2d)
IM2COL_BYTES = 8 << 20
#: the output bytes of one depthwise block (a few channels, or rows, of one image): half the
#: L2 (256 KiB: 0.92x the time of 128 KiB summed over EfficientNet-B0 and MobileNetV3 layers,
#: fewer einsum calls; benchmarks/results/*depthwise-block*)
DEPTHWISE_BYTES = 256 << 10
#: a depthwise kernel of at most 3x3 whose output plane (padded to the phase width) has this
#: many elements (56x56 and up) stays in NCHW: its taps are long runs already, and the
#: transposes to channels last would cost more than they save (measured at MobileNet and
#: EfficientNet layers: 0.75-0.9x the channels-last time there, 1.5-3x below)
PLANE_RUN = 56 * 56
#: channels-last depthwise layers with this many channels (stride 1) or STRIDED_CHANNELS
#: (a stride above 1) take the window view of the padded input (:func:`_depthwise_window`,
#: inner runs of c channels) instead of the stride phases' runs of a row: measured at
#: EfficientNet-B0 and MobileNetV3 layers (benchmarks/results/*depthwise-window*), stride 2
#: from 72 channels 0.3-0.8x the phases' time (their strided copy cost as much as the sums;
#: 16 channels 2.3x), stride 1 from 480 channels 0.7-0.96x (144 channels: 1.5x)
WINDOW_CHANNELS, STRIDED_CHANNELS = 480, 64
#: the output bytes of one block of output rows of im2col by runs with one group (L2-sized)
RUNS_BLOCK_BYTES = 256 << 10
#: im2col by runs writes channels last from this many output channels (one group): the
#: depthwise layer after a stem reads channels-last data faster from 32 channels (EfficientNet-
#: B0's 32: 0.7x its NCHW planes' time), NCHW planes below (MobileNetV3's 16: 0.75x)
RUNS_LAST_CHANNELS = 32
#: a channels-last pointwise layer with at most this many positions a plane runs as one GEMM
#: over the rows of every image (7x7 planes of EfficientNet-B0: 0.81-0.90x the time of one GEMM
#: an image; 14x14 0.92-0.99x; 56x56 0.86-0.95x; the 112x112 stem output's 1.5x). Whole
#: models, one process: 56x56 against 14x14, MobileNetV3-small 0.94x, EfficientNet-B0 0.95x
FOLD_PLANE = 56 * 56


def channels_last(x) -> bool:
    """Whether an NCHW-shaped array lies in memory as NHWC, densely (a channels-last view)."""
    return x.ndim == 4 and x.transpose(0, 2, 3, 1).flags.c_contiguous


def numpy_conv2d(data, weight, bias, attrs, out_dtype, residual=None) -> np.ndarray:
    """conv2d on the host (see the module docstring for the paths). The data may come in any
    strides; NCHW data lying as NHWC in memory (:func:`channels_last`) keeps that layout
    through the pointwise and depthwise paths, which read and write it for free."""
    acc = acc_dtype(data.dtype)
    x, w, pads, oh, ow = host_view(data, weight, attrs, acc)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g, strides, dilation = attrs.groups, attrs.strides, attrs.dilation
    (sh, sw), (dh, dw) = strides, dilation
    last = channels_last(x)
    if acc == np.float32:  # C kernels where a compiler is present (gpucg/ops/_host_c.py)
        y = conv2d_c(x, w, bias, attrs, out_dtype, residual, pads, oh, ow)
        if y is not None:
            return y
    if i == 1 and g > 1 and o == g:
        planes = dh != 1 or dw != 1 or (not last and kh * kw <= 9 and
                                        oh * (ow + (kw - 1) // sw) >= PLANE_RUN)
        window = c >= (WINDOW_CHANNELS if sh == sw == 1 else STRIDED_CHANNELS)
        # the bias added as the phase paths store their rows (alpha 1: alpha * sum + bias)
        b = None if window or bias is None or attrs.alpha != 1.0 else bias.astype(acc)
        y = (_depthwise(x, w, pads, oh, ow, strides, dilation, acc, b) if planes else
             _depthwise_window(x, w, pads, oh, ow, strides, acc) if window else
             _depthwise_channels_last(x, w, pads, oh, ow, strides, acc, b))
        bias = None if b is not None else bias
    elif kh == kw == 1 and sh == sw == 1 and g == 1 and not any(pads) and last:
        # (n, h*w, c) @ (c, o): the NHWC result of a GEMM with the weights read transposed
        # (small planes: the images' rows folded into one GEMM)
        rows = (n * h * wd, c) if h * wd <= FOLD_PLANE else (n, h * wd, c)
        y = np.matmul(x.transpose(0, 2, 3, 1).reshape(rows), w.reshape(o, c).T)
        y = y.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
    elif kh == kw == 1 and sh == sw == 1 and g == 1 and not any(pads):
        y = np.empty((n, o, oh, ow), acc)
        np.matmul(w.reshape(o, c), np.ascontiguousarray(x).reshape(n, c, h * wd),
                  out=y.reshape(n, o, oh * ow))
    elif i == 1 and g > 1:
        y = _depthwise_multiplier(padded(x, pads, acc), w, n, c, oh, ow, strides, dilation,
                                  acc)
    elif i * kh * kw <= RUNS_K and (kw - 1) * dw // sw <= ow // 8:
        y = _im2col_runs(x, w, pads, oh, ow, strides, dilation, acc)
    else:
        y = _im2col(padded(x, pads, acc), w, n, g, oh, ow, strides, dilation, acc)
    res = None if residual is None else to_nchw(residual, attrs.data_layout)
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype, res, attrs),
                     attrs.data_layout)


def _depthwise(x, w, pads, oh, ow, strides, dilation, acc, bias=None):
    """Depthwise by taps over blocks of channels, NCHW: each tap one contiguous run of its
    stride phase's padded plane (see :func:`_phases`; rows computed across the phase's padded
    width, the extra columns dropped at the end): long runs, where a strided tap of a 14x14
    plane is 14-element rows. Dilation moves a tap's phase and offset."""
    (sh, sw), (dh, dw) = strides, dilation
    n, c = x.shape[:2]
    kh, kw = w.shape[2:]
    ph, pw = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    taps = _taps(kh, kw, pw, strides, dilation)
    phase = _phases(x, pads, ph, pw, strides, acc, False, {t[:2] for t in taps})
    plane = (ph + 1) * pw
    y = np.empty((n, c, oh, ow), acc)
    block = max(1, min(c, DEPTHWISE_BYTES // max(1, acc.itemsize * oh * pw)))
    out = np.empty((block, oh, pw), acc)
    scratch = np.empty((block, oh, pw), acc)
    wt = w.reshape(c, kh, kw)
    for b in range(n):
        for c0 in range(0, c, block):
            c1 = min(c, c0 + block)
            yb, tmp = out[:c1 - c0], scratch[:c1 - c0]
            for t, (a, e, start, r, q) in enumerate(taps):
                run = phase[a, e, b, c0:c1].reshape(c1 - c0, plane)
                tap = run[:, start:start + oh * pw].reshape(c1 - c0, oh, pw)
                k = wt[c0:c1, r, q, None, None]
                if t == 0:
                    np.multiply(tap, k, out=yb)
                else:
                    np.multiply(tap, k, out=tmp)
                    yb += tmp
            if bias is None:
                y[b, c0:c1] = yb[:, :, :ow]
            else:
                np.add(yb[:, :, :ow], bias[c0:c1, None, None], out=y[b, c0:c1])
    return y


def _phases(x, pads, ph, pw, strides, acc, channels_last: bool, used=None):
    """The zero-padded input split by the stride into phases: phase (a, b) holds padded rows
    a, a + sh, ... and columns b, b + sw, ... (stride 1: the padded input itself), with one
    more zero row (a flat run of the last tap ends in it); (n, c, ph + 1, pw) each, or
    (n, ph + 1, pw, c) ``channels_last``. Only the phases in ``used`` (None: all) are filled."""
    n, c, h, wd = x.shape
    (sh, sw), (pt, pl) = strides, pads[:2]
    # not np.zeros: only the borders no input lands on are written twice over otherwise (the
    # host keeps freed memory, so a fresh buffer is no longer zero pages for free)
    out = np.empty((sh, sw) + ((n, ph + 1, pw, c) if channels_last else (n, c, ph + 1, pw)), acc)
    for a in range(sh):
        for b in range(sw):
            if used is not None and (a, b) not in used:
                continue
            i0, j0 = max(0, -((a - pt) // sh)), max(0, -((b - pl) // sw))  # first in x
            r0, c0 = a + i0 * sh - pt, b + j0 * sw - pl
            src = x[:, :, r0::sh, c0::sw][:, :, :max(0, ph - i0), :max(0, pw - j0)]
            hi, wi = src.shape[2:]
            p = out[a, b] if channels_last else out[a, b].transpose(0, 2, 3, 1)  # NHWC view
            p[:, :i0], p[:, i0 + hi:] = 0, 0
            p[:, i0:i0 + hi, :j0], p[:, i0:i0 + hi, j0 + wi:] = 0, 0
            p[:, i0:i0 + hi, j0:j0 + wi] = src.transpose(0, 2, 3, 1)
    return out


def _depthwise_channels_last(x, w, pads, oh, ow, strides, acc, bias=None):
    """Depthwise (dilation 1) by phases (see :func:`_phases`): tap (r, q) of the kernel reads
    phase (r % sh, q % sw) at offset (r // sh, q // sw), a stride-1 window; all the taps of
    a phase are one einsum over a strided view, whose rows are whole rows of the padded phase
    (pw positions x c channels, against the weights tiled to that length), pw - ow of them
    dropped as a block of output rows of one image (in cache) is stored (with the ``bias``,
    where given). Returns the NHWC result as an NCHW-shaped view."""
    n, c = x.shape[:2]
    kh, kw = w.shape[2:]
    sh, sw = strides
    ph, pw = oh + (kh - 1) // sh, ow + (kw - 1) // sw
    y = np.empty((n, oh, ow, c), acc)
    if y.size == 0:
        return np.zeros((n, c, oh, ow), acc)
    phase = _phases(x, pads, ph, pw, strides, acc, channels_last=True)
    it, run = acc.itemsize, pw * c
    taps = []  # (a, b, the phase's taps' weights tiled along a row: (kr, kq, run))
    for a in range(min(sh, kh)):
        for b in range(min(sw, kw)):
            k = w[:, 0, a::sh, b::sw].transpose(1, 2, 0)  # (kr, kq, c)
            taps.append((a, b, np.ascontiguousarray(np.broadcast_to(
                k[:, :, None, :], k.shape[:2] + (pw, c))).reshape(k.shape[0], k.shape[1], run)))
    rows = max(1, min(oh, DEPTHWISE_BYTES // (it * run)))
    acc_rows, tmp = np.empty((rows, run), acc), np.empty((rows, run), acc)
    bias_row = None if bias is None else np.tile(bias, ow)  # along a stored row of channels
    for img in range(n):
        for i0 in range(0, oh, rows):
            m = min(rows, oh - i0)
            out = acc_rows[:m]
            for t, (a, b, k) in enumerate(taps):
                base = phase[a, b, img, i0:]
                view = np.lib.stride_tricks.as_strided(
                    base, shape=k.shape[:2] + (m, run), strides=(run * it, c * it, run * it, it))
                dst = out if t == 0 else tmp[:m]
                np.einsum("rqmx,rqx->mx", view, k, out=dst)
                if t:
                    out += dst
            kept = out.reshape(m, pw * c)[:, :ow * c]  # the rows' own columns
            if bias is None:
                y[img, i0:i0 + m] = kept.reshape(m, ow, c)
            else:
                np.add(kept, bias_row, out=y[img, i0:i0 + m].reshape(m, ow * c))
    return y.transpose(0, 3, 1, 2)


def _depthwise_window(x, w, pads, oh, ow, strides, acc):
    """Depthwise (dilation 1) as one einsum a block of output rows of one image over a window
    view of the zero-padded NHWC input: output (i, j) of tap (r, q) reads padded row
    i * sh + r, column j * sw + q; inner runs of c channels, against the weights tiled along
    an output row (runs of a whole row of channels) where that tile fits DEPTHWISE_BYTES, else
    read along the row with stride 0 (runs of c channels, but the kernel's kh * kw * c weights
    stay in cache where the tile streamed from memory: 0.77-0.9x the time at EfficientNet-B0's
    and MobileNetV3's 672-1152 channels of 7x7 and 14x14 planes). One copy of the input (into
    the padded buffer), where stride phases make a strided copy of it. Returns the NHWC result
    as an NCHW-shaped view."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    (sh, sw), (pt, pl) = strides, pads[:2]
    y = np.empty((n, oh, ow, c), acc)
    if y.size == 0:
        return y.transpose(0, 3, 1, 2)
    hp, wp = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # the padded rows and columns read
    xp = np.empty((n, hp, wp, c), acc)
    hi, wi = max(0, min(h, hp - pt)), max(0, min(wd, wp - pl))  # the input's part read
    xp[:, :pt], xp[:, pt + hi:] = 0, 0
    xp[:, pt:pt + hi, :pl], xp[:, pt:pt + hi, pl + wi:] = 0, 0
    xp[:, pt:pt + hi, pl:pl + wi] = x.transpose(0, 2, 3, 1)[:, :hi, :wi]
    it = acc.itemsize
    k = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))  # (kh, kw, c)
    tiled = kh * kw * ow * c * it <= DEPTHWISE_BYTES
    if tiled:  # along an output row: the einsum's runs are whole rows (ow * c)
        k = np.ascontiguousarray(np.broadcast_to(k[:, :, None, :], (kh, kw, ow, c)))
    rows = max(1, min(oh, DEPTHWISE_BYTES // (it * ow * c)))
    for img in range(n):
        for i0 in range(0, oh, rows):
            m = min(rows, oh - i0)
            view = window_view(xp[img, i0 * sh:], kh, kw, m, ow, sh, sw)
            np.einsum("rqmjc,rqjc->mjc" if tiled else "rqmjc,rqc->mjc", view, k,
                      out=y[img, i0:i0 + m])
    return y.transpose(0, 3, 1, 2)


def window_view(rows: np.ndarray, kh: int, kw: int, m: int, ow: int, sh: int, sw: int):
    """(kh, kw, m, ow, c) view of padded NHWC ``rows`` (hp, wp, c) of one image, dense: tap
    (r, q) of output (i, j) reads row i * sh + r, column j * sw + q (no copy)."""
    rs, cs, it = rows.strides
    return np.lib.stride_tricks.as_strided(rows, shape=(kh, kw, m, ow, rows.shape[2]),
                                           strides=(rs, cs, sh * rs, sw * cs, it))


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


def _taps(kh, kw, pw, strides, dilation) -> list:
    """(phase row, phase column, offset of its run in the phase plane, r, q) of each tap."""
    (sh, sw), (dh, dw) = strides, dilation
    return [(r * dh % sh, q * dw % sw, r * dh // sh * pw + q * dw // sw, r, q)
            for r in range(kh) for q in range(kw)]


def _im2col_runs(x, w, pads, oh, ow, strides, dilation, acc):
    """im2col by runs: each tap's columns for every channel are one contiguous run of its
    stride phase's plane (see :func:`_phases`), copied whole into the (c*kh*kw, oh*pw)
    matrix of one image; one GEMM a group, whose pw - ow extra columns a row are dropped as
    the result is stored. The window view's copy it replaces gathers the columns element by
    element (strided at stride 2). One group and RUNS_LAST_CHANNELS outputs (a stem, a
    patchify): (rows x K) @ (K x o) GEMMs over blocks of output rows, the result channels last
    (the depthwise and pointwise layers after a stem then read it as it lies: no transposes);
    else (o/g x K) @ (K x oh*pw) a group, NCHW."""
    n, c = x.shape[:2]
    o, i, kh, kw = w.shape
    g = c // i
    (sh, sw), (dh, dw) = strides, dilation
    ph, pw = oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw
    taps = _taps(kh, kw, pw, strides, dilation)
    phase = _phases(x, pads, ph, pw, strides, acc, False, {t[:2] for t in taps})
    run, plane = oh * pw, (ph + 1) * pw
    wm = w.reshape(g, o // g, i * kh * kw)
    cols = np.empty((c, kh, kw, run), acc)
    last = g == 1 and o >= RUNS_LAST_CHANNELS
    if last:
        y = np.empty((n, oh, ow, o), acc)
        rows = max(1, min(oh, RUNS_BLOCK_BYTES // (acc.itemsize * pw * max(1, o))))
        wide = np.empty((rows * pw, o), acc)
        cm, wt = cols.reshape(i * kh * kw, run), wm[0].T
    else:
        y = np.empty((n, o, oh, ow), acc)
        wide = np.empty((g, o // g, run), acc)
    for b in range(n):
        for a, e, start, r, q in taps:
            cols[:, r, q] = phase[a, e, b].reshape(c, plane)[:, start:start + run]
        if not last:
            np.matmul(wm, cols.reshape(g, i * kh * kw, run), out=wide)
            y[b] = wide.reshape(o, oh, pw)[:, :, :ow]
            continue
        for i0 in range(0, oh, rows):
            m = min(rows, oh - i0)
            np.matmul(cm[:, i0 * pw:(i0 + m) * pw].T, wt, out=wide[:m * pw])
            y[b, i0:i0 + m] = wide[:m * pw].reshape(m, pw, o)[:, :ow]
    return y.transpose(0, 3, 1, 2) if last else y


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
