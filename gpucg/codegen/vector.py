"""128-bit global accesses: 16 bytes moved by one instruction (LDG.E.128 / STG.E.128 on CUDA,
an OpenCL vector type), unpacked to or packed from the elements' compute type.

A vector of 4- or 8-byte elements is the language's own vector type (float4, int4, double2,
64-bit pairs); 16- and 8-bit elements travel as a vector of four 32-bit words (uint4) and are
shifted out of (or into) them, float16 converted by the dialect's helpers, bfloat16 by a shift
into a float's upper half, FP8 by the format's conversions of its bits (gpucg/codegen/fp8.py). OpenCL's float16 buffers are ``half`` pointers: vloada_half8 and
vstorea_half8_rte move eight of them 16-byte aligned without cl_khr_fp16.

The address of every access must be a multiple of 16 bytes (the dispatcher checks the
arguments' alignment before it runs a vector config: Implementation.needs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import DTypeError
from ..half import FP8_DTYPES, HALF_DTYPES
from ..shape import DTYPES

#: bytes one vector access moves
WORD = 16
_COMP = "xyzw"


def itemsize(dtype: str) -> int:
    """Bytes of one element of a whitelisted dtype (narrow floats: their storage)."""
    if dtype not in DTYPES:
        raise DTypeError(f"dtype {dtype!r} has no vector access; allowed: {', '.join(DTYPES)}")
    return 2 if dtype in HALF_DTYPES else 1 if dtype in FP8_DTYPES else np.dtype(dtype).itemsize


def lanes(dtype: str) -> int:
    """Elements of ``dtype`` in one 16-byte access."""
    return WORD // itemsize(dtype)


@dataclass(frozen=True)
class VectorSpelling:
    """How a language spells its 16-byte vectors."""

    #: element dtype (4 or 8 bytes) -> its 16-byte vector type
    types: dict = field(default_factory=dict)
    #: a vector value from its components: ``{t}`` the type, ``{args}`` the components
    make: str = ""
    #: reinterpret a 32-bit unsigned int's bits as a float
    as_float: str = ""
    #: float16 eight at a time from a 16-byte aligned half pointer (``{ptr}``), and stored
    #: from a float8 (``{value}``); empty where float16 travels as words
    half8_load: str = ""
    half8_store: str = ""
    #: a 16-byte store of ``{value}`` (``{n}`` components) at ``{ptr}`` (of the vector's
    #: element type); empty: through a vector pointer. OpenCL stores by vstoreN, which
    #: Oclgrind counts as the bytes it moves (a vector literal stored through a pointer counts
    #: one element twice there)
    store: str = ""


CUDA_VECTORS = VectorSpelling(
    types={"float32": "float4", "int32": "int4", "uint32": "uint4", "float64": "double2",
           "int64": "longlong2", "uint64": "ulonglong2", "words": "uint4"},
    make="make_{t}({args})", as_float="__uint_as_float")
OPENCL_VECTORS = VectorSpelling(
    types={"float32": "float4", "int32": "int4", "uint32": "uint4", "float64": "double2",
           "int64": "long2", "uint64": "ulong2", "words": "uint4"},
    make="({t})({args})", as_float="as_float",
    half8_load="vloada_half8(0, {ptr})", half8_store="vstorea_half8_rte({value}, 0, {ptr});",
    store="vstore{n}({value}, 0, {ptr});")


def _at(ptr: str, index: str, q: int) -> str:
    if not re.fullmatch(r"[\w\s+*]+", index):
        index = f"({index})"
    return f"{ptr} + {index}" + (f" + {q}" if q else "")


def _ptr(d, vtype: str, const: bool, space: str = "global") -> str:
    qual = d.local_ptr if space == "local" else d.global_ptr
    qual = f"{qual} " if qual else ""
    return f"({qual}{'const ' if const else ''}{vtype}*)"


def vload(d, dst: str, ptr: str, index: str, dtype: str, count: int,
          space: str = "global") -> str:
    """Statements declaring ``const CT {dst}{k}`` = ptr[index + k] for k < count, CT the compute
    type (float for 16-bit floats), read ``lanes(dtype)`` elements an access (count a multiple
    of it; 1: one scalar load). ``space`` "local": ``ptr`` is a shared array of 16-bit units
    (Dialect.smem, 16-byte aligned) and ``index`` counts those units (LDS.128 on CUDA)."""
    if space not in ("global", "local"):
        raise DTypeError(f"vector load space {space!r}: 'global' or 'local'")
    half = d.half_format(dtype)
    ct = "float" if half else d.type(dtype)
    local = space == "local"
    if count == 1 and not local:
        value = d.load(ptr, index, dtype) if half else f"{ptr}[{index}]"
        return f"const {ct} {dst}0 = {value};"
    v, per, size = d.vector, lanes(dtype), itemsize(dtype)
    _check(count, per, dtype)
    out = []
    for q in range(0, count, per):
        w, at = f"{dst}_w{q // per}", _at(ptr, index, q * size // 2 if local else q)
        if half == "float16" and v.half8_load:
            if local:
                at = f"({d.local_ptr} const half*)({at})"
            out.append(f"const float8 {w} = {v.half8_load.format(ptr=at)};")
            elems = [f"{w}.s{k}" for k in range(per)]
        else:
            vt = v.types[dtype if size >= 4 else "words"]
            out.append(f"const {vt} {w} = *{_ptr(d, vt, True, space)}({at});")
            elems = [f"{w}.{_COMP[k]}" for k in range(per)] if size >= 4 else \
                [_unpack(d, f"{w}.{_COMP[k * size // 4]}", k * size % 4 * 8, dtype, half)
                 for k in range(per)]
        out += [f"const {ct} {dst}{q + k} = {e};" for k, e in enumerate(elems)]
    return "\n".join(out)


def _unpack(d, word: str, shift: int, dtype: str, half: str) -> str:
    if half == "bfloat16":
        bits = f"({word} << 16)" if shift == 0 else f"({word} & 0xFFFF0000U)"
        return f"{d.vector.as_float}({bits})"
    part = f"({word} >> {shift})" if shift else word
    if half in FP8_DTYPES:
        return d.formats[half].from_bits.format(bits=f"({part} & 0xFFU)")
    if half == "float16":
        return f"gpucg_h2f(({d.utype(16)}){part})"
    return f"({d.type(dtype)}){part}"


def vstore(d, ptr: str, index: str, values, dtype: str) -> str:
    """Statements storing ``values`` (compute-type expressions) at ptr[index + k], lanes(dtype)
    elements an access (one value: a scalar store)."""
    half = d.half_format(dtype)
    if len(values) == 1:
        return d.store(ptr, index, values[0], dtype) if half else f"{ptr}[{index}] = {values[0]};"
    v, per, size = d.vector, lanes(dtype), itemsize(dtype)
    _check(len(values), per, dtype)
    out = []
    for q in range(0, len(values), per):
        part, at = values[q:q + per], _at(ptr, index, q)
        if half == "float16" and v.half8_store:
            out.append(v.half8_store.format(ptr=at, value=v.make.format(
                t="float8", args=", ".join(part))))
            continue
        if size >= 4:
            vt, t = v.types[dtype], d.type(dtype)
            comps = [f"({t})({x})" for x in part]
        else:
            vt = v.types["words"]
            bits = [_bits(d, x, dtype, half) for x in part]
            step = 4 // size
            comps = [" | ".join(b if j == 0 else f"({b} << {j * size * 8})"
                                for j, b in enumerate(bits[c * step:(c + 1) * step]))
                     for c in range(4)]
        value = v.make.format(t=vt, args=", ".join(comps))
        if v.store:
            words = f"({d.global_ptr} {d.utype(32)}*)({at})" if size < 4 else at
            out.append(v.store.format(n=len(comps), value=value, ptr=words))
        else:
            out.append(f"*{_ptr(d, vt, False)}({at}) = {value};")
    return "\n".join(out)


def _bits(d, value: str, dtype: str, half: str) -> str:
    """A 16- or 8-bit element's bits as a 32-bit unsigned int."""
    u32 = d.utype(32)
    if half == "float16":
        return f"({u32})gpucg_f2h({value})"
    if half == "bfloat16":
        return f"({u32})gpucg_f2bf({value})"
    if half in FP8_DTYPES:
        return f"({u32}){d.formats[half].to_bits.format(value=value)}"
    return f"({u32})({d.utype(itemsize(dtype) * 8)})({d.type(dtype)})({value})"


def _check(count: int, per: int, dtype: str) -> None:
    if count % per:
        raise DTypeError(f"a vector access of {dtype} moves {per} elements; count={count} is "
                         f"not a multiple of {per}")
