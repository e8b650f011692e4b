"""Arrays that stay on a target's device: ``gpucg.asarray`` and ``gpucg.to_host``.

``gpucg.asarray(x, target="opencl")`` uploads once and returns the target's own array
(numpy.ndarray on numpy, pyopencl.array.Array on opencl, cupy.ndarray on cuda). Operators called
on such arrays run on their device and return arrays there, so weights and activations are not
copied on every call. ``gpucg.to_host(a)`` brings any of them back as a NumPy array.
"""

from __future__ import annotations

import numpy as np

from .errors import InputError, describe
from .interop import ALLOWED, ingest, native_kind
from .runtime import get_backend
from .shape import dtype_name
from .target import require_usable, resolve

_PYTHON = (list, tuple, int, float, bool, complex)


def asarray(x, target=None, dtype=None):
    """``x`` as an array of ``target``'s own type, uploaded once.

    Args:
        x: a NumPy array (or a list, a scalar), an array of any framework with ``__dlpack__``
            (torch, JAX, ...), or a device array (pyopencl, CuPy).
        target: "numpy", "opencl", "cuda" (with options), a Target, or None for the default
            target (GPUCG_TARGET, else the first usable of cuda, opencl on a GPU, numpy).
        dtype: the dtype of the result (one of gpucg.DTYPES); None keeps x's.

    Returns:
        numpy.ndarray, pyopencl.array.Array (on gpucg's OpenCL context and queue) or
        cupy.ndarray. An array already of the target, in its context and of the dtype asked
        for, is returned as it is; an array of another target comes through the host.

    Raises:
        InputError: x is not an array, or is a pyopencl array of another OpenCL context, or a
            CuPy array on another CUDA device than the target's (to_host it first).

    Example:
        >>> w = gpucg.asarray(np.ones((64, 32), np.float32), target="opencl")
        >>> gpucg.to_host(gpucg.ops.sum(w, axis=0))[:3]
        array([64., 64., 64.], dtype=float32)
    """
    target = resolve(target)
    require_usable(target)
    backend = get_backend(target.backend)
    want = None if dtype is None else np.dtype(dtype_name(dtype, arg="dtype"))
    if isinstance(x, _PYTHON):
        x = np.asarray(x)
    kind = native_kind(x)
    if kind is None:
        if not (hasattr(x, "__dlpack__") or hasattr(x, "__cuda_array_interface__")
                or isinstance(x, np.generic)):
            raise InputError(f"asarray: x={describe(x)} must be {ALLOWED}, a list or a scalar")
        x, kind, _ = ingest(x, "x", "asarray")
    if kind != "numpy" and kind == target.backend:
        backend.check_array(x, "asarray: x")
        x = backend.export(x)
        if want is None or np.dtype(x.dtype) == want:
            return x
        from .ops import cast

        return cast(x, want, target=target)
    host = np.asarray(to_host(x))
    if want is not None and host.dtype != want:
        host = host.astype(want)
    if target.backend == "numpy":
        return host
    return backend.export(backend.to_device(host))


def to_host(a) -> np.ndarray:
    """Any array gpucg takes or returns, as a NumPy array (no copy for one already NumPy or in
    the host's memory, such as a CPU torch tensor).

    Device arrays come back by their library's own copy (pyopencl ``get``, ``cupy.asnumpy``);
    NumPy's ``np.asarray`` works too on arrays whose library allows it (DLPack producers on the
    CPU), but not on pyopencl or CuPy arrays, which refuse an implicit copy.

    Raises:
        InputError: ``a`` is not an array.
    """
    kind = native_kind(a)
    if kind == "numpy":
        return a
    if kind is not None:
        return get_backend(kind).to_host(a)
    if isinstance(a, (np.generic,) + _PYTHON):
        return np.asarray(a)
    native, kind, _ = ingest(a, "a", "to_host")
    return native if kind == "numpy" else get_backend(kind).to_host(native)
