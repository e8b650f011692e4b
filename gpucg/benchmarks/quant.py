"""Weight-only quantized dense layers beside the float16 GEMV and NumPy and torch: times,
ratios and GB/s of weights read (the bytes a decode step streams: float16 2 bytes a weight,
int8 1 and int4 half, plus their scales).

Cases: a LLaMA-7B projection (N = K = 4096) at m = 1 (decoding: the GEMV), m = 16 (a decode
batch: still the GEMV) and m = 128 (the GEMM). Rows: NumPy's and torch's float32 matmul
(the CPU peers), gpucg's dense in float16 (its GEMV at small m), dense_int8 and dense_int4
(group 128, zero points) on each target. The CUDA rows and Marlin's / torch's int4 kernels
need a GPU: "not measured on a GPU" here. Goal on an H100, for the day it is measured:
dense_int4's GEMV at least 3x the float16 GEMV at m = 1.
"""

from __future__ import annotations

import json

import numpy as np

from .common import banner, kernel_note, median_time, parser, print_case, time_on_targets, \
    torch_or_none
from .lowp import NOT_MEASURED, gpu_present

CASES = [("m=1 (decode GEMV)", 1), ("m=16 (decode batch)", 16), ("m=128 (GEMM)", 128)]
GROUP = 128


def _operands(rng, m: int, n: int, k: int):
    """x (float16), the int4 and int8 weights of one float32 W, and W's float16 form."""
    x = (rng.standard_normal((m, k)) * 0.5).astype(np.float16)
    q4 = rng.integers(0, 16, (n, k)).astype(np.uint8)
    s4 = rng.uniform(0.005, 0.02, (n, k // GROUP)).astype(np.float16)
    z4 = rng.integers(6, 10, (n, k // GROUP)).astype(np.uint8)
    int4 = (x, (q4[:, 0::2] | (q4[:, 1::2] << 4)).astype(np.uint8), s4, np.zeros(n, np.float16),
            z4)
    w = (q4.astype(np.float32) - np.repeat(z4, GROUP, 1)) * np.repeat(s4.astype(np.float32),
                                                                       GROUP, 1)
    s8 = (np.abs(w).max(1) / 127).astype(np.float16)
    int8 = (x, np.clip(np.round(w / s8.astype(np.float32)[:, None]), -127, 127).astype(np.int8),
            s8)
    return x, w, int4, int8


def _ours(label, op, arrays, attrs, want, repeat, targets):
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return [(f"gpucg {target} {label} [{impl}]", t, float(np.max(np.abs(y - want))) / scale, kt)
            for target, impl, t, y, kt in time_on_targets(op, arrays, attrs, targets, repeat)]


def main(argv=()) -> int:
    p = parser("quant", "N and K 256 for smoke tests")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    n = k = 256 if args.quick else 4096
    rng = np.random.default_rng(0)
    results = []
    print(banner("quant"))
    for name, m in CASES:
        x, w, int4, int8 = _operands(rng, m, n, k)
        x32 = x.astype(np.float32)
        want = x32.astype(np.float64) @ w.T.astype(np.float64)
        w16 = w.astype(np.float16)
        peers = [("numpy float32 matmul", median_time(lambda: x32 @ w.T, repeat=args.repeat))]
        torch = torch_or_none()
        if torch is not None:
            tx, tw = torch.from_numpy(x32), torch.from_numpy(w)
            peers.append(("torch float32 linear (cpu)", median_time(
                lambda: torch.nn.functional.linear(tx, tw), repeat=args.repeat)))
        weights = {"float16": n * k * 2, "int8": n * k + n * 2,
                   "int4": n * k // 2 + 3 * n * (k // GROUP)}
        ours = []
        w8 = int8[1].astype(np.float64) * int8[2].astype(np.float64)[:, None]
        for label, op, arrays, attrs, ref in (
                ("float16 dense", "dense", (x, w16), {}, want),
                ("int8", "dense_int8", int8, {}, x32.astype(np.float64) @ w8.T),
                ("int4", "dense_int4", int4, {"group_size": GROUP}, want)):
            key = label.split()[0]
            for row, t, err, kt in _ours(label, op, arrays, attrs, ref, args.repeat, targets):
                gbps = weights[key] / t / 1e9
                ours.append((row, t, f"weights {gbps:.2f} GB/s; max rel err {err:.1e}"
                             + kernel_note(kt, weights[key] / 1e9),
                             {"weights_gbps": gbps, "max_rel_err": err, "kernel_seconds": kt}))
        print_case(name, f"{name}: y ({m} x {n}) = x @ W^T, K = {k}; GB/s below: of float32 "
                   "weights for the peers", peers, ours, n * k * 4 / 1e9, results)
        if not gpu_present():
            print(f"  {'cuda rows, Marlin, torch int4 (cuda)':<42} {NOT_MEASURED}")
            results.append({"case": name, "impl": "cuda rows", "skipped": NOT_MEASURED})
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if r.get("max_rel_err", 0) > 5e-3]
    return 1 if bad else 0
