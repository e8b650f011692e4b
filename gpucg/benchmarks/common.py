"""Timing helpers shared by the benchmarks: host wall clock, torch CUDA events."""

from __future__ import annotations

import time

import numpy as np

from ..runtime.opencl_threads import pocl_workers


def median_time(fn, sync=lambda: None, repeat=10, warmup=2) -> float:
    """Median seconds per call of ``fn`` (wall clock; ``sync`` waits for the device)."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def torch_cuda_time(fn, repeat: int) -> float:
    """Median seconds per call of a torch CUDA function, timed with CUDA events."""
    import torch

    for _ in range(2):
        fn()
    out = []
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return float(np.median(out))


def kernel_seconds(target: str, fn, repeat: int) -> float | None:
    """Median seconds per call spent in ``fn``'s own kernels on CUDA (events around each
    launch: Backend kernel_time), None elsewhere: beside the call's time, it tells the kernels'
    speed from the host's per-call work."""
    from gpucg.runtime import get_backend

    be = get_backend(target)
    if target != "cuda" or not hasattr(be, "kernel_time"):
        return None
    return float(np.median(be.kernel_time(fn, repeat=repeat)))


def time_on_targets(op: str, arrays, attrs: dict, targets, repeat: int) -> list[tuple]:
    """``op`` on each usable target of ``targets``, its inputs on the device: (target, the
    implementation that ran, median seconds a call, its first output on the host, the
    kernels' own seconds or None)."""
    import gpucg
    from gpucg.runtime import backend_status, get_backend

    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        f = gpucg.compile(op, *(gpucg.tensor(a.shape, a.dtype.name) for a in arrays),
                          target=target, **attrs)
        be = get_backend(target)
        dev = [be.to_device(a) if target != "numpy" else a for a in arrays]
        out = f(*dev)
        y = np.asarray(be.to_host(out[0] if isinstance(out, tuple) else out), np.float64)
        t = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=2)))
        rows.append((target, f.last_impl, t, y, kernel_seconds(target, lambda: f(*dev), repeat)))
    return rows


def kernel_note(kt: float | None, gbytes: float) -> str:
    """"; kernels X ms (Y GB/s)" for a kernel time, "" without one."""
    return "" if kt is None else f"; kernels {kt * 1e3:.3f} ms ({gbytes / kt:.0f} GB/s)"


def tests_module(name: str):
    """A helper module of the test suite (tests/NAME.py, the models' builders), imported from
    a source checkout; tests/ joins sys.path so that its helpers import one another."""
    import importlib
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "tests"
    if not (folder / f"{name}.py").exists():
        raise SystemExit(f"this benchmark builds its models with {folder / name}.py: run it "
                         "from a source checkout of gpucg")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def interleaved_times(calls: dict, repeat: int, warmup: int = 1) -> dict:
    """(median wall, min wall, median CPU) seconds per call of each function, the calls taken
    in turns (one of each a round), so that a shared machine's changing load falls on every
    row alike (timing one implementation after the other let a minute's load swing decide
    the ratios). The CPU time (the process's, all threads) is the work a call did, whatever
    the wait for a core: with one thread everywhere, the steadier figure on a loaded machine."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    wall: dict = {k: [] for k in calls}
    cpu: dict = {k: [] for k in calls}
    for _ in range(repeat):
        for k, fn in calls.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: (float(np.median(wall[k])), float(np.min(wall[k])), float(np.median(cpu[k])))
            for k in calls}


def torch_or_none():
    """The torch module if it is installed, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def print_case(case: str, title: str, peers, ours, work: float, results: list,
               unit: str = "GB/s") -> None:
    """Print one case's table (peers first; ratios against the first peer and every other)
    and append its rows to ``results``.

    ``peers``: (label, seconds); ``ours``: (label, seconds, note, extra fields for the JSON);
    ``work``: the case's bytes (in GB) or FLOPs (in TFLOP) as ``unit`` ("GB/s", "TFLOP/s") says.
    """
    base = peers[0][1]
    key = {"GB/s": "gbps", "TFLOP/s": "tflops"}[unit]
    print(f"\n{title}")
    print(f"  {'implementation':<42} {'ms':>9} {'/peer0':>8} {unit:>8}  notes")
    for label, t in peers:
        print(f"  {label:<42} {t * 1e3:9.3f} {t / base:8.2f} {work / t:8.3f}")
        results.append({"case": case, "impl": label, "seconds": t, "ratio_vs_peer0": t / base,
                        key: work / t})
    for label, t, note, extra in ours:
        ratios = "; ".join(f"ours/{pl} {t / pt:.2f}" for pl, pt in peers[1:])
        print(f"  {label:<42} {t * 1e3:9.3f} {t / base:8.2f} {work / t:8.3f}  "
              f"{note}{'; ' + ratios if ratios else ''}")
        results.append({"case": case, "impl": label, "seconds": t, "ratio_vs_peer0": t / base,
                        key: work / t, **extra})


def parser(op: str, quick_help: str):
    """The options every benchmark takes: --json, --repeat, --quick, --targets."""
    import argparse

    p = argparse.ArgumentParser(prog=f"gpucg bench {op}")
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--targets", default="cuda,opencl,numpy",
                   help="comma-separated gpucg targets to time (default: every usable one)")
    p.add_argument("--no-traffic", action="store_true",
                   help="skip the memory traffic count on Oclgrind")
    return p


def banner(op: str) -> str:
    """The first line of a benchmark's output: the machine and the usable targets."""
    import platform

    import gpucg

    usable = [t for t in gpucg.targets() if t.usable]
    line = f"gpucg bench {op} on {platform.node()}; targets: " + ", ".join(
        f"{t.name}={t.device}" for t in usable)
    if any(t.name == "opencl" and "PoCL" in t.device for t in usable):
        # timings on PoCL depend on it (gpucg.runtime.opencl_threads)
        line += f"; PoCL workers {pocl_workers()}"
    return line


def print_traffic(ops, enabled: bool = True) -> list[dict]:
    """Where Oclgrind is installed, print the global memory bytes the implementation a GPU
    selects moves on each operator's small cases, against the compulsory bytes (inputs read
    once, outputs written once); counted by a simulator, so a figure of the kernels, not a
    timing. Returns the figures for the JSON output."""
    if not enabled:
        return []
    from gpucg.verify import oclgrind

    ok, why = oclgrind.available()
    if not ok:
        print(f"\nmemory traffic: not counted ({why})")
        return []
    print("\nglobal memory traffic of the GPU-selected kernels (Oclgrind --inst-counts, "
          "small cases; --no-traffic skips it):")
    out = []
    for r in oclgrind.traffic(list(ops)):
        print("  " + oclgrind.traffic_line(r))
        out.append({"op": r.task.op, "case": r.label, "impl": r.impl, "loaded": r.loaded,
                    "stored": r.stored, "compulsory": r.compulsory, "error": r.error})
    return out
