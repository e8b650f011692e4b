"""The machine code (SASS) of CUDA kernels, with no GPU: NVRTC compiles for a real architecture
(ptxas runs, gpucg.verify.nvrtc), cuobjdump disassembles the CUBIN, and each kernel's
instructions are counted by kind.

cuobjdump comes from the ``nvidia-cuda-cuobjdump`` wheel (``pip install 'gpucg[sass]'``); it
reads the CUBINs of the NVRTC it ships with (13.x here, sm_80 and sm_90 checked by the tests).
The counted kinds (:data:`COLUMNS`) are the ones a GEMM is judged by: tensor-core multiplies
(HMMA), ldmatrix (LDSM), cp.async (LDGSTS), 128- and 64-bit global and shared loads and stores,
barriers, shuffles, FFMA, and local memory (LDL/STL: spills or arrays the compiler could not
keep in registers); LDS counts every shared-memory load, of any width.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailableError, InputError
from ..runtime.cache import DiskCache, cache_key
from . import nvrtc

_DISK = DiskCache(namespace="sass")

#: the counted kinds, in the order they are printed; TOTAL is every instruction
COLUMNS = ("HMMA", "LDSM", "LDGSTS", "LDG.128", "LDG.64", "STG.128", "LDS.128", "LDS.64",
           "STS.128", "BAR", "SHFL", "FFMA", "LDL", "STL", "LDS", "TOTAL")

_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")


def _kinds(opcode: str) -> list[str]:
    """The columns one opcode counts in (``LDG.E.128.CONSTANT`` -> ``LDG.128``)."""
    parts = opcode.split(".")
    base, mods = parts[0], set(parts[1:])
    width = "128" if "128" in mods else "64" if "64" in mods else ""
    if base in ("HMMA", "LDSM", "LDGSTS", "BAR", "SHFL", "FFMA", "LDL", "STL"):
        return [base]
    kinds = ["LDS"] if base == "LDS" else []
    if base in ("LDG", "STG", "LDS", "STS") and width:
        name = f"{base}.{width}"
        kinds += [name] if name in COLUMNS else []
    return kinds


def cuobjdump() -> str:
    """The cuobjdump binary: $GPUCG_CUOBJDUMP, the ``nvidia-cuda-cuobjdump`` wheel's, or one
    on PATH; BackendUnavailableError naming the extra to install when there is none."""
    env = os.environ.get("GPUCG_CUOBJDUMP")
    if env:
        return env
    try:
        import nvidia
    except ImportError:
        nvidia = None
    for root in getattr(nvidia, "__path__", []):
        for found in sorted(Path(root).glob("*/bin/cuobjdump")):
            return str(found)
    from shutil import which

    found = which("cuobjdump")
    if found:
        return found
    raise BackendUnavailableError("SASS needs cuobjdump, which is not installed: "
                                  "pip install 'gpucg[sass]' (the nvidia-cuda-cuobjdump wheel)")


@functools.lru_cache(maxsize=1)
def version() -> str:
    """cuobjdump's release line ("Cuda compilation tools, release 13.5, V13.5.37")."""
    out = subprocess.run([cuobjdump(), "--version"], capture_output=True, text=True, check=True)
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else out.stdout.strip()


def disassemble(cubin: bytes) -> str:
    """cuobjdump -sass of one CUBIN."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(bytes(cubin))
        out = subprocess.run([cuobjdump(), "-sass", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise InputError(f"cuobjdump could not read the CUBIN ({version()}): {out.stderr.strip()}")
    return out.stdout


def parse_sass(text: str) -> dict[str, list[str]]:
    """kernel -> its opcodes in order, from cuobjdump -sass output (predicates dropped)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            current.append(m.group(1))
    return out


_LISTED = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)"
                     r"([^;]*);")


def parse_listing(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """kernel -> its instructions as (address, opcode, operands), from cuobjdump -sass."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _LISTED.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2), m.group(3).strip()))
    return out


@dataclass(frozen=True)
class Loop:
    """A loop of the machine code: the instructions from a backward branch's target to the
    branch, and whether another loop lies inside it."""

    start: int
    end: int
    opcodes: tuple
    innermost: bool

    @property
    def count(self) -> int:
        """Instructions in one trip around the loop's body (branches taken or not)."""
        return len(self.opcodes)

    @property
    def mix(self) -> dict[str, int]:
        return instruction_mix(self.opcodes)


def loops(listing) -> list[Loop]:
    """The loops of one kernel's listing (:func:`parse_listing`): each backward branch
    (BRA to an address at or before its own) closes one; sorted by start."""
    spans = set()
    for addr, op, args in listing:
        m = re.match(r"(0x[0-9a-f]+)", args)
        if op.startswith("BRA") and m and int(m.group(1), 16) <= addr:
            spans.add((int(m.group(1), 16), addr))
    out = []
    for start, end in sorted(spans):
        inner = any(s != start or e != end for s, e in spans if start <= s and e <= end)
        out.append(Loop(start, end, tuple(op for a, op, _ in listing if start <= a <= end),
                        not inner))
    return out


def kernel_listing(source: str, entry: str, arch: str = "sm_90",
                   options: tuple = nvrtc.DEFAULT_OPTIONS) -> list[tuple[int, str, str]]:
    """The instructions of ``entry`` in ``source`` compiled for ``arch``, as
    :func:`parse_listing` gives them."""
    ok, why = nvrtc.available()
    if not ok:
        raise BackendUnavailableError(f"SASS needs NVRTC: {why}")
    cubin, _ = nvrtc.compile_to_cubin(source, arch, tuple(options))
    listing = parse_listing(disassemble(cubin))
    if entry not in listing:
        raise InputError(f"cuobjdump found no kernel {entry!r} for {arch} "
                         f"(found: {', '.join(listing) or 'none'})")
    return listing[entry]


def kernel_loops(source: str, entry: str, arch: str = "sm_90",
                 options: tuple = nvrtc.DEFAULT_OPTIONS) -> list[Loop]:
    """The loops of ``entry`` in ``source`` compiled for ``arch`` (see :func:`loops`)."""
    return loops(kernel_listing(source, entry, arch, options))


def instruction_mix(opcodes) -> dict[str, int]:
    """Counts per column of :data:`COLUMNS` of a kernel's opcodes."""
    mix = dict.fromkeys(COLUMNS, 0)
    for op in opcodes:
        for kind in _kinds(op):
            mix[kind] += 1
        mix["TOTAL"] += 1
    return mix


def kernel_mix(source: str, entry: str, arch: str = "sm_90",
               options: tuple = nvrtc.DEFAULT_OPTIONS) -> dict[str, int]:
    """The instruction mix of ``entry`` in ``source`` compiled for ``arch`` (cached on disk)."""
    ok, why = nvrtc.available()
    if not ok:
        raise BackendUnavailableError(f"SASS needs NVRTC: {why}")
    key = cache_key("sass", source, entry, arch, tuple(options), why, version(), COLUMNS)
    blob = _DISK.get(key)
    if blob is not None:
        return json.loads(blob)
    cubin, _ = nvrtc.compile_to_cubin(source, arch, tuple(options))
    kernels = parse_sass(disassemble(cubin))
    if entry not in kernels:
        raise InputError(f"cuobjdump found no kernel {entry!r} for {arch} "
                         f"(found: {', '.join(kernels) or 'none'})")
    mix = instruction_mix(kernels[entry])
    _DISK.put(key, json.dumps(mix).encode())
    return mix


def assert_sass(mix: dict, has=(), none=(), what: str = "kernel") -> None:
    """AssertionError unless every kind of ``has`` occurs in ``mix`` and none of ``none``."""
    missing = [k for k in has if not mix.get(k)]
    present = [f"{k} x{mix[k]}" for k in none if mix.get(k)]
    if missing or present:
        raise AssertionError(f"{what}: SASS lacks {missing or 'nothing'}, holds "
                             f"{present or 'nothing forbidden'}; mix {mix}")


def format_mix(rows, mixes) -> str:
    """The table ``gpucg resources --sass`` prints: one line per resource row and its mix."""
    cw = max([len("implementation")] + [len(r.impl) + 1 for r in rows])
    head = f"{'implementation':<{cw}} {'kernel':<13} " + " ".join(f"{c:>7}" for c in COLUMNS)
    out = [head]
    for r, mix in zip(rows, mixes):
        out.append(f"{r.impl + ('*' if r.selected else ''):<{cw}} {r.kernel[:13]:<13} "
                   + " ".join(f"{mix[c]:>7}" for c in COLUMNS))
    return "\n".join(out)
