"""Strategies for conv2d: which convolution runs for which call.

GPU implementations, by plevel:
  direct_mma    20  (CUDA) the implicit GEMM on tensor cores (strategies/conv2d_mma.py): float16,
                    bfloat16, float32 with allow_tf32; on OpenCL its twin at plevel 1
  winograd_mma  16  (CUDA) F(2x2, 3x3) with its products on tensor cores (float16, TF32; the
                    Winograd requirements; OpenCL twin at plevel 1)
  winograd_fused_4x4  15  needs a 3x3 kernel, stride 1, dilation 1, groups 1 (else excluded,
                    with that reason); condition OH >= 14 and OW >= 14 (F(4x4, 3x3): 36
                    multiplies for 16 outputs, worth its larger tiles and transforms once the
                    output holds a few tiles per axis). One kernel: the transformed tiles stay
                    in local memory and registers (strategies/conv2d_fused.py)
  winograd_fused_2x2  14  the same requirements (F(2x2, 3x3): 16 multiplies for 4 outputs)
  depthwise     13  needs groups == C > 1 (so O = C * multiplier)
  winograd_4x4  12  the unfused F(4x4): transforms and products through global memory (its
                    transformed tiles cost 6-18x the compulsory traffic); forced with impl=.
                    On a CPU device the unfused kernels take 15 and 14, the fused 12 and 11
                    (the unfused are faster on PoCL)
  winograd_2x2  11  the unfused F(2x2), the same
  direct        10  always: implicit GEMM with local-memory tiles and register blocking. On CUDA
                    it ranks above every Winograd kernel: the fused ones take 9 and 8, the
                    unfused 7 and 6 (measured on an H100, float32: direct 1.06-2.9x faster)
The NumPy target has one implementation, conv2d_im2col: by shape, pointwise GEMMs, channels-last
depthwise, im2col by runs or by a window view (strategies/conv2d_host.py). The Winograd
implementations serve conv2d_winograd_without_weight_transform too (strategies/conv2d_winograd.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..codegen import dialect_for
from ..half import half_format
from ..space import ConfigSpace
from ..implementation import Kernel, host_impl, kernel_impl, with_numerics
from ..ops import _epilogue
from ..ops.conv2d import (Conv2dAttrs, Geometry, conv_geometry, epilogue, from_nchw,
                          host_view, to_nchw)
from ..ops._window import is_same
from ..ops.conv2d_winograd import NUMERICS, transform_code, winograd_matrices
from ..runtime.base import ceil_div
from ..shape import INT_MAX
from ..strategy import Strategy, only
from . import conv2d_fused, conv2d_mma
from .conv2d_host import acc_dtype, numpy_conv2d
from .conv2d_call import ConvCall
from .gemm_tile import PLAIN, fill_device, gemm_space, sm_count, vector_needs, work_group

WINOGRAD_NEEDS = "needs a 3x3 kernel, stride 1, dilation 1, groups 1"
WINOGRAD_4X4_MIN_OUT = 14


# -- the NumPy target -------------------------------------------------------------------------

def _im2col_run(ctx):
    data, weight, *extra = ctx.inputs
    return numpy_conv2d(data, weight, extra[0] if extra else None, ctx.attrs,
                        ctx.attrs.out_dtype or data.dtype, extra[1] if extra[1:] else None)


CONV2D_IM2COL = host_impl("conv2d_im2col", _im2col_run, strided=True)  # any layout in


host_strategy = only(CONV2D_IM2COL)


# -- GPU kernels and their launches ---------------------------------------------------------

@dataclass(frozen=True)
class ConvInfo:
    """What the launches read of a call: its geometry, and the convolution as conv2d
    attributes (the pre-transformed Winograd operator's too)."""

    geo: Geometry
    attrs: Conv2dAttrs


def _direct_run(ctx, gemm) -> None:
    k = ConvCall(ctx)
    if k.empty:
        return
    geo = ctx.info.geo
    grid = geo.groups * ceil_div(geo.og, ctx.config["bm"]) * ceil_div(k.n * k.oh * k.ow,
                                                                       ctx.config["bn"])
    gemm(**k.tensors, **k.named_sizes, grid=grid, block=work_group(ctx.config))


def _depthwise_run(ctx, depthwise) -> None:
    k = ConvCall(ctx)
    if k.empty:
        return
    wg, vw = ctx.config["wg"], ctx.config["vw"]
    total = k.n * ctx.info.geo.o * k.oh * ceil_div(k.ow, vw)
    depthwise(**k.tensors, **k.named_sizes, grid=ceil_div(total, wg), block=wg)


def _winograd(ctx, u, input_, gemm, output) -> None:
    """The input transform, the alpha^2 products with U, the output transform."""
    k = ConvCall(ctx)
    geo = ctx.info.geo
    m, wg = ctx.fixed["m"], ctx.fixed["transform_wg"]
    alpha = m + 2
    th, tw = ceil_div(k.oh, m), ceil_div(k.ow, m)
    p = k.n * th * tw
    if not ctx.wide and alpha * alpha * max(geo.c, geo.o) * p > INT_MAX:
        ctx.widen()  # the transformed tiles outgrow 32-bit indices before the tensors do
    s = ctx.size
    v = ctx.empty((alpha * alpha * geo.c * p,), np.float32)
    input_(**k.winograd_input(v, th, tw), grid=ceil_div(p * geo.c, wg), block=wg)
    mo = ctx.empty((alpha * alpha * geo.o * p,), np.float32)
    bm, bn = ctx.config["bm"], ctx.config["bn"]
    gemm(U=u, V=v, Mo=mo, P=s(p), grid=alpha * alpha * ceil_div(geo.o, bm) * ceil_div(p, bn),
         block=work_group(ctx.config))
    output(**k.winograd_output(mo, th, tw), grid=ceil_div(p * geo.o, wg), block=wg)


def _winograd_transforming_run(ctx, weight, input, gemm, output) -> None:  # noqa: A002
    if ctx.outputs[0].size == 0:
        return
    geo, m, wg = ctx.info.geo, ctx.fixed["m"], ctx.fixed["transform_wg"]
    u = ctx.empty(((m + 2) ** 2 * geo.o * geo.c,), np.float32)
    weight(wt=ctx.inputs[1], U=u, grid=ceil_div(geo.o * geo.c, wg), block=wg)
    _winograd(ctx, u, input, gemm, output)


def _winograd_pretransformed_run(ctx, input, gemm, output) -> None:  # noqa: A002
    if ctx.outputs[0].size == 0:
        return
    _winograd(ctx, ctx.inputs[1], input, gemm, output)


_W_INPUT = Kernel("conv2d/winograd_input.j2", doc="the input transform B^T d B of every tile")
_W_GEMM = Kernel("conv2d/winograd_gemm.j2", {"a_k_major": True, "b_k_major": False},
                 doc="the alpha^2 products M = U V")
_W_OUTPUT = Kernel("conv2d/winograd_output.j2",
                   doc="the output transform A^T M A, bias, activation, store")


def _winograd_decl(m: int, transform: bool):
    if transform:
        return with_numerics(kernel_impl(
            f"winograd_{m}x{m}", _winograd_transforming_run,
            weight=Kernel("conv2d/winograd_weight.j2", doc="the weight transform G g G^T"),
            input=_W_INPUT, gemm=_W_GEMM, output=_W_OUTPUT), NUMERICS)
    return with_numerics(kernel_impl(f"winograd_{m}x{m}", _winograd_pretransformed_run,
                                     input=_W_INPUT, gemm=_W_GEMM, output=_W_OUTPUT), NUMERICS)


#: (tile, transforms the weight) -> declaration
WINOGRAD = {(m, t): _winograd_decl(m, t) for m in (2, 4) for t in (True, False)}
DIRECT = kernel_impl("direct", _direct_run, gemm=Kernel(
    "conv2d/direct.j2", doc="implicit GEMM: weights times the im2col matrix, read from x",
    low_occupancy=("the GPU default 128 x 128 register tile, double-buffered, with vector "
                   "fragments: about 200 registers a thread, one block a multiprocessor")))
DEPTHWISE = kernel_impl("depthwise", _depthwise_run, depthwise=Kernel(
    "conv2d/depthwise.j2", doc="vw neighbouring outputs of one channel's row per work-item"))


def common_params(attrs: Conv2dAttrs, geo, data_dtype: str, out_dtype: str, inputs: int,
                  d) -> dict:
    """Template parameters every conv2d kernel of a call shares (``inputs``: how many the call
    has: the bias is the third, the residual the fourth) in dialect ``d``."""
    return dict(half=half_format(data_dtype), out_half=half_format(out_dtype), acc_t="float",
                acc_dtype="float32", **PLAIN,
                **_epilogue.template_params(attrs, inputs >= 3, inputs >= 4, "float32", d),
                nchw=attrs.data_layout == "NCHW",
                oihw=attrs.kernel_layout == "OIHW",
                C=geo.c, O=geo.o, Cg=geo.cg, Og=geo.og, KH=geo.kh, KW=geo.kw,
                SH=attrs.strides[0], SW=attrs.strides[1], DH=attrs.dilation[0],
                DW=attrs.dilation[1])


def winograd_space(geo: Geometry, m: int, on_cpu: bool) -> ConfigSpace:
    """The tile space of the unfused Winograd products (o x p GEMMs, p the batch's m x m
    tiles); on a GPU with static sizes the default fits a small product (gemm_space's
    ``output``): a 6 x 40 product ran 16 x 256 tiles, alpha^2 of them."""
    sizes = [sympy.sympify(v) for v in (geo.o, geo.n, geo.oh, geo.ow)]
    output = None
    if not on_cpu and all(v.is_Integer for v in sizes):
        o, n, oh, ow = (int(v) for v in sizes)
        output = (o, n * ceil_div(oh, m) * ceil_div(ow, m))
    return gemm_space(geo.o, on_cpu, loads=False, output=output)


def winograd_params(common: dict, m: int, on_cpu: bool) -> dict:
    """The Winograd kernels' parameters: the tile, the unrolled transforms, the work-group of
    the transform kernels."""
    at, g, bt = winograd_matrices(m)
    return dict(common, m=m, alpha=m + 2, transform_wg=64 if on_cpu else 256,
                code_weight=transform_code(g, "g", "u"), code_input=transform_code(bt, "d", "v"),
                code_output=transform_code(at, "m", "y"))


def winograd_applies(attrs: Conv2dAttrs, geo) -> bool:
    return (geo.kh, geo.kw) == (3, 3) and tuple(attrs.strides) == (1, 1) \
        and tuple(attrs.dilation) == (1, 1) and attrs.groups == 1


def gpu_strategy(attrs, inputs, outputs, target):
    geo = conv_geometry(inputs, attrs)
    common = common_params(attrs, geo, inputs[0].dtype, outputs[0].dtype, len(inputs),
                           dialect_for(target.backend))
    info = ConvInfo(geo, attrs)
    on_cpu = target.on_cpu
    s = Strategy(target)
    conv2d_mma.offer(s, geo, attrs, inputs[0].dtype, common, info, target)
    conv2d_mma.offer_winograd(s, geo, attrs, inputs[0].dtype, common, info, target,
                              winograd_applies(attrs, geo), winograd_params)
    if winograd_applies(attrs, geo):
        big_out = sympy.And(sympy.sympify(geo.oh) >= WINOGRAD_4X4_MIN_OUT,
                            sympy.sympify(geo.ow) >= WINOGRAD_4X4_MIN_OUT)
        # on a CPU the unfused kernels stay first: their GEMM tile beats the fused kernel's
        # alpha^2 sums a pair there (PoCL, batch 8, 64 -> 64 channels, 56x56: 208-224 ms
        # against 381 for F(4x4), 288 against 424 for F(2x2); benchmarks/results/)
        (f4, f2), (u4, u2) = ((12, 11), (15, 14)) if on_cpu else ((15, 14), (12, 11))
        if target.capabilities.vendor == "nvidia":
            # measured on an H100 (gpucg bench conv2d, batch 8, float32, ResNet's 3x3 layers,
            # benchmarks/results/gpu-h100-*): direct took 0.229 / 0.166 / 0.200 / 0.360 ms at
            # 64x56 / 128x28 / 256x14 / 512x7, the fused Winograd default 0.243 / 0.328 /
            # 0.580 / 0.442: on CUDA direct (10) ranks first, the Winograd kernels after it
            (f4, f2), (u4, u2) = (9, 8), (7, 6)
        # the blocks that move the fewest bytes on a GPU; on a CPU device the fixed 4 x 8 /
        # 2 x 8 blocks (PoCL, batch 8: the others took 0.9-2.9x their time; benchmarks/results/)
        call = conv2d_fused.call_for(geo, attrs, inputs, outputs[0])
        for m, plevel in ((4, f4), (2, f2)):
            s.add(conv2d_fused.FUSED[m, False], plevel, condition=big_out if m == 4 else None,
                  info=info, **conv2d_fused.offer(m, common["nchw"], call, target,
                                                  winograd_params(common, m, on_cpu)))
        s.add(WINOGRAD[4, True], u4, condition=big_out, space=winograd_space(geo, 4, on_cpu),
              info=info, fixed=winograd_params(common, 4, on_cpu))
        s.add(WINOGRAD[2, True], u2, space=winograd_space(geo, 2, on_cpu), info=info,
              fixed=winograd_params(common, 2, on_cpu))
    else:
        for decl, plevel in ((conv2d_fused.FUSED[4, False], 15), (conv2d_fused.FUSED[2, False], 14),
                             (WINOGRAD[4, True], 12), (WINOGRAD[2, True], 11)):
            s.exclude(decl, plevel, WINOGRAD_NEEDS)
    if attrs.groups == geo.c and geo.c > 1:
        # the depthwise kernel's vector width is its knob, not the tile's fixed PLAIN one
        s.add(DEPTHWISE, 13, info=info, fixed={k: v for k, v in common.items() if k != "vw"},
              space=ConfigSpace({"wg": (32, 64, 128, 256), "vw": (1, 2, 4, 8)},
                                {"wg": 64 if on_cpu else 256,
                                 "vw": 4 if attrs.data_layout == "NCHW" else 1}))
    else:
        s.exclude(DEPTHWISE, 13, "needs groups == input channels > 1")
    # the tile's vw, double_buffer and conflict_free are knobs of its space here, not the fixed PLAIN values
    direct = dict({k: v for k, v in common.items() if k not in PLAIN},
                  a_k_major=common["nchw"] and common["oihw"], b_k_major=not common["nchw"])
    vector = not common["half"]
    widths = (2, 4) if vector else ()
    direct.update(a_vec_widths=tuple(v for v in widths if a_vectors(attrs, geo, v)),
                  b_vec_widths=tuple(v for v in widths if b_vectors(attrs, geo, v)))
    default = _direct_default(on_cpu, vector)
    p = sympy.sympify(geo.n * geo.oh * geo.ow)
    if not on_cpu and p.is_Integer:
        default = fill_device(default, geo.groups * geo.og, int(p), sm_count(target))
    space = gemm_space(geo.og, on_cpu, vector, default=default, added=BEFORE_LOADS)
    # vw > 1 reads x (input 0) and W (input 1) vw elements at a time where the layouts allow:
    # their addresses must be aligned to a vector, else the dispatcher takes vw = 1
    needs = vector_needs({0: lambda c: c["vw"] in direct["b_vec_widths"],
                          1: lambda c: c["vw"] in direct["a_vec_widths"]})
    s.add(DIRECT, 10, info=info, space=space, fixed=direct, needs=needs)
    return s


#: the direct kernel before it had the vw, double_buffer and conflict_free knobs (what tuning records of that time
#: measured): scalar loads, one local tile of each operand, the conflict-free layouts
BEFORE_LOADS = {"vw": 1, "double_buffer": False, "conflict_free": True}


def _direct_default(on_cpu: bool, vector: bool) -> dict:
    if on_cpu:  # measured on PoCL (64->64, 56x56): 113 ms against 213 ms for 32x64 tiles;
        # vw=4 with double buffering 0.43-0.51x the time of the kernel before the knobs on
        # resnet 3x3 (NCHW, NHWC), 1x1 and stem layers (benchmarks/results/, 2026-11-23)
        return {"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4 if vector else 1,
                "double_buffer": True, "conflict_free": True}
    return {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "vw": 4 if vector else 1,
            "double_buffer": True, "conflict_free": True}


def a_vectors(attrs: Conv2dAttrs, geo, vw: int) -> bool:
    """Whether the direct kernel loads W vw elements at a time: along K where a row of W is
    one of K (OIHW weights with NCHW data: K a multiple of vw), along the output channels
    where they are W's contiguous axis (HWIO: Og a multiple of vw)."""
    if attrs.kernel_layout == "OIHW":
        return attrs.data_layout == "NCHW" and (geo.cg * geo.kh * geo.kw) % vw == 0
    return geo.og % vw == 0


def b_vectors(attrs: Conv2dAttrs, geo, vw: int) -> bool:
    """Whether the direct kernel loads x vw elements at a time: along the channels in NHWC
    (Cg a multiple of vw: a tap's vw channels lie together), along the pixels of a pointwise
    NCHW convolution (1x1, stride 1, no padding: the im2col matrix is x itself)."""
    if attrs.data_layout == "NHWC":
        return geo.cg % vw == 0
    return (geo.kh, geo.kw) == (1, 1) and tuple(attrs.strides) == (1, 1) \
        and (is_same(attrs.padding) or not any(attrs.padding))


STRATEGIES = {"conv2d": {"gpu": gpu_strategy, "cpu": host_strategy}}
