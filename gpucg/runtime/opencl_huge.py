"""Large OpenCL buffers in huge pages on a device that works in host memory (PoCL).

PoCL's kernels stream NumPy's own large arrays, which NumPy asks the kernel to back with
transparent huge pages, about 20% faster than the device's plain buffers (4 KiB pages) at
(256, 32000) float32: argmax over the device's buffer 3.9 ms, over NumPy's memory 3.2 ms
(benchmarks/results/*pocl3.1-reductions*). NumPy memory under CL_MEM_USE_HOST_PTR cannot be
used for a buffer that outlives a call: freed with a dropped array while a kernel still used
it, it corrupted the heap (84913a7). So the device allocates the memory (CL_MEM_ALLOC_HOST_PTR)
and keeps it until the buffer's last command is done; it is mapped once before its first touch
to ask for huge pages there (madvise), and filled through that map.
"""

from __future__ import annotations

import numpy as np

from .host_memory import HUGE_BYTES, advise_huge_pages, huge_pages_advisable


def huge_buffer(cl, context, queue, nbytes: int, like=None):
    """A READ_WRITE buffer of ``nbytes`` (HUGE_BYTES or more) of the device's host memory in
    huge pages, holding a copy of ``like`` (a contiguous array of nbytes) where given; None
    for a smaller one, or where the kernel takes no advice on huge pages."""
    if nbytes < HUGE_BYTES or not huge_pages_advisable():
        return None
    buf = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
    view, _ = cl.enqueue_map_buffer(queue, buf, cl.map_flags.WRITE_INVALIDATE_REGION, 0,
                                    (nbytes,), np.uint8, is_blocking=True)
    advise_huge_pages(view.ctypes.data, nbytes)
    if like is not None:
        np.copyto(view, like.reshape(-1).view(np.uint8))
    view.base.release(queue)
    return buf

