"""Vector arithmetic in one work-item: a language's own short vectors (OpenCL's float8),
compared, selected and reduced lane by lane.

A CPU OpenCL device (PoCL) runs a work-item as one CPU thread; where a loop carries its own
state (an argmax's running maximum), PoCL's work-group vectorizer has nothing to widen and
LLVM's vectorizers often leave the loop scalar. Written with vector types, the loop is the
CPU's SIMD instructions (vload8 -> one 256-bit load, a conditional on a comparison -> a
compare and a blend). CUDA has no vector arithmetic (its float4 is a struct of four
registers): its spelling raises, and strategies offer these configs only where the target's
capability record lists the "simd" feature (gpucg/arch.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError

#: element dtypes a SIMD vector may hold (4- and 8-byte types: one mask type each)
SIMD_DTYPES = ("float32", "float64", "int32", "uint32", "int64", "uint64")


@dataclass(frozen=True)
class SimdSpelling:
    """How a language spells ``n``-lane vectors of a scalar type ``t`` (empty: it has none)."""

    backend: str
    #: the vector type of ``n`` lanes of scalar type ``{t}``
    vtype: str = ""
    #: ``n`` neighbouring elements from ``{ptr}`` (element-aligned)
    load: str = ""
    #: every lane ``{v}``
    splat: str = ""
    #: lane by lane, ``{b}`` where ``{c}`` (a comparison of vectors) holds, else ``{a}``
    select: str = ""
    #: whether any lane of the comparison ``{m}`` holds
    any: str = ""
    #: lane ``{k}`` (an int) of vector ``{v}``
    lane: str = ""

    def _need(self, what: str, n: int) -> None:
        if not self.vtype:
            raise DTypeError(f"backend {self.backend!r} has no vector arithmetic ({what}); "
                             "configs with simd > 1 need a target with the 'simd' feature")
        if n not in (2, 4, 8, 16):
            raise DTypeError(f"a SIMD vector has 2, 4, 8 or 16 lanes, not {n}")

    def type(self, t: str, n: int) -> str:
        self._need("a vector type", n)
        return self.vtype.format(t=t, n=n)

    def vload(self, ptr: str, n: int) -> str:
        self._need("a vector load", n)
        return self.load.format(ptr=ptr, n=n)

    def broadcast(self, t: str, n: int, v: str) -> str:
        return self.splat.format(vt=self.type(t, n), v=v)

    def where(self, c: str, b: str, a: str) -> str:
        """``b`` in the lanes where ``c`` holds, else ``a``."""
        self._need("select", 2)
        return self.select.format(a=a, b=b, c=c)

    def anyof(self, m: str) -> str:
        self._need("any", 2)
        return self.any.format(m=m)

    def at(self, v: str, k: int) -> str:
        self._need("a lane", 2)
        return self.lane.format(v=v, k=f"{k:x}")


# the selection as OpenCL C's vector conditional, which the language defines as select(a, b,
# c): PoCL compiles it to a compare and a blend, but the select() call to more (argmax over
# (256, 32000) float32 on two cores: 10-15% less time, scratch A/B in one process, 100 rounds)
OPENCL_SIMD = SimdSpelling("opencl", vtype="{t}{n}", load="vload{n}(0, {ptr})",
                           splat="(({vt})({v}))", select="(({c}) ? {b} : {a})",
                           any="any({m})", lane="{v}.s{k}")
CUDA_SIMD = SimdSpelling("cuda")
