"""Winograd convolution: the F(m x m, 3 x 3) matrices, their unrolling into C, the weight
transform, and conv2d on weights already in the Winograd domain
(conv2d_winograd_without_weight_transform, as TVM's).

conv2d's own Winograd implementations (gpucg/strategies/conv2d_winograd.py) use the same
matrices and unrolled transforms; transforming the weights once ahead of time saves that step
on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..codegen import Code
from ..eager import call
from ..errors import AttrError, DTypeError, InputError, describe, require_int
from ..op import Case, KernelInfo, OpPattern, register_op
from ..shape import TensorType, var
from .conv2d import (ACTIVATIONS, DATA_LAYOUTS, DTYPES, KERNEL_LAYOUTS, Conv2dAttrs, check_bias,
                     check_data, choice, geometry, normalize_padding, out_shape, reference_conv,
                     size_constraints, to_oihw)

WINOGRAD_TILES = (2, 4)

#: what every Winograd implementation does to special values, inherent to the method (explain
#: shows it beside the implementation: gpucg.implementation.with_numerics)
NUMERICS = ("an infinite input gives NaN where the direct convolution gives +-inf (the "
            "transforms add and subtract inputs and products: inf - inf); finite results "
            "agree within rounding")
#: the same for winograd_mma, whose transformed tiles are float16 for the tensor cores
NUMERICS_16 = ("an infinite input gives NaN where the direct convolution gives +-inf (inf - "
               "inf in the transforms), and so may inputs near float16's range: the "
               "transformed tiles and products are float16 for the tensor cores and overflow "
               "where the direct sum (float32) does not; finite results agree within rounding")


# -- the transforms ---------------------------------------------------------------------------

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


def _lit(v: float) -> str:
    """A float literal of C (always with a point or exponent, so the f suffix is valid)."""
    text = f"{float(v):.9g}"
    return text + (".0f" if text.lstrip("-").isdigit() else "f")


def _lincomb(coeffs, names) -> str:
    terms = []
    for cf, name in zip(coeffs, names):
        if cf == 0:
            continue
        sign = "-" if cf < 0 else "+"
        mag = abs(cf)
        terms.append(f"{sign} {name}" if mag == 1 else f"{sign} {_lit(mag)} * {name}")
    if not terms:
        return "0.0f"
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def transform_code(mat: np.ndarray, src: str, dst: str) -> Code:
    """C statements computing dst = mat @ src @ mat.T, unrolled with constant coefficients.

    ``src`` names a k x k grid of floats ``{src}_{i}_{j}``; ``dst`` an r x r grid (r = rows of
    ``mat``). Zero coefficients are skipped, unit ones need no multiply.
    """
    r, k = mat.shape
    lines = []
    for i in range(r):  # t = mat @ src
        for j in range(k):
            lines.append(f"    const float {dst}t_{i}_{j} = "
                         f"{_lincomb(mat[i], [f'{src}_{q}_{j}' for q in range(k)])};")
    for i in range(r):  # dst = t @ mat.T
        for j in range(r):
            lines.append(f"    const float {dst}_{i}_{j} = "
                         f"{_lincomb(mat[j], [f'{dst}t_{i}_{q}' for q in range(k)])};")
    return Code("\n".join(lines))


def _host(array) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "get"):
        return array.get()
    if hasattr(array, "__dlpack__"):
        return np.from_dlpack(array)
    raise InputError(f"weight={describe(array)} must be a numpy.ndarray, cupy.ndarray, "
                     "pyopencl.array.Array or a DLPack array")


def winograd_weight_transform(weight, tile_size: int = 4, kernel_layout: str = "OIHW") -> np.ndarray:
    """Weights of a 3x3 convolution in the Winograd domain of F(m x m, 3 x 3), computed once.

    Returns a float32 NumPy array of shape (m + 2, m + 2, O, I): pass it to
    :func:`conv2d_winograd_without_weight_transform` with the same ``tile_size``.
    """
    tile_size = require_int("tile_size", tile_size)
    choice("tile_size", tile_size, WINOGRAD_TILES)
    choice("kernel_layout", kernel_layout, KERNEL_LAYOUTS)
    w = _host(weight)
    if w.ndim != 4:
        raise InputError(f"weight must have rank 4, got shape {w.shape}")
    w = to_oihw(w, kernel_layout).astype(np.float64)
    if w.shape[2:] != (3, 3):
        raise InputError(f"winograd_weight_transform: weight ({kernel_layout}) must be 3x3, "
                         f"got {w.shape[2]}x{w.shape[3]}")
    _, G, _ = winograd_matrices(tile_size)
    return np.einsum("ar,oirs,bs->aboi", G, w, G).astype(np.float32)


# -- the operator on transformed weights --------------------------------------------------------

OP = "conv2d_winograd_without_weight_transform"


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
        choice("tile_size", self.tile_size, WINOGRAD_TILES)
        object.__setattr__(self, "padding", normalize_padding(self.padding))
        choice("data_layout", self.data_layout, DATA_LAYOUTS)
        choice("activation", self.activation, ACTIVATIONS)
        if self.out_dtype is not None:
            object.__setattr__(self, "out_dtype", Conv2dAttrs(out_dtype=self.out_dtype).out_dtype)

    def conv_attrs(self) -> Conv2dAttrs:
        """The same convolution as conv2d attributes (3x3 OIHW weights, stride 1, one group)."""
        return Conv2dAttrs(padding=self.padding, data_layout=self.data_layout,
                           out_dtype=self.out_dtype, activation=self.activation)


def winograd_geometry(inputs, attrs: WinogradAttrs):
    """The convolution's geometry: a 3x3 kernel and O = the transformed weight's third axis."""
    return geometry(inputs[0], 3, 3, inputs[1].shape[2], attrs.conv_attrs())


def _type_rel(inputs, attrs: WinogradAttrs):
    data, weight = inputs[0], inputs[1]
    c = check_data(OP, data, attrs.data_layout, weight)
    alpha = attrs.tile_size + 2
    if weight.dtype != "float32":
        raise DTypeError(f"{OP}: the transformed weight must be float32, got {weight.dtype}")
    if weight.shape[:2] != (alpha, alpha) or weight.shape[3] != c:
        raise InputError(
            f"{OP}: weight {weight} is not a transformed weight for tile_size={attrs.tile_size} "
            f"and {c} input channels; expected shape ({alpha}, {alpha}, O, {c}) from "
            "gpucg.ops.winograd_weight_transform")
    check_bias(OP, inputs, weight.shape[2])
    geo = winograd_geometry(inputs, attrs)
    return TensorType(out_shape(geo, attrs.data_layout), attrs.out_dtype or data.dtype)


def _reference(data, weight, *rest):
    """Undo the transform: rebuild the 3x3 weight from U = G g G^T by least squares, convolve."""
    *bias, attrs = rest
    _, G, _ = winograd_matrices(attrs.tile_size)
    Gp = np.linalg.pinv(G)
    w = np.einsum("ra,aboi,sb->oirs", Gp, weight.astype(np.float64), Gp)
    return reference_conv(data, w, bias[0] if bias else None, attrs.conv_attrs(),
                          attrs.out_dtype or data.dtype.name)


def _static_axes(attrs):
    """Eager calls keep the channels and the whole weight and bias constant."""
    return ({1 if attrs.data_layout == "NCHW" else 3}, {0, 1, 2, 3}, {0})


register_op(OP, attrs=WinogradAttrs, num_inputs=3, optional_inputs=1, type_rel=_type_rel,
            pattern=OpPattern.OPAQUE, reference=_reference,
            input_names=("data", "weight", "bias"),
            constraints=lambda inputs, attrs: size_constraints(winograd_geometry(inputs, attrs),
                                                               attrs.conv_attrs()),
            static_axes=_static_axes,
            cases=lambda: [
                Case((TensorType((8, 64, 56, 56), "float32"), TensorType((6, 6, 64, 64), "float32")),
                     {"padding": 1}, "bench", "resnet 3x3 64x56x56, F(4x4)"),
                Case((TensorType((1, 3, 9, 7), "float32"), TensorType((4, 4, 5, 3), "float32"),
                      TensorType((5,), "float32")), {"padding": 1, "tile_size": 2}, "small")],
            doc="3x3 stride-1 conv2d on weights from winograd_weight_transform.",
            kernel_info=KernelInfo(storage_dtypes=("float16", "bfloat16")),
            example=lambda: ((TensorType((var("n"), 64, 56, 56), "float32"),
                              TensorType((6, 6, 64, 64), "float32")), {"padding": 1}))


def conv2d_winograd_without_weight_transform(data, weight, tile_size=4, padding=(1, 1),
                                             data_layout="NCHW", out_dtype=None, bias=None,
                                             activation=None, *, target=None):
    """A 3x3, stride-1 conv2d whose weight came from :func:`winograd_weight_transform`.

    Transforming the weights once and reusing them saves that step on every call.
    """
    arrays = (data, weight) if bias is None else (data, weight, bias)
    return call(OP, arrays, target=target, tile_size=tile_size, padding=padding,
                data_layout=data_layout, out_dtype=out_dtype, activation=activation)


__all__ = ["DTYPES", "WINOGRAD_TILES", "WinogradAttrs", "conv2d_winograd_without_weight_transform",
           "transform_code", "winograd_geometry", "winograd_matrices", "winograd_weight_transform"]
