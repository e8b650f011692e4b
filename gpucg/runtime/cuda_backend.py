"""The CUDA backend, through CuPy.

Kernels are compiled by NVRTC through CuPy's binding (``cupy.cuda.compiler.compile_using_nvrtc``)
and loaded as modules (``cupy.cuda.function.Module``), not through ``cupy.RawModule``: RawModule
always appends ``-ftz=true``, which flushes float32 subnormals to zero (``abs(1e-39)`` gave 0 on
an H100), where gpucg's kernels keep IEEE semantics on every target. The CUBINs (or PTX, where
the driver is older than NVRTC) go to gpucg's own disk cache."""

from __future__ import annotations

import threading

import numpy as np

from ..codegen import CUDA
from ..codegen.wgmma import required_arch
from ..errors import (CompileError, DTypeError, InputError, LaunchError, ResourceError,
                      TargetUnavailableError)
from ..half import is_ml_dtype, numpy_dtype
from .. import counters as stats
from .base import Backend, Program, c_contiguous, check_dynamic_local
from .cache import DiskCache, cache_key
from .tensor_map import TensorMapArg, encode


class CudaProgram(Program):
    def __init__(self, function, entry: str, backend: "CudaBackend", source: str = "",
                 options: tuple = ()):
        self.function = function
        self.entry = entry
        self.backend = backend
        #: what it was compiled from (the resource check asks ptxas about it)
        self.source = source
        self.options = tuple(options)
        #: the kernel's max dynamic shared memory attribute as this program last raised it
        self.allowed_shared = 0

    def launch(self, args, grid: tuple, block: int, shared: int = 0) -> None:
        self.backend.check_block(block)
        for axis, g, top, name in zip("xyz", grid, (2**31 - 1, 65535, 65535),
                                      ("2^31-1", "65535", "65535")):
            if g > top:
                raise LaunchError(f"CUDA grid {grid} of {self.entry}: {axis} = {g} blocks "
                                  f"exceeds {name}")
        events = self.backend._events
        try:
            if shared:
                self._allow_shared(shared)
            start = end = None
            if events is not None:  # kernel_time(): events tight around the launch
                start, end = self.backend.cupy.cuda.Event(), self.backend.cupy.cuda.Event()
                start.record()
            if not getattr(self.backend.cupy, "takes_tensor_map_args", False):
                args = tuple(a.value if isinstance(a, TensorMapArg) else a for a in args)
            self.function(grid[:3 if grid[2] > 1 else 2 if grid[1] > 1 else 1], (block,),
                          args, shared_mem=shared)
            if events is not None:
                end.record()
                events.append((start, end))
        except ResourceError:
            raise
        except Exception as exc:  # CuPy raises its own CUDADriverError types
            raise LaunchError(f"CUDA launch of {self.entry} failed: {exc}") from None

    def _allow_shared(self, shared: int) -> None:
        """Raise the kernel's max dynamic shared memory attribute to ``shared`` bytes where they
        are above the 48 KiB a launch gets without it; ResourceError above the opt-in limit."""
        portable, optin = self.backend.shared_limits
        check_dynamic_local(self.entry, shared, int(self.function.shared_size_bytes), optin,
                            "sharedMemPerBlockOptin")
        if shared > max(portable, self.allowed_shared):
            self.function.max_dynamic_shared_size_bytes = shared
            self.allowed_shared = shared


def _no_bfloat16(dtype, cupy=None) -> None:
    """DTypeError for bfloat16 and FP8, which CuPy cannot hold (a stand-in CuPy whose arrays
    hold no memory, ``any_dtype``, takes them: the launch checks run on their kernels)."""
    if is_ml_dtype(dtype) and not getattr(cupy, "any_dtype", False):
        name = getattr(dtype, "name", dtype)
        raise DTypeError(f"dtype {name} cannot be held in a CuPy array (CuPy has no such "
                         f"dtype); run {name} on the numpy or opencl target (its CUDA kernels "
                         "compile and are checked with NVRTC)")


class CudaBackend(Backend):
    """CUDA through CuPy.

    Args:
        cupy: the CuPy module to use (default: ``import cupy``); tests pass a stand-in
            (gpucg.verify.cupy_standin) to run this backend's launch path with no GPU.
    """

    name = "cuda"
    dialect = CUDA
    device_type = "gpu"

    def __init__(self, cupy=None):
        self._lock = threading.Lock()
        self._ready = False
        self._reason = ""
        self._programs: dict[str, CudaProgram] = {}
        self._module = cupy
        self._disk = DiskCache(namespace="cuda")
        #: while kernel_time() runs: the (start, end) events of every launch
        self._events: list | None = None

    def _init(self) -> None:
        if self._ready or self._reason:  # decided once (asked before each call)
            return
        with self._lock:
            if self._ready or self._reason:
                return
            cupy = self._module
            if cupy is None:
                try:
                    import cupy
                except ImportError as exc:
                    self._reason = f"cupy is not installed ({exc}); pip install 'gpucg[cuda]'"
                    return
            try:
                count = cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:  # no driver, no device
                self._reason = f"no CUDA device ({exc.__class__.__name__}: {exc})"
                return
            if count < 1:
                self._reason = "no CUDA device"
                return
            self.cupy = cupy
            dev = cupy.cuda.Device()
            props = cupy.cuda.runtime.getDeviceProperties(dev.id)
            name = props["name"]
            self.device_name = name.decode() if isinstance(name, bytes) else str(name)
            self.arch = f"sm_{dev.compute_capability}"
            self._max_block = int(props["maxThreadsPerBlock"])
            #: what else decides the binary: NVRTC's version and the driver's (CUBIN or PTX)
            self._toolchain = (cupy.cuda.nvrtc.getVersion(),
                               cupy.cuda.runtime.driverGetVersion())
            #: (bytes of shared memory a block gets without the opt-in, with it)
            self.shared_limits = (int(props["sharedMemPerBlock"]),
                                  int(props["sharedMemPerBlockOptin"]))
            self._ready = True

    def status(self):
        self._init()
        if not self._ready:
            return False, "", self._reason
        return True, f"{self.device_name} ({self.arch})", ""

    def _require(self) -> None:
        self._init()
        if not self._ready:
            raise TargetUnavailableError(f"CUDA is not usable here: {self._reason}")

    def max_block(self) -> int:
        self._require()
        return self._max_block

    def supports(self, dtype: str) -> bool:
        return True

    def compile(self, source: str, entry: str, options=()) -> CudaProgram:
        """The program of kernel ``entry``; a source with arch-specific instructions
        (wgmma, setmaxnreg: gpucg.codegen.wgmma.required_arch) is compiled for its arch
        (sm_90a on a 9.0 device; NVRTC takes the arch-specific option beside CuPy's plain one),
        or refused with a CompileError on another device."""
        self._require()
        options = tuple(options) or ("-std=c++14",)
        need = required_arch(source)
        if need:
            if need.rstrip("a") != self.arch.rstrip("a"):
                raise CompileError(f"CUDA kernel {entry} needs {need} (arch-specific "
                                   f"instructions: wgmma, setmaxnreg); this device is "
                                   f"{self.arch}", source, options)
            options = (*options, f"-arch={need}")
        key = cache_key("cuda", source, options, self.arch, entry, self._toolchain)
        prog = self._programs.get(key)
        if prog is not None:
            stats.bump("memory_hits")
            return prog
        try:
            function = self._load(source, entry, options, key)
        except self.cupy.cuda.compiler.CompileException as exc:
            raise CompileError(f"CUDA compile of {entry} failed", source, options,
                               str(exc)) from None
        except Exception as exc:  # CuPy's CUDADriverError: the module has no such kernel
            raise CompileError(f"CUDA kernel {entry} not found in its module: {exc}", source,
                               options) from None
        stats.bump("compiles")
        prog = CudaProgram(function, entry, self, source, options)
        self._programs[key] = prog
        return prog

    def _load(self, source: str, entry: str, options: tuple, key: str):
        """The kernel ``entry``: NVRTC's CUBIN for this device (from the disk cache when there),
        loaded as a module. NVRTC's defaults hold: no -ftz, IEEE division and square root."""
        binary = self._disk.get(key)
        if binary is None:
            binary, _ = self.cupy.cuda.compiler.compile_using_nvrtc(
                source, options, arch=self.arch[len("sm_"):], cache_in_memory=True)
            binary = binary.encode() if isinstance(binary, str) else bytes(binary)
            self._disk.put(key, binary)
        module = self.cupy.cuda.function.Module()
        module.load(binary)
        return module.get_function(entry)

    def empty(self, shape, dtype):
        self._require()
        _no_bfloat16(dtype, self.cupy)
        return self.cupy.empty(tuple(shape), dtype=numpy_dtype(dtype) if isinstance(dtype, str)
                               else np.dtype(dtype))

    def to_device(self, array):
        self._require()
        _no_bfloat16(array.dtype, self.cupy)
        stats.bump("uploads")
        return self.cupy.asarray(c_contiguous(np.asarray(array)))

    def to_host(self, array):
        if isinstance(array, np.ndarray):
            return array
        stats.bump("downloads")
        return self.cupy.asnumpy(array)

    def owns(self, array) -> bool:
        return self._ready and isinstance(array, self.cupy.ndarray)

    def check_array(self, array, what: str) -> None:
        """InputError unless a CuPy array is on the current device (where kernels launch)."""
        device = getattr(array, "device", None)
        current = self.cupy.cuda.Device().id
        if device is not None and device.id != current:
            raise InputError(f"{what} is a cupy array on CUDA device {device.id}, but target cuda "
                             f"runs on device {current} (the current device); copy it there "
                             f"(cupy.asarray under `with cupy.cuda.Device({current})`), or "
                             "switch devices")

    def contiguous(self, array):
        return c_contiguous(array, self.cupy)

    def tensor_map_args(self, name: str, array, tmap, offset: int = 0) -> dict:
        """{name: the map bound to the array's device address (plus ``offset`` bytes), encoded
        by the driver} (a stand-in CuPy with ``encode_tensor_map`` encodes it itself)."""
        t = tmap.with_address(self.address(array) + offset)
        enc = getattr(self.cupy, "encode_tensor_map", None) or encode
        return {name: enc(t)}

    def address(self, array) -> int:
        """The device pointer of the array's first element (CuPy's data.ptr; the launch
        stand-in's ptr); 0 for an array ``contiguous`` copies to a fresh buffer."""
        flags = getattr(array, "flags", None)
        if flags is not None and not flags.c_contiguous:
            return 0
        ptr = getattr(getattr(array, "data", None), "ptr", None)
        return int(ptr if ptr is not None else getattr(array, "ptr", 0))

    def synchronize(self) -> None:
        if self._ready:
            self.cupy.cuda.get_current_stream().synchronize()

    def kernel_time(self, fn, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call of ``fn`` spent in its kernels: CUDA events recorded right before
        and after each launch, summed over the call's launches. The host's work between them
        (argument checks, the dispatcher, allocation) is not counted: where it is longer than
        the kernels, time() measures the host and this the kernels."""
        self._require()
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeat):
            self._events = []
            try:
                fn()
            finally:
                events, self._events = self._events, None
            if events:
                events[-1][1].synchronize()
            out.append(sum(self.cupy.cuda.get_elapsed_time(s, e) for s, e in events) / 1e3)
        return out

    def time(self, fn, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call, timed with CUDA events after warm-up."""
        self._require()
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeat):
            start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(self.cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return out
