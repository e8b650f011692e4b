"""2-D convolution (conv2d): attributes, geometry, type relation, reference, eager function.

Layouts: data NCHW or NHWC, weights OIHW or HWIO (any pairing); groups split the channels;
``padding`` is an int, (pad_h, pad_w), (top, left, bottom, right), "SAME", "SAME_LOWER" or
"VALID". The epilogue (alpha, the bias of shape (O,), the activation, a residual of the
output's shape scaled by beta; gpucg/ops/_epilogue.py) is applied in the kernel that computes
the convolution.
float16 and bfloat16 data are stored in 16 bits and accumulated in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..eager import call
from ..errors import AttrError, DTypeError, InputError, require_int
from ..op import Case, Constraint, KernelInfo, OpPattern, added_attr, register_op
from ..shape import TensorType, dtype_name, var
from . import _epilogue
from ._epilogue import ACTIVATIONS  # noqa: F401 (conv2d_winograd's attributes check it)
from .dense import tf32_attr
from ._window import choice, is_same, normalize_padding, out_size, pair, same_pads

DTYPES = ("float16", "float32", "bfloat16")
DATA_LAYOUTS = ("NCHW", "NHWC")
KERNEL_LAYOUTS = ("OIHW", "HWIO")


@dataclass(frozen=True)
class Conv2dAttrs:
    """Attributes of conv2d (as TVM's, plus the fused activation).

    Attributes:
        strides, dilation: (h, w) pairs (an int means both).
        padding: (top, left, bottom, right), "SAME" or "SAME_LOWER" (see
            :func:`normalize_padding`).
        groups: channel groups; must divide the input and output channels.
        data_layout: "NCHW" or "NHWC"; kernel_layout: "OIHW" or "HWIO".
        out_dtype: the output dtype (None: the data's).
        activation: None, "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "silu" or
            "hardswish", applied after alpha and the bias; alpha, beta: scales of the
            convolution and of the residual;
            residual_position: the residual is added "after" the activation or "before" it.
        allow_tf32: float32 operands may be rounded to TF32 for tensor cores (None: the
            GPUCG_ALLOW_TF32 knob, off by default).
    """

    strides: tuple = (1, 1)
    padding: object = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1
    data_layout: str = "NCHW"
    kernel_layout: str = "OIHW"
    out_dtype: str | None = None
    activation: str | None = None
    alpha: float = 1.0
    beta: float = 1.0
    residual_position: str = "after"
    allow_tf32: bool | None = added_attr(None, before=False)

    def __post_init__(self):
        object.__setattr__(self, "allow_tf32", tf32_attr(self.allow_tf32))
        object.__setattr__(self, "strides", pair("strides", self.strides, 1))
        object.__setattr__(self, "dilation", pair("dilation", self.dilation, 1))
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        groups = require_int("groups", self.groups)
        if groups < 1:
            raise AttrError(f"groups={groups} must be >= 1")
        object.__setattr__(self, "groups", groups)
        choice("data_layout", self.data_layout, DATA_LAYOUTS)
        choice("kernel_layout", self.kernel_layout, KERNEL_LAYOUTS)
        _epilogue.check_epilogue(self)
        if self.out_dtype is not None:
            object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype, "out_dtype", DTYPES))


# -- geometry ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Geometry:
    """A convolution's sizes in NCHW/OIHW terms (H, W, OH, OW may be SymPy expressions)."""

    n: object
    c: int
    h: object
    w: object
    o: int
    kh: int
    kw: int
    oh: object
    ow: object
    groups: int

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def og(self) -> int:
        return self.o // self.groups


def data_dims(t, layout: str):
    """(N, C, H, W) of a data tensor type or shape in ``layout``."""
    shape = t.shape if hasattr(t, "shape") else t
    n, a, b, c = shape
    return (n, a, b, c) if layout == "NCHW" else (n, c, a, b)


def weight_dims(t, layout: str):
    """(O, I, KH, KW) of a weight tensor type or shape in ``layout``."""
    shape = t.shape if hasattr(t, "shape") else t
    if layout == "OIHW":
        return tuple(shape)
    kh, kw, i, o = shape
    return (o, i, kh, kw)


def pads_for(attrs, h: int, w: int, kh: int, kw: int) -> tuple[int, int, int, int]:
    """Concrete (top, left, bottom, right) padding for data of height h and width w."""
    if is_same(attrs.padding):
        lower = attrs.padding == "SAME_LOWER"
        t, b = same_pads(h, kh, attrs.strides[0], attrs.dilation[0], lower)
        left, r = same_pads(w, kw, attrs.strides[1], attrs.dilation[1], lower)
        return (t, left, b, r)
    return attrs.padding


def geometry(data: TensorType, kh: int, kw: int, o: int, attrs) -> Geometry:
    n, c, h, w = data_dims(data, attrs.data_layout)
    same = is_same(attrs.padding)
    pads = (0, 0, 0, 0) if same else attrs.padding
    oh = out_size(h, kh, attrs.strides[0], attrs.dilation[0], (pads[0], pads[2]), same)
    ow = out_size(w, kw, attrs.strides[1], attrs.dilation[1], (pads[1], pads[3]), same)
    return Geometry(n, c, h, w, o, kh, kw, oh, ow, attrs.groups)


def out_shape(g: Geometry, layout: str) -> tuple:
    return (g.n, g.o, g.oh, g.ow) if layout == "NCHW" else (g.n, g.oh, g.ow, g.o)


def conv_geometry(inputs, attrs) -> Geometry:
    """The geometry of a conv2d call (data, weight and Conv2dAttrs)."""
    data, weight = inputs[0], inputs[1]
    o, _, kh, kw = weight_dims(weight, attrs.kernel_layout)
    return geometry(data, kh, kw, o, attrs)


def check_data(op: str, data: TensorType, layout: str, weight: TensorType) -> int:
    """Checks shared by the conv2d operators; the number of input channels."""
    if data.ndim != 4:
        raise InputError(f"{op}: data must have rank 4 ({layout}), got {data}")
    if data.dtype not in DTYPES:
        raise DTypeError(f"{op}: data dtype {data.dtype!r} is not supported; "
                         f"allowed: {', '.join(DTYPES)}")
    c = data_dims(data, layout)[1]
    if not isinstance(c, int):
        raise InputError(f"{op}: the channel dimension of data ({layout}) must be "
                         f"a constant, got {c}; batch, height and width may be symbolic")
    if weight.ndim != 4 or not weight.is_static:
        raise InputError(f"{op}: weight must have rank 4 and constant sizes, got {weight}")
    return c


def check_bias(op: str, inputs, o: int) -> None:
    """The optional bias: shape (O,) and the data's dtype."""
    if len(inputs) >= 3:
        data, bias = inputs[0], inputs[2]
        if bias.shape != (o,):
            raise InputError(f"{op}: bias must have shape ({o},) (the output channels), "
                             f"got {bias}")
        if bias.dtype != data.dtype:
            raise DTypeError(f"{op}: bias dtype {bias.dtype} must equal the data dtype "
                             f"{data.dtype}")


def _type_rel(inputs, attrs):
    data, weight = inputs[0], inputs[1]
    c = check_data("conv2d", data, attrs.data_layout, weight)
    if weight.dtype != data.dtype:
        raise DTypeError(f"conv2d: weight dtype {weight.dtype} differs from the data dtype "
                         f"{data.dtype}; they must be equal")
    o, i, kh, kw = weight_dims(weight, attrs.kernel_layout)
    g = attrs.groups
    if c % g or o % g:
        raise InputError(f"conv2d: groups={g} must divide the input channels ({c}) and the "
                         f"output channels ({o})")
    if i * g != c:
        raise InputError(f"conv2d: data has {c} channels but weight {weight} "
                         f"({attrs.kernel_layout}) expects {i} per group x groups={g} = {i * g}")
    if kh < 1 or kw < 1:
        raise InputError(f"conv2d: the kernel size {kh}x{kw} must be at least 1x1")
    check_bias("conv2d", inputs, o)
    geo = conv_geometry(inputs, attrs)
    out = TensorType(out_shape(geo, attrs.data_layout), attrs.out_dtype or data.dtype)
    if len(inputs) == 4:
        _epilogue.residual_rules("conv2d", inputs[3], out)
    return out


def size_constraints(geo: Geometry, attrs) -> list:
    """The kernel must fit the padded input: a rule on H and W, which may be symbolic."""
    if is_same(attrs.padding):
        return []
    pt, pl, pb, pr = attrs.padding
    axis_h, axis_w = (2, 3) if attrs.data_layout == "NCHW" else (1, 2)
    out = []
    for name, axis, size, k, d, pads in (("height", axis_h, geo.h, geo.kh, attrs.dilation[0], pt + pb),
                                          ("width", axis_w, geo.w, geo.kw, attrs.dilation[1], pl + pr)):
        span = (k - 1) * d + 1
        out.append(Constraint(
            sympy.sympify(size) + pads >= span,
            f"conv2d: the kernel ({span} with dilation {d}) is larger than the padded input "
            f"{name} {{}} (data.shape[{axis}] = {{}} plus padding {pads}); use more padding or a "
            "smaller kernel",
            (sympy.sympify(size) + pads, size)))
    return out


def _constraints(inputs, attrs):
    rules = size_constraints(conv_geometry(inputs, attrs), attrs)
    if len(inputs) == 4:
        rules += _epilogue.residual_rules("conv2d", inputs[3], _type_rel(inputs, attrs))
    return rules


# -- references -------------------------------------------------------------------------------

def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def to_oihw(w: np.ndarray, layout: str) -> np.ndarray:
    return w if layout == "OIHW" else w.transpose(3, 2, 0, 1)


def epilogue(y: np.ndarray, bias, activation, out_dtype, residual=None, attrs=None) -> np.ndarray:
    """The shared epilogue (gpucg/ops/_epilogue.py) on an NCHW result: the bias over the channel
    axis, the activation, the residual (NCHW) per ``attrs``; then the output dtype."""
    attrs = attrs or Conv2dAttrs(activation=activation)
    b = None if bias is None else bias.reshape(1, -1, 1, 1)
    return _epilogue.apply(y, b, residual, attrs).astype(out_dtype, copy=False)


def host_view(data, weight, attrs, acc):
    """(x NCHW, w OIHW, (top, left, bottom, right), oh, ow) of host arrays, in dtype ``acc``."""
    x = to_nchw(data, attrs.data_layout).astype(acc, copy=False)
    w = to_oihw(weight, attrs.kernel_layout).astype(acc, copy=False)
    h, wd = x.shape[2:]
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    pads = pads_for(attrs, h, wd, kh, kw)
    oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    return x, w, pads, oh, ow


def reference_conv(data, weight, bias, attrs, out_dtype, acc=np.float64,
                   residual=None) -> np.ndarray:
    """conv2d by shift and accumulate: one channel contraction per kernel tap (in ``acc``).

    A different algorithm from the im2col of the NumPy target, so the two check each other.
    """
    x, w, (pt, pl, pb, pr), oh, ow = host_view(data, weight, attrs, acc)
    n, c = x.shape[:2]
    o, i, kh, kw = w.shape
    g = attrs.groups
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    y = np.zeros((n, g, o // g, oh, ow), acc)
    xg = xp.reshape(n, g, c // g, xp.shape[2], xp.shape[3])
    wg = w.reshape(g, o // g, i, kh, kw)
    for r in range(kh):
        for s in range(kw):
            patch = xg[:, :, :, r * dh: r * dh + (oh - 1) * sh + 1: sh,
                       s * dw: s * dw + (ow - 1) * sw + 1: sw]  # (n, g, i, oh, ow)
            y += np.einsum("ngihw,goi->ngohw", patch, wg[:, :, :, r, s])
    y = y.reshape(n, o, oh, ow)
    res = None if residual is None else to_nchw(residual, attrs.data_layout)
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype, res, attrs), attrs.data_layout)


def _reference(data, weight, *rest):
    *extra, attrs = rest
    return reference_conv(data, weight, extra[0] if extra else None, attrs,
                          attrs.out_dtype or data.dtype.name,
                          residual=extra[1] if extra[1:] else None)


def _static_axes(attrs):
    """Eager calls keep the channels and the whole weight and bias constant."""
    channels = {1 if attrs.data_layout == "NCHW" else 3}
    return (channels, {0, 1, 2, 3}, {0}, channels)


#: the conv2d benchmark's layers: (label, N, C, H, W, O, K, stride, padding, groups)
BENCH_LAYERS = [
    ("resnet 3x3 64x56x56", 8, 64, 56, 56, 64, 3, 1, 1, 1),
    ("resnet 3x3 128x28x28", 8, 128, 28, 28, 128, 3, 1, 1, 1),
    ("resnet 3x3 256x14x14", 8, 256, 14, 14, 256, 3, 1, 1, 1),
    ("resnet 3x3 512x7x7", 8, 512, 7, 7, 512, 3, 1, 1, 1),
    ("stem 7x7/2 3->64 224x224", 8, 3, 224, 224, 64, 7, 2, 3, 1),
    ("1x1 256->64 56x56", 8, 256, 56, 56, 64, 1, 1, 0, 1),
    ("depthwise 3x3 32x112x112", 8, 32, 112, 112, 32, 3, 1, 1, 32),
    ("depthwise 3x3 144x56x56", 8, 144, 56, 56, 144, 3, 1, 1, 144),
    ("depthwise 3x3 576x14x14", 8, 576, 14, 14, 576, 3, 1, 1, 576),
]


def _cases():
    t = TensorType
    bench = [Case((t((n, c, h, w), "float32"), t((o, c // g, k, k), "float32")),
                  {"strides": s, "padding": p, "groups": g}, "bench", label)
             for label, n, c, h, w, o, k, s, p, g in BENCH_LAYERS]
    small = [Case((t((1, 3, 9, 7), "float32"), t((5, 3, 3, 3), "float32"), t((5,), "float32")),
                  {"padding": 1, "activation": "relu"}, "small", "3x3, odd sizes, bias+relu"),
             Case((t((2, 4, 17, 16), "float32"), t((6, 4, 3, 3), "float32")), {"padding": 1},
                  "small", "3x3, 4x4 Winograd tiles"),
             Case((t((1, 6, 11, 11), "float32"), t((6, 1, 3, 3), "float32")),
                  {"padding": 1, "groups": 6, "strides": 2}, "small", "depthwise, stride 2"),
             Case((t((1, 9, 9, 5), "float16"), t((3, 3, 5, 7), "float16")),
                  {"padding": "SAME", "data_layout": "NHWC", "kernel_layout": "HWIO"}, "small",
                  "NHWC/HWIO float16"),
             Case((t((1, 4, 8, 8), "float32"), t((6, 2, 5, 5), "float32")),
                  {"padding": 2, "groups": 2, "dilation": 2}, "small", "groups 2, dilation 2"),
             # the direct kernel's vector loads of x: along the channels (NHWC), along the
             # pixels (a pointwise NCHW convolution)
             Case((t((1, 7, 6, 8), "float32"), t((3, 3, 8, 8), "float32")),
                  {"padding": 1, "strides": 2, "data_layout": "NHWC", "kernel_layout": "HWIO"},
                  "small", "NHWC/HWIO float32, stride 2"),
             Case((t((2, 8, 6, 6), "float32"), t((12, 8, 1, 1), "float32")), {}, "small",
                  "1x1 NCHW")]
    return bench + small


register_op("conv2d", attrs=Conv2dAttrs, num_inputs=4, optional_inputs=2,
            type_rel=_type_rel, pattern=OpPattern.OPAQUE, reference=_reference,
            input_names=("data", "weight", "bias", "residual"), constraints=_constraints,
            static_axes=_static_axes, cases=_cases,
            doc="2-D convolution with groups, dilation, and a fused epilogue (bias, activation, "
                "residual).",
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
            example=lambda: ((TensorType((var("n"), 64, var("h"), var("w")), "float32"),
                              TensorType((64, 64, 3, 3), "float32")), {"padding": 1}))


def conv2d(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
           data_layout="NCHW", kernel_layout="OIHW", out_dtype=None, bias=None, activation=None,
           residual=None, alpha=1.0, beta=1.0, residual_position="after", *, target=None):
    """2-D convolution (cross-correlation, as in deep learning frameworks).

    Args:
        data: (N, C, H, W) for NCHW or (N, H, W, C) for NHWC; float32, float16 or bfloat16.
        weight: (O, C // groups, KH, KW) for OIHW or (KH, KW, C // groups, O) for HWIO.
        strides, dilation: an int or (h, w).
        padding: an int, (pad_h, pad_w), (top, left, bottom, right), "SAME" (an odd total
            padding puts the extra after), "SAME_LOWER" (before, as ONNX) or "VALID".
        groups: channel groups (groups == C: depthwise).
        out_dtype: the output dtype (default: the data's); float16 and bfloat16 accumulate in float32.
        bias: None or shape (O,), added in the same kernel; activation: None, "relu", "gelu",
            "gelu_tanh", "sigmoid", "tanh", "silu" or "hardswish".
        residual: None or an array of the output's shape and dtype, times beta, added after
            the activation (residual_position "after") or before it ("before"); alpha scales
            the convolution.
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    o = weight_dims(weight.shape, kernel_layout)[0] if kernel_layout in KERNEL_LAYOUTS else 0
    arrays = _epilogue.with_residual((data, weight), bias, residual, o, data.dtype)
    return call("conv2d", arrays, target=target, strides=strides, padding=padding,
                dilation=dilation, groups=groups, data_layout=data_layout,
                kernel_layout=kernel_layout, out_dtype=out_dtype, activation=activation,
                alpha=alpha, beta=beta, residual_position=residual_position)


# -- gradient: data by a convolution with the flipped weights, weight by one over the batch ----
from ..op import register_gradient  # noqa: E402
from ._grads import conv2d_gradient  # noqa: E402

register_gradient("conv2d", conv2d_gradient)
