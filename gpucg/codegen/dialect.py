"""Dialects are data: one frozen object per backend with the spellings that differ.

Templates write ``{{ d.barrier }}`` or ``{{ d.local_id(0) }}`` and never test the backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DTypeError
from ..half import FP8_DTYPES, STORAGE_DTYPES
from . import fp8 as _fp8
from . import half_fns as _half
from . import vector as _vec
from .shuffle import SHFL_WORDS
from .simd import CUDA_SIMD, OPENCL_SIMD
from .dynamic_local import CUDA_DYNAMIC, OPENCL_DYNAMIC
from .memsync import CUDA_SYNC, OPENCL_SYNC
from .hopper_ops import CUDA_HOPPER
from .hopper_twin import OPENCL_HOPPER
from .tile_ops import CUDA_TILE, OPENCL_TILE
from .warp import CUDA_WARP, OPENCL_WARP, SCRATCH_WORDS

_AXES = "xyz"


@dataclass(frozen=True, eq=False)
class Dialect:
    """How one kernel language spells kernels, memory spaces, ids, barriers and types: every
    difference between backends is a field; the methods only fill in the spellings, so a new
    backend is one more Dialect object and templates never test a backend's name."""

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
    #: the narrow float formats (float16, bfloat16, FP8) kept in memory and computed as float:
    #: dtype name -> StorageFormat (gpucg/codegen/half_fns.py, fp8.py). CUDA converts with
    #: PTX instructions (no cuda_fp16.h, which NVRTC cannot always find), OpenCL with
    #: vload_half/vstore_half and integer arithmetic
    formats: dict = field(default_factory=dict)
    #: a work-group barrier that also orders global memory: work-items that read a global
    #: value another work-item of the group then writes need it (OpenCL's local-memory
    #: barrier orders local memory only; CUDA's __syncthreads orders both)
    barrier_global: str = ""
    #: the warp-level operations (gpucg/codegen/warp.py): instructions or their emulation
    warp: object = None
    #: the address-space qualifier of a pointer into local (shared) memory ("" when pointers
    #: are generic, as in CUDA)
    local_ptr: str = ""
    #: 16-byte vector types (gpucg/codegen/vector.py)
    vector: object = None
    simd: object = None  # vector arithmetic in a work-item (codegen/simd.py)
    #: synchronization between work-groups (gpucg/codegen/memsync.py): fence, flag load/store
    sync: object = None
    dynamic: object = None  # the dynamic local buffer's spellings (codegen/dynamic_local.py)
    #: the tile layer's shared-memory operations on byte addresses (codegen/tile_ops.py)
    tile: object = None
    #: Hopper's asynchronous operations: TMA, mbarriers, wgmma, setmaxnreg (codegen/hopper_ops.py)
    hopper: object = None

    # -- warp-level operations: every work-item of the work-group calls them -------------------

    def warp_helpers(self, mma=(), cp_async=(), pack=False) -> str:
        """The helper functions of the warp operations a kernel uses: its mma kinds, the
        cp.async sizes of ``d.tile.cp_array`` (into static arrays); ``pack``: the format
        (float16, bfloat16) :meth:`pack2` packs, if any (with :meth:`half_helpers` storing
        it). The tile layer's operations on the dynamic block: ``d.tile.helpers``."""
        parts = [self.warp.helpers(mma, self.half_format(pack) == "float16")]
        if cp_async:
            parts.append(self.tile.helpers(cp=cp_async))
        return "\n".join(p for p in parts if p)


    def launch_bounds(self, threads: int, blocks: int) -> str:
        """A kernel qualifier asking for ``blocks`` resident blocks of ``threads`` (CUDA's
        __launch_bounds__: registers capped to fit); empty where the language has none."""
        return self.warp.bounds(threads, blocks)

    def warp_setup(self, nwarps: int, tid: str, words: int = SCRATCH_WORDS, ids=()) -> str:
        """Kernel-scope declarations the warp operations need: the emulation's scratch,
        ``words`` a warp, with gpucg_lane and gpucg_warp (from the linear work-item id
        ``tid``); where the operations are instructions, only the ids named in ``ids``
        ("lane", "warp") that they use."""
        return self.warp.setup(nwarps, tid, words, ids)

    def shfl_setup(self, nwarps: int, tid: str, lanes: int, scan: bool = False) -> str:
        """warp_setup for a kernel whose warp operations are shuffles alone, block operations
        over ``lanes`` work-items (a scan names the lane even within a warp)."""
        ids = ("lane", "warp") if lanes > self.warp.size else ("lane",) if scan else ()
        return self.warp.setup(nwarps, tid, SHFL_WORDS, ids)

    # shuffles and what is built on them (gpucg/codegen/shuffle.py): statements, called by
    # every work-item of the work-group; op is sum, max, min or an expression in {a} and {b}

    @property
    def warp_size(self) -> int:
        return self.warp.size

    def shfl(self, mode: str, dst: str, value: str, arg: str, ctype: str = "float",
             width: int = 32) -> str:
        """dst = value of another lane: mode xor (lane ^ arg), up (lane - arg), down (lane +
        arg), idx (lane arg), within segments of ``width`` lanes."""
        return self.warp.shfl(mode, dst, value, arg, ctype, width)

    def warp_reduce(self, var: str, op: str, ctype: str = "float", width: int = 32) -> str:
        """var = the combination of var over each ``width`` lanes, in every lane."""
        return self.warp.warp_reduce(var, op, ctype, width)

    def warp_scan(self, var: str, op: str, ctype: str = "float", width: int = 32) -> str:
        """var = the inclusive scan of var over each ``width`` lanes, lane order."""
        return self.warp.warp_scan(var, op, ctype, width)

    def block_reduce(self, var: str, op: str, ctype: str, lanes: int, scratch: str = "") -> str:
        """var = the combination of var over each ``lanes`` consecutive work-items (a power of
        two); more than a warp exchange through ``scratch`` (one ctype a warp): 2 barriers."""
        return self.warp.block_reduce(var, op, ctype, lanes, scratch)

    def block_scan(self, var: str, op: str, ctype: str, lanes: int, scratch: str = "",
                   total: str = "", exclusive: str = "") -> str:
        """var = the inclusive scan of var over each ``lanes`` consecutive work-items; total
        (optional) = their combination; exclusive (optional) = the previous work-item's
        inclusive result (the first's: its own). More than a warp: 2 barriers."""
        return self.warp.block_scan(var, op, ctype, lanes, scratch, total, exclusive)

    def mma(self, kind: str, c: str, a: str, b: str) -> str:
        """c[0..3] += A * B for one warp tile: m16n8k16 (kind f16, bf16) or m16n8k8 (tf32)."""
        return self.warp.mma(kind, c, a, b)

    def to_tf32(self, regs: str, n: int) -> str:
        """Round n float32 registers regs[0..n) to TF32 in place (cvt.rna.tf32.f32): a tf32
        mma's operands, once per fragment rather than once per product."""
        return self.warp.to_tf32(regs, n)

    def store2(self, ptr: str, index: str, a: str, b: str, half) -> str:
        """Store floats a, b at ptr[index], ptr[index + 1] in one access (float2, or two
        16-bit floats rounded to nearest even); ptr + index must be aligned to the pair."""
        fmt = self.half_format(half)
        if fmt in FP8_DTYPES:
            raise DTypeError(f"store2 stores float, float16 or bfloat16 pairs, not {fmt}")
        if fmt == "bfloat16":  # one 32-bit word of two rounded halves, the lower at index
            u, g = self.utype(32), f"{self.global_ptr} " if self.global_ptr else ""
            return (f"*({g}{u}*)({ptr} + {index}) = ({u})gpucg_f2bf({a}) | "
                    f"(({u})gpucg_f2bf({b}) << 16);")
        return self.warp.store2(ptr, index, a, b, fmt == "float16")

    def pack2(self, a: str, b: str, half) -> str:
        """Floats a, b rounded to the 16-bit format ``half`` (nearest even) in one 32-bit
        register, a in the low half: an m16n8k16 fragment register made from accumulators."""
        fmt = self.half_format(half)
        if fmt == "bfloat16":
            u = self.utype(32)
            return f"(({u})gpucg_f2bf({a}) | (({u})gpucg_f2bf({b}) << 16))"
        if fmt != "float16":
            raise DTypeError(f"pack2 packs float16 or bfloat16, not {half!r}")
        return self.warp.pack_f16.format(a=a, b=b)

    def float_bits(self, x: str) -> str:
        """The bits of the float ``x`` as a 32-bit register (a tf32 fragment register)."""
        return self.warp.float_bits.format(x=x)

    def cp_async_commit(self) -> str:
        return self.warp.commit()

    def cp_async_wait(self, n: int) -> str:
        """Wait until at most n committed groups are pending (then a barrier publishes them)."""
        return self.warp.wait(n)

    # 128-bit global accesses (gpucg/codegen/vector.py): addresses 16-byte aligned

    def vlanes(self, dtype: str) -> int:
        return _vec.lanes(dtype)

    def vload(self, dst: str, ptr: str, index: str, dtype: str, count: int, space="global") -> str:
        return _vec.vload(self, dst, ptr, index, dtype, count, space)

    def vstore(self, ptr: str, index: str, values, dtype: str) -> str:
        return _vec.vstore(self, ptr, index, values, dtype)

    @property
    def unroll(self) -> str:
        return self.warp.unroll

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

    # A narrow float buffer is named by its storage format, ``half``: "float16", "bfloat16",
    # an FP8 name, True (float16, as templates wrote it before the others), or anything falsy
    # for a float buffer.

    @staticmethod
    def half_format(half) -> str:
        """The storage format (a name of gpucg.half.STORAGE_DTYPES), or "" for a buffer that
        is not narrow float storage."""
        if half is True:
            return "float16"
        return half if half in STORAGE_DTYPES else ""

    def storage(self, half) -> str:
        """The element type of a float buffer: float, or a narrow format kept only in memory."""
        fmt = self.half_format(half)
        return self.formats[fmt].ctype if fmt else "float"

    def load(self, ptr: str, index: str, half) -> str:
        """``ptr[index]`` as a float; narrow buffers are converted (no half arithmetic needed)."""
        fmt = self.half_format(half)
        return self.formats[fmt].load.format(ptr=ptr, index=index) if fmt else f"{ptr}[{index}]"

    def store(self, ptr: str, index: str, value: str, half) -> str:
        """A statement storing the float ``value`` at ``ptr[index]`` (narrow formats rounded to
        nearest even)."""
        fmt = self.half_format(half)
        if not fmt:
            return f"{ptr}[{index}] = {value};"
        return self.formats[fmt].store.format(ptr=ptr, index=index, value=value)

    def round_to(self, value: str, half) -> str:
        """The float ``value`` rounded to the narrow format ``half`` and back (what a store then
        a load gives, in a register); ``value`` itself for other buffers. The kernel defines
        the format's load and store helpers (:meth:`half_helpers`) and :meth:`round_helpers`."""
        fmt = self.half_format(half)
        if fmt and not self.formats[fmt].round:
            raise DTypeError(f"{self.name}: no rounding to {fmt} in a register")
        return self.formats[fmt].round.format(value=value) if fmt else value

    def round_helpers(self, half) -> str:
        """The helper :meth:`round_to` needs for ``half`` beyond the load and store ones."""
        fmt = self.half_format(half)
        return self.formats[fmt].round_fn if fmt else ""

    def _formats(self, used) -> set:
        items = used if isinstance(used, (list, tuple, set, frozenset)) else (used,)
        return {f for f in map(self.half_format, items) if f}

    def half_helpers(self, load, store) -> str:
        """The helper functions a kernel that loads (``load``) or stores (``store``) narrow
        floats needs, and only those. Each argument is a format (see :meth:`storage`), a bool
        (float16), or a list of them."""
        loads, stores = self._formats(load), self._formats(store)
        fns = [fn for name, f in self.formats.items()
               for fn, used in ((f.load_fn, name in loads), (f.store_fn, name in stores)) if used]
        return "\n".join(fn for fn in fns if fn)

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
    # narrow floats are storage only (see formats): no kernel includes cuda_fp16.h
    type_preambles={},
    source_ext=".cu",
    utypes={8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"},
    device_fn="__device__ __forceinline__",
    u64_suffix="ULL",
    formats={**_half.CUDA_FORMATS, **_fp8.CUDA_FORMATS},
    barrier_global="__syncthreads();",
    warp=CUDA_WARP,
    sync=CUDA_SYNC,
    dynamic=CUDA_DYNAMIC,
    tile=CUDA_TILE,
    hopper=CUDA_HOPPER,
    vector=_vec.CUDA_VECTORS,
    simd=CUDA_SIMD,
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
    # 16-bit floats are storage only: vload_half/vstore_half need no cl_khr_fp16
    type_preambles={"float64": "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"},
    source_ext=".cl",
    utypes={8: "uchar", 16: "ushort", 32: "uint", 64: "ulong"},
    device_fn="static inline",
    u64_suffix="UL",
    formats={**_half.OPENCL_FORMATS, **_fp8.OPENCL_FORMATS},
    barrier_global="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    warp=OPENCL_WARP,
    sync=OPENCL_SYNC,
    dynamic=OPENCL_DYNAMIC,
    tile=OPENCL_TILE,
    hopper=OPENCL_HOPPER,
    vector=_vec.OPENCL_VECTORS,
    simd=OPENCL_SIMD,
)

_DIALECTS = {"cuda": CUDA, "opencl": OPENCL}


def dialect_for(backend: str) -> Dialect:
    """The dialect a backend compiles."""
    try:
        return _DIALECTS[backend]
    except KeyError:
        raise DTypeError(f"backend {backend!r} compiles no kernel source") from None
