"""The per-SM and per-block limits of each CUDA architecture (the CUDA C++ Programming Guide's
table "Technical Specifications per Compute Capability"), and the local memory a work-group may
use on a target. gpucg.verify.occupancy computes occupancy from them; strategies size their
dynamic local buffers by them (gpucg/codegen/dynamic_local.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError

KIB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """The per-SM and per-block limits of one compute capability."""

    arch: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int
    #: the most shared memory a block may have with cudaFuncAttributeMaxDynamicSharedMemorySize
    smem_per_block_optin: int
    regs_per_sm: int = 64 * KIB
    max_regs_per_block: int = 64 * KIB
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256
    sub_partitions: int = 4
    #: static __shared__ beyond this is a compile error; a launch without the opt-in gets no more
    smem_static_max: int = 48 * KIB
    smem_reserved_per_block: int = 1 * KIB
    smem_alloc_unit: int = 128
    max_threads_per_block: int = 1024
    warp_size: int = 32
    max_grid: tuple = (2**31 - 1, 65535, 65535)
    max_block_dims: tuple = (1024, 1024, 64)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])


ARCHS = {a.arch: a for a in [
    ArchLimits("sm_75", 1024, 16, 64 * KIB, 64 * KIB),
    ArchLimits("sm_80", 2048, 32, 164 * KIB, 163 * KIB),
    ArchLimits("sm_86", 1536, 16, 100 * KIB, 99 * KIB),
    ArchLimits("sm_87", 1536, 16, 164 * KIB, 163 * KIB),
    ArchLimits("sm_89", 1536, 24, 100 * KIB, 99 * KIB),
    ArchLimits("sm_90", 2048, 32, 228 * KIB, 227 * KIB),
]}


def limits(arch: str) -> ArchLimits:
    """The limits of ``arch`` ("sm_90"), or InputError naming the known ones."""
    try:
        return ARCHS[arch]
    except KeyError:
        raise InputError(f"arch={arch!r} has no limits table here; allowed: "
                         f"{', '.join(ARCHS)}") from None


#: local memory a work-group may use on an OpenCL GPU, and static __shared__ arrays on CUDA
PORTABLE_LOCAL_BYTES = 48 * KIB
#: the arch a CUDA target without -arch is planned for where no CUDA device is usable here
DEFAULT_ARCH = "sm_90"


def target_arch(target) -> str:
    """The CUDA arch of a target: its -arch, else the device's it runs on here, else
    DEFAULT_ARCH."""
    arch = target.attrs.get("arch")
    if arch:
        return arch
    from .runtime import backend_status, get_backend

    if backend_status("cuda")[0]:
        return getattr(get_backend("cuda"), "arch", DEFAULT_ARCH)
    return DEFAULT_ARCH


def local_limit(target) -> int:
    """Bytes of local (shared) memory, static and dynamic, one work-group may use on
    ``target``: a CUDA arch's opt-in limit (a known arch; else the portable 48 KiB), or the
    portable 48 KiB on other targets (OpenCL GPUs give about that)."""
    if target.kind != "cuda":
        return PORTABLE_LOCAL_BYTES
    lim = ARCHS.get(target_arch(target))
    return lim.smem_per_block_optin if lim else PORTABLE_LOCAL_BYTES
