"""Axes of a reduction: validating ``axis`` (None, an int or a tuple of ints), normalizing it
against a rank, and viewing a reduction as passes over (outer, n, inner) views.

The reductions and the global pools share these; the kernels only ever see one reduced run of
axes at a time, as the (outer, n, inner) view of gpucg.shape.split_axis.
"""

from __future__ import annotations

import numpy as np

from ..errors import AttrError, InputError, describe
from ..shape import product, simplify_dim


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def axis_attr(value, allow_tuple: bool = True):
    """``axis`` as given to an operator: None, an int or (if allowed) a tuple of ints.

    Lists become tuples; anything else is an AttrError naming what is allowed.
    """
    if value is None:
        return None
    if _is_int(value):
        return int(value)
    if allow_tuple and isinstance(value, (tuple, list)) and all(_is_int(v) for v in value):
        return tuple(int(v) for v in value)
    allowed = "None, an int or a tuple of ints" if allow_tuple else "None or an int"
    raise AttrError(f"axis={describe(value)} must be {allowed}")


def flat_axis(data, axis):
    """None for an int ``axis`` of 0 or -1 on a 0-d array, else ``axis``: NumPy's cumsum,
    argmax and argsort treat a 0-d array as its flattened one-element view there (np.sum and
    np.sort do not, and reject the axis)."""
    if axis in (0, -1) and _is_int(axis) and len(getattr(data, "shape", (0,))) == 0:
        return None
    return axis


def normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    """The reduced axes in 0..ndim-1, sorted: None is every axis, an int one, a tuple those.

    Out-of-range and repeated axes are InputErrors naming the allowed range.
    """
    if axis is None:
        return tuple(range(ndim))
    given = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in given:
        if not -ndim <= a < ndim:
            allowed = f"{-ndim}..{ndim - 1}" if ndim else "none (the input is 0-d; use axis=None)"
            raise InputError(f"{op}: axis={axis!r} is out of range for an input of rank {ndim}; "
                             f"allowed: {allowed}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise InputError(f"{op}: axis={axis!r} names axis {max(out, key=out.count)} twice; "
                         "each axis may be reduced once")
    return tuple(sorted(out))


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    """The shape after reducing ``axes`` (kept as 1 with ``keepdims``)."""
    if keepdims:
        return tuple(1 if i in axes else simplify_dim(d) for i, d in enumerate(shape))
    return tuple(simplify_dim(d) for i, d in enumerate(shape) if i not in axes)


def reduced_count(shape, axes):
    """How many elements each output element reduces: the product of the reduced sizes."""
    return product([shape[a] for a in axes])


def runs(shape, axes) -> list[tuple[bool, list]]:
    """The shape as runs of neighbouring reduced (True) or kept (False) dimensions.

    Dimensions of constant size 1 are left out (they change no address), so reducing axes 0
    and 2 of (n, 1, m) is one run.
    """
    out: list[tuple[bool, list]] = []
    for i, d in enumerate(shape):
        if type(d) is int and d == 1:
            continue
        red = i in axes
        if out and out[-1][0] == red:
            out[-1][1].append(d)
        else:
            out.append((red, [d]))
    return out


def passes(shape, axes) -> list[tuple]:
    """The (outer, n, inner) view of each pass that reduces one run of axes, innermost first.

    Each pass sees the shape the passes before it left (their runs reduced away). No reduced
    run (no axes, or only axes of size 1) is one pass of n = 1 over every element.
    """
    parts = runs(shape, axes)
    if not any(red for red, _ in parts):
        return [(product(shape), 1, 1)]
    out = []
    sizes = [(red, product(dims)) for red, dims in parts]
    for pos in range(len(sizes) - 1, -1, -1):
        red, n = sizes[pos]
        if not red:
            continue
        outer = product([s for _, s in sizes[:pos]])
        inner = product([s for _, s in sizes[pos + 1:]])
        out.append((outer, n, inner))
        sizes[pos] = (False, 1)
    return out
