"""cumsum beside np.cumsum, cupy.cumsum and torch.cumsum: times, ratios, GB/s.

GB/s counts 8 bytes per float32 element (one read, one write). Device timings keep the data
on the device (inputs copied once, before timing); the NumPy-fallback row times host arrays.
"""

from __future__ import annotations

import argparse
import json
import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import (banner, kernel_note, kernel_seconds, median_time, print_case,
                     print_traffic, torch_cuda_time)

CPU_CASES = [("1-D 2^24", (1 << 24,), 0), ("(4096, 1024) axis=1", (4096, 1024), 1),
             ("(1024, 4096) axis=0", (1024, 4096), 0)]
GPU_CASES = [("1-D 2^28", (1 << 28,), 0), ("(65536, 1024) axis=-1", (65536, 1024), -1)]


def _peers(x: np.ndarray, axis: int, repeat: int):
    rows = [("np.cumsum", median_time(lambda: np.cumsum(x, axis=axis), repeat=repeat))]
    try:
        import torch

        t = torch.from_numpy(x)
        rows.append(("torch.cumsum (cpu)", median_time(lambda: torch.cumsum(t, dim=axis), repeat=repeat)))
        if torch.cuda.is_available():
            tg = t.cuda()
            rows.append(("torch.cumsum (cuda)", torch_cuda_time(lambda: torch.cumsum(tg, dim=axis), repeat)))
    except ImportError:
        pass
    if backend_status("cuda")[0]:
        import cupy

        xg = cupy.asarray(x)
        rows.append(("cupy.cumsum", float(np.median(get_backend("cuda").time(
            lambda: cupy.cumsum(xg, axis=axis), repeat=repeat)))))
    return rows


def _ours(x: np.ndarray, axis: int, repeat: int):
    rows = []
    for target in ("cuda", "opencl", "numpy"):
        if not backend_status(target)[0]:
            continue
        typ = gpucg.tensor(x.shape, "float32")
        f = gpucg.compile("cumsum", typ, axis=axis, target=target)
        be = get_backend(target)
        xd = be.to_device(x) if target != "numpy" else x
        got = be.to_host(f(xd))
        ref = np.cumsum(x, axis=axis, dtype=np.float64)
        err = float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        t = float(np.median(be.time(lambda: f(xd), repeat=repeat, warmup=2)))
        impl = f.selection.choices[0].impl.name
        rows.append((f"gpucg {target} [{impl}]", t, err,
                     kernel_seconds(target, lambda: f(xd), repeat)))
    return rows


#: the eager fast path's goals: microseconds over np.cumsum on 1000 elements, per target
OVERHEAD_GOALS_US = {"numpy": 10.0, "opencl": 40.0}


def _device_floor(target: str, x: np.ndarray, repeat: int) -> float | None:
    """Seconds of the same call's device work alone: one copy in, the kernels the eager call
    runs (the same compiled operator, called on device arrays), one copy out."""
    if target == "numpy":
        return None
    f = gpucg.compile("cumsum", gpucg.tensor(x.shape, "float32"), target=target)
    plan = f.plan(x)

    def device_work():  # what the eager call does after its memo lookup, as one call
        return f.run(plan, x)
    device_work()
    return median_time(device_work, repeat=repeat, warmup=5)


def overhead(repeat: int = 300) -> list[dict]:
    """Warm eager calls on 1000 float32 elements beside np.cumsum, on every usable target."""
    x = np.ones(1000, np.float32)
    ref = median_time(lambda: np.cumsum(x), repeat=repeat, warmup=5)
    rows = []
    for target in OVERHEAD_GOALS_US:
        if not backend_status(target)[0]:
            continue
        gpucg.ops.cumsum(x, target=target)
        ours = median_time(lambda: gpucg.ops.cumsum(x, target=target), repeat=repeat, warmup=5)
        floor = _device_floor(target, x, repeat)
        rows.append({"target": target, "eager_us": ours * 1e6, "np_cumsum_us": ref * 1e6,
                     "overhead_us": (ours - ref) * 1e6, "goal_us": OVERHEAD_GOALS_US[target],
                     "device_floor_us": None if floor is None else floor * 1e6})
    return rows


def print_overhead(rows) -> None:
    for r in rows:
        met = "goal met" if r["overhead_us"] <= r["goal_us"] else "goal missed"
        line = (f"warm eager cumsum on 1000 elements ({r['target']}): {r['eager_us']:.1f} us; "
                f"np.cumsum {r['np_cumsum_us']:.1f} us; overhead {r['overhead_us']:.1f} us "
                f"(goal {r['goal_us']:.0f} us: {met})")
        if r["device_floor_us"] is not None:
            line += (f"; the device work alone (kernels, copy in and out) takes "
                     f"{r['device_floor_us']:.1f} us, so gpucg's own share is "
                     f"{r['eager_us'] - r['device_floor_us']:.1f} us")
        print(line)


def _inputs(target: str, x: np.ndarray) -> list:
    """(label, array) of each kind of input the eager fast path serves: a NumPy array, a torch
    tensor (where torch is installed) and the target's own device array."""
    out = [("numpy.ndarray", x)]
    try:
        import torch

        out.append(("torch.Tensor", torch.from_numpy(x.copy())))
    except ImportError:
        pass
    if target != "numpy":
        d = gpucg.asarray(x, target=target)
        out.append((f"{type(d).__module__.split('.')[0]} device array", d))
    return out


def input_overheads(repeat: int = 300) -> list[dict]:
    """Warm eager cumsum on 1000 float32 elements per kind of input and target: the time per
    call, whether the fast path served it, and its share (the call against the same run after
    the memo lookup: the compiled operator's plan run on the input as the fast path hands it
    over)."""
    from gpucg.interop import ingest

    x = np.ones(1000, np.float32)
    rows = []
    for target in OVERHEAD_GOALS_US:
        if not backend_status(target)[0]:
            continue
        be = get_backend(target)
        f = gpucg.compile("cumsum", gpucg.tensor(x.shape, "float32"), target=target)
        for label, a in _inputs(target, x):
            gpucg.ops.cumsum(a, target=target)
            before = gpucg.stats()["fast_calls"]
            ours = median_time(lambda: gpucg.ops.cumsum(a, target=target), be.synchronize,
                               repeat=repeat, warmup=5)
            fast = gpucg.stats()["fast_calls"] - before == repeat + 5
            native = ingest(a, "data", "cumsum")[0]
            plan = f.plan(native)
            floor = median_time(lambda: f.run(plan, native), be.synchronize, repeat=repeat,
                                warmup=5)
            rows.append({"target": target, "input": label, "eager_us": ours * 1e6,
                         "fast_path": fast, "share_us": (ours - floor) * 1e6})
    return rows


def print_input_overheads(rows) -> None:
    for target in dict.fromkeys(r["target"] for r in rows):
        parts = [f"{r['input']} {r['eager_us']:.1f} us ("
                 + (f"fast path, its share {r['share_us']:.1f} us)" if r["fast_path"]
                    else "NOT on the fast path)") for r in rows if r["target"] == target]
        print(f"warm eager cumsum on 1000 elements by input ({target}): " + "; ".join(parts))


def main(argv=()) -> int:
    p = argparse.ArgumentParser(prog="gpucg bench scan")
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="smaller cases (for smoke tests)")
    p.add_argument("--no-traffic", action="store_true",
                   help="skip the memory traffic count on Oclgrind")
    args = p.parse_args(list(argv))
    cases = list(CPU_CASES)
    if backend_status("cuda")[0]:
        cases += GPU_CASES
    if args.quick:
        cases = [(name + " /64", tuple(max(1, d // 8) for d in shape), ax) for name, shape, ax in cases]
    rng = np.random.default_rng(0)
    results = []
    print(banner("scan"))
    for name, shape, axis in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        gbytes = x.size * 8 / 1e9
        peers = _peers(x, axis, args.repeat)
        ours = [(label, t, f"rel err {err:.1e}" + kernel_note(kt, gbytes),
                 {"rel_err": err, "kernel_seconds": kt})
                for label, t, err, kt in _ours(x, axis, args.repeat)]
        print_case(name, f"{name}: {x.size} float32 elements", peers, ours, gbytes, results)
    ov = overhead()
    by_input = input_overheads(30 if args.quick else 300)
    print()
    print_overhead(ov)
    print_input_overheads(by_input)
    traffic = print_traffic(["cumsum"], not args.no_traffic)
    if args.json:
        print(json.dumps({"results": results, "overhead": ov, "by_input": by_input,
                          "traffic": traffic}, indent=1))
    return 0
