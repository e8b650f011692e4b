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
from pathlib import Path

from ..errors import BackendUnavailableError, InputError
from ..runtime.cache import DiskCache, cache_key
from . import nvrtc

_DISK = DiskCache(namespace="sass")

#: the counted kinds, in the order they are printed; TOTAL is every instruction; LOOP and
#: LOOP.MMA the static instructions and tensor-core instructions of the hot loop
#: (:func:`hot_loop`)
COLUMNS = ("HMMA", "LDSM", "LDGSTS", "LDG.128", "LDG.64", "STG.128", "LDS.128", "LDS.64",
           "STS.128", "BAR", "SHFL", "FFMA", "LDL", "STL", "LDS", "TOTAL", "LOOP", "LOOP.MMA")
#: tensor-core instructions: mma.sync (HMMA; IMMA for integers; QMMA for FP8 on sm_89+) and
#: wgmma (HGMMA; QGMMA for FP8; IGMMA)
MMA_OPCODES = ("HMMA", "IMMA", "QMMA", "HGMMA", "QGMMA", "IGMMA")

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)(.*)")
#: a branch's target: an address, or a label cuobjdump defines on a line of its own
_TARGET = re.compile(r"^\s*(?:0x([0-9a-f]+)|`\(([.\w]+)\))")
_LABEL = re.compile(r"^\s*([.\w]+):\s*$")
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


def parse_instructions(text: str) -> dict[str, list[tuple[int, str, int | None]]]:
    """kernel -> its instructions in order as (address, opcode, branch target or None), from
    cuobjdump -sass output (predicates dropped; a BRA's target resolved from its address or
    its label)."""
    out: dict[str, list] = {}
    current, labels, pending, unresolved = None, {}, [], []
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            labels, pending = {}, []
            continue
        m = _LABEL.match(line)
        if m and current is not None:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            addr, op, rest = int(m.group(1), 16), m.group(2), m.group(3)
            for name in pending:
                labels[name] = addr
            pending = []
            target = None
            if op.split(".")[0] == "BRA":
                t = _TARGET.match(rest)
                if t and t.group(1):
                    target = int(t.group(1), 16)
                elif t:
                    unresolved.append((current, len(current), t.group(2), labels))
            current.append((addr, op, target))
    for instrs, i, name, table in unresolved:
        if name in table:
            addr, op, _ = instrs[i]
            instrs[i] = (addr, op, table[name])
    return out


def parse_sass(text: str) -> dict[str, list[str]]:
    """kernel -> its opcodes in order, from cuobjdump -sass output (predicates dropped)."""
    return {k: [op for _, op, _ in v] for k, v in parse_instructions(text).items()}


def _is_mma(op: str) -> bool:
    return op.split(".")[0] in MMA_OPCODES


def hot_loop(instructions) -> tuple[int, int]:
    """(instructions, tensor-core instructions) of a kernel's hot loop, statically: of the
    loops (a backward branch and the instructions from its target to it, nested loops and
    cold paths inside included) the one holding the most tensor-core instructions, and of
    those the innermost; (0, 0) for a kernel without one. ``instructions``: one kernel's
    :func:`parse_instructions`."""
    best = (0, 0)
    addrs = [a for a, _, _ in instructions]
    for i, (addr, _, target) in enumerate(instructions):
        if target is None or target > addr:
            continue
        lo = next((j for j, a in enumerate(addrs) if a >= target), i)
        body = instructions[lo:i + 1]
        mma = sum(1 for _, op, _ in body if _is_mma(op))
        if mma and (mma > best[1] or (mma == best[1] and len(body) < best[0])):
            best = (len(body), mma)
    return best


def instruction_mix(opcodes) -> dict[str, int]:
    """Counts per column of :data:`COLUMNS` of a kernel's opcodes (or of its
    :func:`parse_instructions`, which adds the hot loop's LOOP and LOOP.MMA)."""
    mix = dict.fromkeys(COLUMNS, 0)
    ops = list(opcodes)
    if ops and isinstance(ops[0], tuple):
        mix["LOOP"], mix["LOOP.MMA"] = hot_loop(ops)
        ops = [op for _, op, _ in ops]
    for op in ops:
        for kind in _kinds(op):
            mix[kind] += 1
        mix["TOTAL"] += 1
    return mix


def per_mma(mix: dict) -> float | None:
    """Static instructions of the hot loop per tensor-core instruction in it (None without)."""
    return mix["LOOP"] / mix["LOOP.MMA"] if mix.get("LOOP.MMA") else None


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
    kernels = parse_instructions(disassemble(cubin))
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
    head = (f"{'implementation':<{cw}} {'kernel':<13} " + " ".join(f"{c:>7}" for c in COLUMNS)
            + "  loop/MMA")
    out = [head]
    for r, mix in zip(rows, mixes):
        ratio = per_mma(mix)
        out.append(f"{r.impl + ('*' if r.selected else ''):<{cw}} {r.kernel[:13]:<13} "
                   + " ".join(f"{mix.get(c, 0):>7}" for c in COLUMNS)
                   + (f"  {ratio:8.1f}" if ratio is not None else f"  {'-':>8}"))
    out.append("LOOP: static instructions of the loop holding the most tensor-core instructions "
               "(the innermost such; its cold paths included), LOOP.MMA: those it holds; "
               "loop/MMA = LOOP / LOOP.MMA")
    return "\n".join(out)
