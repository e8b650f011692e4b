"""Attributes and geometry that windowed operators share (conv2d, and pooling): (h, w) pairs,
padding in its four spellings, one-of choices, output sizes along one axis."""

from __future__ import annotations

import sympy

from ..errors import AttrError, describe, require_int
from ..shape import simplify_dim


def pair(name: str, value, low: int) -> tuple[int, int]:
    """An int or an (h, w) pair of ints >= ``low``, as an (h, w) tuple."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise AttrError(f"{name}={describe(value)} must be an int or a pair (h, w), "
                            f"got {len(value)} values")
        pair = tuple(require_int(f"{name}[{i}]", v) for i, v in enumerate(value))
    else:
        v = require_int(name, value)
        pair = (v, v)
    for i, v in enumerate(pair):
        if v < low:
            raise AttrError(f"{name}={pair}: {'hw'[i]} is {v}, must be >= {low}")
    return pair


#: the automatic paddings: output ceil(size / stride); an odd total puts the extra row or
#: column after ("SAME", ONNX's SAME_UPPER) or before ("SAME_LOWER")
SAME_PADDINGS = ("SAME", "SAME_LOWER")


def normalize_padding(value):
    """(top, left, bottom, right), "SAME" or "SAME_LOWER"; "VALID" becomes (0, 0, 0, 0)."""
    if isinstance(value, str):
        key = value.upper()
        if key == "VALID":
            return (0, 0, 0, 0)
        if key in ("SAME", "SAME_UPPER"):
            return "SAME"
        if key == "SAME_LOWER":
            return "SAME_LOWER"
        raise AttrError(f"padding={value!r} is not allowed; allowed strings: 'SAME', 'VALID', "
                        "'SAME_LOWER' ('SAME_UPPER' is 'SAME')")
    if isinstance(value, (list, tuple)):
        if len(value) not in (2, 4):
            raise AttrError(f"padding={describe(value)} has {len(value)} values; allowed: an int, "
                            "(pad_h, pad_w), (top, left, bottom, right), 'SAME' or 'VALID'")
        pads = tuple(require_int(f"padding[{i}]", v) for i, v in enumerate(value))
        if len(pads) == 2:
            pads = pads + pads
    else:
        pads = (require_int("padding", value),) * 4
    for i, p in enumerate(pads):
        if p < 0:
            raise AttrError(f"padding={pads}: {('top', 'left', 'bottom', 'right')[i]} is {p}, "
                            "must be >= 0")
    return pads


def choice(name: str, value, allowed):
    """``value`` if it is one of ``allowed``, else AttrError naming ``name`` and the choices."""
    if value not in allowed:
        raise AttrError(f"{name}={describe(value)} is not allowed; allowed: "
                        f"{', '.join(map(repr, allowed))}")
    return value


def is_same(padding) -> bool:
    """True for the automatic paddings ("SAME", "SAME_LOWER")."""
    return isinstance(padding, str) and padding in SAME_PADDINGS


def out_size(size, k: int, stride: int, dilation: int, pads, same: bool, ceil: bool = False):
    """Output length along one spatial axis (pads: (before, after)).

    ``ceil`` rounds the last partial window up, as PyTorch's ceil_mode: a window is kept if it
    starts inside the input or its leading padding, so out = min(ceil(L / s) + 1,
    ceil((size + before) / s)) with L = size + before + after - span.
    """
    if same:
        return simplify_dim(sympy.ceiling(sympy.sympify(size) / stride)) \
            if not isinstance(size, int) else -(-size // stride)
    span = (k - 1) * dilation + 1
    room = size + pads[0] + pads[1] - span
    if isinstance(size, int):
        if not ceil:
            return room // stride + 1
        return min(-(-room // stride) + 1, -(-(size + pads[0]) // stride))
    s = sympy.Integer(stride)
    if not ceil:
        return simplify_dim(sympy.floor(room / s) + 1)
    return simplify_dim(sympy.Min(sympy.ceiling(room / s) + 1, sympy.ceiling((size + pads[0]) / s)))


def same_pads(size: int, k: int, stride: int, dilation: int,
              lower: bool = False) -> tuple[int, int]:
    """(before, after) padding of "SAME" for a concrete length: the extra one of an odd total
    goes after, or before when ``lower`` ("SAME_LOWER", as ONNX's auto_pad)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (big, small) if lower else (small, big)
