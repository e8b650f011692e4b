"""The backend contract, the same for every backend.

``compile(source, entry, options) -> Program``; ``Program(*args, grid=, block=)`` launches;
arrays are made and moved with ``empty``/``to_device``/``to_host`` (``borrow`` for one call's
inputs, which may share the host's memory); ``owns(x)`` says whether an array already lives on
this backend, and ``check_array`` whether it lives on this backend's context or device.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np

from ..errors import LaunchError, ResourceError
from .. import counters as stats


def ceil_div(a: int, b: int) -> int:
    """Blocks of size b needed to cover a items (launch geometry)."""
    return -(-a // b)


def c_contiguous(array, module=np):
    """The array C-contiguous, keeping its shape: ``ascontiguousarray`` of NumPy (and CuPy)
    turns a 0-d array into shape (1,), which would lose rank 0 between a call and its run."""
    out = module.ascontiguousarray(array)
    return out if out.shape == array.shape else out.reshape(array.shape)


def check_dynamic_local(entry: str, nbytes: int, static: int, allowed: int, limit: str) -> None:
    """ResourceError unless a kernel's dynamic local buffer of ``nbytes`` and its ``static``
    local (shared) bytes fit the ``allowed`` bytes of the device's ``limit``."""
    if nbytes + static > allowed:
        raise ResourceError(
            f"{entry}: a dynamic local buffer of {nbytes} bytes and {static} bytes of static "
            f"local memory exceed the device's {limit} of {allowed} bytes; lower the config "
            "knobs that size the buffer", limit=limit, value=nbytes + static, allowed=allowed)


def split_chunks(n: int, groups: int, per_group: int, want: int) -> tuple[int, int]:
    """(chunk, chunks): n items in chunks of at least ``per_group``, enough of them that
    ``groups`` work-groups become about ``want`` (rows split over work-groups)."""
    chunks = max(1, min(ceil_div(n, per_group), ceil_div(want, max(groups, 1))))
    chunk = ceil_div(n, chunks) if n else 0
    return chunk, (ceil_div(n, chunk) if chunk else 1)


def vector_chunks(n: int, groups: int, per_group: int, want: int, vw: int) -> tuple[int, int]:
    """split_chunks with each chunk a multiple of ``vw`` elements (so that chunks of an aligned
    row start aligned for vw-element loads)."""
    chunk, chunks = split_chunks(n, groups, per_group, want)
    if vw == 1 or chunks == 1:
        return chunk, chunks
    chunk = ceil_div(chunk, vw) * vw
    return chunk, ceil_div(n, chunk)


class Program(ABC):
    """A compiled kernel entry point."""

    entry: str

    @abstractmethod
    def launch(self, args, grid: tuple, block: int, shared: int = 0) -> None:
        """Run it on ``grid`` (x, y, z) work-groups of ``block``; ``shared``: bytes of its
        dynamic local buffer (gpucg/codegen/dynamic_local.py), 0 where it declares none."""

    def __call__(self, *args, grid, block: int, shared: int = 0) -> None:
        dims = grid_dims(grid)
        if min(dims) <= 0:
            return  # nothing to do for empty problems
        self.launch(args, dims, block, shared)
        stats.bump("launches")

    def bind(self, refs, grid, block: int, shared: int = 0):
        """This launch, to be made again with new arrays: ``f(arrays)`` launches with each
        argument ``refs[i]``, ``(None, scalar)`` or ``(role, index)``, read as
        ``arrays[role][index]`` (gpucg.run_context.Replay). Backends whose kernels keep their
        arguments set (OpenCL) set the scalars once here, and only the arrays at each call."""
        def run(arrays):
            self(*[v if k is None else arrays[k][v] for k, v in refs], grid=grid, block=block,
                 shared=shared)
        return run


def grid_dims(grid) -> tuple:
    """A grid as (x, y, z) work-groups: an int is (grid, 1, 1); a tuple of one to three
    dimensions is padded with ones (kernels read the y and z block ids: 2-D and 3-D grids)."""
    if isinstance(grid, (tuple, list)):
        if not 1 <= len(grid) <= 3:
            raise LaunchError(f"grid={tuple(grid)!r} must have one to three dimensions")
        dims = tuple(int(g) for g in grid)
        return dims + (1,) * (3 - len(dims))
    return int(grid), 1, 1


class Backend(ABC):
    """One way to run kernels (or, for numpy, host code)."""

    name: str = ""
    dialect = None
    device_type = "cpu"
    #: a compiled operator may replay a kernel implementation's launches for arrays of the
    #: same shapes and dtypes (gpucg.run_context.Replay): true where that is all its launch
    #: code can read of a contiguous array (on CUDA the address's alignment is read too)
    replays = False

    @abstractmethod
    def status(self) -> tuple[bool, str, str]:
        """(usable, device description, reason if not usable)."""

    def compile(self, source: str, entry: str, options=()) -> Program:
        raise NotImplementedError(f"backend {self.name} compiles no kernels")

    @abstractmethod
    def empty(self, shape, dtype): ...

    @abstractmethod
    def to_device(self, array: np.ndarray): ...

    @abstractmethod
    def to_host(self, array) -> np.ndarray: ...

    @abstractmethod
    def owns(self, array) -> bool: ...

    def tensor_map_args(self, name: str, array, tmap, offset: int = 0) -> dict:
        """The launch arguments that give a kernel's TMA tensor-map parameter ``name`` the map
        ``tmap`` (gpucg.codegen.tma.TensorMap) of ``array``'s elements from byte ``offset`` on,
        by parameter name: here the
        OpenCL twin's two (gpucg.codegen.hopper_twin), the tensor's buffer and the map's
        description (hopper_ops.map_words, element 0 at the array's offset); the CUDA
        backend passes the driver's encoding."""
        from ..codegen.hopper_ops import map_words

        words = np.array(map_words(tmap, self.address(array) + offset), np.int64)
        return {f"{name}_g": array, name: self.to_device(words)}

    def borrow(self, array: np.ndarray):
        """A host array as one call's input on the device: a copy unless the backend can use
        the host's memory in place (it must not be kept beyond the call)."""
        return self.to_device(array)

    def check_array(self, array, what: str) -> None:
        """Raise InputError naming ``what`` when an array this backend owns by type lives on
        another context or device than the backend's."""

    def contiguous(self, array):
        return array

    def address(self, array) -> int:
        """The address of an array's first element, as far as its alignment goes: gpucg's own
        buffers and host arrays (copied to a fresh buffer) count as 0."""
        return 0

    def alignment(self, array) -> int:
        """The byte alignment of an argument's address (the largest power of two dividing
        it, at most gpucg.shape.MAX_ALIGN): a vector or cp.async access of N bytes may read
        through it only where this is a multiple of N (conditions use gpucg.shape.alignment)."""
        from ..shape import MAX_ALIGN

        if isinstance(array, np.ndarray):
            return MAX_ALIGN
        a = int(self.address(array))
        return min(a & -a, MAX_ALIGN) if a else MAX_ALIGN

    def fresh(self, shape: tuple, dtype, nbytes: int):
        """A new array of a shape (ints) and a NumPy dtype already checked, ``nbytes`` its
        size (a replayed call's outputs and scratch: see gpucg.run_context.Replay)."""
        return self.empty(shape, dtype)

    def call_key(self, array):
        """What a call made again (gpucg.run_context.CallsAgain) may know of an argument without checking it
        again: hashable, equal only for arguments the dispatcher and the preparation treat
        alike; TypeError for an argument of another kind (only backends with ``replays``)."""
        raise TypeError(f"{self.name} makes no call again")

    def export(self, array):
        """The array as callers on this backend receive it (the backend's public array type)."""
        return array

    def synchronize(self) -> None:
        pass

    def clear_memory_cache(self) -> None:
        """Forget the compiled programs held in memory (the on-disk cache stays)."""
        programs = getattr(self, "_programs", None)
        if programs is not None:
            programs.clear()

    def max_block(self) -> int:
        return 1024

    def check_block(self, block: int) -> None:
        limit = self.max_block()
        if block > limit:
            raise ResourceError(
                f"work-group size {block} exceeds the device limit {limit} on {self.name}; "
                "lower the implementation's 'wg' config knob",
                limit="max work-group size", value=block, allowed=limit,
            )

    def time(self, fn, repeat: int = 10, warmup: int = 2) -> list[float]:
        """Seconds per call of ``fn`` (wall clock, synchronized)."""
        for _ in range(warmup):
            fn()
        self.synchronize()
        out = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            self.synchronize()
            out.append(time.perf_counter() - t0)
        return out
