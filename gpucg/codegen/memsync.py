"""Synchronization between work-groups, as data: a global fence, a flag's atomic load and
store, a vector store. A decoupled look-back (gpucg/templates/scan/_lookback.j2) writes a
value, fences, then sets its flag atomically; a reader loads the flag atomically, fences,
then reads the value. Each Dialect holds its language's spellings as ``d.sync``, so templates
write ``{{ d.sync.fence }}``, ``{{ d.sync.load(ptr) }}`` and never test the language.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError


@dataclass(frozen=True)
class MemSync:
    """One language's spellings (``{ptr}``, ``{value}``; ``{vt}{n}`` a vector type, e.g.
    float4, ``{values}`` its n comma-separated values)."""

    #: orders a work-item's global accesses before its later ones as other work-groups see them
    fence: str
    #: an atomic (or volatile) load and an atomic store of a global 32-bit unsigned int
    load_fmt: str
    store_fmt: str
    vector_store_fmt: str

    def load(self, ptr: str) -> str:
        """The global 32-bit unsigned int at ``ptr``, read past any cache (another group's flag)."""
        return self.load_fmt.format(ptr=ptr)

    def store(self, ptr: str, value: str) -> str:
        """Atomically store ``value`` in the global 32-bit unsigned int at ``ptr`` (an expression)."""
        return self.store_fmt.format(ptr=ptr, value=value)

    def vector_store(self, vt: str, n: int, ptr: str, values) -> str:
        """A statement storing ``values`` (n C expressions) as one ``vt``-of-n vector at
        ``ptr`` (global, aligned to the vector): one 16-byte store for float4."""
        if len(values) != n:
            raise DTypeError(f"vector store of {n} {vt}s: got {len(values)} values")
        return self.vector_store_fmt.format(vt=vt, n=n, ptr=ptr, values=", ".join(values))


CUDA_SYNC = MemSync(fence="__threadfence();", load_fmt="(*(volatile unsigned int*)({ptr}))",
                    store_fmt="atomicExch({ptr}, {value})",
                    vector_store_fmt="*(({vt}{n}*)({ptr})) = make_{vt}{n}({values});")
#: vstoreN, not a store through a vector pointer: Oclgrind's counter takes each element put
#: into a vector variable for a global store, and counts a vstoreN call's bytes once
OPENCL_SYNC = MemSync(fence="mem_fence(CLK_GLOBAL_MEM_FENCE);", load_fmt="atomic_or({ptr}, 0u)",
                      store_fmt="atomic_xchg({ptr}, {value})",
                      vector_store_fmt="vstore{n}(({vt}{n})({values}), 0, {ptr});")
