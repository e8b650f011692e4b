"""softmax and layer_norm rows beside NumPy and torch: times, ratios, GB/s (the input read
once).

Cases: rows of (4096, 1024), (256, 32000) and (8, 2^20), float32. Goals: on the CPU, OpenCL
(PoCL) no slower than NumPy; on a GPU, 80% or more of the device's copy bandwidth, and softmax
no slower than torch. The NumPy peers are the stable textbook formulas (max-subtracted
softmax; mean and biased variance for layer_norm).
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import (banner, kernel_note, kernel_seconds, median_time, parser, print_case,
                     torch_cuda_time, torch_or_none)
from .reduce import goal_lines

CASES = [("(4096, 1024)", (4096, 1024)), ("(256, 32000)", (256, 32000)),
         ("(8, 2^20)", (8, 1 << 20))]
EPS = 1e-5


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def numpy_layer_norm(x, gamma, beta) -> np.ndarray:
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.var(x, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def _peers(op: str, x, params, repeat: int):
    fn = numpy_softmax if op == "softmax" else numpy_layer_norm
    rows = [(f"numpy {op}", median_time(lambda: fn(x, *params), repeat=repeat))]
    torch = torch_or_none()
    if torch is not None:
        import torch.nn.functional as F

        def call(t, p):
            return torch.softmax(t, dim=-1) if op == "softmax" else \
                F.layer_norm(t, (t.shape[-1],), p[0], p[1], EPS)
        t, p = torch.from_numpy(x), [torch.from_numpy(a) for a in params]
        rows.append((f"torch {op} (cpu)", median_time(lambda: call(t, p), repeat=repeat)))
        if torch.cuda.is_available():
            tg, pg = t.cuda(), [a.cuda() for a in p]
            rows.append((f"torch {op} (cuda)", torch_cuda_time(lambda: call(tg, pg), repeat)))
    return rows


def _ours(op: str, x, params, want, repeat: int, targets):
    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        arrays = [x, *params]
        f = gpucg.compile(op, *(gpucg.tensor(a.shape, "float32") for a in arrays),
                          target=target)
        be = get_backend(target)
        dev = [be.to_device(a) if target != "numpy" else a for a in arrays]
        err = float(np.max(np.abs(be.to_host(f(*dev)) - want))) if x.size else 0.0
        t = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=2)))
        rows.append((target, f"gpucg {target} [{f.last_impl}]", t, err,
                      kernel_seconds(target, lambda: f(*dev), repeat)))
    return rows


def main(argv=()) -> int:
    p = parser("softmax", "cases a 64th of the size (for smoke tests)")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    cases = CASES
    if args.quick:
        cases = [(name + " /64", (max(1, s[0] // 8), max(1, s[1] // 8))) for name, s in cases]
    rng = np.random.default_rng(0)
    results, goals = [], []
    print(banner("softmax"))
    for label, shape in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        n = shape[-1]
        for op in ("softmax", "layer_norm"):
            params = [] if op == "softmax" else [rng.uniform(0.5, 1.5, n).astype(np.float32),
                                                 rng.standard_normal(n).astype(np.float32)]
            x64 = x.astype(np.float64)
            want = numpy_softmax(x64) if op == "softmax" else numpy_layer_norm(x64, *params)
            name = f"{op} {label}"
            peers = _peers(op, x, params, args.repeat)
            mine = _ours(op, x, params, want, args.repeat, targets)
            ours = [(lbl, t, f"max abs err {err:.1e}" + kernel_note(kt, x.nbytes / 1e9),
                     {"max_abs_err": err, "kernel_seconds": kt})
                    for _, lbl, t, err, kt in mine]
            print_case(name, f"{name}: {x.size} float32 elements", peers, ours, x.nbytes / 1e9,
                       results)
            goals += goal_lines(name, peers, mine, x.nbytes, args.repeat,
                                torch_peer="torch softmax (cuda)" if op == "softmax" else None)
    print()
    for line in goals:
        print(line)
    if args.json:
        print(json.dumps({"results": results, "goals": goals}, indent=1))
    bad = [r for r in results if r.get("max_abs_err", 0) > 1e-4]
    return 1 if bad else 0
