"""The C library's allocator under the NumPy target's arrays.

A model's host calls allocate and free arrays of megabytes each call (an EfficientNet-B0 layer's
output at batch 3: 14 MB). glibc's malloc maps each such array with mmap (or gives the top of
its heap back to the system as it is freed), so every call touches fresh pages, each a page
fault and a page of zeros: at EfficientNet-B0, batch 3, ~11,000 faults and ~40 ms of system
time a forward, about a fifth of its time. :func:`keep_freed_memory` asks malloc to serve
large arrays from its heap and keep what is freed (``mallopt``: M_MMAP_THRESHOLD and
M_TRIM_THRESHOLD raised), as onnxruntime's arena keeps its buffers: the pages are mapped once
and reused (benchmarks/results/*host-memory*). The cost: the process keeps its peak heap.
"""

from __future__ import annotations

import ctypes
import functools
import platform

from .. import settings

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: arrays below MMAP bytes come from malloc's heap: glibc's documented upper limit for the
#: mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB; where its own
#: dynamic threshold stops). This glibc accepts more, but at 1 GiB the model table's
#: ResNet-50 (numpy, then opencl on PoCL in the same process) aborted in malloc ("malloc
#: assertion failure in _int_malloc: chunk_main_arena"). Free memory at the heap's top is
#: given back only beyond TRIM bytes.
MMAP, TRIM = 32 << 20, 1 << 30


@functools.cache
def keep_freed_memory() -> int:
    """Once a process, where GPUCG_HOST_KEEP_MEMORY allows (default on) and the C library is
    glibc: large arrays from malloc's heap, freed memory kept (see the module docstring).
    Returns the mmap threshold set (0: malloc left as it is); ``cache_clear()`` forgets it."""
    if not settings.get("GPUCG_HOST_KEEP_MEMORY") or platform.libc_ver()[0] != "glibc":
        return 0
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return 0
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return MMAP if mallopt(M_MMAP_THRESHOLD, MMAP) and mallopt(M_TRIM_THRESHOLD, TRIM) else 0


#: buffers of at least this many bytes ask for transparent huge pages (NumPy's own threshold)
HUGE_BYTES = 4 << 20
MADV_HUGEPAGE, _PAGE = 14, 4096


@functools.cache
def _madvise():
    """libc's madvise with its argument types, or None."""
    fn = getattr(ctypes.CDLL(None), "madvise", None)
    if fn is not None:
        fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn


@functools.cache
def huge_pages_advisable() -> bool:
    """Whether the kernel takes madvise(MADV_HUGEPAGE): Linux with transparent huge pages in
    "madvise" or "always" mode."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except OSError:
        return False
    return "[never]" not in mode and _madvise() is not None


def advise_huge_pages(address: int, nbytes: int) -> bool:
    """Ask for huge pages on the whole pages of [address, address + nbytes) before they are
    first touched (NumPy does the same for its large arrays); False where refused."""
    start = -(-address // _PAGE) * _PAGE
    end = (address + nbytes) // _PAGE * _PAGE
    madvise = _madvise()
    if end <= start or madvise is None:
        return False
    return madvise(start, end - start, MADV_HUGEPAGE) == 0
