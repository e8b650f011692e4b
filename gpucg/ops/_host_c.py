"""Host kernels in C for the numpy target, built once with the system C compiler for this CPU.

NumPy has no fused multiply-add over a window and its float32 exp costs 6-13 simple passes, so
a depthwise convolution runs at about 2.7 GMAC/s in its best einsum form and SiLU at 2.3-3.4 ns
an element, which puts EfficientNet-B0's NumPy floor above twice onnxruntime's whole forward
(benchmarks/numpy_floor.py). Three float32 kernels of templates/host/kernels.c.j2 take those
paths where a C compiler is present (strategies/conv2d_c.py and ops/_epilogue.py call them):
depthwise convolution on channels-last data and the direct convolution of few taps an output
(a stem, a patchify), each with its bias and activation, and the epilogue's bias and
activation; each activation is the elementwise operator's own C expression (gpucg/ops/
_unary.py, as the OpenCL kernels spell it), its exp a vectorizable float32 one (within 4 ulp of
NumPy's). Everything else, and every machine without a compiler (or with GPUCG_HOST_C=0), runs
the NumPy paths. The library is cached in the cache directory by a key of its source, the
compiler's version and flags and this CPU's features.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .. import settings
from ..codegen.dialect import OPENCL
from ..codegen.render import environment
from ..runtime.cache import cache_key
from . import _expr

log = logging.getLogger("gpucg.host_c")
#: the activations the kernels know, by index (None: none)
ACTIVATIONS = (None, "relu", "silu", "hardswish", "sigmoid")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared")
_LONG, _PTR = ctypes.c_long, ctypes.c_void_p


def source() -> str:
    """The C source: the template with each activation's C expression."""
    acts = []
    for name in ACTIVATIONS:
        tree = _expr.activation_tree(name, "float32")
        lines, result, _ = ([], "v", {}) if tree is None else \
            _expr.to_c(tree, OPENCL, inputs=("v",), temp="a")
        acts.append((name or "none", lines, result))
    return environment().get_template("host/kernels.c.j2").render(activations=acts)


def _cpu() -> str:
    try:
        return next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                     if ln.startswith(("flags", "Features"))), platform.processor())
    except OSError:
        return platform.processor()


def library():
    """The loaded library, or None (GPUCG_HOST_C=0, no C compiler, a failed build: the reason
    is :func:`status`'s). Built once a process; the setting is read each call."""
    return _build()[0] if settings.get("GPUCG_HOST_C") else None


def status() -> tuple[bool, str]:
    """(usable, why not or which compiler)."""
    if not settings.get("GPUCG_HOST_C"):
        return False, "GPUCG_HOST_C=0"
    lib, why = _build()
    return lib is not None, why


def forget() -> None:
    """Forget this process's build: the next call finds the compiler and the library again."""
    _build.cache_clear()


@functools.cache
def _build():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler (cc, gcc or $CC) on PATH"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[:1]
        src = source()
        key = cache_key("host_c", src, version, FLAGS, _cpu())
        path = settings.cache_dir() / "host_c" / f"{key}.so"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
                c_file, so = Path(tmp) / "kernels.c", Path(tmp) / "kernels.so"
                c_file.write_text(src)
                done = subprocess.run([cc, *FLAGS, "-o", str(so), str(c_file), "-lm"],
                                      capture_output=True, text=True, timeout=300)
                if done.returncode:
                    return None, f"{cc} failed: {done.stderr.strip()[:500]}"
                os.replace(so, path)  # atomic: a concurrent build writes the same bytes
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("host C kernels unavailable: %s", e)
        return None, f"{type(e).__name__}: {e}"
    lib.gpucg_epilogue.argtypes = (_PTR, _LONG, _LONG, _LONG, _PTR, ctypes.c_int)
    lib.gpucg_depthwise.argtypes = (_PTR,) + (_LONG,) * 7 + (_PTR,) + (_LONG,) * 10 + (
        _PTR, ctypes.c_int, _PTR)
    lib.gpucg_direct.argtypes = (_PTR,) + (_LONG,) * 4 + (_PTR,) + (_LONG,) * 9 + (
        _PTR, ctypes.c_int, _PTR)
    lib.gpucg_epilogue.restype = lib.gpucg_depthwise.restype = ctypes.c_int
    lib.gpucg_direct.restype = ctypes.c_int
    return lib, f"{cc} ({version[0] if version else 'unknown version'})"


def _ptr(a) -> int | None:
    return None if a is None else a.ctypes.data


def epilogue(y: np.ndarray, outer: int, channels: int, inner: int, bias, activation) -> bool:
    """y (dense float32, (outer, channels, inner) in memory) = act(y + bias[channel]) in place;
    False where the kernels do not apply (no library, another activation)."""
    lib = library()
    if lib is None or activation not in ACTIVATIONS:
        return False
    b = None if bias is None else np.ascontiguousarray(bias, np.float32)
    return lib.gpucg_epilogue(_ptr(y), outer, channels, inner, _ptr(b),
                              ACTIVATIONS.index(activation)) == 0


def depthwise(x: np.ndarray, w: np.ndarray, bias, activation, strides, dilation, pads, oh: int,
              ow: int):
    """The depthwise convolution of float32 ``x`` (NCHW-shaped, any strides) by ``w`` (c, 1,
    kh, kw), plus ``bias`` (c, or None) and the activation: the NHWC result as an NCHW-shaped
    view, or None where the kernels do not apply."""
    lib = library()
    if lib is None or activation not in ACTIVATIONS or x.dtype != np.float32:
        return None
    n, c, h, wd = x.shape
    nhwc = x.transpose(0, 2, 3, 1)
    if nhwc.strides[3] != 4:  # the kernel reads a position's channels as one run
        nhwc = np.ascontiguousarray(nhwc)
    k = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0), np.float32)  # (kh, kw, c)
    b = None if bias is None else np.ascontiguousarray(bias, np.float32)
    y = np.empty((n, oh, ow, c), np.float32)
    sn, sh, sw = (s // 4 for s in nhwc.strides[:3])
    if lib.gpucg_depthwise(_ptr(nhwc), sn, sh, sw, n, h, wd, c, _ptr(k), k.shape[0], k.shape[1],
                           *strides, *dilation, pads[0], pads[1], oh, ow, _ptr(b),
                           ACTIVATIONS.index(activation), _ptr(y)):
        return None
    return y.transpose(0, 3, 1, 2)


def direct(xp: np.ndarray, w: np.ndarray, bias, activation, strides, dilation, oh: int,
           ow: int):
    """The convolution (one group) of float32 ``xp`` (n, c, hp, wp), already zero-padded, by
    ``w`` (o, c, kh, kw), plus ``bias`` and the activation, by taps (few an output: a stem's):
    the NHWC result as an NCHW-shaped view, or None where the kernels do not apply."""
    lib = library()
    if lib is None or activation not in ACTIVATIONS or xp.dtype != np.float32:
        return None
    n, c, hp, wp = xp.shape
    o, _, kh, kw = w.shape
    x = np.ascontiguousarray(xp)
    wt = np.ascontiguousarray(w.transpose(1, 2, 3, 0), np.float32)  # (c, kh, kw, o)
    b = None if bias is None else np.ascontiguousarray(bias, np.float32)
    y = np.empty((n, oh, ow, o), np.float32)
    if lib.gpucg_direct(_ptr(x), n, c, hp, wp, _ptr(wt), o, kh, kw, *strides, *dilation, oh, ow,
                        _ptr(b), ACTIVATIONS.index(activation), _ptr(y)):
        return None
    return y.transpose(0, 3, 1, 2)
