"""2-D convolution: conv2d, and conv2d on weights already in the Winograd domain.

Layouts: data NCHW or NHWC, weights OIHW or HWIO (any pairing); groups split the channels;
``padding`` is an int, (pad_h, pad_w), (top, left, bottom, right), "SAME" or "VALID". The bias
(shape (O,)) and the activation are applied in the kernel that computes the convolution.
float16 data is stored as float16 and accumulated in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np
import sympy

from ..errors import AttrError, DTypeError, InputError, describe, require_int
from ..op import Constraint, OpPattern, register_op
from ..shape import TensorType, dtype_name, simplify_dim, var

DTYPES = ("float16", "float32")
DATA_LAYOUTS = ("NCHW", "NHWC")
KERNEL_LAYOUTS = ("OIHW", "HWIO")
ACTIVATIONS = (None, "relu")
WINOGRAD_TILES = (2, 4)


def _pair(name: str, value, low: int) -> tuple[int, int]:
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


def normalize_padding(value):
    """(top, left, bottom, right), or "SAME"; "VALID" becomes (0, 0, 0, 0)."""
    if isinstance(value, str):
        key = value.upper()
        if key == "VALID":
            return (0, 0, 0, 0)
        if key == "SAME":
            return "SAME"
        raise AttrError(f"padding={value!r} is not allowed; allowed strings: 'SAME', 'VALID'")
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


def _choice(name: str, value, allowed):
    if value not in allowed:
        raise AttrError(f"{name}={describe(value)} is not allowed; allowed: "
                        f"{', '.join(map(repr, allowed))}")
    return value


@dataclass(frozen=True)
class Conv2dAttrs:
    """Attributes of conv2d (as TVM's, plus the fused activation).

    Attributes:
        strides, dilation: (h, w) pairs (an int means both).
        padding: (top, left, bottom, right) or "SAME" (see :func:`normalize_padding`).
        groups: channel groups; must divide the input and output channels.
        data_layout: "NCHW" or "NHWC"; kernel_layout: "OIHW" or "HWIO".
        out_dtype: the output dtype (None: the data's).
        activation: None or "relu", applied after the bias.
    """

    strides: tuple = (1, 1)
    padding: object = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1
    data_layout: str = "NCHW"
    kernel_layout: str = "OIHW"
    out_dtype: str | None = None
    activation: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "strides", _pair("strides", self.strides, 1))
        object.__setattr__(self, "dilation", _pair("dilation", self.dilation, 1))
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        groups = require_int("groups", self.groups)
        if groups < 1:
            raise AttrError(f"groups={groups} must be >= 1")
        object.__setattr__(self, "groups", groups)
        _choice("data_layout", self.data_layout, DATA_LAYOUTS)
        _choice("kernel_layout", self.kernel_layout, KERNEL_LAYOUTS)
        _choice("activation", self.activation, ACTIVATIONS)
        if self.out_dtype is not None:
            object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype, "out_dtype", DTYPES))


@dataclass(frozen=True)
class WinogradAttrs:
    """Attributes of conv2d_winograd_without_weight_transform: a 3x3, stride-1 convolution
    whose weight was transformed ahead of time by :func:`winograd_weight_transform`.

    ``tile_size`` is m of F(m x m, 3 x 3): 2 or 4, as given to the transform.
    """

    tile_size: int = 4
    padding: object = (1, 1)
    data_layout: str = "NCHW"
    out_dtype: str | None = None
    activation: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "tile_size", require_int("tile_size", self.tile_size))
        _choice("tile_size", self.tile_size, WINOGRAD_TILES)
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        _choice("data_layout", self.data_layout, DATA_LAYOUTS)
        _choice("activation", self.activation, ACTIVATIONS)
        if self.out_dtype is not None:
            object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype, "out_dtype", DTYPES))

    # the fixed parts of the convolution, so both ops share one view (the transformed
    # weight has no kernel layout of its own; OIHW names the untransformed one)
    kernel_layout = "OIHW"
    strides = (1, 1)
    dilation = (1, 1)
    groups = 1


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


def out_size(size, k: int, stride: int, dilation: int, pads, same: bool):
    """Output length along one spatial axis (pads: (before, after))."""
    if same:
        return simplify_dim(sympy.ceiling(sympy.sympify(size) / stride)) \
            if not isinstance(size, int) else -(-size // stride)
    span = (k - 1) * dilation + 1
    if isinstance(size, int):
        return (size + pads[0] + pads[1] - span) // stride + 1
    return simplify_dim(sympy.floor((size + pads[0] + pads[1] - span) / sympy.Integer(stride)) + 1)


def same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """(before, after) padding of "SAME" for a concrete length (the extra one goes after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def pads_for(attrs, h: int, w: int, kh: int, kw: int) -> tuple[int, int, int, int]:
    """Concrete (top, left, bottom, right) padding for data of height h and width w."""
    if attrs.padding == "SAME":
        t, b = same_pads(h, kh, attrs.strides[0], attrs.dilation[0])
        left, r = same_pads(w, kw, attrs.strides[1], attrs.dilation[1])
        return (t, left, b, r)
    return attrs.padding


def geometry(data: TensorType, kh: int, kw: int, o: int, attrs) -> Geometry:
    n, c, h, w = data_dims(data, attrs.data_layout)
    same = attrs.padding == "SAME"
    pads = (0, 0, 0, 0) if same else attrs.padding
    oh = out_size(h, kh, attrs.strides[0], attrs.dilation[0], (pads[0], pads[2]), same)
    ow = out_size(w, kw, attrs.strides[1], attrs.dilation[1], (pads[1], pads[3]), same)
    return Geometry(n, c, h, w, o, kh, kw, oh, ow, attrs.groups)


def out_shape(g: Geometry, layout: str) -> tuple:
    return (g.n, g.o, g.oh, g.ow) if layout == "NCHW" else (g.n, g.oh, g.ow, g.o)


def conv_geometry(inputs, attrs) -> Geometry:
    """The geometry of a conv2d (or pre-transformed winograd) call, checked."""
    data, weight = inputs[0], inputs[1]
    if isinstance(attrs, WinogradAttrs):
        return geometry(data, 3, 3, weight.shape[2], attrs)
    o, _, kh, kw = weight_dims(weight, attrs.kernel_layout)
    return geometry(data, kh, kw, o, attrs)


def _type_rel(op: str):
    def rel(inputs, attrs):
        data, weight = inputs[0], inputs[1]
        if data.ndim != 4:
            raise InputError(f"{op}: data must have rank 4 ({attrs.data_layout}), got {data}")
        if data.dtype not in DTYPES:
            raise DTypeError(f"{op}: data dtype {data.dtype!r} is not supported; "
                             f"allowed: {', '.join(DTYPES)}")
        n, c, h, w = data_dims(data, attrs.data_layout)
        if not isinstance(c, int):
            raise InputError(f"{op}: the channel dimension of data ({attrs.data_layout}) must be "
                             f"a constant, got {c}; batch, height and width may be symbolic")
        if weight.ndim != 4 or not weight.is_static:
            raise InputError(f"{op}: weight must have rank 4 and constant sizes, got {weight}")
        if isinstance(attrs, WinogradAttrs):
            alpha = attrs.tile_size + 2
            if weight.dtype != "float32":
                raise DTypeError(f"{op}: the transformed weight must be float32, got {weight.dtype}")
            if weight.shape[:2] != (alpha, alpha) or weight.shape[3] != c:
                raise InputError(
                    f"{op}: weight {weight} is not a transformed weight for tile_size="
                    f"{attrs.tile_size} and {c} input channels; expected shape ({alpha}, {alpha}, "
                    f"O, {c}) from gpucg.ops.winograd_weight_transform")
            o, i = weight.shape[2], weight.shape[3]
        else:
            if weight.dtype != data.dtype:
                raise DTypeError(f"{op}: weight dtype {weight.dtype} differs from the data dtype "
                                 f"{data.dtype}; they must be equal")
            o, i, kh, kw = weight_dims(weight, attrs.kernel_layout)
            g = attrs.groups
            if c % g or o % g:
                raise InputError(f"{op}: groups={g} must divide the input channels ({c}) and the "
                                 f"output channels ({o})")
            if i * g != c:
                raise InputError(
                    f"{op}: data has {c} channels but weight {weight} ({attrs.kernel_layout}) "
                    f"expects {i} per group x groups={g} = {i * g}")
            if kh < 1 or kw < 1:
                raise InputError(f"{op}: the kernel size {kh}x{kw} must be at least 1x1")
        if len(inputs) == 3:
            bias = inputs[2]
            if bias.shape != (o,):
                raise InputError(f"{op}: bias must have shape ({o},) (the output channels), "
                                 f"got {bias}")
            if bias.dtype != data.dtype:
                raise DTypeError(f"{op}: bias dtype {bias.dtype} must equal the data dtype "
                                 f"{data.dtype}")
        geo = conv_geometry(inputs, attrs)
        return TensorType(out_shape(geo, attrs.data_layout), attrs.out_dtype or data.dtype)
    return rel


def _constraints(inputs, attrs):
    if attrs.padding == "SAME":
        return []
    geo = conv_geometry(inputs, attrs)
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


# -- references -------------------------------------------------------------------------------

def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def to_oihw(w: np.ndarray, layout: str) -> np.ndarray:
    return w if layout == "OIHW" else w.transpose(3, 2, 0, 1)


def epilogue(y: np.ndarray, bias, activation, out_dtype) -> np.ndarray:
    """Bias over the channel axis (1, NCHW), the activation, the output dtype."""
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape(1, -1, 1, 1)
    if activation == "relu":
        y = np.maximum(y, 0)
    return y.astype(out_dtype, copy=False)


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


def reference_conv(data, weight, bias, attrs, out_dtype, acc=np.float64) -> np.ndarray:
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
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype), attrs.data_layout)


def _reference(data, weight, *rest):
    *bias, attrs = rest
    return reference_conv(data, weight, bias[0] if bias else None, attrs,
                          attrs.out_dtype or data.dtype.name)


# -- Winograd transforms ----------------------------------------------------------------------

def winograd_matrices(m: int):
    """(A^T, G, B^T) of F(m x m, 3 x 3) as float64 arrays (m = 2 or 4).

    The standard matrices of Lavin and Gray (points 0, +-1, +-2 and infinity).
    """
    if m == 2:
        AT = [[1, 1, 1, 0], [0, 1, -1, -1]]
        G = [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
        BT = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    elif m == 4:
        AT = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
        G = [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
             [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]
        BT = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
              [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
    else:
        raise AttrError(f"tile_size={describe(m)} is not allowed; allowed: 2, 4")
    return np.array(AT, np.float64), np.array(G, np.float64), np.array(BT, np.float64)


def _host(array) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "get"):
        return array.get()
    raise InputError(f"weight={describe(array)} must be a numpy.ndarray, cupy.ndarray or "
                     "pyopencl.array.Array")


def winograd_weight_transform(weight, tile_size: int = 4, kernel_layout: str = "OIHW") -> np.ndarray:
    """Weights of a 3x3 convolution in the Winograd domain of F(m x m, 3 x 3), computed once.

    Returns a float32 NumPy array of shape (m + 2, m + 2, O, I): pass it to
    :func:`conv2d_winograd_without_weight_transform` with the same ``tile_size``.
    """
    tile_size = require_int("tile_size", tile_size)
    _choice("tile_size", tile_size, WINOGRAD_TILES)
    _choice("kernel_layout", kernel_layout, KERNEL_LAYOUTS)
    w = _host(weight)
    if w.ndim != 4:
        raise InputError(f"weight must have rank 4, got shape {w.shape}")
    w = to_oihw(w, kernel_layout).astype(np.float64)
    if w.shape[2:] != (3, 3):
        raise InputError(f"winograd_weight_transform: weight ({kernel_layout}) must be 3x3, "
                         f"got {w.shape[2]}x{w.shape[3]}")
    _, G, _ = winograd_matrices(tile_size)
    return np.einsum("ar,oirs,bs->aboi", G, w, G).astype(np.float32)


def _static_axes(attrs):
    """Eager calls keep the channels and the whole weight and bias constant."""
    return ({1 if attrs.data_layout == "NCHW" else 3}, {0, 1, 2, 3}, {0})


register_op("conv2d", attrs=Conv2dAttrs, num_inputs=3, optional_inputs=1,
            type_rel=_type_rel("conv2d"), pattern=OpPattern.OPAQUE, reference=_reference,
            input_names=("data", "weight", "bias"), constraints=_constraints,
            static_axes=_static_axes,
            doc="2-D convolution with groups, dilation, fused bias and relu.",
            kernel_info={"storage_dtypes": ("float16",)},
            example=lambda: ((TensorType((var("n"), 64, var("h"), var("w")), "float32"),
                              TensorType((64, 64, 3, 3), "float32")), {"padding": 1}))


def _winograd_reference(data, weight, *rest):
    """Undo nothing: rebuild the 3x3 weight from U = G g G^T by least squares, then convolve."""
    *bias, attrs = rest
    _, G, _ = winograd_matrices(attrs.tile_size)
    Gp = np.linalg.pinv(G)
    w = np.einsum("ra,aboi,sb->oirs", Gp, weight.astype(np.float64), Gp)
    return reference_conv(data, w, bias[0] if bias else None,
                          Conv2dAttrs(padding=attrs.padding, data_layout=attrs.data_layout,
                                      activation=attrs.activation),
                          attrs.out_dtype or data.dtype.name)


register_op("conv2d_winograd_without_weight_transform", attrs=WinogradAttrs, num_inputs=3,
            optional_inputs=1, type_rel=_type_rel("conv2d_winograd_without_weight_transform"),
            pattern=OpPattern.OPAQUE, reference=_winograd_reference,
            input_names=("data", "weight", "bias"), constraints=_constraints,
            static_axes=_static_axes,
            doc="3x3 stride-1 conv2d on weights from winograd_weight_transform.",
            kernel_info={"storage_dtypes": ("float16",)},
            example=lambda: ((TensorType((var("n"), 64, 56, 56), "float32"),
                              TensorType((6, 6, 64, 64), "float32")), {"padding": 1}))


def conv2d(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
           data_layout="NCHW", kernel_layout="OIHW", out_dtype=None, bias=None, activation=None,
           *, target=None):
    """2-D convolution (cross-correlation, as in deep learning frameworks).

    Args:
        data: (N, C, H, W) for NCHW or (N, H, W, C) for NHWC; float32 or float16.
        weight: (O, C // groups, KH, KW) for OIHW or (KH, KW, C // groups, O) for HWIO.
        strides, dilation: an int or (h, w).
        padding: an int, (pad_h, pad_w), (top, left, bottom, right), "SAME" or "VALID".
        groups: channel groups (groups == C: depthwise).
        out_dtype: the output dtype (default: the data's); float16 accumulates in float32.
        bias: None or shape (O,), added in the same kernel; activation: None or "relu".
        target: "cuda", "opencl", "numpy" or None for the default target.
    """
    from ..api import call

    arrays = (data, weight) if bias is None else (data, weight, bias)
    return call("conv2d", arrays, target=target, strides=strides, padding=padding,
                dilation=dilation, groups=groups, data_layout=data_layout,
                kernel_layout=kernel_layout, out_dtype=out_dtype, activation=activation)


def conv2d_winograd_without_weight_transform(data, weight, tile_size=4, padding=(1, 1),
                                             data_layout="NCHW", out_dtype=None, bias=None,
                                             activation=None, *, target=None):
    """A 3x3, stride-1 conv2d whose weight came from :func:`winograd_weight_transform`.

    Transforming the weights once and reusing them saves that step on every call.
    """
    from ..api import call

    arrays = (data, weight) if bias is None else (data, weight, bias)
    return call("conv2d_winograd_without_weight_transform", arrays, target=target,
                tile_size=tile_size, padding=padding, data_layout=data_layout,
                out_dtype=out_dtype, activation=activation)
