"""How aligned a host array must be for an OpenCL kernel to read it in place."""

from __future__ import annotations

import re

#: a host array is used in place only where its address is a multiple of this (and of its
#: element size). A kernel that loads wider vector types (a double4 needs 32 bytes: the
#: compiler emits aligned loads) gets a copy of a borrowed input that is not aligned for them,
#: made at its launch (OpenCLProgram.align). PoCL itself takes any host pointer in place.
HOST_PTR_ALIGN = 16
#: accesses that need their vector's alignment: through a vector pointer, and vloada_halfN
#: (vloadN/vstoreN and vector values in registers need only the element's)
_VECTOR = re.compile(r"\b(u?char|u?short|half|u?int|float|u?long|double)(2|3|4|8|16)\s*\*"
                     r"|\bv(?:load|store)a_(half)(2|3|4|8|16)")
_SIZES = {"char": 1, "short": 2, "half": 2, "int": 4, "float": 4, "long": 8, "double": 8}
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def vector_align(source: str) -> int:
    """The alignment in bytes that a kernel's vector types need (their size; 1 for none)."""
    found = [(m.group(1) or m.group(3), m.group(2) or m.group(4))
             for m in _VECTOR.finditer(_COMMENT.sub("", source))]
    sizes = [_SIZES[base.lstrip("u")] * (4 if n == "3" else int(n)) for base, n in found]
    return max(sizes, default=1)
