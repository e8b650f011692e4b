"""Occupancy of CUDA kernels from the published per-SM limits, without a GPU.

The limits are gpucg.arch's (the CUDA C++ Programming Guide's table "Technical Specifications
per Compute Capability"); the computation follows the occupancy calculator the CUDA toolkit ships
(cuda_occupancy.h): registers are allocated per warp in units of 256 and split over the SM's
four sub-partitions, shared memory per block in units of 128 bytes with 1 KiB reserved per
block, and the resident blocks of an SM are the fewest that any one limit allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import ARCHS, KIB, Capabilities, limits  # noqa: F401 (the limits' home is gpucg.arch)
from ..runtime.base import ceil_div


def _round_up(value: int, unit: int) -> int:
    return ceil_div(value, unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """What one launch configuration gets on one SM.

    Attributes:
        blocks: resident blocks per SM (0: the launch fails).
        warps: resident warps per SM.
        occupancy: warps / the SM's maximum warps (0.0 to 1.0).
        limiter: the limit that decides ``blocks``: "warps", "blocks", "registers" or
            "shared memory".
        fits: whether the launch can run at all; ``reason`` says why not.
    """

    arch: str
    block: int
    registers: int
    shared: int
    blocks: int
    warps: int
    occupancy: float
    limiter: str
    fits: bool
    reason: str = ""


def occupancy(arch: str, registers: int, shared: int, block: int,
              dynamic_shared: int = 0) -> Occupancy:
    """Resident blocks and warps per SM for a kernel using ``registers`` per thread and
    ``shared`` bytes of static shared memory, launched with ``block`` threads per block and
    ``dynamic_shared`` bytes of dynamic shared memory (above 48 KiB the backend raises the
    kernel's opt-in attribute first: up to the arch's smem_per_block_optin, with the static)."""
    lim = limits(arch)
    warps_per_block = ceil_div(block, lim.warp_size)
    total_smem = shared + dynamic_shared
    why = []
    if block < 1 or block > lim.max_threads_per_block:
        why.append(f"block of {block} threads is outside 1..{lim.max_threads_per_block}")
    if registers > lim.max_regs_per_thread:
        why.append(f"{registers} registers per thread exceed {lim.max_regs_per_thread}")
    regs_per_warp = _round_up(registers * lim.warp_size, lim.reg_alloc_unit)
    # the hardware check assumes every sub-partition gets the block's warps at once
    assumed = regs_per_warp * _round_up(warps_per_block, lim.sub_partitions)
    if max(assumed, regs_per_warp * warps_per_block) > lim.max_regs_per_block:
        why.append(f"{registers} registers x {block} threads need {assumed} registers, more "
                   f"than the {lim.max_regs_per_block} of a block (too many resources "
                   "requested for launch): lower the block size or the registers")
    if shared > lim.smem_static_max:
        why.append(f"{shared} bytes of static shared memory exceed {lim.smem_static_max}")
    elif total_smem > lim.smem_per_block_optin:
        why.append(f"{shared} bytes of static and {dynamic_shared} of dynamic shared memory "
                   f"exceed the {lim.smem_per_block_optin} a block gets with the opt-in attribute")
    smem_per_block = _round_up(total_smem + lim.smem_reserved_per_block, lim.smem_alloc_unit)
    by = {
        "warps": lim.max_warps_per_sm // max(1, warps_per_block),
        "blocks": lim.max_blocks_per_sm,
        "registers": (lim.regs_per_sm // lim.sub_partitions // regs_per_warp * lim.sub_partitions
                      // max(1, warps_per_block)) if regs_per_warp else lim.max_blocks_per_sm,
        "shared memory": lim.smem_per_sm // smem_per_block,
    }
    limiter = min(by, key=lambda k: by[k])  # first of equals: warps, blocks, registers, smem
    blocks = 0 if why else by[limiter]
    warps = blocks * warps_per_block
    return Occupancy(arch, block, registers, total_smem, blocks, warps,
                     warps / lim.max_warps_per_sm, limiter, not why, "; ".join(why))


def max_block(arch: str, registers: int) -> int:
    """The largest block (a multiple of the warp size) a kernel of ``registers`` registers
    per thread can be launched with: what cudaFuncGetAttributes calls maxThreadsPerBlock."""
    lim = limits(arch)
    best = 0
    for block in range(lim.warp_size, lim.max_threads_per_block + 1, lim.warp_size):
        if occupancy(arch, registers, 0, block).fits:
            best = block
    return best
