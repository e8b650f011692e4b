"""Winograd F(m x m, 3 x 3) in one kernel (templates/conv2d/winograd_fused.j2): conv2d's
winograd_fused_2x2 / winograd_fused_4x4 and the pre-transformed operator's.

A work-group takes bm output channels of a bth x btw block of neighbouring output tiles of one
image. For each step of bk input channels it loads the input region the block covers once
(local memory, zero outside x), transforms every tile's patch there (V = B^T d B), transforms
the bm x bk filters (U = G g G^T; the pre-transformed operator loads U) and adds the alpha^2
products; each work-item keeps all alpha^2 sums of its tm x tn (output channel, tile) pairs in
registers, so the output transform and the shared epilogue run there too. Neither V nor the
products M reach global memory: a work-group reads its input region (the block's tiles and a
2-element halo, clipped to x) once per block of output channels, the filters of its bm
channels once, and writes y once. :func:`traffic` counts those bytes exactly as the kernel
moves them (equal to Oclgrind's count: tests/test_conv2d_fused.py), and the strategy's
default (:func:`default_for`) is the config that moves the fewest on the call's shapes.

What a register tile allows: a work-group holding the alpha^2 sums of bm x bn pairs moves at
least I O / bm + F T / bn >= 2 sqrt(I O F T / (bm bn)) bytes (x of I bytes read once per block
of channels, the filters of F bytes once per block of the T tiles), plus y; with the sums in
registers (at most 144 a work-item, 256 work-items: 2304 pairs for F(2x2), 1024 for F(4x4))
that is 2.29x and 1.83x the compulsory bytes at 64 -> 64 channels, 56 x 56 before the halo,
2.59x and 2.02x at 128 -> 128, 28 x 28. Beyond it, om > 1: a work-group keeps the input region
of every channel in its dynamic local buffer (gpucg/codegen/dynamic_local.py: up to the
arch's opt-in limit, target.capabilities.smem_per_block_optin; 48 KiB on OpenCL) and runs om passes of bm
output channels over it, so x is read once per bm * om channels. The defaults move (static
count, batch 8 / batch 1, sm_80 and sm_90; before: the 48 KiB blocks, as OpenCL GPUs keep)
  64 x 56:  F(2x2) 1.79x / 1.66x, F(4x4) 1.74x / 1.61x  (before 3.01x / 2.79x, 2.34x / 2.16x)
  128 x 28: F(2x2) 3.68x / 2.32x  (before 5.26x / 3.31x); F(4x4) 3.77x / 2.38x  (om = 1)
  256 x 14: F(2x2) 5.99x / 1.51x, F(4x4) 4.83x / 1.22x  (om = 1)
  512 x 7:  F(2x2) 7.50x / 1.08x  (om = 1: om = 32 would move 6.99x / 1.00x)
with one work-group of 224-256 work-items a multiprocessor (the buffer: 135-200 KiB). Passes
are the default only where they save HELD_GAIN of the bytes: they cost time. On an H100
(batch 8, float32) the held defaults took 0.31 ms at 64 x 56 (F(2x2), F(4x4)) against 0.17 and
0.14 ms for the 48 KiB blocks, 0.64 ms against 0.16 ms at 128 x 28 (F(2x2)), and om = 32 at
512 x 7 6.3 ms against 0.36 ms: x fits the 50 MB L2 there, so the bytes the count saves were
not the bound; few work-groups (64 at 64 x 56, batch 8) and one a multiprocessor were. At
batch 8 the filters' re-reads dominate from 128 channels on (each work-group reads them all).

2x at 128 -> 128, 28 x 28, batch 8 is out of this kernel's reach (it writes y once, the sums
of a pass in registers): x and y are 3.21 MB each, the filters 0.59 MB, 2x 14.02 MB. Holding
the input region of all 128 channels in 227 KiB, a work-group covers at most 84 F(2x2) tiles
(16 x 26 words a channel) or 21 F(4x4) tiles (14 x 30): 336 outputs, so the batch's 6272
outputs take >= 19 work-groups, each reading all the filters: >= 11.2 MB, with x and y once
>= 17.6 MB (2.51x). Holding the filters instead (4.5 KiB an output channel: at most 50), x is
read >= 3 times, with the halo of the blocks a pass of >= 43 channels holds in registers
(<= 53 F(2x2) or 23 F(4x4) tiles: 7 x 7 or 7 x 3, >= 1.14x x) >= 11.0 MB: with y and the
filters >= 14.9 MB (2.12x, on a grid of three work-groups). The F(2x2) default takes blocks
of 56 tiles (the larger ones leave no work-group size a multiple of 32 or miss the buffer):
3.68x; F(4x4)'s held blocks of 16 tiles would save 2% of the bytes: it keeps one pass.

The unfused kernels (winograd_2x2 / winograd_4x4: transforms and products through global
memory) stay: below the fused ones on a GPU (forceable with impl=), above them on a CPU device,
where their GEMM tile is faster (PoCL: 1.3-1.8x the time for the fused kernel at batch 8). A
CPU device's fused default stays DEFAULTS: default_for's blocks took 0.9-2.9x its time on PoCL.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import numpy as np

from ..implementation import Kernel, kernel_impl, with_numerics
from ..ops.conv2d import pads_for
from ..ops.conv2d_winograd import NUMERICS
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from .conv2d_call import ConvCall
from .conv2d_fused_layout import Layout, _extra, cost, held, layout, requests, work_group  # noqa: F401
from .gemm_tile import LOCAL_BYTES

#: most sums a work-item keeps (alpha^2 * tm * tn) before the registers spill
MAX_SUMS = 144

#: defaults by tile size m where the call's sizes are symbolic and on a CPU device (a GPU with
#: constant sizes takes default_for's): 2x2 tiles in 4 x 8 blocks of 32 output channels, 2 x 2
#: (o, tile) pairs a work-item (64 sums); 4x4 tiles in 2 x 8 blocks, 2 x 1 pairs (72 sums), 4
#: channels a step (36 KiB of local memory at 8 would leave no room for two blocks a
#: multiprocessor)
DEFAULTS = {2: {"bm": 32, "bth": 4, "btw": 8, "bk": 8, "tm": 2, "tn": 2, "om": 1},
            4: {"bm": 32, "bth": 2, "btw": 8, "bk": 4, "tm": 2, "tn": 1, "om": 1}}


def local_bytes(config, m: int, c: int = 0) -> tuple[int, int]:
    """(static, dynamic) local memory of ``c`` input channels, unpadded: U and V of one step,
    and the input region of bk channels (static) or of every channel (om > 1: dynamic), its
    rows of m * ceil(q / m) words (:class:`Layout`)."""
    a2 = (m + 2) ** 2
    row = m * ceil_div(m * config["btw"] + 2, m)
    region = 4 * held(config, c) * (m * config["bth"] + 2) * row
    uv = 4 * config["bk"] * a2 * (config["bm"] + config["bth"] * config["btw"])
    return (uv, region) if config.get("om", 1) > 1 else (uv + region, 0)


#: om: passes of bm output channels a work-group runs over its input region (om > 1: all
#: channels of the region in the dynamic local buffer)
KNOBS = {"bm": (8, 16, 32, 64), "bth": (1, 2, 4, 7, 8), "btw": (2, 4, 7, 8, 14, 16),
         "bk": (2, 4, 8, 16), "tm": (1, 2, 4), "tn": (1, 2, 4, 8), "om": (1, 2, 4, 8, 16, 32)}


def fits(c, m: int, call: "Call | None" = None, limit: int = LOCAL_BYTES) -> bool:
    """Whether a config is in the space on ``call`` with ``limit`` bytes of local memory a
    work-group (its layout's paddings are dropped where the padded tiles would not fit:
    :class:`Layout`); om > 1 needs the call's channels, every pass some of them."""
    a2, bn, om = (m + 2) ** 2, c["bth"] * c["btw"], c.get("om", 1)
    if om > 1 and (call is None or c["bm"] * (om - 1) >= call.o):
        return False
    static, dynamic = local_bytes(c, m, call.c if om > 1 else 0)
    return (c["bm"] % c["tm"] == 0 and bn % c["tn"] == 0 and 32 <= work_group(c) <= 256
            and a2 * c["tm"] * c["tn"] <= MAX_SUMS and static <= LOCAL_BYTES
            and static + dynamic <= limit)


def offer(m: int, nchw: bool, call: "Call | None", target, fixed: dict) -> dict:
    """The space and fixed parameters of a fused implementation on ``target``: its local
    memory limit (target.capabilities.smem_per_block_optin); a CPU device's default stays DEFAULTS."""
    limit = target.capabilities.smem_per_block_optin
    return dict(space=space(m, nchw, call, limit, pick=not target.on_cpu),
                fixed=dict(fixed, local_limit=limit))


def space(m: int, nchw: bool, call: "Call | None" = None, limit: int = LOCAL_BYTES,
          pick: bool = True) -> ConfigSpace:
    """The fused kernel's tiles for F(m x m, 3 x 3) with ``limit`` bytes of local memory a
    work-group; the default the one that moves the fewest bytes on ``call`` (``pick``:
    :func:`default_for`, in the data layout ``nchw``), else DEFAULTS[m]."""
    # the search for the default runs only when selection reaches the implementation (on CUDA
    # direct ranks above it: a conv2d compile skips the search there)
    default = (lambda: default_for(m, nchw, call, limit)) if pick and call is not None \
        else DEFAULTS[m]
    return ConfigSpace(KNOBS, default, constraint=lambda c: fits(c, m, call, limit),
                       added={"om": 1})  # configs older than om: one pass


@dataclass(frozen=True)
class Call:
    """The sizes of one call (NCHW terms; pt, pl: the top and left padding) and the bytes of
    an element of each tensor (bias and residual 0 where the call has none); ``w_words``: the
    weight's elements an (o, c) pair, 9 filter taps or the alpha^2 words of U."""

    n: int
    c: int
    h: int
    w: int
    o: int
    oh: int
    ow: int
    pt: int
    pl: int
    x_bytes: int = 4
    w_bytes: int = 4
    y_bytes: int = 4
    bias_bytes: int = 0
    residual_bytes: int = 0
    w_words: int = 9

    @property
    def compulsory(self) -> int:
        """Inputs read once, the output written once (what Oclgrind's ratio divides by)."""
        return (self.x_bytes * self.n * self.c * self.h * self.w
                + self.w_bytes * self.w_words * self.o * self.c + self.bias_bytes * self.o
                + (self.residual_bytes + self.y_bytes) * self.n * self.o * self.oh * self.ow)


def call_for(geo, attrs, inputs, output, m: int | None = None) -> "Call | None":
    """The :class:`Call` of a conv2d (``m``: the pre-transformed operator's tile, its weight
    U), or None where a size is symbolic (N may be: the bytes scale with it)."""
    sizes = (geo.c, geo.h, geo.w, geo.o, geo.oh, geo.ow)
    if not all(isinstance(v, (int, np.integer)) or getattr(v, "is_Integer", False)
               for v in sizes):
        return None
    pads = pads_for(attrs, int(geo.h), int(geo.w), 3, 3)
    size = [np.dtype(t.dtype).itemsize for t in inputs] + [0, 0]
    return Call(1, *(int(v) for v in sizes), pads[0], pads[1], x_bytes=size[0],
                w_bytes=size[1], y_bytes=np.dtype(output.dtype).itemsize, bias_bytes=size[2],
                residual_bytes=size[3], w_words=9 if m is None else (m + 2) ** 2)


def _covered(lo: int, n: int, size: int) -> int:
    return max(0, min(lo + n, size) - max(lo, 0))


def traffic(config, m: int, call: Call) -> tuple[int, int]:
    """(bytes loaded, bytes stored) of global memory by the fused kernel with ``config`` on
    ``call``, counted as the template moves them (equal to Oclgrind's count): per work-group,
    the input region's elements inside x of every channel; per pass and step the weights of
    its bm x bk (o, c) pairs with o valid; in the epilogue each valid output
    channel's bias by each of the bth * btw / tn work-items of its row, each output's
    residual; each output stored once."""
    bm, bth, btw = config["bm"] * config.get("om", 1), config["bth"], config["btw"]
    th, tw = ceil_div(call.oh, m), ceil_div(call.ow, m)
    bh, bw = ceil_div(th, bth), ceil_div(tw, btw)
    rows = sum(_covered(b * bth * m - call.pt, m * bth + 2, call.h) for b in range(bh))
    cols = sum(_covered(b * btw * m - call.pl, m * btw + 2, call.w) for b in range(bw))
    blocks = call.n * bh * bw
    outputs = call.n * call.o * call.oh * call.ow
    loaded = (call.n * ceil_div(call.o, bm) * call.c * rows * cols * call.x_bytes
              + blocks * call.o * (call.c * call.w_words * call.w_bytes
                                   + bth * btw // config["tn"] * call.bias_bytes)
              + outputs * call.residual_bytes)
    return loaded, outputs * call.y_bytes


def blockings(m: int, call: "Call | None" = None, limit: int = LOCAL_BYTES):
    """Every blocking of the space on ``call`` with ``limit`` bytes of local memory (bm, bth,
    btw, tm, tn, om; bk 2), its layout not padded."""
    names = ("bm", "bth", "btw", "tm", "tn", "om")
    for values in product(*(KNOBS[k] for k in names)):
        c = dict(zip(names, values), bk=2)
        if fits(c, m, call, limit):
            yield c


#: the least fraction of the bytes passes over a held region must save to be the default: they
#: serialize a work-group's output channels on few work-groups of one a multiprocessor (H100,
#: 512 -> 512 channels at 7 x 7, batch 8: om = 32 moved 7% fewer bytes in 17x the time)
HELD_GAIN = 0.1


@lru_cache(maxsize=None)
def default_for(m: int, nchw: bool, call: Call, limit: int = LOCAL_BYTES) -> dict:
    """The config of the space that moves the fewest bytes on ``call`` with ``limit`` bytes of
    local memory (:func:`traffic`; ties: fewer (output channel, tile) pairs computed past the
    edges, fewer sums a work-item, more work-items, less local memory), with the most
    channels a step that fit and a layout whose steps are conflict-free in the bank model
    (:func:`cost`); where none of the 16 that move the fewest has one (the region of every
    channel leaves no room for its padding), the one of them with the fewest extra wavefronts.
    Passes (om > 1) only where they move HELD_GAIN fewer bytes than one pass would; those
    first, then one pass."""
    th, tw = ceil_div(call.oh, m), ceil_div(call.ow, m)
    ranked = []
    for c in blockings(m, call, limit):
        if work_group(c) % 32:
            continue
        pairs = (ceil_div(call.o, c["bm"]) * c["bm"] * ceil_div(th, c["bth"]) * c["bth"]
                 * ceil_div(tw, c["btw"]) * c["btw"])
        ranked.append((sum(traffic(c, m, call)), pairs, c["tm"] * c["tn"], -work_group(c),
                       sum(local_bytes(c, m, call.c)), c))
    one = min((r[0] for r in ranked if r[-1]["om"] == 1), default=None)
    held = [r for r in ranked if r[-1]["om"] > 1 and (one is None
                                                      or r[0] <= (1 - HELD_GAIN) * one)]
    for group in (held, [r for r in ranked if r[-1]["om"] == 1]):
        fewest = None
        for i, (*_, c) in enumerate(sorted(group, key=lambda r: r[:5])[:16]):
            for bk in (8, 4, 2):
                c = dict(c, bk=bk)
                if fits(c, m, call, limit):
                    extra = cost(c, m, nchw, layout(c, m, nchw, call.c, limit))
                    if not extra[0]:
                        return c
                    fewest = min(fewest or (extra, i, c), (extra, i, c), key=lambda e: e[:2])
        if fewest:
            return fewest[2]
    return DEFAULTS[m]


def _run(ctx, fused) -> None:
    k = ConvCall(ctx)
    if k.empty:
        return
    m, c = ctx.fixed["m"], ctx.config
    th, tw = ceil_div(k.oh, m), ceil_div(k.ow, m)
    grid = (ceil_div(ctx.info.geo.o, c["bm"] * c["om"]) * k.n * ceil_div(th, c["bth"])
            * ceil_div(tw, c["btw"]))
    fused(**k.tensors, **k.named_sizes, TH=ctx.size(th), TW=ctx.size(tw), grid=grid, block=work_group(c))


def layout_of(p) -> Layout:
    """The layout of a kernel with template parameters ``p`` (its channels, its target's
    local memory limit)."""
    return layout(p, p["m"], p["nchw"], p["C"], p["local_limit"])


def kernel_requests(p) -> list:
    """The local-memory requests of a kernel with template parameters ``p`` (:func:`requests`
    on its own layout: gpucg.verify.banks evaluates them)."""
    return requests(p, p["m"], p["nchw"], layout_of(p))


def _strides(p) -> dict:
    """The template's layout parameters (:class:`Layout`) and its dynamic buffer's bytes."""
    lay = layout_of(p)
    return dict(cq=lay.cq, qs=lay.qs, xs=lay.xs, us=lay.us, vs=lay.vs,
                dyn_bytes=lay.split(p)[1])


def _dynamic(p) -> int:
    """Bytes of the dynamic local buffer: the input region of every channel where om > 1."""
    return layout_of(p).split(p)[1]


def decl(m: int, pre: bool):
    """winograd_fused_{m}x{m}: filters transformed in the kernel, or U given (``pre``)."""
    what = "U loaded" if pre else "the filters transformed there"
    return with_numerics(kernel_impl(f"winograd_fused_{m}x{m}", _run, fused=Kernel(
        "conv2d/winograd_fused.j2", {"pre": pre}, derive=_strides,
        doc=f"the input region in local memory, V = B^T d B there, {what}, the alpha^2 "
            "products in registers, A^T M A and the epilogue",
        low_occupancy=_low, dynamic_local=_dynamic, smem_requests=kernel_requests)), NUMERICS)


def _low(p) -> str:
    """Why a config may run one block a multiprocessor."""
    sums = (p["m"] + 2) ** 2 * p["tm"] * p["tn"]
    if p["om"] > 1:
        return (f"the input region of all {p['C']} channels in {_dynamic(p)} bytes of dynamic "
                f"shared memory, read once for {p['om']} passes of {p['bm']} output channels: "
                "the blocks that move the fewest bytes (default_for)")
    if sums <= 64:
        return ""
    return (f"{sums} sums a work-item (all alpha^2 of {p['tm'] * p['tn']} (o, tile) pairs in "
            "registers, 170-240 registers on sm_80/sm_90: capped at 128 for two blocks they "
            "spill); the blocks that move the fewest bytes need that many (default_for)")


#: (tile, U given) -> declaration
FUSED = {(m, pre): decl(m, pre) for m in (2, 4) for pre in (False, True)}

