"""topk beside NumPy (argpartition + sort of the k) and torch.topk: times, ratios, GB/s.

GB/s counts the input once (rows x length x 4 bytes of float32): a selection has to read every
element at least once, so this is the fraction of copy bandwidth a case reaches. Device
timings keep the data on the device; the NumPy-fallback row times host arrays.
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import (banner, median_time, parser, print_case, print_traffic, torch_cuda_time,
                     torch_or_none)

#: (name, shape, k): the issue's cases, then the two the CPU goals name
CASES = [("(1, 2^24) k=10", (1, 1 << 24), 10), ("(1, 2^24) k=1000", (1, 1 << 24), 1000),
         ("(4096, 1024) k=8", (4096, 1024), 8), ("(256, 262144) k=256", (256, 262144), 256),
         ("(64, 4096) k=4096 (full sort)", (64, 4096), 4096)]
CPU_CASES = [("(1, 2^22) k=100", (1, 1 << 22), 100)]
#: an implementation a newer one replaced, timed beside it in the same process (forced)
BEFORE = {"topk_warp": "topk_group"}


def numpy_topk(x: np.ndarray, k: int):
    """The peer: np.argpartition for the k largest, then a sort of those k (ties unordered)."""
    n = x.shape[-1]
    part = np.argpartition(x, n - k, axis=-1)[:, n - k:]
    vals = np.take_along_axis(x, part, -1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, -1), np.take_along_axis(part, order, -1)


def _peers(x: np.ndarray, k: int, repeat: int):
    rows = [("numpy argpartition+sort", median_time(lambda: numpy_topk(x, k), repeat=repeat))]
    torch = torch_or_none()
    if torch is not None:
        t = torch.from_numpy(x)
        rows.append(("torch.topk (cpu)", median_time(lambda: torch.topk(t, k, dim=-1), repeat=repeat)))
        if torch.cuda.is_available():
            tg = t.cuda()
            rows.append(("torch.topk (cuda)", torch_cuda_time(lambda: torch.topk(tg, k, dim=-1), repeat)))
    return rows


def _ours(x: np.ndarray, k: int, want: np.ndarray, repeat: int, targets):
    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        f = gpucg.compile("topk", gpucg.tensor(x.shape, "float32"), k=k, target=target)
        be = get_backend(target)
        xd = be.to_device(x) if target != "numpy" else x
        values, _ = f(xd)
        ok = np.array_equal(be.to_host(values), want)
        t = float(np.median(be.time(lambda: f(xd), repeat=repeat, warmup=1)))
        rows.append((f"gpucg {target} [{f.last_impl}]", t, ok))
        old = BEFORE.get(f.last_impl.rsplit(".", 1)[0])
        if old:
            g = gpucg.compile("topk", gpucg.tensor(x.shape, "float32"), k=k, target=target, impl=old)
            ok = np.array_equal(be.to_host(g(xd)[0]), want)
            t = float(np.median(be.time(lambda: g(xd), repeat=repeat, warmup=1)))
            rows.append((f"gpucg {target} [{g.last_impl}] (before)", t, ok))
    return rows


def main(argv=()) -> int:
    p = parser("topk", "smaller cases (for smoke tests)")
    args = p.parse_args(list(argv))
    cases = CASES + ([] if backend_status("cuda")[0] else CPU_CASES)
    if args.quick:
        cases = [(name + " /64", (max(1, s[0] // 8), max(k, s[1] // 8)), k) for name, s, k in cases]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rng = np.random.default_rng(0)
    results = []
    print(banner("topk"))
    for name, shape, k in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        gbytes = x.size * 4 / 1e9
        want = numpy_topk(x, k)[0]
        peers = _peers(x, k, args.repeat)
        ours = [(label, t, "values match" if ok else "VALUES DIFFER", {"values_match": ok})
                for label, t, ok in _ours(x, k, want, args.repeat, targets)]
        print_case(name, f"{name}: {x.size} float32 elements, descending", peers, ours, gbytes,
                   results)
    traffic = print_traffic(["topk"], not args.no_traffic)
    if args.json:
        print(json.dumps({"results": results, "traffic": traffic}, indent=1))
    return 0 if all(r.get("values_match", True) for r in results) else 1
