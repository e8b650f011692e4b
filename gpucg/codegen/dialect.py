"""Dialects are data: one frozen object per backend with the spellings that differ.

Templates write ``{{ d.barrier }}`` or ``{{ d.local_id(0) }}`` and never test the backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DTypeError

_AXES = "xyz"


@dataclass(frozen=True, eq=False)
class Dialect:
    """How one kernel language spells kernels, memory spaces, ids, barriers and types.

    Every difference between backends is a field; the methods only fill in the spellings, so
    a new backend is one more Dialect object and templates never test a backend's name.
    """

    name: str
    kernel: str
    global_ptr: str
    local: str
    restrict: str
    barrier: str
    #: ids and sizes, with ``{axis}`` (x, y, z) or ``{dim}`` (0, 1, 2) filled in
    local_id_fmt: str
    group_id_fmt: str
    local_size_fmt: str
    num_groups_fmt: str
    #: the function adding atomically to a 32-bit unsigned int (returns the old value)
    atomic_add_fn: str
    types: dict = field(default_factory=dict)
    #: dtype -> preamble line needed when that dtype appears in a kernel
    type_preambles: dict = field(default_factory=dict)
    source_ext: str = ".txt"
    #: bits -> unsigned integer type (keys and raw bit patterns)
    utypes: dict = field(default_factory=dict)
    #: qualifiers of a helper function callable from kernels
    device_fn: str = ""
    #: suffix that makes a hex literal 64-bit unsigned
    u64_suffix: str = "UL"
    #: the 16-bit float type as a storage format, how a float is loaded from and stored to it
    #: (``{ptr}``, ``{index}``, ``{value}``), and the helper each needs. OpenCL needs none:
    #: vload_half/vstore_half are core, unlike half arithmetic; CUDA converts with one PTX
    #: instruction each way, so no cuda_fp16.h, which NVRTC cannot always find.
    half_storage: str = "half"
    half_load: str = ""
    half_store: str = ""
    half_load_fn: str = ""
    half_store_fn: str = ""
    #: a work-group barrier that also orders global memory: work-items that read a global
    #: value another work-item of the group then writes need it (OpenCL's local-memory
    #: barrier orders local memory only; CUDA's __syncthreads orders both)
    barrier_global: str = ""
    #: the address-space qualifier of a pointer into local (shared) memory ("" when pointers
    #: are generic, as in CUDA)
    local_ptr: str = ""

    def local_id(self, dim: int = 0) -> str:
        return self.local_id_fmt.format(axis=_AXES[dim], dim=dim)

    def group_id(self, dim: int = 0) -> str:
        return self.group_id_fmt.format(axis=_AXES[dim], dim=dim)

    def local_size(self, dim: int = 0) -> str:
        return self.local_size_fmt.format(axis=_AXES[dim], dim=dim)

    def num_groups(self, dim: int = 0) -> str:
        return self.num_groups_fmt.format(axis=_AXES[dim], dim=dim)

    def type(self, dtype: str) -> str:
        """The C type name of a whitelisted dtype."""
        try:
            return self.types[dtype]
        except KeyError:
            raise DTypeError(
                f"dtype {dtype!r} has no {self.name} spelling; allowed: {', '.join(self.types)}"
            ) from None

    def utype(self, bits: int) -> str:
        """The unsigned integer type of ``bits`` (8, 16, 32 or 64) bits."""
        try:
            return self.utypes[bits]
        except KeyError:
            raise DTypeError(f"no {bits}-bit unsigned type; allowed: {', '.join(map(str, self.utypes))}") from None

    def uconst(self, value: int, bits: int) -> str:
        """An unsigned literal of the ``bits``-wide type (value masked to that width)."""
        value &= (1 << bits) - 1
        suffix = self.u64_suffix if bits == 64 else "U"
        return f"(({self.utype(bits)})0x{value:X}{suffix})"

    def index_max(self, wide: bool) -> str:
        """The largest value of the kernel index type, as a literal."""
        if not wide:
            return "0x7FFFFFFF"
        return f"(({self.types['int64']})0x7FFFFFFFFFFFFFFF{self.u64_suffix.removeprefix('U')})"

    def atomic_add(self, ptr: str, value: str) -> str:
        """Atomically add to a 32-bit unsigned int in global or local memory; yields the old value."""
        return f"{self.atomic_add_fn}({ptr}, {value})"

    def storage(self, half: bool) -> str:
        """The element type of a float buffer: float, or 16-bit half kept only in memory."""
        return self.half_storage if half else "float"

    def load(self, ptr: str, index: str, half: bool) -> str:
        """``ptr[index]`` as a float; half buffers are converted (no half arithmetic needed)."""
        if not half:
            return f"{ptr}[{index}]"
        return self.half_load.format(ptr=ptr, index=index)

    def store(self, ptr: str, index: str, value: str, half: bool) -> str:
        """A statement storing the float ``value`` at ``ptr[index]`` (rounded to nearest for half)."""
        if not half:
            return f"{ptr}[{index}] = {value};"
        return self.half_store.format(ptr=ptr, index=index, value=value)

    def half_helpers(self, load: bool, store: bool) -> str:
        """The helper functions a kernel that loads (``load``) or stores (``store``) float16
        needs, and only those."""
        return "\n".join(fn for fn, used in ((self.half_load_fn, load), (self.half_store_fn, store))
                         if used and fn)

    @property
    def half_preamble(self) -> str:
        """Both float16 helpers (for a kernel that loads and stores float16)."""
        return self.half_helpers(True, True)

    def index_type(self, wide: bool) -> str:
        return self.types["int64"] if wide else "int"

    def preamble(self, dtypes) -> str:
        lines = []
        for dt in sorted(set(dtypes)):
            line = self.type_preambles.get(dt)
            if line and line not in lines:
                lines.append(line)
        return "\n".join(lines)


_INT_TYPES_CUDA = {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
                   "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
                   "uint64": "unsigned long long"}
_INT_TYPES_OPENCL = {"int8": "char", "int16": "short", "int32": "int", "int64": "long",
                     "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong"}

CUDA = Dialect(
    name="cuda",
    kernel='extern "C" __global__ void',
    global_ptr="",
    local="__shared__",
    restrict="__restrict__",
    barrier="__syncthreads();",
    local_id_fmt="threadIdx.{axis}",
    group_id_fmt="blockIdx.{axis}",
    local_size_fmt="blockDim.{axis}",
    num_groups_fmt="gridDim.{axis}",
    atomic_add_fn="atomicAdd",
    types={"bool": "unsigned char", **_INT_TYPES_CUDA,
           "float16": "__half", "float32": "float", "float64": "double"},
    type_preambles={"float16": "#include <cuda_fp16.h>"},
    source_ext=".cu",
    utypes={8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"},
    device_fn="__device__ __forceinline__",
    u64_suffix="ULL",
    half_storage="unsigned short",
    half_load="gpucg_h2f({ptr}[{index}])",
    half_store="{ptr}[{index}] = gpucg_f2h({value});",
    half_load_fn=(
        "/* float16 bits to float: one PTX cvt (no cuda_fp16.h) */\n"
        "__device__ __forceinline__ float gpucg_h2f(unsigned short h)\n{\n"
        "    float f;\n"
        "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
        "    return f;\n}\n"),
    half_store_fn=(
        "/* float to float16 bits, rounded to nearest even: one PTX cvt */\n"
        "__device__ __forceinline__ unsigned short gpucg_f2h(float f)\n{\n"
        "    unsigned short h;\n"
        "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
        "    return h;\n}\n"),
    barrier_global="__syncthreads();",
)

OPENCL = Dialect(
    name="opencl",
    kernel="__kernel void",
    global_ptr="__global",
    local="__local",
    local_ptr="__local",
    restrict="restrict",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    local_id_fmt="get_local_id({dim})",
    group_id_fmt="get_group_id({dim})",
    local_size_fmt="get_local_size({dim})",
    num_groups_fmt="get_num_groups({dim})",
    atomic_add_fn="atomic_add",
    types={"bool": "uchar", **_INT_TYPES_OPENCL,
           "float16": "half", "float32": "float", "float64": "double"},
    type_preambles={"float64": "#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                    "float16": "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"},
    source_ext=".cl",
    utypes={8: "uchar", 16: "ushort", 32: "uint", 64: "ulong"},
    device_fn="static inline",
    u64_suffix="UL",
    half_load="vload_half({index}, {ptr})",
    half_store="vstore_half_rte({value}, {index}, {ptr});",
    barrier_global="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
)

_DIALECTS = {"cuda": CUDA, "opencl": OPENCL}


def dialect_for(backend: str) -> Dialect:
    """The dialect a backend compiles."""
    try:
        return _DIALECTS[backend]
    except KeyError:
        raise DTypeError(f"backend {backend!r} compiles no kernel source") from None
