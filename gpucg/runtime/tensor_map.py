"""Tensor maps on the host: a validated gpucg.codegen.tma.TensorMap encoded into the 128
opaque bytes a kernel takes by value (``const __grid_constant__ gpucg_tensor_map``), through
the CUDA driver's cuTensorMapEncodeTiled as cuda-bindings exposes it.

:func:`driver_arguments` builds the call's arguments from the map (pure, tested without a
driver); :func:`encode` makes the call, or raises BackendUnavailableError where no CUDA driver
can be loaded (this machine, CI). A launch passes a :class:`TensorMapArg`: the bytes, and the
map they encode, which the launch stand-in (gpucg/verify/cupy_standin.py) checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..codegen.tma import (DATA_TYPES, INTERLEAVES, L2_PROMOTIONS, OOB_FILLS, SWIZZLE_ENUM,
                           TENSOR_MAP_BYTES, TensorMap)
from ..errors import BackendUnavailableError, InputError, LaunchError


@dataclass(frozen=True)
class TensorMapArg:
    """A kernel argument: an encoded tensor map (``value``: a NumPy void scalar of 128 bytes,
    what CuPy passes by value) and the TensorMap it encodes."""

    tensor_map: TensorMap
    value: np.void

    def problem(self) -> str:
        """What makes this argument unfit for a launch ("" if nothing): an invalid map
        (cuTensorMapEncodeTiled's rules), no address, or a value other than 128 bytes. A box
        may reach past the tensor (the driver sets no bound between boxDim and globalDim: a
        tile of a small matrix is one box, its outside filled), so none is checked."""
        t = self.tensor_map
        try:
            t.validate()
        except InputError as exc:
            return str(exc)
        if not t.address:
            return "the tensor map is bound to no address"
        size = np.asarray(self.value).nbytes
        return "" if size == TENSOR_MAP_BYTES else f"{size} bytes, not {TENSOR_MAP_BYTES}"


def driver_arguments(t: TensorMap) -> dict:
    """cuTensorMapEncodeTiled's arguments for ``t`` (bound to an address), by name, as plain
    ints and lists in the driver's order (dimension 0 innermost)."""
    t.validate()
    return dict(tensorDataType=DATA_TYPES[t.dtype], tensorRank=t.rank,
                globalAddress=t.address, globalDim=list(t.dims),
                globalStrides=list(t.strides), boxDim=list(t.box),
                elementStrides=list(t.element_strides), interleave=INTERLEAVES[t.interleave],
                swizzle=SWIZZLE_ENUM[t.swizzle], l2Promotion=L2_PROMOTIONS[t.l2_promotion],
                oobFill=OOB_FILLS[t.oob_fill])


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise BackendUnavailableError(f"encoding a tensor map needs cuda-bindings ({exc}); "
                                      "pip install 'gpucg[nvrtc]'") from None
    return driver


def encode(t: TensorMap, address: int | None = None, driver=None) -> TensorMapArg:
    """``t`` (at ``address``, if given) encoded by the CUDA driver. ``driver``: the module
    with cuTensorMapEncodeTiled and its enums (default: cuda.bindings.driver; tests pass a
    recording one). BackendUnavailableError where the driver library cannot be loaded;
    LaunchError with the driver's error code where it refuses the map."""
    if address is not None:
        t = t.with_address(address)
    args = driver_arguments(t)
    drv = driver or _driver()
    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    call = [drv.CUtensorMapDataType(args["tensorDataType"]), u32(args["tensorRank"]),
            args["globalAddress"], [u64(v) for v in args["globalDim"]],
            [u64(v) for v in args["globalStrides"]], [u32(v) for v in args["boxDim"]],
            [u32(v) for v in args["elementStrides"]],
            drv.CUtensorMapInterleave(args["interleave"]), drv.CUtensorMapSwizzle(args["swizzle"]),
            drv.CUtensorMapL2promotion(args["l2Promotion"]),
            drv.CUtensorMapFloatOOBfill(args["oobFill"])]
    try:
        err, encoded = drv.cuTensorMapEncodeTiled(*call)
    except RuntimeError as exc:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda
        raise BackendUnavailableError(f"encoding a tensor map needs the CUDA driver (libcuda), "
                                      f"which cannot be loaded here: {exc}") from None
    if int(err) != 0:
        raise LaunchError(f"cuTensorMapEncodeTiled refused {t}: error {err}")
    words = np.array([int(w) for w in encoded.opaque], np.uint64)
    if words.nbytes != TENSOR_MAP_BYTES:
        raise LaunchError(f"cuTensorMapEncodeTiled gave {words.nbytes} bytes, not "
                          f"{TENSOR_MAP_BYTES}")
    return TensorMapArg(t, words.view(np.dtype((np.void, TENSOR_MAP_BYTES)))[0])
