"""How host values meet an OpenCL kernel: how aligned a host array must be for a kernel to read
it in place, and the dtypes its scalar arguments are packed by."""

from __future__ import annotations

import re

import numpy as np

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


def scalar_dtypes(types) -> list:
    """A kernel's argument types as pyopencl's set_scalar_arg_dtypes takes them: the dtype of
    each NumPy scalar, None for the rest (buffers, local memory). Declared, pyopencl packs the
    scalars itself (0.5 us each on PoCL; its generic set_arg took 12-15 us a NumPy scalar)."""
    return [np.dtype(t) if issubclass(t, np.generic) else None for t in types]
