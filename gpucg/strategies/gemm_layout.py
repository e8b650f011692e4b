"""Where the GEMM kernels find their operands: each operand's first element, leading dimension
and batch strides, read from the array itself, so a strided view (a transposed or reshaped
pyopencl array, a CuPy view) is read in place by every GEMM kernel (templates/dense/_common.j2).

An operand is readable in place when its last axis has unit stride (the kernels' inner
loops run along it) and its other strides are whole, non-negative elements; dense also needs
the data's leading dimensions to fold into one row axis. Any other operand is made contiguous
on its own device first (Backend.contiguous), never through the host.
"""

from __future__ import annotations

import numpy as np

from ..interop import byte_offset


def element_layout(x):
    """(first element, element strides) of a backend array, or None when a stride is not a
    whole number of elements. gpucg's own buffers and arrays without strides are packed."""
    shape = tuple(int(d) for d in x.shape)
    strides = getattr(x, "strides", None)
    if strides is None or 0 in shape:  # an empty CuPy array's strides can be anything
        out, acc = [], 1
        for d in reversed(shape):
            out.append(acc)
            acc *= d
        return 0, tuple(out[::-1])
    item = np.dtype(x.dtype).itemsize
    offset = byte_offset(x)
    if offset % item or any(int(s) % item for s in strides):
        return None
    return offset // item, tuple(int(s) // item for s in strides)


def _rows(shape, strides, fold: bool):
    """The leading dimension of a matrix whose rows are axis -2 (or, with ``fold``, every axis
    but the last, when they fold into one), or None where they do not."""
    if len(shape) < 2:
        return max(shape[-1], 1) if shape else 1
    axes = range(len(shape) - 1) if fold else (len(shape) - 2,)
    rows = [(shape[i], strides[i]) for i in axes if shape[i] != 1]
    for (_, outer), (n, inner) in zip(rows, rows[1:]):
        if outer != inner * n:
            return None
    return rows[-1][1] if rows else max(shape[-1], 1)


def operand(x, batch_rank: int, batch_axes, fold: bool = False):
    """(first element, leading dimension, strides along the output's batch axes
    ``batch_axes``) of operand x, or None when the kernels cannot read it in place.
    ``batch_rank``: the output's number of batch axes (x's batch axes align to its right)."""
    got = element_layout(x)
    if got is None:
        return None
    offset, strides = got
    shape = tuple(int(d) for d in x.shape)
    if shape and shape[-1] > 1 and strides[-1] != 1:
        return None
    ld = _rows(shape, strides, fold)
    if ld is None or ld < 0:
        return None
    own = shape[:-2]
    lead = batch_rank - len(own)
    batch = []
    for axis in batch_axes:
        j = axis - lead
        batch.append(strides[j] if j >= 0 and shape[j] != 1 else 0)
    if any(s < 0 for s in batch):
        return None
    return offset, ld, tuple(batch)
