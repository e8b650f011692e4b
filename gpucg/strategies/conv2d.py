"""Strategies for conv2d: which convolution runs for which call.

GPU implementations, by plevel (the guards are static: a failing guard is the condition
``false``, shown with its reason by ``gpucg explain``):
  winograd_4x4  15  guard: 3x3 kernel, stride 1, dilation 1, groups 1; and OH >= 14, OW >= 14
                    (F(4x4, 3x3): 36 multiplies for 16 outputs, worth its larger tiles and
                    transforms once the output holds a few tiles per axis)
  winograd_2x2  14  the same guard (F(2x2, 3x3): 16 multiplies for 4 outputs)
  depthwise     13  groups == C > 1 (so O = C * multiplier)
  direct        10  always: implicit GEMM with local-memory tiles and register blocking
The NumPy target has one implementation, im2col + matmul per group (vectorized).
"""

from __future__ import annotations

import functools

import numpy as np
import sympy

from ..autotune.space import ConfigSpace
from ..codegen import Code, KernelSpec
from ..op import get_op
from ..ops.conv2d import (conv_geometry, data_dims, epilogue, from_nchw, host_view, pads_for,
                          to_nchw, winograd_matrices)
from ..runtime.base import ceil_div
from ..shape import INT_MAX
from ..strategy import Implementation, Strategy

WINOGRAD_GUARD = "3x3 kernel, stride 1, dilation 1, groups 1"
WINOGRAD_4X4_MIN_OUT = 14


# -- unrolled transforms ----------------------------------------------------------------------

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


# -- the NumPy target -------------------------------------------------------------------------

def _acc_dtype(dtype) -> np.dtype:
    return np.dtype(np.float32) if np.dtype(dtype).itemsize <= 4 else np.dtype(dtype)


def numpy_conv2d(data, weight, bias, attrs, out_dtype) -> np.ndarray:
    """conv2d on the host: im2col by a strided window view, then one matmul per group
    (depthwise: a multiply-add per kernel tap)."""
    acc = _acc_dtype(data.dtype)
    x, w, (pt, pl, pb, pr), oh, ow = host_view(data, weight, attrs, acc)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g = attrs.groups
    (sh, sw), (dh, dw) = attrs.strides, attrs.dilation
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), acc)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    if i == 1 and g > 1:
        # depthwise: im2col would make g matmuls of one column; a multiply-add per tap over
        # the whole output is a few passes over memory instead
        y = np.zeros((n, c, o // g, oh, ow), acc)
        wd_ = w.reshape(c, o // g, kh, kw)
        for r in range(kh):
            for q in range(kw):
                tap = xp[:, :, r * dh: r * dh + (oh - 1) * sh + 1: sh,
                         q * dw: q * dw + (ow - 1) * sw + 1: sw]
                y += tap[:, :, None] * wd_[None, :, :, r, q, None, None]
        return from_nchw(epilogue(y.reshape(n, o, oh, ow), bias, attrs.activation, out_dtype),
                         attrs.data_layout)
    win = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1),
                                                   axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]  # (n, c, oh, ow, kh, kw)
    # im2col as (g, i*kh*kw, n*oh*ow): the copy runs along output rows (5x faster than the
    # transposed order), then one (o/g x K) @ (K x n*oh*ow) matmul per group
    cols = win.reshape(n, g, i, oh, ow, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4)
    cols = cols.reshape(g, i * kh * kw, n * oh * ow)
    wm = w.reshape(g, o // g, i * kh * kw)
    y = np.matmul(wm, cols)  # (g, o/g, n*oh*ow)
    y = y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype), attrs.data_layout)


def numpy_winograd(data, u, bias, attrs, out_dtype) -> np.ndarray:
    """F(m x m, 3 x 3) on the host from transformed weights ``u`` (alpha, alpha, O, C)."""
    m = attrs.tile_size
    alpha = m + 2
    AT, _, BT = winograd_matrices(m)
    acc = _acc_dtype(data.dtype)
    x = to_nchw(data, attrs.data_layout)
    n, c, h, wd = x.shape
    pt, pl, pb, pr = pads_for(attrs, h, wd, 3, 3)
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.zeros((n, c, th * m + 2, tw * m + 2), acc)
    hh, ww = min(h, th * m + 2 - pt), min(wd, tw * m + 2 - pl)
    xp[:, :, pt:pt + hh, pl:pl + ww] = x[:, :, :hh, :ww]
    tiles = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ai,ncxyij,bj->abcnxy", BT.astype(acc), tiles, BT.astype(acc), optimize=True)
    mm = np.matmul(u.astype(acc).reshape(alpha * alpha, -1, c),
                   v.reshape(alpha * alpha, c, n * th * tw))
    mm = mm.reshape(alpha, alpha, -1, n, th, tw)
    y = np.einsum("ia,abonxy,jb->noxiyj", AT.astype(acc), mm, AT.astype(acc), optimize=True)
    y = y.reshape(n, -1, th * m, tw * m)[:, :, :oh, :ow]
    return from_nchw(epilogue(y, bias, attrs.activation, out_dtype), attrs.data_layout)


def make_cpu_strategy(op_name: str):
    winograd = op_name != "conv2d"

    def run(ctx):
        data, weight = ctx.inputs[:2]
        bias = ctx.inputs[2] if len(ctx.inputs) == 3 else None
        fn = numpy_winograd if winograd else numpy_conv2d
        ctx.outputs[0][...] = fn(data, weight, bias, ctx.attrs, ctx.outputs[0].dtype)

    def strategy(attrs, inputs, outputs, target):
        s = Strategy()
        name = "winograd_host" if winograd else "conv2d_im2col"
        s.add_implementation(Implementation(f"{name}.{target.kind}", 10, run))
        return s
    return strategy


# -- GPU kernels and their launches ---------------------------------------------------------

class _Call:
    """The concrete sizes of one call, and the arguments every kernel shares."""

    def __init__(self, ctx, geo):
        attrs = ctx.attrs
        self.data, self.weight = ctx.inputs[:2]
        self.bias = ctx.inputs[2:]
        self.y = ctx.outputs[0]
        n, c, h, w = (int(v) for v in data_dims(self.data.shape, attrs.data_layout))
        _, _, oh, ow = (int(v) for v in data_dims(self.y.shape, attrs.data_layout))
        pads = pads_for(attrs, h, w, geo.kh, geo.kw)
        self.n, self.h, self.w, self.oh, self.ow = n, h, w, oh, ow
        self.pt, self.pl = pads[0], pads[1]
        s = ctx.size
        self.sizes = (s(n), s(h), s(w), s(oh), s(ow), np.int32(self.pt), np.int32(self.pl))

    @property
    def empty(self) -> bool:
        return self.y.size == 0


def _direct_run(ctx, geo) -> None:
    k = _Call(ctx, geo)
    if k.empty:
        return
    bm, bn = ctx.config["BM"], ctx.config["BN"]
    wg = (bm // ctx.config["TM"]) * (bn // ctx.config["TN"])
    grid = geo.groups * ceil_div(geo.og, bm) * ceil_div(k.n * k.oh * k.ow, bn)
    ctx.kernel("gemm")(k.data, k.weight, *k.bias, k.y, *k.sizes, grid=grid, block=wg)


def _depthwise_run(ctx, geo) -> None:
    k = _Call(ctx, geo)
    if k.empty:
        return
    wg, vw = ctx.config["wg"], ctx.config["VW"]
    total = k.n * geo.o * k.oh * ceil_div(k.ow, vw)
    ctx.kernel("depthwise")(k.data, k.weight, *k.bias, k.y, *k.sizes, grid=ceil_div(total, wg),
                            block=wg)


def _winograd_run(m: int, transform: bool, geo, wg: int):
    def run(ctx) -> None:
        k = _Call(ctx, geo)
        if k.empty:
            return
        s = ctx.size
        alpha = m + 2
        if transform:
            u = ctx.empty((alpha * alpha * geo.o * geo.c,), np.float32)
            ctx.kernel("weight")(k.weight, u, grid=ceil_div(geo.o * geo.c, wg), block=wg)
        else:
            u = k.weight
        th, tw = ceil_div(k.oh, m), ceil_div(k.ow, m)
        p = k.n * th * tw
        if not ctx.wide and alpha * alpha * max(geo.c, geo.o) * p > INT_MAX:
            # the transformed tiles outgrow 32-bit indices before the tensors do
            ctx = ctx.widened()
            s = ctx.size
        v = ctx.empty((alpha * alpha * geo.c * p,), np.float32)
        ctx.kernel("input")(k.data, v, s(k.n), s(k.h), s(k.w), s(th), s(tw), np.int32(k.pt),
                            np.int32(k.pl), grid=ceil_div(p * geo.c, wg), block=wg)
        mo = ctx.empty((alpha * alpha * geo.o * p,), np.float32)
        bm, bn = ctx.config["BM"], ctx.config["BN"]
        gwg = (bm // ctx.config["TM"]) * (bn // ctx.config["TN"])
        ctx.kernel("gemm")(u, v, mo, s(p), grid=alpha * alpha * ceil_div(geo.o, bm) * ceil_div(p, bn),
                           block=gwg)
        ctx.kernel("output")(mo, *k.bias, k.y, s(k.n), s(k.oh), s(k.ow), s(th), s(tw),
                             grid=ceil_div(p * geo.o, wg), block=wg)
    return run


def _gemm_space(m_rows: int, on_cpu: bool) -> ConfigSpace:
    """Tiles of the GEMM: BM x BN outputs a work-group, TM x TN a work-item, BK of K a step."""
    def ok(c):
        wg = (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
        return (c["TM"] <= c["BM"] and c["TN"] <= c["BN"] and 16 <= wg <= 256
                and (c["BM"] * c["BK"]) % wg == 0 and (c["BN"] * c["BK"]) % wg == 0)
    if on_cpu:  # measured on PoCL (64->64, 56x56): 113 ms against 213 ms for 32x64 tiles
        default = {"BM": 64, "BN": 128, "BK": 8, "TM": 8, "TN": 8}
    else:
        default = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}
    while default["BM"] > 16 and default["BM"] // 2 >= m_rows and default["BN"] < 256:
        # few rows: a thinner, wider tile
        default["BM"] //= 2
        default["BN"] *= 2
    return ConfigSpace({"BM": (16, 32, 64, 128), "BN": (32, 64, 128, 256), "BK": (8, 16, 32),
                        "TM": (1, 2, 4, 8), "TN": (2, 4, 8)}, default, constraint=ok)


def _common_params(attrs, geo, data_dtype: str, out_dtype: str, has_bias: bool) -> dict:
    return dict(half=data_dtype == "float16", out_half=out_dtype == "float16",
                nchw=attrs.data_layout == "NCHW",
                oihw=attrs.kernel_layout == "OIHW",
                C=geo.c, O=geo.o, Cg=geo.cg, Og=geo.og, KH=geo.kh, KW=geo.kw,
                SH=attrs.strides[0], SW=attrs.strides[1], DH=attrs.dilation[0],
                DW=attrs.dilation[1], has_bias=has_bias, relu=attrs.activation == "relu")


def _gemm_params(mode: str, a_k_major: bool, b_k_major: bool):
    """The GEMM's tile parameters; a tile is loaded along K where memory runs along K."""
    return lambda c: dict(c.items(), mode=mode, a_k_major=a_k_major, b_k_major=b_k_major)


def _specs(op_name: str, common: dict, parts: dict):
    def build(config):
        return {key: KernelSpec.make(f"conv2d/{template}", f"gpucg_{op_name}_{key}", **common,
                                     **extra(config))
                for key, (template, extra) in parts.items()}
    return build


def winograd_guard(attrs, geo) -> bool:
    return (geo.kh, geo.kw) == (3, 3) and tuple(attrs.strides) == (1, 1) \
        and tuple(attrs.dilation) == (1, 1) and attrs.groups == 1


def _winograd_impl(op_name, kind, m, plevel, common, transform, condition, space, wg, geo,
                   guard_fails=False):
    alpha = m + 2
    AT, G, BT = winograd_matrices(m)
    stage = dict(m=m, alpha=alpha, wg=wg)
    parts = {
        "input": ("winograd.j2", lambda c: dict(stage, stage="input",
                                                code_input=transform_code(BT, "d", "v"))),
        "gemm": ("gemm.j2", _gemm_params("winograd", True, False)),
        "output": ("winograd.j2", lambda c: dict(stage, stage="output",
                                                 code_output=transform_code(AT, "m", "y"))),
    }
    if transform:
        parts["weight"] = ("winograd.j2", lambda c: dict(stage, stage="weight",
                                                         code_weight=transform_code(G, "g", "u")))
    return Implementation(f"winograd_{m}x{m}.{kind}", plevel, _winograd_run(m, transform, geo, wg),
                          _specs(op_name, common, parts), condition=condition, space=space,
                          guard=WINOGRAD_GUARD if guard_fails else "")


def make_gpu_strategy(op_name: str):
    pretransformed = op_name != "conv2d"

    def strategy(attrs, inputs, outputs, target):
        geo = conv_geometry(inputs, attrs)
        kind = target.kind
        on_cpu = target.attrs.get("device") == "cpu"
        common = _common_params(attrs, geo, inputs[0].dtype, outputs[0].dtype, len(inputs) == 3)
        wg = 64 if on_cpu else 256
        s = Strategy()
        big_out = sympy.And(sympy.sympify(geo.oh) >= WINOGRAD_4X4_MIN_OUT,
                            sympy.sympify(geo.ow) >= WINOGRAD_4X4_MIN_OUT)
        if pretransformed:
            m = attrs.tile_size
            s.add_implementation(_winograd_impl(op_name, kind, m, 15, common, False, None,
                                                _gemm_space(geo.o, on_cpu), wg, geo))
            return s
        guard = winograd_guard(attrs, geo)
        wspace = _gemm_space(geo.o, on_cpu)
        s.add_implementation(_winograd_impl(op_name, kind, 4, 15, common, True,
                                            big_out if guard else sympy.false, wspace, wg, geo,
                                            not guard))
        s.add_implementation(_winograd_impl(op_name, kind, 2, 14, common, True,
                                            sympy.true if guard else sympy.false, wspace, wg, geo,
                                            not guard))
        depthwise = attrs.groups == geo.c and geo.c > 1
        s.add_implementation(Implementation(
            f"depthwise.{kind}", 13, functools.partial(_depthwise_run, geo=geo),
            _specs(op_name, common, {"depthwise": ("depthwise.j2", lambda c: dict(c.items()))}),
            condition=sympy.true if depthwise else sympy.false,
            space=ConfigSpace({"wg": (32, 64, 128, 256), "VW": (1, 2, 4, 8)},
                              {"wg": wg, "VW": 4 if attrs.data_layout == "NCHW" else 1}),
            guard="" if depthwise else "groups == input channels > 1"))
        s.add_implementation(Implementation(
            f"direct.{kind}", 10, functools.partial(_direct_run, geo=geo),
            _specs(op_name, common, {"gemm": ("gemm.j2", _gemm_params(
                "direct", common["nchw"] and common["oihw"], not common["nchw"]))}),
            space=_gemm_space(geo.og, on_cpu)))
        return s
    return strategy


for _op in ("conv2d", "conv2d_winograd_without_weight_transform"):
    get_op(_op).strategy.register(["gpu"], make_gpu_strategy(_op))
    get_op(_op).strategy.register(["cpu"], make_cpu_strategy(_op))

__all__ = ["make_cpu_strategy", "make_gpu_strategy", "numpy_conv2d", "numpy_winograd",
           "transform_code", "winograd_guard"]
