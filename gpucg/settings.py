"""Every environment variable gpucg reads, in one place.

Settings are read when used, never at import, so tests and users can change them at any time.
``scope()`` sets settings for a block and restores them afterwards.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected one of 1/0/true/false/yes/no/on/off, got {text!r}")


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, type, default and meaning."""

    env: str
    parse: Callable[[str], object]
    default: Callable[[], object]
    doc: str

    def get(self):
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default()
        try:
            return self.parse(raw)
        except ValueError as exc:
            from .errors import InputError

            raise InputError(f"environment variable {self.env}={raw!r} is invalid: {exc}") from None


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucg"


SETTINGS: dict[str, Setting] = {
    k.env: k
    for k in [
        Setting("GPUCG_TARGET", str, lambda: None,
             "Default target when target=None, e.g. `opencl` or `numpy`; "
             "otherwise the first usable of cuda, opencl on a GPU, numpy."),
        Setting("GPUCG_CACHE_DIR", Path, _default_cache_dir,
             "Directory of the on-disk kernel cache (default `~/.cache/gpucg`)."),
        Setting("GPUCG_DISK_CACHE", _parse_bool, lambda: True,
             "Set to 0 to keep compiled kernels in memory only."),
        Setting("GPUCG_OPENCL_DEVICE", str, lambda: None,
             "Substring of the OpenCL platform or device name to use (default: first GPU, "
             "else first device that compiles a test kernel)."),
        Setting("GPUCG_RECORDS", str, lambda: "",
             "Tuning records file that `gpucg.compile`, eager `gpucg.ops.*` calls, `explain` and "
             "`gpucg tune` use (default `records.jsonl` in the cache directory); `off` disables."),
        Setting("GPUCG_REQUIRE", str, lambda: "",
             "Comma-separated backends and tools (`opencl`, `cuda`, `nvrtc`, `oclgrind`) whose "
             "absence makes the test suite fail instead of skip; `make test` sets "
             "`opencl,nvrtc,oclgrind`."),
        Setting("GPUCG_ALLOW_TF32", _parse_bool, lambda: False,
             "Default of the `allow_tf32` attribute of dense, matmul, batch_matmul and conv2d: "
             "float32 products may round their operands to TF32 (10-bit mantissa) and run on "
             "tensor cores (`gemm_mma`); off by default, so float32 stays exact float32."),
        Setting("GPUCG_OCLGRIND_RUNTIME", Path, lambda: None,
             "Path of Oclgrind's `liboclgrind-rt-icd.so` where it is not in the usual places "
             "(`/usr/lib/oclgrind`, beside the `oclgrind` command); the Oclgrind checks and "
             "`gpucg resources --traffic` load it."),
        Setting("GPUCG_HOST_C", _parse_bool, lambda: True,
             "Set to 0 to keep the numpy target on NumPy alone: by default, where a C compiler "
             "is present (`cc`, `gcc` or `$CC`), it builds its host kernels once for this CPU "
             "(float32 depthwise convolution and the epilogue's bias and activation, "
             "gpucg/runtime/host_c.py) and caches them in the cache directory."),
        Setting("GPUCG_HOST_KEEP_MEMORY", _parse_bool, lambda: True,
             "Set to 0 to leave glibc's malloc as it is: by default a compiled model (an ONNX "
             "model, a graph) running on the numpy target asks it once to serve large arrays "
             "from its heap and keep freed memory (`mallopt`), so each call reuses mapped pages "
             "instead of faulting in fresh ones (the process keeps its peak heap)."),
    ]
}


def get(env: str):
    """The current value of a setting, parsed."""
    return SETTINGS[env].get()


def target() -> str | None:
    return get("GPUCG_TARGET")


def cache_dir() -> Path:
    return get("GPUCG_CACHE_DIR")


def disk_cache() -> bool:
    return get("GPUCG_DISK_CACHE")


def opencl_device() -> str | None:
    return get("GPUCG_OPENCL_DEVICE")


def oclgrind_runtime() -> Path | None:
    return get("GPUCG_OCLGRIND_RUNTIME")


def records_path() -> Path | None:
    """The tuning records file, or None when GPUCG_RECORDS is "off"."""
    raw = get("GPUCG_RECORDS").strip()
    if raw.lower() in ("off", "0", "no", "false", "none"):
        return None
    return Path(raw).expanduser() if raw else cache_dir() / "records.jsonl"


def allow_tf32() -> bool:
    return get("GPUCG_ALLOW_TF32")


def required_backends() -> set[str]:
    return {p.strip() for p in get("GPUCG_REQUIRE").split(",") if p.strip()}


@contextlib.contextmanager
def scope(**values) -> Iterator[None]:
    """Set settings (by env name, value None unsets) for the duration of a block."""
    old = {}
    for name, value in values.items():
        if name not in SETTINGS:
            raise KeyError(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
        old[name] = os.environ.get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def table() -> str:
    """The settings as a Markdown table (the README's table is checked against it)."""
    rows = ["| variable | meaning |", "| --- | --- |"]
    rows += [f"| `{k.env}` | {k.doc} |" for k in SETTINGS.values()]
    return "\n".join(rows)
