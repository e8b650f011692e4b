"""The Hopper attention forward (templates/attention/flash_wgmma.j2): its geometry, config
space, when it is offered, its tensor maps and its launch.

flash_wgmma is FlashAttention-3's forward on the tile layer and gemm_wgmma's Hopper machinery:
one work-group a (batch, head, tile of 64 * ``consumers`` query rows) of one producer
warpgroup and ``consumers`` consumer warpgroups of 64 query rows each (setmaxnreg 40 / 232).
The producer loads the q tile once by TMA (completing on its own mbarrier), then the K and V
tiles of ``bkv`` keys into ``stages`` stages of 128-byte-swizzled dynamic shared memory, each
completing on its stage's mbarrier (templates/tile/_tma_pipeline.j2, gpucg.codegen.mbarrier);
a consumer computes S = q K^T with wgmma (both operands by descriptors, K-major: the head dim
spans D / 64 swizzle rows, each k-step's descriptor at its own start), the online softmax in
registers (exp2, row maxima and sums across a quad by shuffles; the causal and key-count masks
only on the tiles that reach past the keys or the consumer's diagonal), then O += P V with P
from registers (the RS form of wgmma: S's accumulators 8j..8j+7 of a thread are the A
fragment of keys 16j.., packed to f16/bf16 pairs) and V an MN-major operand of N = D, and
releases the stage. Two consumers take turns at the tensor cores (``pingpong``,
FlashAttention-3's schedule: named barriers 8 + c hand a consumer's burst of O += P V of one
tile and S of the next to the other, so its softmax runs under the other's products). GQA
maps a query head to its KV head in the TMA coordinates. The OpenCL
twin runs the roles in one legal order of the same protocol (gemm_wgmma's twin).

Offered where the capability record has wgmma (sm_90a: plevel 18, above flash_mma's 15 and
below split-KV decoding's 20) and as the OpenCL twin (plevel 1, forced only), for float16 and
bfloat16 at D = 64 and 128, causal or not, with or without the log-sum-exp. Not built (each
excluded with its reason): masks, soft-capping, sliding windows, ALiBi, other head dims,
float32; packed varlen batches are attention_varlen's operator (flash_mma's kernel).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..codegen import register_geometry
from ..codegen.mbarrier import MBARRIER_BYTES, Pipeline
from ..codegen.shuffle import SHFL_WORDS
from ..codegen.smem import SmemPlan, SmemTile
from ..codegen.tma import TensorMap
from ..codegen.wgmma import wgmma_atom
from ..codegen.wgmma_core import CONSUMER_REGS, PRODUCER_REGS, SWIZZLE, Operand, TmaRing
from ..implementation import Kernel, kernel_impl
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from .attention_args import common_args, heads, outputs
from .gemm_mma import KINDS as MMA_KINDS, PLEVEL_TWIN, pairs_ok, smem_limit
from .gemm_wgmma import aligned, supported

#: above flash_mma (15), below split-KV decoding (20, on its condition)
PLEVEL_CUDA = 18
HEAD_DIMS = (64, 128)
#: the 16-bit element types of the tensor-core atoms (gemm_mma.KINDS): dtype -> atom kind
KINDS = {dt: kind for dt, (kind, eb) in MMA_KINDS.items() if eb == 2}


@dataclass(frozen=True)
class FlashWgmma(TmaRing):
    """One config's tiles, barriers and shared-memory plan (the template renders this); the
    ring's offsets, barriers and descriptors are wgmma_core.TmaRing's."""

    kind: str
    d: int
    consumers: int
    bkv: int
    stages: int

    @property
    def atom_s(self):
        """S = q K^T: m64n{bkv}, A (q) and B (K) K-major by descriptors."""
        return wgmma_atom(self.kind, self.bkv)

    @property
    def atom_o(self):
        """O += P V: m64n{D}, A (P) from registers, B (V) MN-major."""
        return wgmma_atom(self.kind, self.d, a_regs=True)

    @property
    def eb(self) -> int:
        return self.atom_s.elem_bytes

    @property
    def regs(self) -> tuple:
        """Registers a thread keeps after setmaxnreg: (producer, consumers), the GEMM core's."""
        return PRODUCER_REGS, CONSUMER_REGS

    @property
    def bq(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @functools.cached_property
    def Q(self) -> Operand:
        return Operand("Q", self.bq, self.d, "K", self.eb)

    @functools.cached_property
    def K(self) -> Operand:
        return Operand("K", self.bkv, self.d, "K", self.eb)

    @functools.cached_property
    def V(self) -> Operand:
        return Operand("V", self.d, self.bkv, "MN", self.eb)

    @functools.cached_property
    def plan(self) -> SmemPlan:
        bars = SmemTile("bars", 1, (2 * self.stages + 1) * 2 * MBARRIER_BYTES, 1, align=16)
        q = SmemTile("Q", self.Q.bytes // SWIZZLE, SWIZZLE, 1, align=1024)
        staged = (SmemTile("K", self.K.bytes // SWIZZLE, SWIZZLE, 1, align=1024),
                  SmemTile("V", self.V.bytes // SWIZZLE, SWIZZLE, 1, align=1024))
        return SmemPlan(tiles=(bars, q), staged=staged, stages=self.stages)

    @functools.cached_property
    def pipe(self) -> Pipeline:
        """The ring of K and V tiles: each stage completes on both tiles' bytes."""
        return Pipeline(self.stages, self.consumers, self.K.bytes + self.V.bytes)

    @property
    def qbar(self) -> int:
        """The offset of the q tile's mbarrier (after the ring's pairs)."""
        return self.off("bars") + 16 * self.stages

    def kstep(self, op: Operand, var: str) -> str:
        """The C byte offset in ``op``'s tile of k-step ``var``'s descriptor start (16 of K a
        step; a K-major tile steps 32 bytes within a 128-byte row, then to the next slab),
        checked against hopper_layouts' tile for every step."""
        steps, per = op.bk // 16, SWIZZLE // (16 * self.eb)
        step = op.k_start(16)
        if op.major == "MN" or steps <= per:
            expr, at = f"({var} * {step})", [i * step for i in range(steps)]
        else:
            slab = op.k_start(16 * per)
            expr = f"(({var} >> 2) * {slab} + ({var} & 3) * {step})"
            at = [i // per * slab + i % per * step for i in range(steps)]
        assert at == [op.k_start(16 * i) for i in range(steps)], op
        return expr

    def why_not(self, limit: int) -> str:
        if self.d not in HEAD_DIMS:
            return f"head dim D={self.d} is not one of {HEAD_DIMS} (the tiles built)"
        if self.consumers not in (1, 2) or self.bkv not in (16, 32, 64, 128):
            return f"consumers={self.consumers} (1, 2), bkv={self.bkv} (16, 32, 64, 128)"
        if not 2 <= self.stages <= 4:
            return f"{self.stages} stages (2 to 4)"
        if self.smem_bytes > limit:
            return f"{self.smem_bytes} B of shared memory (the target allows {limit})"
        return ""


@functools.lru_cache(maxsize=None)
def geometry(kind: str, d: int, consumers: int, bkv: int, stages: int) -> FlashWgmma:
    return FlashWgmma(kind, int(d), int(consumers), int(bkv), int(stages))


register_geometry("flash_wgmma", geometry)


def config_geometry(p) -> FlashWgmma:
    return geometry(p["kind"], p["D"], p["consumers"], p["bkv"], p["stages"])


def space(kind: str, d: int, small: bool, limit: int) -> ConfigSpace:
    """consumers (warpgroups of 64 query rows), bkv (keys a tile), stages of the ring, pingpong
    (two consumers take turns at the tensor cores, FlashAttention-3's schedule). The GPU's
    default: two consumers, 128 keys, the deepest ring up to 3 that fits (2 at D = 128 f16:
    over 128 KiB); the twin's: one consumer, 16 keys, 2 stages (emulated warpgroups are slow:
    Oclgrind simulates a tile of 16 keys in half the time of 32; at D = 64 it fits Oclgrind's 48
    KiB of local memory beside the emulation's scratch)."""
    def why(c):
        return geometry(kind, d, c["consumers"], c["bkv"], c["stages"]).why_not(limit)

    default = {"consumers": 1, "bkv": 16, "stages": 2, "pingpong": 1}
    if not small:
        default = {"consumers": 2, "bkv": 128, "stages": 2, "pingpong": 1}
        for st in (3,) if d <= 64 else ():
            if not why(dict(default, stages=st)):
                default["stages"] = st
    knobs = {"consumers": (1, 2), "bkv": (16, 32, 64, 128), "stages": (2, 3, 4),
             "pingpong": (0, 1)}
    return ConfigSpace(knobs, default, why=why)


def head_map(dtype: str, d: int, b: int, nheads: int, seq: int, box, bshd: bool) -> TensorMap:
    """The 4-D map of q, k or v (layout BHSD or BSHD): rows of D contiguous elements, the box
    ``box`` (64 of D, rows) at coordinates (d0, row, head, b) or (d0, head, row, b). An empty
    sequence gets a map of one row (the kernel loads nothing from it)."""
    eb = MMA_KINDS[dtype][1]
    seq = max(seq, 1)
    dims = [d, nheads, seq, b] if bshd else [d, seq, nheads, b]
    box4 = [box[0], 1, box[1], 1] if bshd else [box[0], box[1], 1, 1]
    strides = [d * eb]
    for n in dims[1:3]:
        strides.append(strides[-1] * n)
    return TensorMap(dtype, dims, strides, box4, swizzle=SWIZZLE)


def _run(ctx, main):
    (b, hq, hkv, sq, skv), arrays, _ = common_args(ctx)
    if b * hq * sq == 0:
        return
    g, be = config_geometry(ctx.fixed | dict(ctx.config)), ctx.backend
    bshd = ctx.info.layout == "BSHD"
    dt = str(ctx.inputs[0].dtype)
    maps = {}
    for name, x, nh, seq, op in (("tmQ", arrays[0], hq, sq, g.Q), ("tmK", arrays[1], hkv, skv, g.K),
                                 ("tmV", arrays[2], hkv, skv, g.V)):
        maps.update(be.tensor_map_args(name, aligned(be, x),
                                       head_map(dt, g.d, b, nh, seq, op.box, bshd)))
    qtiles = ceil_div(sq, g.bq)
    out = ctx.outputs[0]
    main(**maps, **outputs(ctx), **heads(ctx, hq, hkv, sq, skv), qtiles=ctx.size(qtiles),
         vec=np.int32(int(pairs_ok(out, g.d)) << 1), grid=b * hq * qtiles, block=g.threads)


FLASH_WGMMA = kernel_impl("flash_wgmma", _run, main=Kernel(
    "attention/flash_wgmma.j2", doc="FlashAttention-3-style forward on Hopper: a TMA producer "
    "warpgroup, wgmma consumer warpgroups (S by descriptors, P V with P from registers), the "
    "online softmax in registers, mbarrier stages of dynamic shared memory",
    low_occupancy="one work-group a multiprocessor by design: warp-specialized, most of the "
                  "shared memory in its TMA ring",
    dynamic_local=lambda p: config_geometry(p).smem_bytes))


def not_built(params: dict) -> str:
    """Why the call asks for what flash_wgmma does not build ("" if nothing)."""
    for key, what in (("mask", "a mask input"), ("softcap", "soft-capping"),
                      ("alibi", "ALiBi slopes")):
        if params.get(key):
            return f"{what} (not built on wgmma: flash_mma takes it)"
    if params.get("window", -1) >= 0:
        return "a sliding window (not built on wgmma: flash_mma takes it)"
    return ""


def offer(s, dtype: str, d: int, params: dict, info, target) -> None:
    """Offer flash_wgmma on strategy ``s``, or exclude it with the reason."""
    twin, why = supported(target)
    plevel = PLEVEL_TWIN if twin else PLEVEL_CUDA
    if not why and dtype not in KINDS:
        why = (f"{dtype}: wgmma attention takes float16 and bfloat16 (float32 stays on "
               "flash_mma's TF32 or the SIMT kernel)")
    if not why and d not in HEAD_DIMS:
        why = f"head dim D={d} is not one of {HEAD_DIMS} (the tiles built)"
    why = why or not_built(params)
    if why:
        s.exclude(FLASH_WGMMA, plevel, why)
        return
    kind = KINDS[dtype]
    sp = space(kind, d, twin or target.on_cpu, smem_limit(target, twin))
    s.add(FLASH_WGMMA, plevel, space=sp, info=info,
          fixed=dict(params, kind=kind, EB=2, words=SHFL_WORDS))
