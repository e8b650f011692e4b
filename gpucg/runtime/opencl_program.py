"""A compiled OpenCL kernel of the OpenCL backend (opencl_backend.py): its launches, each with
its arguments set on the shared kernel object, and bound launches (a replayed call's: a kernel
object of their own, the scalars set once)."""

from __future__ import annotations

import threading

import numpy as np

from .. import counters as stats
from ..errors import LaunchError
from .base import Program, check_dynamic_local, grid_dims
from .opencl_align import HOST_PTR_ALIGN, scalar_dtypes
from .opencl_array import DeviceArray


class OpenCLProgram(Program):
    def __init__(self, backend: "OpenCLBackend", kernel, entry: str, align: int = 1):
        self.backend = backend
        self.kernel = kernel
        self.entry = entry
        #: the alignment its vector types need of the buffers it is given
        self.align = align
        self.lock = threading.Lock()
        self._static_local = None
        self._types = None  # the argument types the kernel's scalar dtypes were declared for

    def launch(self, args, grid: tuple, block: int, shared: int = 0) -> None:
        self.backend.check_block(block)
        if shared:  # the dynamic local buffer: the kernel's last parameter
            args = (*args, self._local(shared))
        raw = [self._buffer_of(a) for a in args]
        types = tuple(map(type, raw))
        try:
            with self.lock:  # pyopencl sets the shared kernel's arguments, then enqueues
                if types != self._types:
                    self.kernel.set_scalar_arg_dtypes(scalar_dtypes(types))
                    self._types = types
                self.kernel(self.backend.queue, *_sizes(grid, block), *raw)
        except self.backend.cl.Error as exc:
            raise self._failed(exc, grid, block) from None

    def bind(self, refs, grid, block: int, shared: int = 0):
        """A launch made again with new arrays (Program.bind) on a kernel object of its own,
        whose scalars and local buffer are set here, once: each call sets the arrays and
        enqueues (PoCL: ~40 us less a launch than setting every argument again)."""
        dims = grid_dims(grid)
        if min(dims) <= 0:
            return lambda arrays: None  # nothing to do for empty problems
        if any(k is None and not isinstance(v, np.generic) for k, v in refs):
            return super().bind(refs, grid, block, shared)  # a scalar of no declared width
        self.backend.check_block(block)
        cl = self.backend.cl
        kernel = cl.Kernel(self.kernel.program, self.entry)
        for i, (k, v) in enumerate(refs):
            if k is None:
                kernel.set_arg(i, v)
        if shared:
            kernel.set_arg(len(refs), self._local(shared))
        arrays_at = tuple((i, k, v) for i, (k, v) in enumerate(refs) if k is not None)
        queue, enqueue, lock, sizes = (self.backend.queue, cl.enqueue_nd_range_kernel,
                                       threading.Lock(), _sizes(dims, block))
        buffer_of = self._buffer_of

        def run(arrays):
            try:
                with lock:
                    for i, k, v in arrays_at:
                        kernel.set_arg(i, buffer_of(arrays[k][v]))
                    enqueue(queue, kernel, *sizes)
            except cl.Error as exc:
                raise self._failed(exc, dims, block) from None
            stats.bump("launches")
        return run

    def _local(self, shared: int):
        """The dynamic local buffer of ``shared`` bytes, checked against the device."""
        check_dynamic_local(self.entry, shared, self.static_local(),
                            int(self.backend.device.local_mem_size), "CL_DEVICE_LOCAL_MEM_SIZE")
        return self.backend.cl.LocalMemory(shared)

    def _buffer_of(self, a):
        """What the kernel is given for an argument: a gpucg array's buffer (a borrowed one
        copied first where the kernel's vectors need more alignment), a pyopencl array's
        buffer start (an offset reaches only kernels that take it as an argument:
        CompiledOp.prepare makes the inputs of the others contiguous), else the value."""
        if type(a) is DeviceArray:
            if self.align > HOST_PTR_ALIGN and a.host is not None:
                self.backend.align_borrowed(a, self.align)
            return a.data
        return a.base_data if isinstance(a, self.backend.cla.Array) else a

    def _failed(self, exc, grid, block) -> LaunchError:
        return LaunchError(f"OpenCL launch of {self.entry} (grid {grid} x block {block}) "
                           f"failed: {exc}")

    def static_local(self) -> int:
        """The kernel's static local memory in bytes (asked once, before any launch sets a
        local argument, which the driver's figure would then include)."""
        if self._static_local is None:
            self._static_local = int(self.kernel.get_work_group_info(
                self.backend.cl.kernel_work_group_info.LOCAL_MEM_SIZE, self.backend.device))
        return self._static_local


def _sizes(grid: tuple, block: int) -> tuple:
    """(global, local) work sizes of (x, y, z) work-groups of ``block`` work-items."""
    if grid[1] == grid[2] == 1:
        return (grid[0] * block,), (block,)
    return (grid[0] * block, grid[1], grid[2]), (block, 1, 1)
