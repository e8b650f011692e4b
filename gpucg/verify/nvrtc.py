"""Compile CUDA source to PTX or CUBIN with NVRTC, with no GPU and no driver (cuda-bindings)."""

from __future__ import annotations

import functools

from ..codegen.wgmma import required_arch  # noqa: F401  (re-exported: the pass and tests ask)
from ..errors import BackendUnavailableError, CompileError
from ..runtime.cache import DiskCache, cache_key

DEFAULT_OPTIONS = ("-std=c++14",)


def available() -> tuple[bool, str]:
    """(True, version) when NVRTC can be loaded, else (False, reason)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        return False, f"cuda-bindings is not installed ({exc}); pip install 'gpucg[nvrtc]'"
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # the shared library itself is missing
        return False, f"NVRTC library not found ({exc}); pip install nvidia-cuda-nvrtc"
    if int(err) != 0:
        return False, f"nvrtcVersion failed ({err})"
    return True, f"{major}.{minor}"


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def _compile(source: str, arch_option: str, options: tuple, name: str, arch: str,
             binary: bool) -> tuple[bytes, str]:
    """(PTX or CUBIN, NVRTC's log) or CompileError with the log."""
    ok, why = available()
    if not ok:
        raise BackendUnavailableError(why)
    from cuda.bindings import nvrtc

    opts = [arch_option, *options]
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffer: a fresh bytearray, never a bytes object (``b" " * 1``
        # is CPython's shared one-byte b" ", and an empty log's NUL once overwrote it, so that
        # every later Jinja string literal " " rendered as NUL)
        buf = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00 ")
        if int(err) != 0:
            raise CompileError(f"NVRTC compile of {name} for {arch} failed", source, tuple(opts),
                               log)
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if binary
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        size = _check(get_size(prog), "nvrtcGetCUBINSize" if binary else "nvrtcGetPTXSize")
        buf = bytearray(size)
        get(prog, buf)
        return bytes(buf), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _virtual(arch: str) -> str:
    """NVRTC's option for PTX of ``arch``'s virtual architecture (sm_90 -> compute_90)."""
    return f"--gpu-architecture=compute_{arch.removeprefix('sm_')}"


@functools.lru_cache(maxsize=4096)
def compile_to_ptx(source: str, arch: str = "sm_90", options: tuple = DEFAULT_OPTIONS,
                   name: str = "kernel.cu") -> str:
    """PTX for ``source`` on ``arch`` (``sm_80``...), or CompileError with NVRTC's log."""
    ptx, _ = _compile(source, _virtual(arch), tuple(options), name, arch, binary=False)
    return ptx.decode(errors="replace").rstrip("\x00")


#: (CUBIN, log) of compile_to_cubin, by source, arch, options and NVRTC's version
_CUBINS = DiskCache(namespace="cubins")


def compile_to_cubin(source: str, arch: str = "sm_90", options: tuple = DEFAULT_OPTIONS,
                     name: str = "kernel.cu") -> tuple[bytes, str]:
    """(CUBIN, ptxas's verbose report) for ``source`` on the real architecture ``arch``.

    Compiling for ``sm_XY`` rather than ``compute_XY`` makes NVRTC run ptxas, the assembler
    that allocates registers; ``-Xptxas=-v`` puts its report (registers, shared memory, stack
    frame, spill stores and loads per kernel) in NVRTC's log. Cached on disk (gpucg's cache
    directory, ``cubins``) by source, arch, options and NVRTC's version: the resources and the
    SASS of a kernel, and each entry of a source, take one compile.
    """
    ok, version = available()
    key = cache_key("cubin", source, arch, tuple(options), name, version) if ok else None
    blob = _CUBINS.get(key) if key else None
    if blob is not None:  # the log's length, the log, the CUBIN
        n = int.from_bytes(blob[:4], "little")
        return blob[4 + n:], blob[4:4 + n].decode()
    cubin, log = _compile(source, f"--gpu-architecture={arch}", (*options, "-Xptxas=-v"), name,
                          arch, binary=True)
    if key:
        text = log.encode()
        _CUBINS.put(key, len(text).to_bytes(4, "little") + text + cubin)
    return cubin, log


#: a kernel's declaration in gpucg's CUDA sources (the CUDA Dialect's ``kernel``)
_ENTRY = 'extern "C" __global__'


@functools.lru_cache(maxsize=1)
def _fast_flags() -> tuple:
    ok, version = available()
    if ok and tuple(int(v) for v in version.split(".")[:2]) >= (12, 8):
        return ("--Ofast-compile=max",)
    return ()


def check_options(options: tuple = DEFAULT_OPTIONS) -> tuple:
    """The options check_sources compiles with: ``options``, plus ``--Ofast-compile=max``
    where NVRTC has it (12.8 on). That keeps the front end and PTX emission whole and drops most
    of the optimizer: 2.6x quicker a source (31.9 against 81.8 ms on the test machine), and
    what decides whether a source compiles is the same, as are the kernels' entries; a
    ``__shared__`` variable the optimizer would fold away may stay declared. Resources and SASS
    (verify.resources, verify.sass) compile with the optimizer, as a launch does."""
    return (*options, *_fast_flags())


def check_sources(sources: list[str], arch: str = "sm_90",
                  batch: int = 48) -> list[tuple[int, CompileError]]:
    """Compile many gpucg sources to PTX for ``arch`` (with :func:`check_options`); the
    (index, CompileError) of each that fails on its own.

    Each NVRTC call costs about 15 ms before it reads a line, so sources are compiled
    ``batch`` at a time as one translation unit: each inside its own namespace, its kernels
    declared C++ rather than ``extern "C"`` (so that two configs of one kernel, which share an
    entry name, do not collide). Nothing leaks between units but the preprocessor, so a source
    with a ``#define`` or ``#include`` is compiled alone; a batch that fails, or whose PTX has
    fewer entries than its sources declare, is compiled again source by source, so every
    failure names its own source with its own log (a source alone that compiles to fewer
    entries than it declares fails too).
    """
    options, arch_option = check_options(), _virtual(arch)
    failures: list[tuple[int, CompileError]] = []
    alone = [i for i, s in enumerate(sources) if "#define" in s or "#include" in s]
    together = [i for i in range(len(sources)) if i not in set(alone)]
    for start in range(0, len(together), batch):
        group = together[start:start + batch]
        unit = "\n".join(f"namespace gpucg_unit_{i} {{\n{sources[i].replace(_ENTRY, '__global__')}"
                         f"\n}}  // namespace gpucg_unit_{i}" for i in group)
        try:  # not through compile_to_ptx: its cache would hold every unit's text
            ptx = _compile(unit, arch_option, options, "units.cu", arch,
                           binary=False)[0].decode(errors="replace")
            if ptx.count(".entry ") >= sum(sources[i].count(_ENTRY) for i in group):
                continue
        except CompileError:
            pass
        alone += group
    for i in sorted(alone):
        try:
            ptx = _compile(sources[i], arch_option, options, "kernel.cu", arch,
                           binary=False)[0].decode(errors="replace")
        except CompileError as exc:
            failures.append((i, exc))
            continue
        kernels = sources[i].count(_ENTRY)
        if ptx.count(".entry ") < kernels:
            failures.append((i, CompileError(
                f"NVRTC emitted {ptx.count('.entry ')} entries for {arch}, the source declares "
                f"{kernels} kernels", sources[i], (arch_option, *options), ptx[-2000:])))
    return failures
