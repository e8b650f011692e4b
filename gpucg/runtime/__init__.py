"""Runtime backends, found through a table of lazy imports."""

from __future__ import annotations

import contextlib
import importlib
import threading

from ..errors import BackendUnavailableError

_TABLE = {
    "numpy": ("gpucg.runtime.numpy_backend", "NumpyBackend", "numpy"),
    "opencl": ("gpucg.runtime.opencl_backend", "OpenCLBackend", "opencl"),
    "cuda": ("gpucg.runtime.cuda_backend", "CudaBackend", "cuda"),
}
_instances: dict = {}
_lock = threading.Lock()
_local = threading.local()


@contextlib.contextmanager
def use_backend(name: str, backend):
    """Within the block, and in this thread only, ``get_backend(name)`` is ``backend``.

    The launch-path checks run the real CUDA backend on a stand-in for CuPy this way
    (``use_backend("cuda", CudaBackend(cupy=StandInCupy("sm_90")))``); operators compiled
    inside the block keep the backend they were compiled with.
    """
    old = getattr(_local, "overrides", {})
    _local.overrides = {**old, name: backend}
    try:
        yield backend
    finally:
        _local.overrides = old


def get_backend(name: str):
    """The (single) backend object for a name; packages are imported on first use."""
    overrides = getattr(_local, "overrides", None)
    if overrides and name in overrides:
        return overrides[name]
    backend = _instances.get(name)  # made once: asked again before each call
    if backend is not None:
        return backend
    with _lock:
        if name not in _instances:
            if name not in _TABLE:
                raise BackendUnavailableError(
                    f"backend {name!r} is unknown; known: {', '.join(_TABLE)}")
            module, cls, extra = _TABLE[name]
            try:
                _instances[name] = getattr(importlib.import_module(module), cls)()
            except ImportError as exc:
                raise BackendUnavailableError(
                    f"backend {name!r} needs a package that is missing ({exc}); "
                    f"pip install 'gpucg[{extra}]'") from None
        return _instances[name]


def backend_status(name: str) -> tuple[bool, str, str]:
    """(usable, device, reason) for a backend, never raising."""
    try:
        return get_backend(name).status()
    except BackendUnavailableError as exc:
        return False, "", str(exc)


def _holder(array):
    from ..interop import native_kind

    kind = native_kind(array)
    return None if kind in (None, "numpy") else get_backend(kind)


def alignment_of(array) -> int:
    """The byte alignment of an array's address as the backend holding it reports it
    (Backend.alignment; NumPy arrays go to a fresh, fully aligned device buffer)."""
    from ..shape import MAX_ALIGN

    backend = _holder(array)
    return MAX_ALIGN if backend is None else backend.alignment(array)


__all__ = ["alignment_of", "backend_status", "get_backend", "use_backend"]
