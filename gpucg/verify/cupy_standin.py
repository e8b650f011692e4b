"""A stand-in for the parts of CuPy the CUDA backend uses, so its launch path runs with no GPU.

``CudaBackend(cupy=StandInCupy("sm_90"))`` is the real backend: it compiles through the
stand-in's ``cuda.compiler.compile_using_nvrtc``, loads through its ``cuda.function.Module``
and launches through its kernel call, which records each launch
(kernel, grid, block, arguments) instead of running it. Arrays have a shape and a dtype but no
memory, so benchmark-sized calls cost nothing. With ``check=True`` every kernel is compiled to
PTX by NVRTC, and every launch is checked as the driver would take it: the arguments against
the parameters the PTX ``.entry`` declares (count, pointer or value, width, integer or float),
and grid, block and shared memory against the device's limits (dynamic shared memory above
48 KiB only where the kernel's max dynamic shared memory attribute allows it), and a TMA tensor
map (a ``.param .align 64 .b8 [128]``) only by value, declared 64-byte aligned, as a
gpucg.runtime.tensor_map.TensorMapArg whose map is valid with its box within the tensor's
dims and strides. A bad launch raises
:class:`LaunchCheckError`, which the backend reports as a LaunchError, as it would a driver's.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..codegen.tma import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES
from ..half import numpy_dtype
from ..runtime.tensor_map import TensorMapArg
from . import nvrtc
from .occupancy import limits
from .ptx import ptx_cluster, ptx_entry_layout, ptx_entry_params, ptx_static_shared  # noqa: F401
from .ptx import ptx_warpgroups

_PTRS = itertools.count(1 << 32, 1 << 20)

#: bytes of the C types kernel parameters point to
_C_SIZES = {"char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "short": 2,
            "unsigned short": 2, "__half": 2, "int": 4, "unsigned int": 4, "float": 4,
            "long long": 8, "unsigned long long": 8, "double": 8}


class StandInArray:
    """A device array without memory: shape, dtype, size, nbytes and a made-up pointer."""

    gpucg_backend = "cuda"

    def __init__(self, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.ptr = next(_PTRS)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def view_at(self, nbytes: int, shape) -> "StandInArray":
        """A contiguous view of ``shape`` starting ``nbytes`` into this array, as CuPy makes
        of ``a[1:]`` and the like: its pointer is as (mis)aligned as CuPy's would be."""
        out = StandInArray(shape, self.dtype)
        out.ptr = self.ptr + nbytes
        return out

    def reshape(self, shape) -> "StandInArray":
        """A view of another shape (views carry no memory either; CuPy's share the pointer)."""
        out = StandInArray(shape, self.dtype)
        out.ptr = self.ptr
        return out

    def transpose(self, axes) -> "StandInArray":
        return self.reshape(tuple(self.shape[a] for a in axes))

    def __repr__(self) -> str:
        return f"StandInArray({self.shape}, {self.dtype})"


class LaunchCheckError(RuntimeError):
    """A launch the device would refuse or misread (the stand-in's driver error)."""


class CompileException(RuntimeError):
    """What the stand-in's compile raises for source NVRTC rejects (as CuPy's)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its PTX type (``u32``, ``u64``, ``f32``...), and from the CUDA
    signature whether it is a pointer and the size of what it points to (0: unknown)."""

    ptx: str
    decl: str
    pointer: bool
    pointee: int
    align: int = 0
    count: int = 0  # array parameters (a struct passed by value): its elements

    @property
    def tensor_map(self) -> bool:
        """A by-value parameter of a tensor map's size (``.b8 [128]``)."""
        return not self.pointer and self.ptx == "b8" and self.count == TENSOR_MAP_BYTES

    @property
    def bits(self) -> int:
        return int(re.sub(r"\D", "", self.ptx) or 0)


def source_params(source: str, entry: str) -> list[str]:
    """The parameter declarations of ``entry`` in CUDA source ("const float* __restrict__ x")."""
    start = source.index(entry + "(") + len(entry) + 1
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(source[end], 0)
        end += 1
    text = source[start:end - 1].strip()
    return [p.strip() for p in text.split(",")] if text else []


def kernel_params(source: str, entry: str, ptx: str) -> list[Param]:
    """The parameters of a kernel: widths from the PTX, pointers from the CUDA signature (PTX
    spells a pointer as ``.u64``, like a 64-bit integer)."""
    types = ptx_entry_params(ptx, entry)
    if types is None:
        raise LaunchCheckError(f"the PTX of this module has no kernel {entry!r} "
                               "(named symbol not found)")
    decls = source_params(source, entry)
    if len(decls) != len(types):
        raise LaunchCheckError(f"{entry}: the CUDA signature has {len(decls)} parameters, "
                               f"its PTX .entry {len(types)}")
    layout = ptx_entry_layout(ptx, entry)
    layout = layout if len(layout) == len(types) else [(0, 0)] * len(types)
    out = []
    for t, decl, (align, count) in zip(types, decls, layout):
        pointer = "*" in decl
        base = re.sub(r"\b(const|volatile|__restrict__|restrict|__grid_constant__)\b|\*", " ",
                      decl).split()
        ctype = " ".join(base[:-1])  # the last word is the parameter's name
        out.append(Param(t, decl, pointer, _C_SIZES.get(ctype, 0) if pointer else 0, align,
                         count))
    return out


def describe_arg(arg) -> tuple[str, int, str]:
    """(kind, bits, text) of a launch argument as CuPy passes it: arrays as 64-bit pointers,
    NumPy scalars at their own width, Python ints as int64 and floats as float64."""
    if isinstance(arg, StandInArray):
        return "pointer", 64, f"a {arg.dtype} array"
    if isinstance(arg, TensorMapArg):
        return "tensor map", 8 * TENSOR_MAP_BYTES, "a tensor map"
    if isinstance(arg, (bool, np.bool_)):
        return "uint", 8, f"bool {arg!r}"
    if isinstance(arg, np.generic):
        kind = {"i": "int", "u": "uint", "f": "float"}.get(arg.dtype.kind, arg.dtype.kind)
        return kind, arg.dtype.itemsize * 8, f"{arg.dtype} {arg!r}"
    if isinstance(arg, int):
        return "int", 64, f"Python int {arg} (passed as int64)"
    if isinstance(arg, float):
        return "float", 64, f"Python float {arg} (passed as float64)"
    return "object", 0, f"{type(arg).__name__}"


def check_args(entry: str, params: list[Param], args) -> None:
    """LaunchCheckError unless ``args`` match ``params`` one for one."""
    if len(args) != len(params):
        raise LaunchCheckError(f"{entry} declares {len(params)} parameters (PTX .entry) but the "
                               f"launch passes {len(args)} arguments")
    for i, (p, a) in enumerate(zip(params, args)):
        kind, bits, text = describe_arg(a)
        where = f"{entry}: argument {i} ({text}) for parameter '{p.decl}' (.{p.ptx})"
        if p.tensor_map or kind == "tensor map":
            check_tensor_map(where, p, a)
            continue
        if p.pointer != (kind == "pointer"):
            want = "a device array" if p.pointer else "a value"
            raise LaunchCheckError(f"{where}: the kernel takes {want}")
        if p.pointer:
            if p.pointee and a.dtype.itemsize != p.pointee:
                raise LaunchCheckError(f"{where}: elements of {a.dtype.itemsize} bytes where "
                                       f"the kernel reads {p.pointee}")
            continue
        if bits != p.bits or (kind == "float") != p.ptx.startswith("f"):
            raise LaunchCheckError(f"{where}: {bits}-bit {kind} where the kernel reads "
                                   f"{p.bits}-bit {'float' if p.ptx.startswith('f') else 'int'}")


def check_tensor_map(where: str, p: Param, arg) -> None:
    """LaunchCheckError unless a tensor map goes by value to a 128-byte parameter declared
    64-byte aligned, valid (cuTensorMapEncodeTiled's rules), its box within dims and strides."""
    if not isinstance(arg, TensorMapArg):
        raise LaunchCheckError(f"{where}: the kernel takes a tensor map by value (128 bytes); "
                               "pass a gpucg.runtime.tensor_map.TensorMapArg")
    if not p.tensor_map:
        raise LaunchCheckError(f"{where}: a tensor map goes by value to a "
                               f"'const __grid_constant__' parameter of {TENSOR_MAP_BYTES} "
                               "bytes, not to this one")
    if p.align != TENSOR_MAP_ALIGN:
        have = f"{p.align}-byte aligned" if p.align else "without an alignment"
        raise LaunchCheckError(f"{where}: the parameter is declared {have}; a tensor map needs "
                               f"{TENSOR_MAP_ALIGN} (struct __align__(64))")
    bad = arg.problem()
    if bad:
        raise LaunchCheckError(f"{where}: {bad}")


def check_geometry(entry: str, arch: str, grid, block, shared_mem: int, allowed: int = 0,
                   static: int = 0, cluster: tuple = (), warpgroups: bool = False) -> None:
    """LaunchCheckError unless grid, block and dynamic shared memory are within the device's
    limits: ``shared_mem`` within 48 KiB, or within ``allowed`` (the kernel's max dynamic
    shared memory attribute as set), and with ``static`` within the opt-in limit; a kernel
    of thread-block ``cluster`` dims only on an arch with clusters, its grid a multiple of
    them; a kernel running ``warpgroups`` instructions (wgmma, setmaxnreg) in blocks of whole
    warpgroups (128 threads)."""
    lim = limits(arch)
    if cluster:
        if not lim.native("clusters"):
            raise LaunchCheckError(f"{entry}: clusters of {cluster} blocks on {arch}, which has "
                                   "no thread-block clusters (sm_90 on)")
        dims = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        if any(int(g) % c for g, c in zip(dims, cluster)):
            raise LaunchCheckError(f"{entry}: grid {dims} is not a multiple of its cluster "
                                   f"dims {cluster}")
    for what, dims, caps in (("grid", grid, lim.max_grid), ("block", block, lim.max_block_dims)):
        for d, cap in zip(dims, caps):
            if not 1 <= int(d) <= cap:
                raise LaunchCheckError(f"{entry}: {what} {tuple(dims)} is outside 1..{caps}")
    threads = int(np.prod(block))
    if warpgroups and threads % 128:
        raise LaunchCheckError(f"{entry}: block of {threads} threads runs warpgroup "
                               "instructions (wgmma, setmaxnreg): it must be whole warpgroups, "
                               "a multiple of 128")
    if threads > lim.max_threads_per_block:
        raise LaunchCheckError(f"{entry}: block of {threads} threads exceeds "
                               f"{lim.max_threads_per_block}")
    if shared_mem > max(lim.smem_static_max, allowed):
        raise LaunchCheckError(
            f"{entry}: {shared_mem} bytes of dynamic shared memory exceed "
            + (f"its max dynamic shared memory attribute, {allowed}" if allowed else
               f"{lim.smem_static_max} (no opt-in attribute is set)"))
    if shared_mem + static > lim.smem_per_block_optin:
        raise LaunchCheckError(f"{entry}: {shared_mem} bytes of dynamic and {static} of static "
                               f"shared memory exceed the opt-in limit "
                               f"{lim.smem_per_block_optin} of {arch}")


@dataclass
class Launch:
    """One recorded kernel launch."""

    entry: str
    source: str
    options: tuple
    grid: tuple
    block: tuple
    args: tuple
    shared_mem: int = 0


class _Function:
    def __init__(self, module: "_Module", entry: str, params, static: int = 0,
                 cluster: tuple = (), warpgroups: bool = False):
        self.module, self.entry, self.params, self.static = module, entry, params, static
        self.cluster, self.warpgroups = cluster, warpgroups
        self._max_dynamic = 0

    @property
    def shared_size_bytes(self) -> int:
        """Its static shared memory (CuPy's attribute, from the PTX here)."""
        return self.static

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        """The attribute CuPy's Function sets with cuFuncSetAttribute; the driver refuses a
        value that with the static shared memory exceeds the opt-in limit."""
        return self._max_dynamic

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        cupy = self.module.cupy
        cupy.attributes.append((self.entry, "max_dynamic_shared_size_bytes", int(value)))
        optin = cupy.limits.smem_per_block_optin
        if cupy.check and int(value) + self.static > optin:
            raise LaunchCheckError(f"{self.entry}: max_dynamic_shared_size_bytes={value} with "
                                   f"{self.static} bytes of static shared memory exceeds the "
                                   f"opt-in limit {optin} of {cupy.arch}")
        self._max_dynamic = int(value)

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        cupy = self.module.cupy
        cupy.launches.append(Launch(self.entry, self.module.code, self.module.options,
                                    tuple(grid), tuple(block), tuple(args), shared_mem))
        if cupy.check:
            check_geometry(self.entry, cupy.arch, grid, block, shared_mem, self._max_dynamic,
                           self.static, self.cluster, self.warpgroups)
            check_args(self.entry, self.params, args)


class _Module:
    """cupy.cuda.function.Module: ``load`` a compiled binary, then ``get_function``."""

    def __init__(self, cupy: "StandInCupy"):
        self.cupy, self.code, self.options, self.ptx = cupy, "", (), None

    def load(self, binary: bytes) -> None:
        """``binary``: what the stand-in's compile returned (from gpucg's disk cache too)."""
        what = json.loads(binary)
        self.code, self.options, self.ptx = what["source"], tuple(what["options"]), what["ptx"]

    def get_function(self, entry: str) -> _Function:
        if self.ptx is None:
            return _Function(self, entry, None)
        return _Function(self, entry, kernel_params(self.code, entry, self.ptx),
                         ptx_static_shared(self.ptx), ptx_cluster(self.ptx, entry),
                         ptx_warpgroups(self.ptx, entry))


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


class StandInCupy:
    """The CuPy module as the CUDA backend sees it, for one device of ``arch``.

    Attributes:
        launches: every launch so far (:class:`Launch`), checked or not.
        attributes: every kernel attribute set so far, (entry, name, value).
        check: compile each kernel to PTX and check every launch (NVRTC needed).
    """

    #: its arrays hold no memory, so bfloat16 and FP8 arrays stand in too (real CuPy has
    #: neither dtype): the launches of their kernels are checked like any other
    any_dtype = True
    takes_tensor_map_args = True  # launches keep TensorMapArg; real CuPy gets its 128 bytes

    def encode_tensor_map(self, t) -> TensorMapArg:
        """``t`` as a launch argument (no driver: the map itself, checked at launch)."""
        return TensorMapArg(t, np.zeros(1, np.dtype((np.void, 128)))[0])

    def __init__(self, arch: str = "sm_90", check: bool = True, device_count: int = 1,
                 name: str = "gpucg stand-in GPU"):
        self.arch, self.check, self.launches, self.attributes = arch, check, [], []
        self.limits = limits(arch)
        self.ndarray = StandInArray
        major, minor = self.limits.compute_capability
        props = {"name": name.encode(), "major": major, "minor": minor,
                 "maxThreadsPerBlock": self.limits.max_threads_per_block,
                 "sharedMemPerBlock": self.limits.smem_static_max,
                 "sharedMemPerBlockOptin": self.limits.smem_per_block_optin,
                 "regsPerBlock": self.limits.max_regs_per_block, "warpSize": 32,
                 "maxGridSize": self.limits.max_grid,
                 "maxThreadsDim": self.limits.max_block_dims}
        device = SimpleNamespace(id=0, compute_capability=f"{major}{minor}")
        self.cuda = SimpleNamespace(
            runtime=SimpleNamespace(getDeviceCount=lambda: device_count,
                                    getDeviceProperties=lambda i: dict(props),
                                    driverGetVersion=lambda: 0),
            Device=lambda i=0: device,
            compiler=SimpleNamespace(CompileException=CompileException,
                                     compile_using_nvrtc=self._compile),
            function=SimpleNamespace(Module=lambda: _Module(self)),
            # the binary holds PTX only when checked: its version keeps the two apart in the
            # backend's disk cache
            nvrtc=SimpleNamespace(getVersion=lambda: ("stand-in", self.check)),
            get_current_stream=lambda: SimpleNamespace(synchronize=lambda: None),
            Event=_Event, get_elapsed_time=lambda start, end: 0.0)

    def _compile(self, source: str, options=(), arch=None, cache_in_memory=False, **_):
        """(binary, None) as CuPy's compile_using_nvrtc: the binary is the source, options and,
        with ``check``, NVRTC's PTX for the stand-in's arch, as JSON (a rejected source raises
        CompileException, as CuPy's does). The PTX is compiled with nvrtc.check_options: the
        same entries as an optimized compile, 2.4x sooner; its static shared memory may count
        a variable the optimizer would drop (norm_split's gskip where it is constant), never
        less, so the limits it checks only err strict."""
        ptx = None
        if self.check:
            try:
                ptx = nvrtc.compile_to_ptx(source, self.arch, nvrtc.check_options(tuple(options)))
            except Exception as exc:  # NVRTC's CompileError, as CuPy's CompileException
                raise CompileException(getattr(exc, "log", "") or str(exc)) from None
        return json.dumps({"source": source, "options": list(options), "ptx": ptx}).encode(), None

    def empty(self, shape, dtype) -> StandInArray:
        return StandInArray(shape, dtype)

    def asarray(self, array) -> StandInArray:
        array = np.asarray(array)
        return StandInArray(array.shape, array.dtype)

    def asnumpy(self, array) -> np.ndarray:
        """Zeros: the stand-in keeps no data (run functions that read device values back,
        such as topk's early stop, see zeros and take their longest path)."""
        return np.zeros(array.shape, array.dtype)

    def ascontiguousarray(self, array):
        return array
