"""Hopper's asynchronous operations as Dialect operations (``d.hopper``): TMA tensor copies
(``cp.async.bulk.tensor``, 1-5 dimensions, loads completing on an mbarrier and bulk stores),
mbarriers (init, arrive, arrive.expect_tx, try_wait.parity), fence.proxy.async, elect.sync,
setmaxnreg, named barriers, and wgmma (gpucg/codegen/wgmma.py), each spelled as the CUDA
instruction and as the OpenCL twin's emulation.

CUDA: each operation is the instruction, executed by the threads that call it (a TMA copy or an
arrive by one elected thread, a wait by every thread that needs the data). A tensor map is a
``const __grid_constant__ gpucg_tensor_map`` parameter (gpucg/codegen/tma.py), 128 bytes the
host encodes (gpucg/runtime/tensor_map.py).

The OpenCL twin has no concurrent roles (``concurrent_roles`` False): PoCL and Oclgrind give no
independent forward progress under work-group barriers, so the kernels run the producer's and
the consumers' steps in one legal order of the same protocol (templates/tile/_tma_pipeline.j2),
and every operation here is a *collective* of the work-group, called in uniform control flow:
- a tensor map is two parameters, the tensor's bytes (``<name>_g``) and its description
  (``<name>``: rank, element bytes, swizzle, OOB fill, dims, byte strides, box; :data:`MAP_WORDS`
  longs the host writes from the same gpucg.codegen.tma.TensorMap it encodes for CUDA);
- a TMA load copies the box the map describes (dimension 0 fastest; elements outside the
  tensor zero-filled, the swizzle applied by local address, gpucg.codegen.tma.box_load), every
  work-item a share, then completes the box's bytes on the mbarrier; a store writes it back,
  skipping elements outside;
- an mbarrier is its 8 bytes of local memory: word 0 the phase (bit 31), the expected arrivals
  (bits 15-29) and the pending ones (bits 0-14), word 1 the transaction count (signed). Arrivals
  and transactions are counted as the PTX ISA describes; when both reach zero the phase
  completes (its bit flips, the pending count re-arms). A wait of parity p passes when the
  phase of parity p has completed (the current phase's parity differs); in the twin's order it
  must pass at once: one that would block clears ``gpucg_pipe_ok``, and kernels make their
  outputs NaN (:meth:`OpenCLHopper.poison`), so a protocol the order breaks cannot go unseen;
- fences, setmaxnreg and elect are nothing (one work-item order, no registers to move), a named
  barrier is a work-group barrier.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError
from .tma import CUDA_TENSOR_MAP_TYPE, TensorMap
from . import wgmma as wg

#: longs of the twin's tensor-map description: rank, element bytes, swizzle, NaN fill,
#: dims[5], strides[4] (bytes, dimensions 1-4), box[5], the byte offset of element 0 in the
#: buffer the kernel is given
MAP_WORDS = 19


def map_words(t: TensorMap, offset: int = 0) -> list[int]:
    """The twin's description of tensor map ``t`` (:data:`MAP_WORDS` ints), its element 0
    ``offset`` bytes into the buffer."""
    def pad(xs, n):
        return list(xs) + [0] * (n - len(xs))
    return ([t.rank, t.elem_bytes, t.swizzle, int(t.oob_fill == "nan")] + pad(t.dims, 5)
            + pad(t.strides, 4) + pad(t.box, 5) + [int(offset)])


def _rank(rank: int) -> int:
    if rank not in (1, 2, 3, 4, 5):
        raise DTypeError(f"TMA copies have 1 to 5 dimensions, not {rank!r}")
    return rank


def _regs(n: int) -> int:
    if not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
        raise DTypeError(f"setmaxnreg takes a multiple of 8 in [24, 256], not {n!r}")
    return n


# -- CUDA ---------------------------------------------------------------------------------------

_CUDA_MBAR = """\
__device__ __forceinline__ void gpucg_mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void gpucg_mbar_arrive(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
/* one arrival that also expects `bytes` more transaction bytes on the phase */
__device__ __forceinline__ void gpucg_mbar_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
/* spin until the phase of this parity has completed */
__device__ __forceinline__ void gpucg_mbar_wait(unsigned bar, unsigned parity)
{
    unsigned ok;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    } while (!ok);
}
"""
_CUDA_ELECT = """\
/* 1 in one lane of the (converged) warp, 0 in the others */
__device__ __forceinline__ int gpucg_elect()
{
    unsigned e;
    asm volatile("{ .reg .pred p; elect.sync _|p, 0xffffffff; selp.u32 %0, 1, 0, p; }" : "=r"(e));
    return (int)e;
}
"""


def _cuda_tma(rank: int, store: bool) -> str:
    cs = ", ".join(f"int c{i}" for i in range(rank))
    regs = ", ".join(f"%{i + 2}" for i in range(rank))
    ins = ", ".join(f'"r"(c{i})' for i in range(rank))
    if store:
        return (f"/* the box at coordinates (c0 innermost) written from shared memory at src */\n"
                f"__device__ __forceinline__ void gpucg_tma_store_{rank}d(const void* map, "
                f"unsigned src, {cs})\n{{\n"
                f'    asm volatile("cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group '
                f'[%0, {{ {regs} }}], [%1];"\n'
                f'        :: "l"((unsigned long long)map), "r"(src), {ins} : "memory");\n}}\n')
    return (f"/* the box at coordinates (c0 innermost) into shared memory at dst, its bytes "
            f"completing on mbarrier bar */\n"
            f"__device__ __forceinline__ void gpucg_tma_load_{rank}d(unsigned dst, const void* map, "
            f"unsigned bar, {cs})\n{{\n"
            f'    asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::'
            f'complete_tx::bytes [%0], [%1, {{ {", ".join(f"%{i + 3}" for i in range(rank))} }}], [%2];"\n'
            f'        :: "r"(dst), "l"((unsigned long long)map), "r"(bar), {ins} : "memory");\n}}\n')


@dataclass(frozen=True)
class CudaHopper:
    """The instructions."""

    concurrent_roles: bool = True
    #: the dynamic block's 32-bit shared address, rounded up to 1024 bytes (a 128-byte
    #: swizzle's pattern starts on a 1024-byte boundary; CUDA aligns the block to less)
    base: str = "((gpucg_smem_addr(gpucg_smem) + 1023u) & ~1023u)"
    #: a pointer to the aligned block (at ``sbase``) for ordinary loads and stores
    generic: str = "gpucg_smem + (sbase - gpucg_smem_addr(gpucg_smem))"

    def helpers(self, wgmma=(), loads=(), stores=(), arch_specific: bool = False,
                mbarrier: bool = True, elect: bool = False, tf32: bool = False) -> str:
        """The device functions of the operations a kernel uses, and only those: ``wgmma``
        (atom, A major, B major) triples, TMA load and store ranks, the mbarrier operations,
        elect; ``arch_specific``: the kernel uses setmaxnreg (marked as needing sm_90a, like
        wgmma); ``tf32``: the twin's rounding (CUDA's is the tile layer's cvt.rna chunk).
        Single instructions (fences, commits, waits, setmaxnreg, bar.sync) are inline
        asm and need none."""
        parts = [wg.ARCH_MARK] if wgmma or arch_specific else []
        parts += [CUDA_TENSOR_MAP_TYPE] if loads or stores else []
        parts += [_CUDA_MBAR] if mbarrier else []
        parts += [_CUDA_ELECT] if elect else []
        parts += [_cuda_tma(_rank(r), False) for r in sorted(set(loads))]
        parts += [_cuda_tma(_rank(r), True) for r in sorted(set(stores))]
        parts += [wg.cuda_wgmma(*w) for w in dict.fromkeys(wgmma)]
        return "\n".join(parts)

    def map_param(self, name: str, writable: bool = False) -> str:
        """A tensor-map parameter (``writable``: a TMA store's)."""
        return f"const __grid_constant__ gpucg_tensor_map {name}"

    def wg_setup(self, tid: str, warpgroups: int, consumer: str, rs: bool = False) -> str:
        """What the twin's warpgroup operations name (nothing here)."""
        return ""

    def state(self) -> str:
        return ""

    def poison(self, value: str) -> str:
        return value

    def init(self, bar: str, count) -> str:
        return f"gpucg_mbar_init({bar}, {count});"

    def init_fence(self) -> str:
        return 'asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");'

    def arrive(self, bar: str, count=1) -> str:
        return f"gpucg_mbar_arrive({bar}, {count});"

    def expect_tx(self, bar: str, nbytes) -> str:
        return f"gpucg_mbar_expect_tx({bar}, {nbytes});"

    def wait(self, bar: str, parity: str) -> str:
        return f"gpucg_mbar_wait({bar}, {parity});"

    def tma_load(self, dst: str, tmap: str, bar: str, coords) -> str:
        return (f"gpucg_tma_load_{_rank(len(coords))}d({dst}, &{tmap}, {bar}, "
                f"{', '.join(map(str, coords))});")

    def tma_store(self, tmap: str, src: str, coords) -> str:
        return (f"gpucg_tma_store_{_rank(len(coords))}d(&{tmap}, {src}, "
                f"{', '.join(map(str, coords))});")

    def store_commit(self) -> str:
        return 'asm volatile("cp.async.bulk.commit_group;" ::: "memory");'

    def store_wait_read(self, n: int = 0) -> str:
        """Wait until at most ``n`` committed stores still read their shared memory."""
        return f'asm volatile("cp.async.bulk.wait_group.read {int(n)};" ::: "memory");'

    def store_wait(self) -> str:
        return 'asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");'

    def prefetch(self, tmap: str) -> str:
        return (f'asm volatile("prefetch.tensormap [%0];" :: "l"((unsigned long long)&{tmap}) '
                ': "memory");')

    def fence_proxy(self) -> str:
        """Shared memory this thread wrote with ordinary stores, made visible to the async
        proxy (wgmma, TMA) that reads it after the next barrier."""
        return 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'

    def elect(self) -> str:
        return "gpucg_elect()"

    def bar_sync(self, bar_id, threads: int) -> str:
        """Named barrier ``bar_id`` (1-15; 0 is __syncthreads; a C expression) of ``threads``
        threads, whole warps."""
        return (f'asm volatile("bar.sync %0, {int(threads)};" :: "r"((unsigned)({bar_id})) '
                ': "memory");')

    def bar_arrive(self, bar_id, threads: int) -> str:
        """This thread's arrival on named barrier ``bar_id`` of ``threads`` threads, without
        waiting (the threads that bar_sync on it wait for it)."""
        return (f'asm volatile("bar.arrive %0, {int(threads)};" :: "r"((unsigned)({bar_id})) '
                ': "memory");')

    def setmaxnreg(self, regs: int, inc: bool) -> str:
        return (f'asm volatile("setmaxnreg.{"inc" if inc else "dec"}.sync.aligned.u32 '
                f'{_regs(regs)};");')

    # wgmma: the atom's call and its ordering (fence before, commit and wait after)

    def wgmma(self, atom, a_major: str, b_major: str, d: str, a: str, b: str, scale_d) -> str:
        return f"{wg.fn_name(atom, a_major, b_major)}({d}, {a}, {b}, {scale_d});"

    def wgmma_fence(self) -> str:
        return 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'

    def wgmma_commit(self) -> str:
        return 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");'

    def wgmma_wait(self, n: int) -> str:
        """Wait until at most ``n`` committed groups of this warpgroup's products are pending."""
        return f'asm volatile("wgmma.wait_group.sync.aligned {int(n)};" ::: "memory");'

    def wgmma_keep(self, d: str, n: int) -> str:
        """Accumulators ``d[0..n)`` pinned around an asynchronous product: the compiler may not
        move their reads or writes across this point (CUTLASS's warpgroup_fence_operand)."""
        return (f'for (int i = 0; i < {int(n)}; ++i) asm volatile("" : "+f"({d}[i]) :: '
                '"memory");')


CUDA_HOPPER = CudaHopper()
