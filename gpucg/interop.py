"""Arrays in and out: NumPy, CuPy and PyOpenCL arrays, and any framework's arrays through
DLPack (``__dlpack__``) or ``__cuda_array_interface__``.

A framework's array comes in without a copy where the device allows: a CPU tensor becomes a
NumPy view (np.from_dlpack), a CUDA tensor a CuPy view; the results go back to the same
framework through its ``from_dlpack`` (torch.from_dlpack, or the array API namespace's), so a
torch tensor in gives a torch tensor out, on the device it came from.

DLPack cannot carry bfloat16 or FP8 into NumPy (NumPy has no such dtypes; torch 2.13 exports
float8 tensors, which np.from_dlpack refuses: "Unsupported dtype in DLTensor"): a CPU
torch.bfloat16 or torch.float8_e4m3fn/float8_e5m2 tensor comes in as an integer view of its
width reinterpreted as ml_dtypes' dtype, and goes back the same way, without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError, describe
from .half import ML_DTYPES, is_ml_dtype, ml_dtypes

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13

ALLOWED = ("a numpy.ndarray, cupy.ndarray or pyopencl.array.Array, or an array of any framework "
           "with __dlpack__ or __cuda_array_interface__ (torch, JAX, array-api-strict, ...)")


def native_kind(x) -> str | None:
    """"numpy", "cuda" (CuPy) or "opencl" (PyOpenCL) for arrays gpucg runs on as they are."""
    if type(x) is np.ndarray or isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__ or ""
    if mod.startswith("cupy") and hasattr(x, "shape"):
        return "cuda"
    if mod.startswith("pyopencl") and hasattr(x, "shape"):
        return "opencl"
    return getattr(type(x), "gpucg_backend", None)  # gpucg's own device arrays


def byte_offset(x) -> int:
    """Bytes from the start of an array's buffer to its first element, where the array
    passes its buffer's start to kernels (a pyopencl view); 0 for arrays whose pointer is
    their first element (NumPy, CuPy, gpucg's own buffers)."""
    return int(getattr(x, "offset", 0)) if native_kind(x) == "opencl" else 0


def type_name(x) -> str:
    """"torch.Tensor", "numpy.ndarray": the package and the class of an array, for errors."""
    return f"{(type(x).__module__ or '').split('.')[0]}.{type(x).__name__}"


@dataclass(frozen=True)
class Framework:
    """Where an input came from, so the outputs can go back there."""

    name: str  # "torch", "array_api_strict", ...
    sample: object  # one input array of that framework

    def wrap(self, out):
        """``out`` (NumPy or CuPy) as an array of this framework, without a copy."""
        if self.name == "torch":
            import torch

            if isinstance(out, np.ndarray):
                if out.dtype.kind in "Vf" and is_ml_dtype(out.dtype):  # .kind first: it is cheap
                    bits = np.int16 if out.dtype.itemsize == 2 else np.uint8
                    return torch.from_numpy(out.view(bits)).view(getattr(torch, out.dtype.name))
                if out.flags.writeable:  # the same view as from_dlpack's, at half its cost
                    return torch.from_numpy(out)
            return torch.from_dlpack(out)
        ns = getattr(self.sample, "__array_namespace__", None)
        if ns is not None:
            return ns().from_dlpack(out)
        import importlib

        module = importlib.import_module(self.name)
        for owner in (module, getattr(module, "dlpack", None)):
            fn = getattr(owner, "from_dlpack", None)
            if fn is not None:
                return fn(out)
        return out  # a producer with no from_dlpack of its own: NumPy/CuPy out


def wrap(framework: Framework | None, out):
    """Outputs (one array or a tuple) as arrays of ``framework`` (None: as they are)."""
    if framework is None:
        return out
    return tuple(map(framework.wrap, out)) if isinstance(out, tuple) else framework.wrap(out)


def _cupy():
    try:
        import cupy
    except ImportError as exc:
        raise InputError(f"a CUDA array needs CuPy to run on ({exc}); pip install 'gpucg[cuda]'") from None
    return cupy


def ingest(x, name: str, op: str):
    """(array gpucg can run on, its kind, the Framework it came from or None).

    Raises InputError for objects that are not arrays, and for DLPack devices other than
    the CPU and CUDA.
    """
    kind = native_kind(x)
    if kind is not None:
        return x, kind, None
    if isinstance(x, np.generic):  # a NumPy scalar (np.float32(2)) is a 0-d array
        return np.asarray(x), "numpy", None
    root = (type(x).__module__ or "").split(".")[0]
    framework = Framework(root, x)
    if hasattr(x, "__dlpack_device__") and hasattr(x, "__dlpack__"):
        device, _ = x.__dlpack_device__()
        device = int(device)
        ml = str(getattr(x, "dtype", "")).rpartition(".")[2]
        if ml in ML_DTYPES:
            return _ml_dtype_in(x, ml, name, op, device), "numpy", framework
        if device in (_KDL_CPU, _KDL_CUDA_HOST):
            return np.from_dlpack(x), "numpy", framework
        if device in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            return _cupy().from_dlpack(x), "cuda", framework
        raise InputError(f"{op}: {name} is a {type(x).__name__} on DLPack device type {device}; "
                         "gpucg takes CPU and CUDA arrays")
    if hasattr(x, "__cuda_array_interface__"):
        return _cupy().asarray(x), "cuda", framework
    raise InputError(f"{op}: {name}={describe(x)} must be {ALLOWED}")


def _ml_dtype_in(x, dtype: str, name: str, op: str, device: int):
    """A CPU torch.bfloat16 or float8 tensor as an ml_dtypes NumPy view (DLPack has no way)."""
    ml = getattr(ml_dtypes(dtype), dtype)
    if type_name(x) != "torch.Tensor" or device not in (_KDL_CPU, _KDL_CUDA_HOST):
        raise InputError(f"{op}: {name} is a {dtype} {type_name(x)} on DLPack device type "
                         f"{device}; gpucg takes {dtype} as ml_dtypes NumPy arrays, pyopencl "
                         f"arrays and CPU torch tensors (NumPy and CuPy have no {dtype} dtype "
                         "to receive it through DLPack)")
    import torch

    bits = torch.int16 if dtype == "bfloat16" else torch.uint8
    return np.from_dlpack(x.detach().view(bits)).view(ml)


def ingest_all(arrays, names, op: str):
    """(arrays gpucg runs on, their kinds, the one Framework of the inputs or None).

    Inputs from different frameworks (a torch tensor beside a NumPy array, say) are an
    InputError: convert them to one framework first.
    """
    out, kinds, frameworks = [], [], []
    for name, x in zip(names, arrays):
        a, kind, fw = ingest(x, name, op)
        out.append(a)
        kinds.append(kind)
        frameworks.append(fw)
    foreign = [fw for fw in frameworks if fw is not None]
    if foreign and len({fw.name if fw else None for fw in frameworks}) > 1:
        what = ", ".join(f"{n} is a {type_name(x)}" for n, x in zip(names, arrays))
        raise InputError(f"{op}: inputs come from different frameworks ({what}); pass arrays "
                         "of one framework")
    return tuple(out), kinds, (foreign[0] if foreign else None)
