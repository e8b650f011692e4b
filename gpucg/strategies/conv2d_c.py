"""conv2d on the host through the numpy target's C kernels (gpucg/ops/_host_c.py), where a C
compiler is present: depthwise convolution, and convolutions with few taps an output (a stem's
3x3 over 3 channels, a 4x4 patchify: at most RUNS_K, 1x1 layers excepted: BLAS runs those). The
bias and the activation run in the kernel where no scale or residual comes between them."""

from __future__ import annotations

import numpy as np

from ..ops import _host_c
from ..ops.conv2d import epilogue, from_nchw, to_nchw

#: the most taps an output (c * kh * kw: a stem's 3x3 over 3 channels 27, a 4x4 patchify 48)
#: of a convolution that the direct kernel takes here and that the NumPy path makes by runs
#: of its stride phases (conv2d_host._im2col_runs: there the copy is the work, 3-3.7x faster by
#: runs; with more taps the GEMM dominates and both copies cost alike)
RUNS_K = 64


def conv2d_c(x, w, bias, attrs, out_dtype, residual, pads, oh: int, ow: int):
    """The float32 NCHW-shaped ``x`` (any strides) convolved by ``w`` (OIHW) in C, with the
    epilogue, in the data's layout; None where no kernel applies (no library, other shapes)."""
    if _host_c.library() is None:
        return None
    c, (o, i, kh, kw), g = x.shape[1], w.shape, attrs.groups
    if i == 1 and g > 1 and o == g == c:
        def kernel(b, a):
            return _host_c.depthwise(x, w, b, a, attrs.strides, attrs.dilation, pads, oh, ow)
    elif g == 1 and kh * kw > 1 and i * kh * kw <= RUNS_K:
        def kernel(b, a):
            return _host_c.direct(np.ascontiguousarray(padded(x, pads, np.float32)), w, b, a,
                                  attrs.strides, attrs.dilation, oh, ow)
    else:
        return None
    fused = residual is None and attrs.alpha == 1.0
    act = attrs.activation if fused and attrs.activation in _host_c.ACTIVATIONS else None
    y = kernel(bias if fused else None, act)
    if y is None:
        return None
    if not fused:
        res = None if residual is None else to_nchw(residual, attrs.data_layout)
        y = epilogue(y, bias, attrs.activation, out_dtype, res, attrs)
    elif act != attrs.activation:  # an activation the kernels lack
        y = epilogue(y, None, attrs.activation, out_dtype)
    return from_nchw(y.astype(out_dtype, copy=False), attrs.data_layout)


def padded(x, pads, acc):
    """x (NCHW-shaped) with zeros around its planes (top, left, bottom, right), NCHW in dtype
    ``acc``; x itself where there is no padding."""
    pt, pl, pb, pr = pads
    if not any(pads):
        return x
    n, c, h, wd = x.shape
    xp = np.empty((n, c, h + pt + pb, wd + pl + pr), acc)  # zeros on the borders only
    xp[:, :, :pt], xp[:, :, pt + h:] = 0, 0
    xp[:, :, pt:pt + h, :pl], xp[:, :, pt:pt + h, pl + wd:] = 0, 0
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    return xp
