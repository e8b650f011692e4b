"""Checks that drop a config before it runs: device limits, per backend, pluggable.

A check is ``check(backend, program, kernel_key, grid, block) -> reason or None`` (a check
with a ``shared`` parameter also gets the launch's dynamic local bytes). The tuner
runs each registered check of the target's backend before each launch of a candidate (after
the kernel is compiled, so a check can read what the compiler says about it); the first reason
given drops the candidate: it is recorded with that reason and never measured. More checks
(the CUDA resource check: registers x block and shared memory against the device) register
with :func:`register_check`.
"""

from __future__ import annotations

import inspect
from typing import Callable


class Dropped(Exception):
    """A candidate cannot run on this device; ``reason`` says which limit."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self):
        return (Dropped, (self.reason,))


CHECKS: dict[str, list[Callable]] = {}


def register_check(backend: str, check: Callable) -> Callable:
    """Add a check for a backend ("opencl", "cuda"); returns it (usable as a decorator with
    functools.partial)."""
    CHECKS.setdefault(backend, []).append(check)
    return check


def launch_checker(backend) -> Callable | None:
    """The function CompiledOp.launch_check takes: runs the backend's checks, raises
    :class:`Dropped` with the first reason."""
    checks = CHECKS.get(backend.name, [])
    if not checks:
        return None

    # which checks take the launch's dynamic local bytes, looked up once, not per launch
    takes_shared = [(c, "shared" in inspect.signature(c).parameters) for c in checks]

    def check(program, key, grid, block, shared=0):
        for c, takes in takes_shared:
            reason = c(backend, program, key, grid, block, **({"shared": shared} if takes else {}))
            if reason:
                raise Dropped(f"kernel {key}: {reason}")
    return check


# -- OpenCL ----------------------------------------------------------------------------------

def _kernel_info(backend, program, what: str):
    cl = backend.cl
    return program.kernel.get_work_group_info(getattr(cl.kernel_work_group_info, what),
                                              backend.device)


def opencl_work_group(backend, program, key, grid, block):
    """The work-group size against the device's limit and the compiled kernel's own."""
    limit = int(backend.device.max_work_group_size)
    if block > limit:
        return (f"work-group size {block} exceeds the device's CL_DEVICE_MAX_WORK_GROUP_SIZE "
                f"{limit}")
    own = int(_kernel_info(backend, program, "WORK_GROUP_SIZE"))
    if block > own:
        return f"work-group size {block} exceeds the kernel's CL_KERNEL_WORK_GROUP_SIZE {own}"
    return None


def opencl_local_memory(backend, program, key, grid, block, shared=0):
    """The kernel's local memory (its static and the launch's dynamic) against the device's."""
    used = program.static_local() + shared
    have = int(backend.device.local_mem_size)
    if used > have:
        return f"uses {used} bytes of local memory; the device has {have}"
    return None


def cuda_block(backend, program, key, grid, block):
    """The block size against the device's maxThreadsPerBlock."""
    limit = backend.max_block()
    if block > limit:
        return f"block of {block} threads exceeds the device's maxThreadsPerBlock {limit}"
    return None


register_check("opencl", opencl_work_group)
register_check("opencl", opencl_local_memory)
register_check("cuda", cuda_block)
