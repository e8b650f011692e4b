"""PoCL's worker threads, each kept on a core of its own.

PoCL's CPU device runs a kernel's work-groups on worker threads, one a CPU. Left to the
operating system's scheduler, workers that sat idle while the calling thread worked (NumPy,
other Python) are moved between CPUs and wait for one at the next launch: on the 2-core CI
machine, argmax over (256, 32000) float32 after a 64 MiB NumPy read took 2.5-2.7 ms a call with
free workers (0.4-0.5 migrations a worker a call) and 1.8-2.0 ms pinned, the workers' own CPU
time the same (1.3-1.5 ms); in benchmarks/pocl_reductions.py 2.2-2.4 ms against 1.5-1.6 ms
(benchmarks/results/*pocl3.1-reductions*). PoCL pins worker i to CPU i when POCL_AFFINITY=1,
read when it starts its workers (the process's first platform query); gpucg asks for that
before its own first query.

It asks only where pinning is safe: POCL_AFFINITY not set by the user (their value stands, 0
turns pinning off), the process allowed on every CPU 0..n-1 of the n online CPUs (a process
held to some CPUs, by taskset or a container's cpuset, is left alone: PoCL would pin a worker to
a CPU the process may not use, and newer PoCLs abort on that), and no more workers asked for
(POCL_MAX_PTHREAD_COUNT) than there are CPUs. Where PoCL was already started in the process (the
user queried OpenCL before gpucg did), the variable changes nothing. It stays set: child
processes inherit it (one started under taskset on a newer PoCL needs POCL_AFFINITY=0).
"""

from __future__ import annotations

import os

#: PoCL's own switch (pthread device, Linux): worker i runs on CPU i
AFFINITY = "POCL_AFFINITY"


def pin_pocl_workers(environ=None) -> bool:
    """Ask PoCL to pin its worker threads a CPU each, where that is safe (module docstring);
    True where gpucg set POCL_AFFINITY=1. Call before the process's first OpenCL query."""
    environ = os.environ if environ is None else environ
    if AFFINITY in environ or not hasattr(os, "sched_getaffinity"):
        return False
    cpus = os.cpu_count() or 0
    try:
        allowed = os.sched_getaffinity(0)
        workers = int(environ.get("POCL_MAX_PTHREAD_COUNT", "0") or 0)
    except (OSError, ValueError):
        return False
    if cpus < 2 or workers > cpus or not set(range(cpus)) <= allowed:
        return False
    environ[AFFINITY] = "1"
    return True


def pocl_workers() -> str:
    """Whether PoCL's worker threads run pinned a CPU each, as POCL_AFFINITY says (for the
    first line of a benchmark's output: timings on PoCL depend on it)."""
    value = os.environ.get(AFFINITY)
    return f"{'pinned' if value == '1' else 'free'} ({AFFINITY}={value or 'unset'})"
