"""The tensor-core attention forward (templates/attention/flash_mma.j2): its geometry, config
space, when it is offered, and its launch.

flash_mma is FlashAttention-2's forward on the tile layer: one work-group of ``warps`` warps a
(batch, head, tile of 16 * qm * warps query rows), K and V tiles of ``bkv`` keys streamed
through ``stages`` cp.async stages of dynamic shared memory (templates/tile/_pipeline.j2, the
GEMM core's pipeline and copies), S = Q K^T and O += P V on the MMA atom of the dtype (float16,
bfloat16: m16n8k16; float32 with allow_tf32: m16n8k8 tf32), P taken from S's accumulators as
the atom's maps say (gpucg.codegen.mma_atom.scores_as_a), the online softmax on the
accumulators. Key tiles wholly inside the keys and below every row's causal diagonal run a
loop without masks; the rest (the last partial tile, the diagonal) a masked one. Causal query
tiles run longest first (the last query tile sees the most keys). A window starts the key
tiles at the tile's first row's window; a window or ALiBi slopes take every tile through the
masked loop (it knows each score's key). With ``varlen`` the same kernel is
attention_varlen's varlen_flash (strategies/attention_varlen.py): rows and keys at the
sequence's offsets in packed (total, heads, D) arrays.

On CUDA it sits above the SIMT kernel (and below split-KV decoding, which the dispatcher picks
for short queries on long keys); on OpenCL it is the twin (the warp operations emulated), at
gemm_mma's twin plevel: run only when forced. The space keeps the shared tiles within the
target's opt-in shared memory and a lane's registers (:meth:`FlashGeometry.regs`) within
:data:`REGS_MAX`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..codegen import register_geometry
from ..codegen.mma_atom import atom as atom_of, scores_as_a
from ..codegen.shuffle import SHFL_WORDS
from ..codegen.smem import CHUNK, SmemPlan, SmemTile
from ..codegen.warp import SCRATCH_WORDS
from ..implementation import Kernel, kernel_impl
from ..runtime import alignment_of
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from .attention_args import common_args, heads, named, outputs
from .attention_decode import slopes_arg
from .gemm_mma import PLEVEL_TWIN, Request, mma_kind, pairs_ok, smem_limit, tensor_cores

#: above the SIMT kernel (10), below split-KV decoding (20, on its condition)
PLEVEL_CUDA = 15
#: head dims the kernel takes (multiples of 16: whole m16n8k16 k-steps and pairs of 8-column
#: output tiles)
HEAD_DIMS = (32, 64, 80, 96, 128, 256)
#: 32-bit registers a lane may hold by :meth:`FlashGeometry.regs` (ptxas's count for the
#: default configs, held by tests/test_resources.py, stays within 255 without spills)
REGS_MAX = 262


@dataclass(frozen=True)
class FlashGeometry:
    """One config's tiles, plan and register estimate (the template renders this object)."""

    kind: str
    d: int
    warps: int
    qm: int
    bkv: int
    stages: int
    qres: bool

    @property
    def atom(self):
        return atom_of(self.kind)

    @property
    def eb(self) -> int:
        return self.atom.elem_bytes

    @property
    def bq(self) -> int:
        """Query rows a work-group: qm atoms of 16 rows a warp."""
        return self.warps * self.qm * self.atom.m

    @property
    def nt(self) -> int:
        return self.warps * 32

    @functools.cached_property
    def tiles(self):
        return (SmemTile("Q", self.bq, self.d, self.eb), SmemTile("K", self.bkv, self.d, self.eb),
                SmemTile("V", self.bkv, self.d, self.eb))

    @functools.cached_property
    def plan(self) -> SmemPlan:
        q, k, v = self.tiles
        return SmemPlan(tiles=(q,), staged=(k, v), stages=self.stages)

    @property
    def dc(self) -> int:
        """16-byte chunks of data a row."""
        return self.d * self.eb // CHUNK

    def copies(self, rows: int) -> int:
        """Copies a thread makes of a tile of ``rows`` rows (the last guarded where the
        chunks do not divide among the threads)."""
        return ceil_div(rows * self.dc, self.nt)

    def regs(self) -> int:
        """An estimate of a lane's registers: the output accumulators, a tile of scores (and
        half again for P's fragments and the exponentials in flight), the q fragments
        (resident: ``qres``), the fragment addresses, the softmax state and a margin, fitted
        to ptxas's counts on sm_80 and sm_90 (within 15 of them at D = 64 and 128)."""
        a = self.atom
        acc = self.qm * (self.d // a.n) * 4
        scores = self.qm * (self.bkv // a.n) * 4
        q = self.qm * (self.d // a.k) * a.a_regs if self.qres else a.a_regs
        addrs = 2 * (self.d // a.k) + (0 if self.qres else self.d // a.k)
        return acc + scores * 3 // 2 + q + addrs + 8 * self.qm + 60

    def smem_requests(self) -> list:
        """Warp 0's first shared-memory request of each access, with ints: the 16-byte copies
        of q, k and v (copy 0 of each lane), the ldmatrix rows of q, k and v (.trans), TF32's
        32-bit loads of v in the keys' permuted order; the addresses the template computes
        (the atom's ldmatrix lanes, the tiles' swizzles)."""
        a = self.atom
        q, k, v = self.tiles
        out = []
        for tile in (q, k, v):
            off = self.plan.offset(tile.name)
            at = tuple(off + tile.chunk_at(t // self.dc, t % self.dc) for t in range(32))
            out.append(Request(f"cp.async {tile.name}", 16, at))
        for tile, operand, tiles, k_major in ((q, "A", 1, True), (k, "B", 2, True),
                                              (v, "B", 2, False)):
            if a.epr != 2 and not k_major:
                continue
            off = self.plan.offset(tile.name)
            lanes = tuple(off + tile.at(*a.ldmatrix_lane(operand, tiles, k_major, lane),
                                        aligned=True) for lane in range(32))
            out.append(Request(f"ldmatrix {tile.name}", 16, lanes, "ldmatrix"))
        if a.epr == 1:
            _, perm = scores_as_a(a)
            off = self.plan.offset("V")
            for u in range(a.b_regs):
                lanes = tuple(off + v.at(perm[a.b(lane, u)[0]], lane >> 2)
                              for lane in range(32))
                out.append(Request(f"ld.shared.b32 V (b{u})", 4, lanes))
        return out

    def why_not(self, limit: int) -> str:
        if self.d % 16 or self.bkv % 16:
            return f"D={self.d} and bkv={self.bkv} must be multiples of 16"
        if self.plan.bytes > limit:
            return f"{self.plan.bytes} B of shared memory (the target allows {limit})"
        if self.regs() > REGS_MAX:
            return f"about {self.regs()} registers a lane (over {REGS_MAX})"
        return ""


@functools.lru_cache(maxsize=None)
def geometry(kind: str, d: int, warps: int, qm: int, bkv: int, stages: int,
             qres: bool) -> FlashGeometry:
    return FlashGeometry(kind, int(d), int(warps), int(qm), int(bkv), int(stages), bool(qres))


register_geometry("flash", geometry)


def config_geometry(p) -> FlashGeometry:
    """The geometry of a call's template parameters (fixed and config)."""
    return geometry(p["kind"], p["D"], p["warps"], p["qm"], p["bkv"], p["stages"], p["qres"])


_geo = config_geometry


def space_for(d: int, kind: str, small: bool, limit: int) -> ConfigSpace | None:
    """The configs whose tiles fit ``limit`` bytes and whose registers fit; the default the
    first of a preference list (GPU: 128 query rows, 64 keys a tile, 3 stages; 32 query rows
    a warp where the registers allow; the q fragments resident where they fit; the twin: one
    warp, small tiles)."""
    def why(c):
        g = geometry(kind, d, c["warps"], c["qm"], c["bkv"], c["stages"], c["qres"])
        if g.d % 16 or g.bkv % 16:
            return "tile geometry"
        if g.plan.bytes > limit:
            return f"shared memory over {limit // 1024} KiB"
        return f"over {REGS_MAX} registers a lane (estimate)" if g.regs() > REGS_MAX else ""

    def ok(c):
        return not why(c)
    knobs = {"warps": (1, 2, 4, 8), "qm": (1, 2), "bkv": (16, 32, 64, 128),
             "stages": (2, 3, 4), "qres": (False, True)}
    prefer = ([(1, 1, 32, 2, True), (1, 1, 16, 2, True), (1, 1, 16, 2, False)] if small else
              [(4, 2, 64, 3, True), (8, 1, 64, 3, True), (4, 2, 64, 3, False),
               (8, 1, 64, 3, False), (8, 1, 32, 3, False), (4, 1, 32, 2, False),
               (4, 1, 16, 2, False), (2, 1, 16, 2, False)])
    for w, qm, bkv, st, qres in prefer:
        c = {"warps": w, "qm": qm, "bkv": bkv, "stages": st, "qres": qres}
        if ok(c):
            return ConfigSpace(knobs, c, added={"qm": 1, "qres": True}, why=why)
    return None


def _run(ctx, main):
    (b, hq, hkv, sq, skv), arrays, mstr = common_args(ctx)
    if b * hq * sq == 0:
        return
    s, bq = ctx.size, _geo(ctx.fixed | dict(ctx.config)).bq
    qtiles = ceil_div(sq, bq)
    vec = vec_bits(arrays[:3], ctx.outputs[0], int(ctx.inputs[0].shape[3]))
    main(**named(arrays, mstr), **outputs(ctx), **slopes_arg(ctx, ctx.attrs.alibi_slopes), **heads(ctx, hq, hkv, sq, skv),
         qtiles=s(qtiles), vec=np.int32(vec), grid=b * hq * qtiles,
         block=32 * ctx.config["warps"])


def vec_bits(arrays, out, d: int) -> int:
    """bit 0: the arrays copied 16 bytes at a time are aligned to 16 bytes; bit 1: o takes a
    pair of outputs a store."""
    return (int(all(alignment_of(a) % 16 == 0 for a in arrays)) | int(pairs_ok(out, d)) << 1)


def _low_occupancy(p) -> str:
    return ("a lane keeps the D={} output accumulator and a tile of scores in registers "
            "(FlashAttention-2's layout); the pipeline, not more warps, hides the latency"
            .format(p["D"]) if p["D"] >= 64 else "")


def flash_kernel(doc: str) -> Kernel:
    """The kernel of flash_mma (and of attention_varlen's varlen_flash: ``varlen`` set)."""
    return Kernel("attention/flash_mma.j2", low_occupancy=_low_occupancy,
                  dynamic_local=lambda p: _geo(p).plan.bytes,
                  smem_requests=lambda p: _geo(p).smem_requests(), doc=doc)


FLASH_MMA = kernel_impl("flash_mma", _run, main=flash_kernel(
    "FlashAttention-2 forward on tensor cores: cp.async stages, mma, online softmax"))


def offer(s, dtype: str, allow_tf32: bool, d: int, params: dict, info, target,
          decl=FLASH_MMA) -> None:
    """Offer flash_mma (or another implementation ``decl`` of its kernel) on strategy ``s``,
    or exclude it with the reason."""
    got, why = mma_kind(dtype, allow_tf32, True, True)
    twin = tensor_cores(target, got[0])[0] if got else tensor_cores(target, "f16")[0]
    plevel = PLEVEL_TWIN if twin else PLEVEL_CUDA
    if got is None or twin is None:
        s.exclude(decl, plevel, why or tensor_cores(target, got[0])[1])
        return
    kind, eb = got
    if d not in HEAD_DIMS:
        s.exclude(decl, plevel, f"head dim D={d} is not one of {HEAD_DIMS}")
        return
    limit = smem_limit(target, twin)
    space = space_for(d, kind, twin or target.on_cpu, limit)
    if space is None:
        least = geometry(kind, d, 1, 1, 16, 2, False)
        s.exclude(decl, plevel, f"head dim D={d} in {kind}: no tile fits; "
                  f"{least.why_not(limit) or 'no config of the space fits'}")
        return
    s.add(decl, plevel, space=space, info=info,
          fixed=dict(params, kind=kind, EB=eb, words=max(SCRATCH_WORDS, SHFL_WORDS)))
