"""The OpenCL kernel that makes a strided pyopencl view contiguous on the device."""

from __future__ import annotations

UNITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong", 16: "ulong2"}
GATHER_WG = 256


def gather_source(itemsize: int, rank: int) -> str:
    """A kernel copying a strided view of ``rank`` dimensions into a contiguous buffer: one
    work-item per element, its index decoded over the sizes s_r (innermost last) into the
    view's element strides st_r from element offset off. Elements move as unsigned integers of
    their size (any dtype, bits unchanged)."""
    t = UNITS[itemsize]
    dims = "".join(f", const long s{r}, const long st{r}" for r in range(rank))
    walk = "".join(f"    at += (rem % s{r}) * st{r};\n    rem /= s{r};\n"
                   for r in reversed(range(rank)))
    return (f"/* gpucg: a strided view of {rank} dimension(s) made contiguous on the device, "
            f"{itemsize}-byte elements; grid = ceil(n / {GATHER_WG}) work-groups of "
            f"{GATHER_WG} */\n"
            f"__kernel void gpucg_gather_{itemsize}_{rank}(__global const {t}* restrict x, "
            f"__global {t}* restrict y, const long n, const long off{dims})\n{{\n"
            "    const long i = get_global_id(0);\n    if (i >= n) return;\n"
            f"    long rem = i, at = off;\n{walk}    y[i] = x[at];\n}}\n")
