"""The OpenCL backend (PyOpenCL). In CI it runs on PoCL, a CPU OpenCL implementation.

On a device that shares memory with the host (a CPU device such as PoCL, or one reporting
CL_DEVICE_HOST_UNIFIED_MEMORY), a call's NumPy inputs are used in place: ``borrow`` wraps them
in CL_MEM_USE_HOST_PTR buffers instead of copying, for the duration of one call, and large
results come back mapped (``to_host``) instead of copied into fresh host memory.
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np

from .. import settings
from ..codegen import OPENCL
from ..errors import CompileError, InputError, LaunchError, TargetUnavailableError
from .. import counters as stats
from .base import Backend, c_contiguous
from .cache import DiskCache, cache_key, keeps_own_binaries
from ..shape import c_strides
from .host_memory import HUGE_BYTES
from .opencl_huge import huge_buffer
from .opencl_align import HOST_PTR_ALIGN, vector_align
from .opencl_array import DeviceArray
from .opencl_gather import GATHER_WG, UNITS, gather_source
from .opencl_program import OpenCLProgram
from .opencl_threads import pin_pocl_workers

log = logging.getLogger("gpucg.runtime")

_PROBE = "__kernel void gpucg_probe(__global int* a) { a[get_global_id(0)] += 1; }"
#: results at least this large come back mapped, smaller ones copied (a map costs more).
MAP_MIN_BYTES = 1 << 20


class OpenCLBackend(Backend):
    name = "opencl"
    dialect = OPENCL
    replays = True  # a contiguous input is a whole, aligned buffer (or copied to one)

    def __init__(self):
        self._lock = threading.Lock()
        self._ready = False
        self._reason = ""
        self._status = None
        self.shares_host = False
        self.keeps_binaries = True  # whether the disk cache holds this platform's binaries
        self._programs: dict[str, OpenCLProgram] = {}
        self._disk = DiskCache(namespace="opencl")

    # -- device selection -------------------------------------------------------------------
    def _init(self) -> None:
        if self._ready or self._reason:  # decided once (asked before each call)
            return
        with self._lock:
            if self._ready or self._reason:
                return
            try:
                import pyopencl as cl
                import pyopencl.array as cla
            except ImportError as exc:
                self._reason = f"pyopencl is not installed ({exc}); pip install 'gpucg[opencl]'"
                return
            self.cl, self.cla = cl, cla
            pin_pocl_workers()  # before PoCL starts its workers, at the first query
            try:
                platforms = cl.get_platforms()
            except cl.Error as exc:
                self._reason = f"no OpenCL platform ({exc})"
                return
            want = settings.opencl_device()
            devices = [(p, d) for p in platforms for d in p.get_devices()]
            if want:
                devices = [(p, d) for p, d in devices if want.lower() in (p.name + " " + d.name).lower()]
            else:
                # Oclgrind is a simulator that calls itself a GPU: slow, for checks only
                # (gpucg.verify.oclgrind), so it runs only where it is asked for by name
                devices = [(p, d) for p, d in devices if "oclgrind" not in (p.name + d.name).lower()]
            devices.sort(key=lambda pd: 0 if pd[1].type & cl.device_type.GPU else 1)
            failures = []
            for platform, device in devices:
                try:
                    ctx = cl.Context([device])
                    prg = cl._cl._Program(ctx, _PROBE)
                    prg.build(b"", [device])
                except cl.Error as exc:
                    first = str(exc).strip().splitlines()
                    detail = next((ln for ln in first if "error" in ln.lower()), first[0] if first else "")
                    failures.append(f"{device.name.strip()} ({platform.version.strip()}): {detail.strip()}")
                    continue
                self.context, self.device, self.platform = ctx, device, platform
                # profiling: the tuner times kernels with OpenCL events
                self.queue = cl.CommandQueue(
                    ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
                self.device_type = "gpu" if device.type & cl.device_type.GPU else "cpu"
                self.shares_host = self.device_type == "cpu" or _unified(device)
                self.keeps_binaries = not keeps_own_binaries(platform.name)
                self._ready = True
                if failures:
                    log.info("skipped OpenCL devices that cannot compile: %s", "; ".join(failures))
                return
            if not devices:
                self._reason = "no OpenCL device" + (f" matches GPUCG_OPENCL_DEVICE={want!r}" if want else "")
            else:
                self._reason = "no OpenCL device compiles a test kernel: " + "; ".join(failures)

    def status(self):
        self._init()
        if not self._ready:
            return False, "", self._reason
        if self._status is None:  # asked before each call: the driver's strings read once
            d = self.device
            self._status = (True, f"{d.name.strip()} ({self.platform.version.strip()}, "
                                  f"{self.device_type})", "")
        return self._status

    def _require(self) -> None:
        self._init()
        if not self._ready:
            raise TargetUnavailableError(f"OpenCL is not usable here: {self._reason}")

    @property
    def device_key(self) -> str:
        d = self.device
        return f"{self.platform.version}|{d.name}|{d.version}|{d.driver_version}"

    def max_block(self) -> int:
        self._require()
        return int(self.device.max_work_group_size)

    def supports(self, dtype: str) -> bool:
        self._require()
        ext = self.device.extensions
        if dtype == "float64":
            return "cl_khr_fp64" in ext
        if dtype == "float16":
            return "cl_khr_fp16" in ext
        return True

    # -- compile ----------------------------------------------------------------------------
    def compile(self, source: str, entry: str, options=()) -> OpenCLProgram:
        self._require()
        cl = self.cl
        options = tuple(options)
        key = cache_key("opencl", source, options, self.device_key)
        prog = self._programs.get(key + entry)
        if prog is not None:
            stats.bump("memory_hits")
            return prog
        built = None
        binary = self._disk.get(key) if self.keeps_binaries else None
        if binary is not None:
            try:
                built = cl._cl._Program(self.context, [self.device], [binary])
                built.build(" ".join(options).encode(), [self.device])
                stats.bump("disk_hits")
            except cl.Error as exc:
                log.warning("cached OpenCL binary unusable (%s); recompiling", exc)
                built = None
        if built is None:
            built = cl._cl._Program(self.context, source)
            try:
                built.build(" ".join(options).encode(), [self.device])
            except cl.Error as exc:
                try:
                    blog = built.get_build_info(self.device, cl.program_build_info.LOG)
                except cl.Error:
                    blog = str(exc)
                raise CompileError(f"OpenCL compile of {entry} failed on {self.device.name.strip()}",
                                   source, options, blog) from None
            stats.bump("compiles")
            if self.keeps_binaries:
                try:
                    binaries = built.get_info(cl.program_info.BINARIES)
                    if binaries and binaries[0]:
                        self._disk.put(key, bytes(binaries[0]))
                except cl.Error:
                    pass
        prog = OpenCLProgram(self, cl.Kernel(built, entry), entry, vector_align(source))
        self._programs[key + entry] = prog
        return prog

    # -- arrays -----------------------------------------------------------------------------
    def empty(self, shape, dtype):
        if not self._ready:
            self._require()
        dtype = np.dtype(dtype)
        shape = tuple(map(int, shape))
        return self.fresh(shape, dtype, math.prod(shape) * dtype.itemsize)

    def fresh(self, shape: tuple, dtype, nbytes: int):
        # lean: a replayed call's outputs are made here, with the interpreter's code and data
        # often out of the caches (the last call streamed its input through them)
        buf = (nbytes >= HUGE_BYTES and self._buffer(nbytes)) or self.cl.Buffer(
            self.context, self.cl.mem_flags.READ_WRITE, max(nbytes, 1))
        stats.bump("buffers")
        return DeviceArray(buf, shape, dtype, fresh=True)

    def _buffer(self, nbytes: int, like=None):
        """A new buffer of ``nbytes`` (a copy of ``like``), large ones in huge pages."""
        buf = self.shares_host and huge_buffer(self.cl, self.context, self.queue, nbytes, like)
        if buf:
            return buf
        mf = self.cl.mem_flags
        if like is None:
            return self.cl.Buffer(self.context, mf.READ_WRITE, max(nbytes, 1))
        return self.cl.Buffer(self.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=like)

    def to_device(self, array):
        """A device copy of a host array (it stays valid whatever the host array does next)."""
        self._require()
        array = c_contiguous(np.asarray(array))
        if array.nbytes == 0:
            return self.empty(array.shape, array.dtype)
        buf = self._buffer(array.nbytes, array)
        stats.bump("buffers")
        stats.bump("uploads")
        return DeviceArray(buf, array.shape, array.dtype)

    def borrow(self, array):
        """A host array as one call's read-only input: in place (CL_MEM_USE_HOST_PTR) where
        the device shares host memory and the array is contiguous, aligned and writeable
        (never a read-only one, which may be a bytes object's memory), else a copy. The call
        must not keep it."""
        if not self._ready:
            self._require()
        flags = array.flags  # (each of these is an object made anew: asked once)
        if (not self.shares_host or not flags.c_contiguous or not flags.writeable
                or array.nbytes == 0
                or array.__array_interface__["data"][0] % max(HOST_PTR_ALIGN,
                                                              array.dtype.itemsize)):
            return self.to_device(array)
        mf = self.cl.mem_flags
        buf = self.cl.Buffer(self.context, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=array)
        stats.bump("borrowed")
        return DeviceArray(buf, array.shape, array.dtype, host=array)

    def align_borrowed(self, array: DeviceArray, align: int) -> None:
        """A borrowed input copied (once, for the call) for a kernel needing more alignment."""
        if array.host.ctypes.data % align:
            copy = self.to_device(array.host)
            array.data, array.host = copy.data, None

    def to_host(self, array):
        if isinstance(array, np.ndarray):
            return array
        array = self.contiguous(array)  # a view: gathered on the device, then one read
        if isinstance(array, DeviceArray):
            if array.fresh and self.shares_host and array.nbytes >= MAP_MIN_BYTES:
                # the host sees the buffer's own memory: map it (unmapped when the array dies)
                mf = self.cl.map_flags
                out, _ = self.cl.enqueue_map_buffer(self.queue, array.data, mf.READ | mf.WRITE,
                                                    0, array.shape, array.dtype)
                array.fresh = False  # mapped once: a second READ|WRITE map is undefined
                stats.bump("mapped")
                return out
            out = np.empty(array.shape, array.dtype)
            if out.nbytes:
                self.cl.enqueue_copy(self.queue, out, array.data)
                stats.bump("downloads")
            return out
        stats.bump("downloads")
        return array.get()

    def check_array(self, array, what: str) -> None:
        """InputError unless a pyopencl array lives in this backend's context."""
        context = getattr(array, "context", None)
        if context is not None and context != self.context:
            raise InputError(f"{what} is a pyopencl array of {_describe(context)}, but target "
                             f"opencl runs on {_describe(self.context)}; make it with "
                             "gpucg.asarray(x, target='opencl'), or pass gpucg.to_host(x)")

    def export(self, array):
        """A pyopencl.array.Array of a gpucg array (no copy), for callers on the device, by
        pyopencl's fast constructor (its checks cost ~40 us a call) where it has one."""
        if not isinstance(array, DeviceArray):
            return array
        try:
            return self.cla.Array(None, array.shape, array.dtype, data=array.data, _fast=True,
                                  strides=c_strides(array.shape, array.dtype.itemsize),
                                  _size=array.size, _context=self.context, _queue=self.queue)
        except TypeError:  # a pyopencl without the fast constructor
            return self.cla.Array(self.queue, array.shape, array.dtype, data=array.data)

    def call_key(self, array):
        """(type, shape, dtype) of a NumPy array or a gpucg one; of a whole pyopencl array
        also its context (another context is refused: the first call with it decides);
        TypeError for the rest, pyopencl views included (a call copies them first)."""
        t = type(array)
        if t is np.ndarray or t is DeviceArray:
            return t, array.shape, array.dtype
        if t is self.cla.Array and not array.offset and array.flags.c_contiguous:
            return t, array.shape, array.dtype, array.context
        raise TypeError(f"no call again with a {t.__name__}" + (" view" * (t is self.cla.Array)))

    def owns(self, array) -> bool:
        if not self._ready:
            return False
        return isinstance(array, (DeviceArray, self.cla.Array))

    def address(self, array) -> int:
        """A pyopencl array's offset into its buffer (buffers start aligned to the device's
        base address alignment, 128 bytes or more). An offset view is copied before a launch
        (contiguous), yet its alignment is the view's own, so that the twin makes the dispatch
        decisions a CUDA kernel makes on the same view."""
        return 0 if isinstance(array, DeviceArray) else int(getattr(array, "offset", 0))

    def contiguous(self, array):
        if isinstance(array, DeviceArray):
            return array
        if array.flags.c_contiguous and array.offset == 0:
            return array
        return self._gather(array)

    def _gather(self, array):
        """A contiguous copy of a pyopencl view (an offset, strides), made on the device: one
        buffer copy where the view is contiguous, else the strided gather kernel."""
        dtype = np.dtype(array.dtype)
        out = self.empty(array.shape, dtype)
        stats.bump("device_copies")
        if out.nbytes == 0:
            return out
        if array.flags.c_contiguous:
            self.cl.enqueue_copy(self.queue, out.data, array.base_data, byte_count=out.nbytes,
                                 src_offset=array.offset)
            return out
        item = dtype.itemsize
        dims = [(int(n), int(st)) for n, st in zip(array.shape, array.strides) if n != 1]
        if item not in UNITS or array.offset % item or any(st % item for _, st in dims):
            raise LaunchError(f"a pyopencl view of dtype {dtype} with byte strides "
                              f"{array.strides} and offset {array.offset} is not aligned to "
                              "its elements; gpucg copies views whose strides are whole elements")
        prog = self.compile(gather_source(item, len(dims)), f"gpucg_gather_{item}_{len(dims)}")
        args = [np.int64(a) for n, st in dims for a in (n, st // item)]
        prog(array.base_data, out.data, np.int64(out.size), np.int64(array.offset // item),
             *args, grid=-(-out.size // GATHER_WG), block=GATHER_WG)
        return out

    def synchronize(self) -> None:
        if self._ready:
            self.queue.finish()


def _unified(device) -> bool:
    try:  # CL_DEVICE_HOST_UNIFIED_MEMORY: deprecated in OpenCL 2.0, absent from some drivers
        return bool(device.host_unified_memory)
    except Exception:
        return False


def _describe(context) -> str:
    """"context 0x55d1c0 (device pthread-haswell-AMD EPYC)": which context, on what devices."""
    names = ", ".join(d.name.strip() for d in context.devices)
    return f"context {context.int_ptr:#x} (device {names})"
