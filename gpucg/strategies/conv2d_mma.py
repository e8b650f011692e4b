"""conv2d on the tensor-core GEMM core (templates/gemm/_mma.j2): direct_mma, the implicit GEMM
of templates/conv2d/direct_mma.j2, for NCHW and NHWC.

Per group the product is Y (M x Og) = im2col(x) (M x K) * W (K x Og) with M = N * OH * OW
output pixels and K = Cg * KH * KW, in the order x lies in memory ((c, r, s) for NCHW, (r, s, c)
for NHWC). The core's operand-loader hook gathers the im2col matrix from x: 16-byte cp.async
along the channels for NHWC when each group's channels are whole 16-byte runs, element by element
(zero-filled at the padding) otherwise; the weights take the 16-byte path where their rows along
K (OIHW with NCHW) or along the output channels (HWIO) are whole chunks.

On CUDA direct_mma takes the highest plevel (gemm_mma's) for float16, bfloat16 and float32 with
allow_tf32, where each group has at least :data:`MIN_OG` output channels and :data:`MIN_K`
products a sum, NHWC groups hold whole 16-byte runs of channels, and (the condition, checked by
the dispatcher for symbolic sizes) there are at least :data:`MIN_PIXELS` output pixels. On
OpenCL it is the twin, offered at the lowest plevel for any size (forced with impl=).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..implementation import Kernel, kernel_impl, with_numerics
from ..ops.conv2d_winograd import NUMERICS_16
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from . import gemm_mma
from .conv2d_call import ConvCall

#: CUDA needs this many output pixels (N * OH * OW): fewer leave most of a 128-row tile idle
MIN_PIXELS = 256
#: output channels per group on CUDA: the core's narrowest warp tile is 16 wide
MIN_OG = 16
#: products a sum (Cg * KH * KW) on CUDA: one m16n8k16 step
MIN_K = 16


#: work-items a work-group of the split-K reduction
REDUCE_WG = 256
#: how many ways K may be split (NHWC, where the tiles are fewer than a wave of the device)
SPLITS = (1, 2, 3, 4, 6, 8)


def _run(ctx, gemm, reduce) -> None:
    k = ConvCall(ctx)
    if k.empty:
        return
    c, geo, p = ctx.config, ctx.info.geo, ctx.fixed
    tiles = geo.groups * ceil_div(k.n * k.oh * k.ow, c["bm"]) * ceil_div(geo.og, c["bn"])
    threads = (c["bm"] // c["wm"]) * (c["bn"] // c["wn"]) * 32
    aligned = all(gemm_mma.alignment_of(a) % 16 == 0 for a in (k.data, k.weight))
    pairs = not p["nchw"] and gemm_mma.pairs_ok(k.y, geo.og)
    vec = np.int32(int(aligned) | int(pairs) << 1)
    splits = c.get("splits", 1)
    if splits == 1:
        gemm(**k.tensors, **k.named_sizes, vec=vec, grid=tiles, block=threads)
        return
    total = k.y.size
    part = ctx.empty((splits * total,), np.float32)
    gemm(x=k.data, wt=k.weight, part=part, **k.named_sizes, vec=vec, grid=(tiles, splits),
         block=threads)
    reduce(part=part, **k.named_epilogue, y=k.y, total=ctx.size(total),
           grid=ceil_div(total, REDUCE_WG), block=REDUCE_WG)


DIRECT_MMA = kernel_impl(
    "direct_mma", _run,
    gemm=Kernel("conv2d/direct_mma.j2", doc="implicit GEMM on tensor cores: the im2col matrix "
                "gathered into the core's swizzled stages, mma.sync, the fused epilogue (or "
                "a split of K's float sums)",
                low_occupancy=gemm_mma.low_occupancy, dynamic_local=gemm_mma.dynamic_bytes,
                smem_requests=gemm_mma.kernel_requests),
    reduce=Kernel("conv2d/splitk_reduce.j2", {"wg": REDUCE_WG},
                  doc="split-K: the splits' sums added, the epilogue, the store"))


def layout(common: dict, kind: str, eb: int, plain: bool) -> dict:
    """The operands' layouts and which may copy 16 bytes at a time. A (the im2col matrix) lies
    along K; it is x itself, read as a matrix, for a 1x1 convolution with stride 1 and no
    padding in NHWC (``plain``), and NHWC with whole 16-byte runs of each group's channels
    copies 16 bytes. The weights lie along K for OIHW, along the output channels for HWIO; they
    are read as a dense matrix where their memory order is K's ((c, r, s) for NCHW data,
    (r, s, c) for NHWC; any order for 1x1), 16 bytes at a time where their rows are whole
    chunks, else gathered element by element."""
    epc = 16 // eb
    nchw, oihw = common["nchw"], common["oihw"]
    k = common["Cg"] * common["KH"] * common["KW"]
    one = common["KH"] * common["KW"] == 1
    w_dense = one or nchw == oihw
    if oihw:
        b_vec = w_dense and k % epc == 0
    else:
        b_vec = w_dense and common["Og"] % epc == 0 and common["O"] % epc == 0
    a_vec = not nchw and common["Cg"] % epc == 0 and common["C"] % epc == 0
    return dict(a_k_major=True, b_k_major=oihw, a_vec=a_vec, b_vec=b_vec, w_dense=w_dense,
                x_dense=plain and not nchw and a_vec, mma_ld=True)


def space(kind: str, eb: int, b_k_major: bool, limit: int, small: bool, og: int,
          fill=None, k: int = 0, splittable: bool = False) -> ConfigSpace:
    """gemm_mma's space (without its raster order: the tiles run pixel-major) and ``splits``,
    the ways K is split (NHWC: ``splittable``). On a GPU with few output channels a group (64
    or fewer) a tile tall along the pixels rather than wide along the channels; where the
    sizes are known (``fill``: pixels, output channels, multiprocessors) and the tiles are
    fewer than a wave, K split until they make one (each split keeping two tiles of K or
    more: ``k`` products a sum)."""
    base = gemm_mma.mma_space(kind, eb, True, b_k_major, limit, small, fill)
    default = {n: v for n, v in base.default.items() if n != "raster"}
    knobs = {n: v for n, v in base.knobs.items() if n != "raster"}
    tall = dict(default, bm=128, bn=64, wm=64, wn=32)
    if not small and og <= 64 and (fill is None or _tiles(fill, tall) >= fill[2]):
        default = tall if base.constraint(tall) else dict(tall, stages=3)
    default["splits"] = 1
    knobs["splits"] = SPLITS if splittable else (1,)
    if splittable and fill is not None and not small:
        tiles = _tiles(fill, default)
        most = max(1, ceil_div(k, default["bk"]) // 2)
        want = min(ceil_div(fill[2], tiles), most)
        default["splits"] = max(s for s in SPLITS if s <= want)
    return ConfigSpace(knobs, default, added={"splits": 1}, why=base.why)


def _tiles(fill, c) -> int:
    return ceil_div(fill[0], c["bm"]) * ceil_div(fill[1], c["bn"])


def why_not_cuda(common: dict, eb: int) -> str:
    """The reason the CUDA kernel does not apply to these channels, or ''."""
    og, cg = common["Og"], common["Cg"]
    k = cg * common["KH"] * common["KW"]
    if og < MIN_OG:
        return f"needs at least {MIN_OG} output channels a group (has {og})"
    if k < MIN_K:
        return f"needs at least {MIN_K} products a sum, Cg * KH * KW (has {k})"
    if not common["nchw"] and cg % (16 // eb):
        return (f"NHWC needs each group's channels in whole 16-byte runs for cp.async "
                f"({cg} channels of {eb} bytes)")
    return ""


def offer(s, geo, attrs, dtype: str, common: dict, info, target) -> None:
    """Offer direct_mma on strategy ``s``, or exclude it with the reason."""
    got, why = gemm_mma.mma_kind(dtype, bool(attrs.allow_tf32), True, True)
    if got is None:
        s.exclude(DIRECT_MMA, gemm_mma.PLEVEL_CUDA, why)
        return
    kind, eb = got
    twin, why = gemm_mma.tensor_cores(target, kind)
    if twin is None:
        s.exclude(DIRECT_MMA, gemm_mma.PLEVEL_CUDA, why)
        return
    if not twin:
        why = why_not_cuda(common, eb)
        if why:
            s.exclude(DIRECT_MMA, gemm_mma.PLEVEL_CUDA, why)
            return
    pixels = sympy.sympify(geo.n) * sympy.sympify(geo.oh) * sympy.sympify(geo.ow)
    lay = layout(common, kind, eb, plain_1x1(attrs, geo))
    fill = (int(pixels), geo.o, target.capabilities.sm_count) if pixels.is_Integer else None
    s.add(DIRECT_MMA, gemm_mma.PLEVEL_TWIN if twin else gemm_mma.PLEVEL_CUDA, info=info,
          condition=None if twin else pixels >= MIN_PIXELS,
          fixed=dict(common, kind=kind, EB=eb, **lay),
          space=space(kind, eb, lay["b_k_major"], gemm_mma.smem_limit(target, twin),
                      twin or target.on_cpu, common["Og"], fill,
                      common["Cg"] * common["KH"] * common["KW"], not common["nchw"]))


def plain_1x1(attrs, geo) -> bool:
    """Whether the convolution reads x as a matrix: a 1x1 kernel, stride 1, no padding."""
    pads = attrs.padding
    zero = pads in ("VALID", "SAME", "SAME_LOWER") or (
        not isinstance(pads, str) and all(int(v) == 0 for v in pads))
    return geo.kh == geo.kw == 1 and tuple(attrs.strides) == (1, 1) and zero


# -- Winograd's batched product on the core -----------------------------------------------------

#: Winograd's tile on tensor cores: F(2x2, 3x3). U and V are rounded to the 16-bit format (or
#: TF32) after the transforms; F(4x4)'s larger coefficients (up to 5 and 8) grow them enough
#: that float16 results leave the error bound direct convolution keeps (tests/test_conv2d.py's
#: 2e-3 of conv(|x|, |w|)); F(2x2)'s (0, 1, 1/2) keep it
WINOGRAD_M = 2
#: why bfloat16 keeps to direct_mma
WINOGRAD_NO_BF16 = ("bfloat16 keeps 8 mantissa bits: Winograd's transformed tiles rounded to it "
                    "leave bfloat16's one-rounding error bound (direct_mma runs bfloat16)")


def _winograd_run(ctx, weight, input, gemm, output) -> None:  # noqa: A002
    """The weight and input transforms into 16-bit (or float32 for TF32) U and V, the alpha^2
    products on the core into float32 M, the output transform with the epilogue."""
    if ctx.outputs[0].size == 0:
        return
    k, geo, p, c, s = ConvCall(ctx), ctx.info.geo, ctx.fixed, ctx.config, ctx.size
    m, wg, eb = p["m"], p["transform_wg"], p["EB"]
    a2 = (m + 2) ** 2
    th, tw = ceil_div(k.oh, m), ceil_div(k.ow, m)
    tiles = k.n * th * tw
    if not ctx.wide and a2 * max(geo.c, geo.o) * tiles > np.iinfo(np.int32).max:
        ctx.widen()
    tdt = np.float32 if eb == 4 else ctx.inputs[0].dtype
    u = ctx.empty((a2 * geo.o * geo.c,), tdt)
    weight(wt=ctx.inputs[1], U=u, grid=ceil_div(geo.o * geo.c, wg), block=wg)
    v = ctx.empty((a2 * geo.c * tiles,), tdt)
    input(**k.winograd_input(v, th, tw), grid=ceil_div(tiles * geo.c, wg), block=wg)
    mo = ctx.empty((a2 * geo.o * tiles,), np.float32)
    epc = 16 // eb
    rows = geo.c % epc == 0 and (p["b_k_major"] or tiles % epc == 0)
    threads = (c["bm"] // c["wm"]) * (c["bn"] // c["wn"]) * 32
    gemm(U=u, V=v, Mo=mo, P=s(tiles), vec=np.int32(int(rows) | int(tiles % 2 == 0) << 1),
         grid=a2 * ceil_div(geo.o, c["bm"]) * ceil_div(tiles, c["bn"]), block=threads)
    output(**k.winograd_output(mo, th, tw), grid=ceil_div(tiles * geo.o, wg), block=wg)


WINOGRAD_MMA = with_numerics(kernel_impl(
    "winograd_mma", _winograd_run,
    weight=Kernel("conv2d/winograd_weight.j2", doc="the weight transform G g G^T, stored for "
                  "the tensor cores"),
    input=Kernel("conv2d/winograd_input.j2", doc="the input transform B^T d B of every tile, "
                 "stored for the tensor cores"),
    gemm=Kernel("conv2d/winograd_gemm_mma.j2", doc="the alpha^2 products M = U V on tensor "
                "cores (gemm/_mma.j2)", low_occupancy=gemm_mma.low_occupancy,
                dynamic_local=gemm_mma.dynamic_bytes, smem_requests=gemm_mma.kernel_requests),
    output=Kernel("conv2d/winograd_output.j2",
                  doc="the output transform A^T M A, bias, activation, store")), NUMERICS_16)

#: its CUDA plevel: above the SIMT Winograd kernels, below direct_mma (an implicit GEMM on
#: tensor cores skips the transforms' memory traffic, which dominates once the products are fast)
PLEVEL_WINOGRAD = 16


def offer_winograd(s, geo, attrs, dtype: str, common: dict, info, target, applies: bool,
                   winograd_params) -> None:
    """Offer winograd_mma on ``s`` for a 3x3, stride 1, undilated, ungrouped conv2d
    (``applies``), or exclude it with the reason."""
    if not applies:
        s.exclude(WINOGRAD_MMA, PLEVEL_WINOGRAD,
                  "needs a 3x3 kernel, stride 1, dilation 1, groups 1")
        return
    got, why = gemm_mma.mma_kind(dtype, bool(attrs.allow_tf32), True, True)
    if got is None:
        s.exclude(WINOGRAD_MMA, PLEVEL_WINOGRAD, why)
        return
    kind, eb = got
    if kind == "bf16":
        s.exclude(WINOGRAD_MMA, PLEVEL_WINOGRAD, WINOGRAD_NO_BF16)
        return
    twin, why = gemm_mma.tensor_cores(target, kind)
    if twin is None:
        s.exclude(WINOGRAD_MMA, PLEVEL_WINOGRAD, why)
        return
    if not twin and min(geo.o, geo.c) < MIN_OG:
        s.exclude(WINOGRAD_MMA, PLEVEL_WINOGRAD,
                  f"needs at least {MIN_OG} input and output channels (has {geo.c}, {geo.o})")
        return
    tf32 = kind == "tf32"
    params = dict(winograd_params(common, WINOGRAD_M, target.on_cpu), kind=kind, EB=eb,
                  a_k_major=True, b_k_major=tf32, v_pc=tf32, t_half=common["half"])
    s.add(WINOGRAD_MMA, gemm_mma.PLEVEL_TWIN if twin else PLEVEL_WINOGRAD, info=info,
          fixed=params,
          space=gemm_mma.mma_space(kind, eb, True, tf32, gemm_mma.smem_limit(target, twin),
                                   twin or target.on_cpu))
