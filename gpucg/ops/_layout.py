"""The data-movement operators of the elementwise family: reshape, transpose, flip, pad,
broadcast_to and sum_to (what gradients need: NumPy broadcasting undone, convolution weights
turned around). Attributes, type relations and NumPy references; gpucg/ops/elementwise.py
registers them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..errors import AttrError, InputError, describe, require_int
from ..half import half_format
from ..op import Constraint
from ..shape import TensorType, normalize_axis, product, simplify_dim


def _ints(name: str, value, allow_none=False) -> tuple | None:
    if value is None and allow_none:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise AttrError(f"{name}={describe(value)} must be a tuple of ints")
    return tuple(require_int(f"{name}[{i}]", v) for i, v in enumerate(value))


@dataclass(frozen=True)
class ShapeAttrs:
    """A target shape (reshape: one entry may be -1; broadcast_to, sum_to)."""

    shape: tuple = ()

    def __post_init__(self):
        shape = _ints("shape", self.shape)
        if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
            raise AttrError(f"shape={shape} must hold sizes >= 0 and at most one -1")
        object.__setattr__(self, "shape", shape)


@dataclass(frozen=True)
class AxesAttrs:
    """Axes (transpose: a permutation, None reverses; flip: the axes, None is all)."""

    axes: tuple | None = None

    def __post_init__(self):
        object.__setattr__(self, "axes", _ints("axes", self.axes, allow_none=True))


@dataclass(frozen=True)
class PadAttrs:
    """Per axis (low, high) or (low, high, interior): elements added before, after and
    between neighbours; negative low/high remove elements (as XLA's pad). ``value`` fills."""

    pad_width: tuple = ()
    value: float = 0.0

    def __post_init__(self):
        if not isinstance(self.pad_width, (tuple, list)):
            raise AttrError(f"pad_width={describe(self.pad_width)} must be a tuple of "
                            "(low, high) or (low, high, interior) per axis")
        out = []
        for i, p in enumerate(self.pad_width):
            p = _ints(f"pad_width[{i}]", p)
            if len(p) not in (2, 3) or (len(p) == 3 and p[2] < 0):
                raise AttrError(f"pad_width[{i}]={p} must be (low, high) or (low, high, "
                                "interior >= 0)")
            out.append(p + (0,) * (3 - len(p)))
        object.__setattr__(self, "pad_width", tuple(out))
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise AttrError(f"value={describe(self.value)} must be a number")


def _same(op, got, want, what, rules):
    """A rule that size ``got`` equals ``want``: an error when decided false, else a rule."""
    eq = sympy.Eq(sympy.sympify(got), sympy.sympify(want))
    message = f"{op}: {what} is {{}} but must be {{}}"
    if eq is sympy.false:
        raise InputError(message.format(got, want))
    if eq is not sympy.true:
        rules.append(Constraint(eq, message, (got, want)))


def reshape_rel(x: TensorType, attrs: ShapeAttrs, rules: list) -> tuple:
    numel = product(x.shape)
    known = product(d for d in attrs.shape if d != -1)
    shape = list(attrs.shape)
    if -1 in shape:
        if known == 0:
            raise InputError(f"reshape: cannot infer -1 in {attrs.shape} with a zero size")
        rest = simplify_dim(sympy.floor(sympy.sympify(numel) / known))
        _same("reshape", simplify_dim(sympy.Mod(numel, known)), 0,
              f"the size of x modulo {known}", rules)
        shape[shape.index(-1)] = rest
    else:
        _same("reshape", numel, known, f"the number of elements of x (shape {x.shape})", rules)
    return tuple(shape)


def permutation(ndim: int, axes) -> tuple:
    """transpose's axes, normalized; None reverses."""
    if axes is None:
        return tuple(range(ndim))[::-1]
    axes = tuple(normalize_axis(a, ndim, "axes") for a in axes)
    if sorted(axes) != list(range(ndim)):
        raise InputError(f"transpose: axes={axes} must be a permutation of 0..{ndim - 1}")
    return axes


def flip_axes(ndim: int, axes) -> tuple:
    """flip's axes, normalized and sorted; None is every axis."""
    if axes is None:
        return tuple(range(ndim))
    out = sorted({normalize_axis(a, ndim, "axes") for a in axes})
    if len(out) != len(axes):
        raise InputError(f"flip: axes={axes} repeats an axis")
    return tuple(out)


def pad_rel(x: TensorType, attrs: PadAttrs, rules: list) -> tuple:
    if len(attrs.pad_width) != x.ndim:
        raise InputError(f"pad: pad_width has {len(attrs.pad_width)} entries, x has "
                         f"{x.ndim} axes")
    out = []
    for axis, (d, (lo, hi, inner)) in enumerate(zip(x.shape, attrs.pad_width)):
        size = lo + hi if d == 0 else simplify_dim(lo + hi + d + (sympy.sympify(d) - 1) * inner)
        ok = sympy.sympify(size) >= 0
        if ok is sympy.false:
            raise InputError(f"pad: axis {axis} would have size {size} < 0")
        if ok is not sympy.true:
            rules.append(Constraint(ok, f"pad: axis {axis} would have size {{}} < 0", (size,)))
        out.append(size)
    return tuple(out)


def broadcast_rel(op: str, x: TensorType, attrs: ShapeAttrs, rules: list) -> tuple:
    """broadcast_to: x broadcasts to shape; sum_to: shape broadcasts to x (x's extra leading
    axes and its axes where shape has 1 are summed)."""
    big, small = (attrs.shape, x.shape) if op == "broadcast_to" else (x.shape, attrs.shape)
    if -1 in attrs.shape:
        raise InputError(f"{op}: shape={attrs.shape} must not hold -1")
    if len(small) > len(big):
        raise InputError(f"{op}: shape {tuple(small)} has more axes than {tuple(big)}")
    for i in range(1, len(small) + 1):
        if small[-i] != 1:
            _same(op, small[-i], big[-i], f"axis -{i} of {tuple(small)}", rules)
    return tuple(attrs.shape)


# -- NumPy references ---------------------------------------------------------------------------

def pad_reference(x, attrs: PadAttrs):
    """XLA's pad: interior dilation, then low/high padding (negative: cropping)."""
    dil = []
    for d, (_, _, inner) in zip(x.shape, attrs.pad_width):
        dil.append(d + max(d - 1, 0) * inner)
    full = np.zeros(dil, x.dtype)
    full[...] = x.dtype.type(attrs.value)
    full[tuple(slice(None, None, inner + 1) for _, _, inner in attrs.pad_width)] = x
    out = np.full(pad_rel(TensorType(x.shape, x.dtype.name), attrs, []), attrs.value, x.dtype)
    src, dst = [], []
    for n, (lo, hi, _) in zip(dil, attrs.pad_width):
        s0, d0 = max(-lo, 0), max(lo, 0)
        length = n - s0 - max(-hi, 0)
        src.append(slice(s0, s0 + max(length, 0)))
        dst.append(slice(d0, d0 + max(length, 0)))
    out[tuple(dst)] = full[tuple(src)]
    return out


def sum_to_reference(x, shape):
    """x summed over its axes that ``shape`` broadcasts along, as ``shape``."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    acc = np.float32 if half_format(x.dtype) else x.dtype
    return np.sum(x, axis=axes, dtype=acc).reshape(shape).astype(x.dtype)
