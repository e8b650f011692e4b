"""Compile CUDA source to PTX with NVRTC, with no GPU and no driver (cuda-bindings)."""

from __future__ import annotations

import functools

from ..errors import BackendUnavailableError, CompileError

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


@functools.lru_cache(maxsize=4096)
def compile_to_ptx(source: str, arch: str = "sm_90", options: tuple = DEFAULT_OPTIONS,
                   name: str = "kernel.cu") -> str:
    """PTX for ``source`` on ``arch`` (``sm_80``...), or CompileError with NVRTC's log."""
    ok, why = available()
    if not ok:
        raise BackendUnavailableError(why)
    from cuda.bindings import nvrtc

    opts = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}", *options]
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if int(err) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            buf = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, buf)
            raise CompileError(f"NVRTC compile of {name} for {arch} failed", source, tuple(opts),
                               buf.decode(errors="replace").rstrip("\x00 "))
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.decode(errors="replace").rstrip("\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
