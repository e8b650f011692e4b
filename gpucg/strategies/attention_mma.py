"""The tensor-core attention forward (templates/attention/flash_mma.j2): its config space, when
it is offered, and its launch.

flash_mma is FlashAttention-2's forward: one work-group of ``warps`` warps a (batch, head, tile
of 16 * warps query rows), K and V tiles of ``bkv`` keys streamed through ``stages`` cp.async
stages of swizzled shared memory, S = Q K^T and O += P V on mma.sync (float16 and bfloat16:
m16n8k16; float32 with allow_tf32: m16n8k8 tf32), the online softmax on the accumulators.
On CUDA it sits above the SIMT kernel (and below split-KV decoding, which the dispatcher picks
for short queries on long keys); on OpenCL it is the twin (the warp operations emulated,
gpucg/codegen/warp.py), at gemm_mma's twin plevel: run only when forced. The resource check
(the space's constraint) keeps the shared tiles within 48 KiB and the registers a lane holds
(q fragments, the output accumulator, one tile of scores) within :data:`REGS_MAX`.
"""

from __future__ import annotations

import numpy as np

from ..codegen.shuffle import SHFL_WORDS
from ..codegen.warp import SCRATCH_WORDS
from ..implementation import Kernel, kernel_impl
from ..runtime import alignment_of
from ..runtime.base import ceil_div
from ..space import ConfigSpace
from .attention_args import common_args
from .gemm_mma import PLEVEL_TWIN, SMEM_BYTES, mma_kind, pairs_ok, tensor_cores

#: above the SIMT kernel (10), below split-KV decoding (20, on its condition)
PLEVEL_CUDA = 15
#: head dims the kernel takes (multiples of 16: whole m16n8k16 k-steps and pairs of 8-column
#: output tiles)
HEAD_DIMS = (32, 64, 80, 96, 128, 256)
#: 32-bit registers a lane may hold in its q fragments, output accumulator and score tile
#: (the rest of the 255 go to addresses, the softmax state and the fragments in flight)
REGS_MAX = 192


def cpr_pad(d: int, eb: int) -> int:
    """16-byte chunks a shared row holds: D's, rounded up to a power of two (the swizzle's)."""
    cpr = d * eb // 16
    return 1 << (cpr - 1).bit_length()


def smem_bytes(c, d: int, eb: int) -> int:
    """The q tile and the stages of k and v tiles."""
    row = cpr_pad(d, eb) * 16
    return (16 * c["warps"] + 2 * c["stages"] * c["bkv"]) * row


def regs(c, d: int, kind: str) -> int:
    """A lane's q fragments (D / k-step x 4), output (D / 8 x 4) and scores (bkv / 8 x 4)."""
    return d // (8 if kind == "tf32" else 16) * 4 + d // 2 + c["bkv"] // 2


def space_for(d: int, kind: str, eb: int, small: bool) -> ConfigSpace | None:
    def ok(c):
        return smem_bytes(c, d, eb) <= SMEM_BYTES and regs(c, d, kind) <= REGS_MAX
    knobs = {"warps": (1, 2, 4, 8), "bkv": (16, 32, 64), "stages": (2, 3)}
    prefer = ([(1, 32, 2), (1, 16, 2)] if small else
              [(4, 64, 2), (4, 32, 2), (2, 32, 2), (2, 16, 2), (1, 16, 2)])
    for w, bkv, st in prefer:
        c = {"warps": w, "bkv": bkv, "stages": st}
        if ok(c):
            return ConfigSpace(knobs, c, constraint=ok)
    return None


def _run(ctx, main):
    (b, hq, hkv, sq, skv), arrays, mstr = common_args(ctx)
    if b * hq * sq == 0:
        return
    s, bq = ctx.size, 16 * ctx.config["warps"]
    qtiles = ceil_div(sq, bq)
    vec = (int(all(alignment_of(a) % 16 == 0 for a in arrays[:3]))
           | int(pairs_ok(ctx.outputs[0], int(ctx.inputs[0].shape[3]))) << 1)
    main(*arrays, *ctx.outputs, *mstr, s(hq), s(hkv), s(hq // hkv), s(sq), s(skv), s(qtiles),
         np.int32(vec), grid=b * hq * qtiles, block=32 * ctx.config["warps"])


def _low_occupancy(p) -> str:
    return ("a lane keeps its q fragments, the D={} output accumulator and a tile of scores "
            "in registers (FlashAttention-2's layout)".format(p["D"]) if p["D"] >= 64 else "")


FLASH_MMA = kernel_impl("flash_mma", _run, main=Kernel(
    "attention/flash_mma.j2", low_occupancy=_low_occupancy,
    doc="FlashAttention-2 forward on tensor cores: cp.async stages, mma, online softmax"))


def offer(s, dtype: str, allow_tf32: bool, d: int, params: dict, info, target) -> None:
    """Offer flash_mma on strategy ``s``, or exclude it with the reason."""
    got, why = mma_kind(dtype, allow_tf32, True, True)
    twin = tensor_cores(target, got[0])[0] if got else tensor_cores(target, "f16")[0]
    plevel = PLEVEL_TWIN if twin else PLEVEL_CUDA
    if got is None or twin is None:
        s.exclude(FLASH_MMA, plevel, why or tensor_cores(target, got[0])[1])
        return
    kind, eb = got
    if d not in HEAD_DIMS:
        s.exclude(FLASH_MMA, plevel, f"head dim D={d} is not one of {HEAD_DIMS}")
        return
    space = space_for(d, kind, eb, twin or target.on_cpu)
    if space is None:
        least = regs({"bkv": 16}, d, kind)
        s.exclude(FLASH_MMA, plevel, f"head dim D={d} in {kind}: no tile fits; a lane would "
                  f"hold at least {least} registers of q fragments, output and scores (over "
                  f"{REGS_MAX}: at D=256 float16 ptxas spills on sm_90) or the tiles over "
                  f"{SMEM_BYTES // 1024} KiB of shared memory")
        return
    s.add(FLASH_MMA, plevel, space=space, info=info,
          fixed=dict(params, kind=kind, EB=eb, cpr_pad=cpr_pad(d, eb),
                     words=max(SCRATCH_WORDS, SHFL_WORDS)))
