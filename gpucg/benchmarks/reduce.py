"""Reductions beside NumPy, torch and CuPy: times, ratios, GB/s (the input read once).

Cases: sum over the last axis of (4096, 4096) and of (4, 2^24), over axis 0 of (4096, 4096),
and argmax of (4096, 32000) rows (a vocabulary). Goals: on the CPU, OpenCL (PoCL) no slower
than NumPy; on a GPU, 80% or more of the device's copy bandwidth. Device timings keep the data
on the device; the NumPy-fallback row times host arrays.
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import (banner, kernel_note, kernel_seconds, median_time, parser, print_case,
                     torch_cuda_time, torch_or_none)

#: (name, op, shape, axis)
CASES = [("sum (4096, 4096) axis -1", "sum", (4096, 4096), -1),
         ("sum (4, 2^24) axis -1", "sum", (4, 1 << 24), -1),
         ("sum (4096, 4096) axis 0", "sum", (4096, 4096), 0),
         ("argmax (4096, 32000) axis -1", "argmax", (4096, 32000), -1)]


def copy_bandwidth(target: str, nbytes: int, repeat: int) -> float | None:
    """GB/s of a device-to-device copy of ``nbytes`` (read once, written once: 2 * nbytes),
    the ceiling the GPU goal is measured against; None off the GPU."""
    if target != "cuda":
        return None
    import cupy

    a = cupy.empty(nbytes // 4, cupy.float32)
    b = cupy.empty_like(a)
    t = float(np.median(get_backend("cuda").time(lambda: b.__setitem__(Ellipsis, a),
                                                 repeat=repeat)))
    return 2 * nbytes / t / 1e9


def _peers(op: str, x: np.ndarray, axis: int, repeat: int):
    fn = getattr(np, op)
    rows = [(f"np.{op}", median_time(lambda: fn(x, axis=axis), repeat=repeat))]
    torch = torch_or_none()
    if torch is not None:
        t = torch.from_numpy(x)
        tfn = getattr(torch, op)
        rows.append((f"torch.{op} (cpu)", median_time(lambda: tfn(t, dim=axis), repeat=repeat)))
        if torch.cuda.is_available():
            tg = t.cuda()
            rows.append((f"torch.{op} (cuda)", torch_cuda_time(lambda: tfn(tg, dim=axis), repeat)))
    if backend_status("cuda")[0]:
        import cupy

        xg = cupy.asarray(x)
        cfn = getattr(cupy, op)
        rows.append((f"cupy.{op}", float(np.median(get_backend("cuda").time(
            lambda: cfn(xg, axis=axis), repeat=repeat)))))
    return rows


def _ours(op: str, x: np.ndarray, axis: int, want: np.ndarray, repeat: int, targets):
    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        f = gpucg.compile(op, gpucg.tensor(x.shape, "float32"), axis=axis, target=target)
        be = get_backend(target)
        xd = be.to_device(x) if target != "numpy" else x
        got = be.to_host(f(xd))
        if op == "argmax":
            ok = bool(np.array_equal(got, want))
        else:
            ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-3 * np.sqrt(x.shape[axis])))
        t = float(np.median(be.time(lambda: f(xd), repeat=repeat, warmup=2)))
        rows.append((target, f"gpucg {target} [{f.last_impl}]", t, ok,
                      kernel_seconds(target, lambda: f(xd), repeat)))
    return rows


def main(argv=()) -> int:
    p = parser("reduce", "cases a 64th of the size (for smoke tests)")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    cases = CASES
    if args.quick:
        cases = [(name + " /64", op, (max(1, s[0] // 8), max(1, s[1] // 8)), ax)
                 for name, op, s, ax in cases]
    rng = np.random.default_rng(0)
    results, goals = [], []
    print(banner("reduce"))
    for name, op, shape, axis in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        gbytes = x.nbytes / 1e9
        want = getattr(np, op)(x, axis=axis)
        peers = _peers(op, x, axis, args.repeat)
        mine = _ours(op, x, axis, want, args.repeat, targets)
        ours = [(label, t, ("matches" if ok else "DIFFERS") + kernel_note(kt, gbytes),
                 {"matches": ok, "kernel_seconds": kt})
                for _, label, t, ok, kt in mine]
        print_case(name, f"{name}: {x.size} float32 elements", peers, ours, gbytes, results)
        goals += goal_lines(name, peers, mine, x.nbytes, args.repeat)
    print()
    for line in goals:
        print(line)
    if args.json:
        print(json.dumps({"results": results, "goals": goals}, indent=1))
    return 0 if all(r.get("matches", True) for r in results) else 1


def goal_lines(name, peers, mine, nbytes: int, repeat: int, torch_peer: str | None = None):
    """The goals' verdicts for one case: OpenCL on a CPU against NumPy (the first peer); CUDA
    against the copy bandwidth (and, with ``torch_peer``, no slower than torch on the GPU)."""
    out = []
    numpy_t = peers[0][1]
    by_label = dict(peers)
    for target, label, t, _, kt in mine:
        if target == "opencl" and get_backend("opencl").device_type == "cpu":
            verdict = "met" if t <= numpy_t else f"missed ({t / numpy_t:.2f}x NumPy's time)"
            out.append(f"{name}: OpenCL on the CPU no slower than NumPy: {verdict}")
        if target == "cuda":
            copy = copy_bandwidth("cuda", nbytes, repeat)
            share = nbytes / t / 1e9 / copy
            out.append(f"{name}: CUDA at {share:.0%} of copy bandwidth ({copy:.0f} GB/s): "
                       f"{'met' if share >= 0.8 else 'missed'} (goal 80%)")
            if kt is not None:
                ks = nbytes / kt / 1e9 / copy
                out.append(f"{name}: CUDA kernels alone at {ks:.0%} of copy bandwidth: "
                           f"{'met' if ks >= 0.8 else 'missed'} (goal 80%; the rest of the "
                           f"call, {(t - kt) * 1e6:.0f} us, is the host's)")
            if torch_peer and torch_peer in by_label:
                ratio = t / by_label[torch_peer]
                out.append(f"{name}: CUDA {ratio:.2f}x {torch_peer}'s time: "
                           f"{'met' if ratio <= 1 else 'missed'} (goal: no slower)")
    return out
