"""2-D pooling: max_pool2d, avg_pool2d, global_max_pool2d, global_avg_pool2d.

Semantics are PyTorch's and ONNX's: padding counts as -inf for max (it never wins) and as 0 for
avg, whose divisor counts the padding taps inside the padded input (``count_include_pad``, the
default) or only the taps on the input; ``ceil_mode`` keeps a last, partial window when it
starts inside the input or its leading padding. ``padding`` is an int, (pad_h, pad_w),
(top, left, bottom, right), "SAME" (an odd total padding puts the extra after), "SAME_LOWER"
(before) or "VALID"; ``strides`` default to the kernel (PyTorch). Layouts NCHW and NHWC. Max
pooling takes integers too; float16 and bfloat16 are stored in 16 bits and computed in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen.literals import lowest_value
from ..eager import call
from ..errors import AttrError, DTypeError, InputError, require_bool
from ..op import Case, Constraint, KernelInfo, OpPattern, register_op
from ..half import is_float
from ..shape import TensorType
from ._window import choice, is_same, normalize_padding, out_size, pair, same_pads

FLOATS = ("float16", "float32", "float64", "bfloat16")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LAYOUTS = ("NCHW", "NHWC")


@dataclass(frozen=True)
class PoolAttrs:
    """Attributes of max_pool2d and avg_pool2d.

    Attributes:
        kernel: the window (h, w) (an int means both); required.
        strides: (h, w) steps; None means the kernel (as PyTorch).
        padding: (top, left, bottom, right), "SAME" or "SAME_LOWER" once normalized.
        dilation: (h, w) spacing of the window's taps.
        ceil_mode: round the output size up (a last partial window).
        layout: "NCHW" or "NHWC".
        count_include_pad: avg_pool2d only: divide by the taps inside the padded input (True)
            or by those on the input (False).
    """

    kernel: object = None
    strides: object = None
    padding: object = 0
    dilation: object = 1
    ceil_mode: bool = False
    layout: str = "NCHW"
    count_include_pad: bool = True

    def __post_init__(self):
        if self.kernel is None:
            raise AttrError("kernel=None: a pooling window (an int or a pair (h, w)) is required")
        kernel = pair("kernel", self.kernel, 1)
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "strides", kernel if self.strides is None
                           else pair("strides", self.strides, 1))
        object.__setattr__(self, "dilation", pair("dilation", self.dilation, 1))
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        object.__setattr__(self, "ceil_mode", require_bool("ceil_mode", self.ceil_mode))
        object.__setattr__(self, "count_include_pad",
                           require_bool("count_include_pad", self.count_include_pad))
        choice("layout", self.layout, LAYOUTS)
        if not is_same(self.padding):
            for i, p in enumerate(self.padding):
                span = self.span[i % 2]
                if p >= span:
                    side = ("top", "left", "bottom", "right")[i]
                    raise AttrError(f"padding={self.padding}: the {side} padding {p} must be "
                                    f"smaller than the window's span {span} (a window of "
                                    "padding alone has nothing to pool)")

    @property
    def span(self) -> tuple[int, int]:
        """The extent of the window on the input: (k - 1) * dilation + 1 per axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))


@dataclass(frozen=True)
class GlobalPoolAttrs:
    """Attributes of the global pools: the layout."""

    layout: str = "NCHW"

    def __post_init__(self):
        choice("layout", self.layout, LAYOUTS)


def hw_axes(layout: str) -> tuple[int, int]:
    """The (height, width) axes of a 4-D tensor in ``layout``."""
    return (2, 3) if layout == "NCHW" else (1, 2)


def pads_for(attrs: PoolAttrs, h: int, w: int) -> tuple[int, int, int, int]:
    """Concrete (top, left, bottom, right) padding for an input of height h and width w."""
    if not is_same(attrs.padding):
        return attrs.padding
    lower = attrs.padding == "SAME_LOWER"
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilation
    t, b = same_pads(h, kh, sh, dh, lower)
    left, r = same_pads(w, kw, sw, dw, lower)
    return (t, left, b, r)


def out_hw(attrs: PoolAttrs, h, w) -> tuple:
    """The output height and width (ints or SymPy expressions)."""
    same = is_same(attrs.padding)
    pads = (0, 0, 0, 0) if same else attrs.padding
    return tuple(out_size(size, attrs.kernel[i], attrs.strides[i], attrs.dilation[i],
                          (pads[i], pads[i + 2]), same, attrs.ceil_mode)
                 for i, size in enumerate((h, w)))


def _check(op: str, x: TensorType, allowed) -> None:
    if x.dtype not in allowed:
        raise DTypeError(f"{op}: x dtype {x.dtype!r} is not supported; allowed: "
                         f"{', '.join(allowed)}")
    if x.ndim != 4:
        raise InputError(f"{op}: x has shape {x.shape}; it must be 4-D (N, C, H, W or N, H, W, C)")


def _rel(op: str):
    def rel(inputs, attrs):
        (x,) = inputs
        _check(op, x, FLOATS + INTS if op == "max_pool2d" else FLOATS)
        ah, aw = hw_axes(attrs.layout)
        shape = list(x.shape)
        shape[ah], shape[aw] = out_hw(attrs, x.shape[ah], x.shape[aw])
        return TensorType(tuple(shape), x.dtype)
    return rel


def _constraints(op: str):
    def constraints(inputs, attrs):
        if is_same(attrs.padding):
            return []
        (x,) = inputs
        out = []
        for i, axis in enumerate(hw_axes(attrs.layout)):
            size = sympy.sympify(x.shape[axis])
            pads = attrs.padding[i] + attrs.padding[i + 2]
            span = attrs.span[i]
            out.append(Constraint(size + pads >= span, (
                f"{op}: the window ({span} with dilation {attrs.dilation[i]}) is larger than the "
                f"padded input {('height', 'width')[i]} {{}} (x.shape[{axis}] = {{}} plus "
                f"padding {pads}); use a smaller window or more padding"), (size + pads, size)))
        return out
    return constraints


def _global_rel(op: str):
    def rel(inputs, attrs):
        (x,) = inputs
        _check(op, x, FLOATS + INTS if op == "global_max_pool2d" else FLOATS)
        shape = list(x.shape)
        for a in hw_axes(attrs.layout):
            shape[a] = 1
        return TensorType(tuple(shape), x.dtype)
    return rel


def reference(op: str):
    """The NumPy reference: one strided gather per window tap, with a validity mask."""
    def ref(x: np.ndarray, attrs):
        if op.startswith("global"):
            axes = hw_axes(attrs.layout)
            if op == "global_max_pool2d":
                return np.max(x, axis=axes, keepdims=True)
            return np.mean(x.astype(np.float64), axis=axes, keepdims=True).astype(x.dtype)
        xs = x if attrs.layout == "NCHW" else x.transpose(0, 3, 1, 2)
        h, w = xs.shape[2:]
        pt, pl, pb, pr = pads_for(attrs, h, w)
        oh, ow = out_hw(attrs, h, w)
        (kh, kw), (sh, sw), (dh, dw) = attrs.kernel, attrs.strides, attrs.dilation
        rows = np.arange(oh)[:, None] * sh - pt
        cols = np.arange(ow)[None, :] * sw - pl
        big = op == "max_pool2d"
        acc = np.full(xs.shape[:2] + (oh, ow), lowest_value(x.dtype) if big else 0,
                      x.dtype if big else np.float64)
        count = np.zeros((oh, ow))
        for r in range(kh):
            for s in range(kw):
                hh, ww = rows + r * dh, cols + s * dw
                inside = (hh >= 0) & (hh < h) & (ww >= 0) & (ww < w)
                tap = xs[:, :, np.clip(hh, 0, max(h - 1, 0)), np.clip(ww, 0, max(w - 1, 0))]
                if big:
                    nan = np.isnan(tap) if is_float(x.dtype) else False
                    better = inside & ((tap > acc) | nan)
                    acc = np.where(better, tap, acc)
                else:
                    acc = acc + np.where(inside, tap.astype(np.float64), 0)
                    padded = (hh < h + pb) & (ww < w + pr) if attrs.count_include_pad else inside
                    count = count + padded
        y = acc if big else (acc / count).astype(x.dtype)
        return y if attrs.layout == "NCHW" else y.transpose(0, 2, 3, 1)
    return ref


def _cases(op: str):
    """The pooling of a ResNet stem and of a VGG block, and small awkward ones."""
    def cases():
        t = TensorType
        if op.startswith("global"):
            return [Case((t((32, 2048, 7, 7), "float32"),), {}, "bench", "ResNet-50 head"),
                    Case((t((3, 5, 7, 9), "float32"),), {"layout": "NHWC"}, "small"),
                    Case((t((2, 3, 1, 1), "float16"),), {}, "small")]
        return [Case((t((32, 64, 112, 112), "float32"),),
                     {"kernel": 3, "strides": 2, "padding": 1}, "bench", "ResNet stem 3x3/2"),
                Case((t((32, 56, 56, 256), "float32"),), {"kernel": 2, "layout": "NHWC"},
                     "bench", "VGG 2x2/2, NHWC"),
                Case((t((1, 3, 7, 9), "float32"),), {"kernel": 3, "strides": 2,
                                                     "ceil_mode": True}, "small", "ceil_mode"),
                Case((t((2, 5, 6, 5), "float16"),), {"kernel": (2, 3), "padding": "SAME_LOWER",
                                                     "strides": 1}, "small", "SAME_LOWER"),
                Case((t((2, 9, 8, 3), "float64"),), {"kernel": 2, "dilation": 2, "padding": 1,
                                                     "layout": "NHWC"}, "small", "dilation")]
    return cases


for _op, _doc in (("max_pool2d", "The maximum of each window (padding never wins)."),
                  ("avg_pool2d", "The mean of each window (count_include_pad as PyTorch).")):
    register_op(_op, attrs=PoolAttrs, num_inputs=1, type_rel=_rel(_op),
                pattern=OpPattern.OPAQUE, reference=reference(_op), input_names=("x",),
                constraints=_constraints(_op), cases=_cases(_op), doc=_doc,
                kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
                example=lambda: ((TensorType((8, 64, 56, 56), "float32"),), {"kernel": 3}))
for _op, _doc in (("global_max_pool2d", "The maximum over height and width."),
                  ("global_avg_pool2d", "The mean over height and width.")):
    register_op(_op, attrs=GlobalPoolAttrs, num_inputs=1, type_rel=_global_rel(_op),
                pattern=OpPattern.REDUCE, reference=reference(_op), input_names=("x",),
                cases=_cases(_op), doc=_doc, kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
                example=lambda: ((TensorType((8, 512, 7, 7), "float32"),), {}))


def max_pool2d(x, kernel, strides=None, padding=0, dilation=1, ceil_mode=False, layout="NCHW",
               *, target=None):
    """The maximum of each window of a 4-D input (NCHW or NHWC); integers too.

    Args:
        x: a NumPy, CuPy or PyOpenCL array.
        kernel: the window, an int or (h, w).
        strides: an int or (h, w); None: the kernel.
        padding: an int, (pad_h, pad_w), (top, left, bottom, right), "SAME", "SAME_LOWER" or
            "VALID"; padding never wins.
        dilation: an int or (h, w): the spacing of the window's taps.
        ceil_mode: keep a last, partial window (as PyTorch).
        layout: "NCHW" or "NHWC".
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    return call("max_pool2d", (x,), target=target, kernel=kernel, strides=strides,
                padding=padding, dilation=dilation, ceil_mode=ceil_mode, layout=layout)


def avg_pool2d(x, kernel, strides=None, padding=0, dilation=1, ceil_mode=False, layout="NCHW",
               count_include_pad=True, *, target=None):
    """The mean of each window of a 4-D float input; see :func:`max_pool2d`.

    ``count_include_pad`` divides by the window's taps inside the padded input (PyTorch's
    default); False divides by the taps on the input.
    """
    return call("avg_pool2d", (x,), target=target, kernel=kernel, strides=strides,
                padding=padding, dilation=dilation, ceil_mode=ceil_mode, layout=layout,
                count_include_pad=count_include_pad)


def global_max_pool2d(x, layout="NCHW", *, target=None):
    """The maximum over height and width, keeping them as 1: (N, C, 1, 1) or (N, 1, 1, C)."""
    return call("global_max_pool2d", (x,), target=target, layout=layout)


def global_avg_pool2d(x, layout="NCHW", *, target=None):
    """The mean over height and width, keeping them as 1: (N, C, 1, 1) or (N, 1, 1, C)."""
    return call("global_avg_pool2d", (x,), target=target, layout=layout)
