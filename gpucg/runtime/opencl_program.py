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
        cl = self.backend.cl
        if shared:  # the dynamic local buffer: the kernel's last parameter
            check_dynamic_local(self.entry, shared, self.static_local(),
                                int(self.backend.device.local_mem_size), "CL_DEVICE_LOCAL_MEM_SIZE")
            args = (*args, cl.LocalMemory(shared))
        if self.align > HOST_PTR_ALIGN:
            for a in args:
                if type(a) is DeviceArray and a.host is not None:
                    self.backend.align_borrowed(a, self.align)
        # a pyopencl array passes its buffer's start: an offset reaches only kernels that take
        # it as an argument (CompiledOp.prepare makes the inputs of the others contiguous)
        cla = self.backend.cla
        raw = [a.data if isinstance(a, DeviceArray) else a.base_data if isinstance(a, cla.Array)
               else a for a in args]
        types = tuple(map(type, raw))
        try:
            with self.lock:  # pyopencl sets the shared kernel's arguments, then enqueues
                if types != self._types:
                    self.kernel.set_scalar_arg_dtypes(scalar_dtypes(types))
                    self._types = types
                gs, ls = (((grid[0] * block,), (block,)) if grid[1] == grid[2] == 1 else
                          ((grid[0] * block, grid[1], grid[2]), (block, 1, 1)))
                self.kernel(self.backend.queue, gs, ls, *raw)
        except cl.Error as exc:
            raise LaunchError(f"OpenCL launch of {self.entry} (grid {grid} x block {block}) "
                              f"failed: {exc}") from None

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
        cl, cla = self.backend.cl, self.backend.cla
        kernel = cl.Kernel(self.kernel.program, self.entry)
        for i, (k, v) in enumerate(refs):
            if k is None:
                kernel.set_arg(i, v)
        if shared:
            check_dynamic_local(self.entry, shared, self.static_local(),
                                int(self.backend.device.local_mem_size), "CL_DEVICE_LOCAL_MEM_SIZE")
            kernel.set_arg(len(refs), cl.LocalMemory(shared))
        arrays_at = tuple((i, k, v) for i, (k, v) in enumerate(refs) if k is not None)
        gs, ls = (((dims[0] * block,), (block,)) if dims[1] == dims[2] == 1 else
                  ((dims[0] * block, dims[1], dims[2]), (block, 1, 1)))
        queue, enqueue, lock = self.backend.queue, cl.enqueue_nd_range_kernel, threading.Lock()
        align = self.align if self.align > HOST_PTR_ALIGN else 0
        backend, entry = self.backend, self.entry

        def run(arrays):
            try:
                with lock:
                    for i, k, v in arrays_at:
                        a = arrays[k][v]
                        if type(a) is DeviceArray:
                            if align and a.host is not None:
                                backend.align_borrowed(a, align)
                            a = a.data
                        elif isinstance(a, cla.Array):
                            a = a.base_data
                        kernel.set_arg(i, a)
                    enqueue(queue, kernel, gs, ls)
            except cl.Error as exc:
                raise LaunchError(f"OpenCL launch of {entry} (grid {dims} x block {block}) "
                                  f"failed: {exc}") from None
            stats.bump("launches")
        return run

    def static_local(self) -> int:
        """The kernel's static local memory in bytes (asked once, before any launch sets a
        local argument, which the driver's figure would then include)."""
        if self._static_local is None:
            self._static_local = int(self.kernel.get_work_group_info(
                self.backend.cl.kernel_work_group_info.LOCAL_MEM_SIZE, self.backend.device))
        return self._static_local
