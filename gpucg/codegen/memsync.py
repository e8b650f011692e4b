"""Synchronization between work-groups, as data: a global fence, a flag's atomic load and
store, a flag and its value as one 64-bit word, a vector store. A decoupled look-back (gpucg/templates/scan/_lookback.j2) writes a
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
    #: a flag and a 32-bit value in one 64-bit word (``{ptr}`` a pointer to its two 32-bit
    #: halves: the value, then the flag): statements publishing ``{flag}`` and ``{value}``,
    #: and reading them into the variables ``{flag}`` and ``{value}``. Where the language has
    #: 64-bit atomics that every runtime here keeps (CUDA), one exchange and one load: a
    #: reader never sees a flag without its value and no fence is needed. OpenCL writes the
    #: value, fences, then the flag, and reads in the opposite order: Oclgrind 21.10
    #: corrupts its heap counting a kernel's 64-bit atomic exchanges and loads
    pair_store_fmt: str = ""
    pair_load_fmt: str = ""
    #: statements before ``pair_store_fmt`` when the pair replaces one published before (a
    #: tile's inclusive prefix over its aggregate): OpenCL clears the flag first, so no reader
    #: pairs the old flag with the new value. A first publish finds the flag 0 and skips them
    pair_replace_fmt: str = ""

    def load(self, ptr: str) -> str:
        """The global 32-bit unsigned int at ``ptr``, read past any cache (another group's flag)."""
        return self.load_fmt.format(ptr=ptr)

    def store(self, ptr: str, value: str) -> str:
        """Atomically store ``value`` in the global 32-bit unsigned int at ``ptr`` (an expression)."""
        return self.store_fmt.format(ptr=ptr, value=value)

    def pair_store(self, ptr: str, flag: str, value: str, replaces: bool = False) -> str:
        """Statements publishing ``flag`` and the 32-bit ``value`` (unsigned ints) at ``ptr``
        (a global unsigned int pointer to the pair's two words, 8-byte aligned); ``replaces``:
        a pair was published there before (else the flag is still 0)."""
        head = self.pair_replace_fmt.format(ptr=ptr) if replaces else ""
        return head + self.pair_store_fmt.format(ptr=ptr, flag=flag, value=value)

    def pair_load(self, ptr: str, flag: str, value: str) -> str:
        """Statements reading the pair at ``ptr`` into the unsigned int variables ``flag`` and
        ``value``, the value never older than the flag."""
        return self.pair_load_fmt.format(ptr=ptr, flag=flag, value=value)

    def vector_store(self, vt: str, n: int, ptr: str, values) -> str:
        """A statement storing ``values`` (n C expressions) as one ``vt``-of-n vector at
        ``ptr`` (global, aligned to the vector): one 16-byte store for float4."""
        if len(values) != n:
            raise DTypeError(f"vector store of {n} {vt}s: got {len(values)} values")
        return self.vector_store_fmt.format(vt=vt, n=n, ptr=ptr, values=", ".join(values))


CUDA_SYNC = MemSync(fence="__threadfence();", load_fmt="(*(volatile unsigned int*)({ptr}))",
                    store_fmt="atomicExch({ptr}, {value})",
                    vector_store_fmt="*(({vt}{n}*)({ptr})) = make_{vt}{n}({values});",
                    pair_store_fmt="atomicExch((unsigned long long*)({ptr}), "
                                   "(unsigned long long)({flag}) << 32 | ({value}));",
                    pair_load_fmt="{{\n    const unsigned long long gpucg_pair = *(volatile unsigned "
                                  "long long*)({ptr});\n    {flag} = (unsigned int)(gpucg_pair >> 32);"
                                  "\n    {value} = (unsigned int)gpucg_pair;\n}}")
#: OpenCL's pair is two 32-bit words, not one atomic word: a tile publishes its aggregate (flag
#: 1) and later its inclusive prefix (flag 2) in the same value word, so the flag is cleared
#: before the value changes and a reader takes the pair only when the flag read after the
#: value is the one read before it (else "nothing yet": the look-back waits and reads again);
#: without that a reader could pair flag 1 with the inclusive prefix and count it twice.
#: vstoreN, not a store through a vector pointer: Oclgrind's counter takes each element put
#: into a vector variable for a global store, and counts a vstoreN call's bytes once
OPENCL_SYNC = MemSync(fence="mem_fence(CLK_GLOBAL_MEM_FENCE);", load_fmt="atomic_or({ptr}, 0u)",
                      store_fmt="atomic_xchg({ptr}, {value})",
                      vector_store_fmt="vstore{n}(({vt}{n})({values}), 0, {ptr});",
                      pair_replace_fmt="atomic_xchg({ptr} + 1, 0u);\n"
                                       "mem_fence(CLK_GLOBAL_MEM_FENCE);\n",
                      pair_store_fmt="atomic_xchg({ptr}, {value});\n"
                                     "mem_fence(CLK_GLOBAL_MEM_FENCE);\n"
                                     "atomic_xchg({ptr} + 1, {flag});",
                      pair_load_fmt="{flag} = atomic_or({ptr} + 1, 0u);\n"
                                    "mem_fence(CLK_GLOBAL_MEM_FENCE);\n"
                                    "{value} = atomic_or({ptr}, 0u);\n"
                                    "mem_fence(CLK_GLOBAL_MEM_FENCE);\n"
                                    "if (atomic_or({ptr} + 1, 0u) != {flag}) {flag} = 0u;")
