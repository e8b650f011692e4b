"""What a target's hardware can do, as one record per architecture: the capability table.

Every budget and every capability test in gpucg reads it (strategies never compare a target's
kind or backend name, and no shared-memory literal lives outside this table):

- the per-SM and per-block limits of each CUDA architecture (the CUDA C++ Programming Guide's
  table "Technical Specifications per Compute Capability"): gpucg.verify.occupancy computes
  occupancy from them, strategies size their shared memory by them;
- the instructions each has (``features``): mma.sync shapes, ldmatrix, cp.async, wgmma, TMA,
  mbarriers, FP8, thread-block clusters, setmaxnreg, warp shuffles;
- the OpenCL targets' records, whose warp operations are emulated for a 32-work-item warp
  (gpucg/codegen/warp.py: the twin of a CUDA kernel), with the portable 48 KiB of local memory
  a work-group gets on OpenCL GPUs.

A feature is *native* (the instruction), *emulated* (the OpenCL twin's emulation: same data
movement, for proving, not for speed) or absent; :meth:`Capabilities.native` and
:meth:`Capabilities.supports` ask.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError

KIB = 1024

#: the mma.sync shapes and types (PTX ``mma.sync.aligned.<shape>.row.col.f32.<t>.<t>.f32``)
MMA_F16, MMA_BF16, MMA_TF32 = "mma.m16n8k16.f16", "mma.m16n8k16.bf16", "mma.m16n8k8.tf32"
MMA_E4M3, MMA_E5M2 = "mma.m16n8k32.e4m3", "mma.m16n8k32.e5m2"
#: Ampere's tile instructions (sm_80 on)
AMPERE = frozenset({MMA_F16, MMA_BF16, MMA_TF32, "ldmatrix", "cp.async", "shfl"})
#: Ada (sm_89): FP8 mma.sync
ADA = AMPERE | {MMA_E4M3, MMA_E5M2, "fp8"}
#: Hopper (sm_90): Ada's FP8 mma.sync (the PTX ISA: m16n8k32 .e4m3/.e5m2 on sm_89 and higher),
#: clusters, TMA and mbarriers; the arch-specific sm_90a adds wgmma and setmaxnreg (ptxas
#: rejects them for plain sm_90)
HOPPER = ADA | {"clusters", "tma", "mbarrier"}
HOPPER_A = HOPPER | {"wgmma", "setmaxnreg"}


@dataclass(frozen=True)
class Capabilities:
    """One target's hardware: limits and instructions.

    Attributes:
        arch: "sm_90", "sm_90a"..., or the record's name for other targets ("opencl-gpu").
        features: what the hardware does natively (see the module's constants).
        emulated: what the target runs as an emulation of the CUDA instruction (OpenCL twins).
        sm_count: multiprocessors of the GPU the arch is (by default) met on (A100: 108, H100
            SXM: 132): default tiles shrink until their grid fills a wave of them.
        smem_static_max: static shared memory a block may declare; also what a launch gets
            without the opt-in attribute (48 KiB on CUDA; the portable local memory of an
            OpenCL GPU work-group).
        smem_per_block_optin: the most shared memory a block may have, static and dynamic,
            with cudaFuncAttributeMaxDynamicSharedMemorySize raised (on OpenCL the portable
            limit: the device's CL_DEVICE_LOCAL_MEM_SIZE is checked at launch).
    """

    arch: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int
    smem_per_block_optin: int
    features: frozenset = frozenset()
    emulated: frozenset = frozenset()
    sm_count: int = 132
    regs_per_sm: int = 64 * KIB
    max_regs_per_block: int = 64 * KIB
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256
    sub_partitions: int = 4
    smem_static_max: int = 48 * KIB
    smem_reserved_per_block: int = 1 * KIB
    smem_alloc_unit: int = 128
    max_threads_per_block: int = 1024
    warp_size: int = 32
    max_grid: tuple = (2**31 - 1, 65535, 65535)
    max_block_dims: tuple = (1024, 1024, 64)
    #: alignment of the dynamic shared-memory block (1024 B: what a 128-byte swizzle of TMA
    #: and wgmma needs of its tiles; CUDA aligns the extern block to at least 16 B, so the
    #: kernel rounds its base up, gpucg/codegen/tile.py)
    smem_align: int = 1024
    #: whose hardware the record describes ("nvidia"; "" for a generic OpenCL device):
    #: measured rankings of implementations apply to it
    vendor: str = "nvidia"

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_").rstrip("a")
        return int(digits[:-1]), int(digits[-1])

    def native(self, feature: str) -> bool:
        """Whether the hardware has ``feature`` as an instruction."""
        return feature in self.features

    def supports(self, feature: str) -> bool:
        """Whether kernels may use ``feature``: natively or through the twin's emulation."""
        return feature in self.features or feature in self.emulated

    def why_not(self, feature: str) -> str:
        """Why ``feature`` is not available ("" when it is)."""
        return "" if self.supports(feature) else f"{self.arch} has no {feature}"

    def describe(self) -> str:
        """One line of the limits and instructions selection used (explain prints it)."""
        tail = f", emulated: {', '.join(sorted(self.emulated))}" if self.emulated else ""
        feats = ", ".join(sorted(self.features)) or "none"
        return (f"{self.arch}: warp {self.warp_size}, shared memory {self.smem_static_max // KIB}"
                f" KiB static / {self.smem_per_block_optin // KIB} KiB opt-in a block, "
                f"{self.smem_per_sm // KIB} KiB an SM, {self.max_regs_per_thread} registers a "
                f"thread, {self.sm_count} SMs; instructions: {feats}{tail}")


ARCHS = {a.arch: a for a in [
    Capabilities("sm_75", 1024, 16, 64 * KIB, 64 * KIB, frozenset({"shfl"}), sm_count=40),
    Capabilities("sm_80", 2048, 32, 164 * KIB, 163 * KIB, AMPERE, sm_count=108),
    Capabilities("sm_86", 1536, 16, 100 * KIB, 99 * KIB, AMPERE, sm_count=84),
    Capabilities("sm_87", 1536, 16, 164 * KIB, 163 * KIB, AMPERE, sm_count=16),
    Capabilities("sm_89", 1536, 24, 100 * KIB, 99 * KIB, ADA, sm_count=128),
    Capabilities("sm_90", 2048, 32, 228 * KIB, 227 * KIB, HOPPER, sm_count=132),
    Capabilities("sm_90a", 2048, 32, 228 * KIB, 227 * KIB, HOPPER_A, sm_count=132),
]}

#: local memory a work-group may use on an OpenCL GPU (what CUDA gives a block without the
#: opt-in; OpenCL 1.2 guarantees only 32 KiB, every GPU driver gpucg targets gives 48 or more)
PORTABLE_LOCAL_BYTES = ARCHS["sm_80"].smem_static_max
#: the OpenCL targets: the CUDA kernels' twins emulate the warp operations for 32 work-items,
#: and Hopper's warpgroup, TMA and mbarrier operations (gpucg/codegen/hopper_twin.py)
_TWIN = frozenset(AMPERE | {"wgmma", "tma", "mbarrier", "setmaxnreg"})
#: "simd": the language's vector arithmetic in a work-item (float8 compares and selects)
OPENCL_GPU = Capabilities("opencl-gpu", 2048, 32, PORTABLE_LOCAL_BYTES, PORTABLE_LOCAL_BYTES,
                          frozenset({"simd"}), emulated=_TWIN, smem_static_max=PORTABLE_LOCAL_BYTES, vendor="")
OPENCL_CPU = Capabilities("opencl-cpu", 2048, 32, PORTABLE_LOCAL_BYTES, PORTABLE_LOCAL_BYTES,
                          frozenset({"simd"}), emulated=_TWIN, smem_static_max=PORTABLE_LOCAL_BYTES, vendor="")
#: the NumPy target runs no kernels
HOST = Capabilities("host", 1, 1, 0, 0, sm_count=1, smem_static_max=0, vendor="")

#: the arch a CUDA target without -arch is planned for where no CUDA device is usable here
DEFAULT_ARCH = "sm_90"


def limits(arch: str) -> Capabilities:
    """The capabilities of CUDA ``arch`` ("sm_90"), or InputError naming the known ones."""
    try:
        return ARCHS[arch]
    except KeyError:
        raise InputError(f"arch={arch!r} has no limits table here; allowed: "
                         f"{', '.join(ARCHS)}") from None
