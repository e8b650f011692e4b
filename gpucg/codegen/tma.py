"""TMA (the Tensor Memory Accelerator, ``cp.async.bulk.tensor``): the tensor map a copy reads,
validated as the CUDA driver's cuTensorMapEncodeTiled documents it, and what a tiled box copy
does, as one Python definition that the OpenCL emulation, the tests and the host share
(gpucg/runtime/tensor_map.py encodes a TensorMap through the driver).

A tensor map describes a global tensor of rank 1-5, dimension 0 innermost (the driver's
order, the reverse of NumPy's shape): ``dims`` elements per dimension, ``strides`` bytes
between consecutive indices of dimensions 1.. (dimension 0 is contiguous), and the ``box`` one
copy moves. A load of the box at coordinates ``c`` (which may lie partly or wholly outside the
tensor, negative too) writes box element ``i`` (dimension 0 fastest) to shared memory at byte
``i * elem_bytes`` from the destination, swizzled by address (gpucg/codegen/hopper_layouts.py:
``swizzle_address``), reading tensor element ``c + i``; elements outside the tensor are zeros
(or NaN with ``oob_fill="nan"``). A store writes the box back, skipping elements outside.
Element strides other than 1 are validated but not emulated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import InputError
from .hopper_layouts import SWIZZLES, swizzle_address

#: CUtensorMapDataType of each gpucg dtype (FP8, bool and int8 travel as UINT8, as CUTLASS's)
DATA_TYPES = {"uint8": 0, "int8": 0, "bool": 0, "float8_e4m3fn": 0, "float8_e5m2": 0,
              "uint16": 1, "int16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5,
              "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
ELEM_BYTES = {"uint8": 1, "int8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
              "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2, "uint32": 4, "int32": 4,
              "float32": 4, "uint64": 8, "int64": 8, "float64": 8}
_FLOAT_TYPES = {6, 7, 8, 9}
#: enum values of the driver's CUtensorMapInterleave, CUtensorMapSwizzle,
#: CUtensorMapL2promotion and CUtensorMapFloatOOBfill
INTERLEAVES = {"none": 0, "16B": 1, "32B": 2}
SWIZZLE_ENUM = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}
OOB_FILLS = {"zero": 0, "nan": 1}
#: a tensor map as a kernel parameter: 128 opaque bytes, 64-byte aligned, passed by value
#: (``const __grid_constant__ gpucg_tensor_map tm``); PTX declares ``.param .align 64 .b8 tm[128]``
TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN = 128, 64
CUDA_TENSOR_MAP_TYPE = ("/* a TMA tensor map (CUtensorMap): 128 opaque bytes, 64-byte aligned */\n"
                        "struct __align__(64) gpucg_tensor_map { unsigned long long opaque[16]; };\n")


def _ints(name: str, values) -> tuple:
    try:
        out = tuple(values)
    except TypeError:
        raise InputError(f"TensorMap {name}={values!r} must be a sequence of ints") from None
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in out):
        raise InputError(f"TensorMap {name}={values!r} must be a sequence of ints")
    return tuple(int(v) for v in out)


@dataclass(frozen=True)
class TensorMap:
    """A tiled tensor map (cuTensorMapEncodeTiled's parameters), validated on construction.

    Attributes:
        dtype: a gpucg dtype name (DATA_TYPES).
        dims: elements per dimension, innermost first (rank 1-5).
        strides: bytes between consecutive indices of dimensions 1..rank-1.
        box: elements one copy moves per dimension.
        element_strides: the traversal step per dimension (default 1s).
        interleave: "none", "16B" or "32B".
        swizzle: 0, 32, 64 or 128 (bytes).
        l2_promotion: 0, 64, 128 or 256 (bytes).
        oob_fill: "zero", or "nan" (NaN_REQUEST_ZERO_FMA: float types only).
        address: the global address of element 0 (0: not bound yet).
    """

    dtype: str
    dims: tuple
    strides: tuple
    box: tuple
    element_strides: tuple = ()
    interleave: str = "none"
    swizzle: int = 0
    l2_promotion: int = 0
    oob_fill: str = "zero"
    address: int = 0

    def __post_init__(self):
        for name in ("dims", "strides", "box", "element_strides"):
            object.__setattr__(self, name, _ints(name, getattr(self, name)))
        if not self.element_strides:
            object.__setattr__(self, "element_strides", (1,) * len(self.dims))
        self.validate()

    @classmethod
    def for_array(cls, shape, dtype: str, box, *, strides=None, **kw) -> "TensorMap":
        """A tensor map of an array of NumPy ``shape`` (outermost first) and byte ``strides``
        (NumPy's; default C-contiguous), with ``box`` in NumPy order too."""
        shape, box = _ints("shape", shape), _ints("box", box)
        if dtype not in ELEM_BYTES:
            raise InputError(f"TensorMap dtype={dtype!r} is not allowed; allowed: "
                             f"{', '.join(ELEM_BYTES)}")
        es = ELEM_BYTES[dtype]
        if strides is None:
            strides = [es]
            for d in reversed(shape[1:]):
                strides.insert(0, strides[0] * d)
        strides = _ints("strides", strides)
        if len(strides) != len(shape) or strides[-1] != es:
            raise InputError(f"TensorMap strides={strides} must have one entry per dimension "
                             f"of shape={shape}, the innermost {es} (contiguous)")
        return cls(dtype, shape[::-1], strides[-2::-1], box[::-1], **kw)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def box_bytes(self) -> int:
        """Bytes one box copy delivers (the expect_tx of its mbarrier)."""
        n = self.elem_bytes
        for b, e in zip(self.box, self.element_strides):
            n *= -(-b // e)
        return n

    def with_address(self, address: int) -> "TensorMap":
        return replace(self, address=address)

    def validate(self) -> None:
        """InputError naming the first requirement of cuTensorMapEncodeTiled (CUDA driver API,
        "Tensor Map Object Management") this map breaks."""
        bad = _problem(self)
        if bad:
            raise InputError(f"TensorMap: {bad}")

    def box_in_bounds(self, coords) -> bool:
        """Whether the box at ``coords`` lies wholly inside the tensor."""
        return all(0 <= c and c + b <= d for c, b, d in zip(coords, self.box, self.dims))


def _problem(t: TensorMap) -> str:
    rank = len(t.dims)
    if t.dtype not in DATA_TYPES:
        return f"dtype={t.dtype!r} is not allowed; allowed: {', '.join(DATA_TYPES)}"
    es = ELEM_BYTES[t.dtype]
    if t.interleave not in INTERLEAVES:
        return f"interleave={t.interleave!r} is not allowed; allowed: {', '.join(INTERLEAVES)}"
    for name, table in (("swizzle", SWIZZLE_ENUM), ("l2_promotion", L2_PROMOTIONS),
                        ("oob_fill", OOB_FILLS)):
        if getattr(t, name) not in table:
            return (f"{name}={getattr(t, name)!r} is not allowed; allowed: "
                    f"{', '.join(map(str, table))}")
    if not 1 <= rank <= 5:
        return f"rank {rank} (dims={t.dims}) must be 1 to 5"
    if t.interleave != "none" and rank < 3:
        return f"interleave={t.interleave!r} needs rank >= 3, got {rank}"
    align = 32 if t.interleave == "32B" else 16
    if t.address % align:
        return (f"address=0x{t.address:x} must be {align}-byte aligned (32 with interleave "
                "32B, else 16)")
    if len(t.strides) != rank - 1 or len(t.box) != rank or len(t.element_strides) != rank:
        return (f"strides={t.strides} needs {rank - 1} entries, box={t.box} and "
                f"element_strides={t.element_strides} {rank} (rank {rank})")
    for i, d in enumerate(t.dims):
        if not 1 <= d <= 1 << 32:
            return f"dims[{i}]={d} must be in [1, 2**32]"
    for i, s in enumerate(t.strides):
        if s % 16 or not 0 < s < 1 << 40:
            return f"strides[{i}]={s} bytes must be a positive multiple of 16 below 2**40"
        if t.interleave == "32B" and s % 32:
            return f"strides[{i}]={s} bytes must be a multiple of 32 with interleave 32B"
        below = t.dims[0] * es if i == 0 else t.dims[i] * t.strides[i - 1]
        if s < below:
            return (f"strides[{i}]={s} bytes overlaps dimension {i}: at least "
                    f"{'dims[0] * elem_bytes' if i == 0 else f'dims[{i}] * strides[{i - 1}]'}"
                    f" = {below}")
    for i, b in enumerate(t.box):
        if not 1 <= b <= 256:
            return f"box[{i}]={b} must be in [1, 256]"
    for i, e in enumerate(t.element_strides):
        if not 1 <= e <= 8:
            return f"element_strides[{i}]={e} must be in [1, 8]"
    inner = t.box[0] * es
    if t.interleave == "none":
        if inner % 16:
            return f"box[0] * elem_bytes = {inner} must be a multiple of 16 (interleave none)"
        if t.swizzle and inner > t.swizzle:
            return (f"box[0] * elem_bytes = {inner} bytes exceeds the {t.swizzle}-byte "
                    "swizzle span")
    if t.interleave == "32B" and t.swizzle != 32:
        return f"interleave 32B needs swizzle=32, got {t.swizzle}"
    if t.oob_fill == "nan" and DATA_TYPES[t.dtype] not in _FLOAT_TYPES:
        return f"oob_fill='nan' needs a float dtype, not {t.dtype}"
    return ""


# -- the copy, emulated ---------------------------------------------------------------------

def _box_elements(t: TensorMap, coords):
    """(flat byte offsets in the tensor or -1 outside, shared-memory byte offsets before the
    swizzle) of the box's elements, dimension 0 fastest."""
    if any(e != 1 for e in t.element_strides):
        raise InputError(f"TensorMap element_strides={t.element_strides}: only 1s are emulated")
    coords = _ints("coords", coords)
    if len(coords) != t.rank:
        raise InputError(f"coords={coords} needs {t.rank} entries (dimension 0 innermost)")
    grids = np.meshgrid(*[np.arange(b) + c for b, c in zip(t.box, coords)], indexing="ij")
    pos = [g.transpose(tuple(range(t.rank))[::-1]).reshape(-1) for g in grids]
    inside = np.ones(pos[0].shape, bool)
    for p, d in zip(pos, t.dims):
        inside &= (p >= 0) & (p < d)
    strides = (t.elem_bytes,) + t.strides
    offset = sum(p.astype(np.int64) * s for p, s in zip(pos, strides))
    return np.where(inside, offset, -1), np.arange(pos[0].size, dtype=np.int64) * t.elem_bytes


def _check_smem(at: int, t: TensorMap, smem: np.ndarray) -> None:
    if at % 128:
        raise InputError(f"box copy: the shared-memory address {at} must be 128-byte aligned")
    if at + t.box_bytes > smem.size:
        raise InputError(f"box copy: {t.box_bytes} bytes at {at} overrun shared memory of "
                         f"{smem.size} bytes")


def box_load(t: TensorMap, memory: np.ndarray, coords, smem: np.ndarray, dst: int = 0) -> int:
    """Copy the box at ``coords`` from ``memory`` (the bytes from the tensor's element 0 on,
    uint8) into ``smem`` (uint8) at byte ``dst``, as cp.async.bulk.tensor does; returns the
    transaction bytes (those the copy completes on its mbarrier: the whole box)."""
    _check_smem(dst, t, smem)
    src, off = _box_elements(t, coords)
    addr = np.array([swizzle_address(int(o) + dst, t.swizzle) for o in off], np.int64)
    es = t.elem_bytes
    fill = np.zeros(es, np.uint8)
    if t.oob_fill == "nan":
        fill = np.array([np.nan], {2: np.float16, 4: np.float32, 8: np.float64}[es]).view(np.uint8)
        if t.dtype == "bfloat16":
            fill = np.array([0xC0, 0x7F], np.uint8)
    for s, a in zip(src, addr):
        smem[a:a + es] = memory[s:s + es] if s >= 0 else fill
    return t.box_bytes


def box_store(t: TensorMap, smem: np.ndarray, src: int, memory: np.ndarray, coords) -> None:
    """Copy a box from ``smem`` (swizzled, at byte ``src``) back to ``memory`` at ``coords``;
    elements outside the tensor are not written."""
    _check_smem(src, t, smem)
    dst, off = _box_elements(t, coords)
    es = t.elem_bytes
    for d, o in zip(dst, off):
        if d >= 0:
            a = swizzle_address(int(o) + src, t.swizzle)
            memory[d:d + es] = smem[a:a + es]


__all__ = ["CUDA_TENSOR_MAP_TYPE", "DATA_TYPES", "SWIZZLES", "TensorMap", "box_load",
           "box_store"]
