"""argsort of long rows beside NumPy's and torch's stable sorts: the onesweep radix sort
(sort_radix, what selection picks for rows of 2^15 and more) and the bitonic + merge path it
replaces there (sort_merge, forced by impl=), timed interleaved in one process.

GB/s counts the input read once and the indices written once (8 bytes an element). The
traffic table gives, for each path, the bytes its kernels load and store as counted from their
code (the radix sort's figure is the bound in gpucg/strategies/sort_radix.py, which Oclgrind's
count of the small case keeps within; the merge path's counts every load of its binary
searches, most of which a GPU's caches serve).
"""

from __future__ import annotations

import json
import math

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend
from gpucg.strategies.sort_radix import traffic_bound

from .common import banner, median_time, parser, print_case, torch_or_none

CASES = [("(1, 2^20) argsort", (1, 1 << 20)), ("(16, 2^16) argsort", (16, 1 << 16)),
         ("(1, 2^24) argsort", (1, 1 << 24))]
IMPLS = ("sort_radix", "sort_merge")


def merge_traffic(rows: int, n: int, block: int = 4096, probes: bool = True) -> int:
    """Bytes the bitonic + merge path's kernels load and store for float32 keys and int32
    indices: blocks read keys and write pairs; each merge pass reads its pairs, log2(width) + 1
    probed pairs per element (``probes``), writes pairs (the last: values gathered from the
    data, indices)."""
    m = rows * n
    total = m * 4 + m * 8
    width = block
    while width < n:
        total += m * 8 + m * 8 * (int(math.log2(width)) + 1) * probes + m * 8
        width *= 2
    return total + m * 4  # the last pass gathers the values from the data


def main(argv=()) -> int:
    p = parser("sort", "smaller cases (for smoke tests)")
    args = p.parse_args(list(argv))
    cases = [(name + " /64", (s[0], s[1] // 64)) for name, s in CASES] if args.quick else CASES
    targets = [t.strip() for t in args.targets.split(",") if t.strip() and t.strip() != "numpy"]
    rng = np.random.default_rng(0)
    results, traffic = [], []
    print(banner("sort"))
    torch = torch_or_none()
    for name, shape in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        want = np.argsort(x, axis=-1, kind="stable")
        peers = [("numpy argsort(kind=stable)",
                  median_time(lambda: np.argsort(x, axis=-1, kind="stable"), repeat=args.repeat))]
        if torch is not None:
            t = torch.from_numpy(x)
            peers.append(("torch.sort(stable=True) (cpu)",
                          median_time(lambda: torch.sort(t, dim=-1, stable=True), repeat=args.repeat)))
        ours = []
        for target in targets:
            if not backend_status(target)[0]:
                continue
            be = get_backend(target)
            xd = be.to_device(x)
            fs = {i: gpucg.compile("argsort", gpucg.tensor(shape, "float32"), target=target, impl=i)
                  for i in IMPLS}
            oks = {i: np.array_equal(be.to_host(f(xd)), want) for i, f in fs.items()}
            times = {i: [] for i in IMPLS}
            for _ in range(args.repeat):  # interleaved: the machine's load falls on both alike
                for i, f in fs.items():
                    times[i] += be.time(lambda: f(xd), repeat=1, warmup=0)
            for i in IMPLS:
                ok = oks[i]
                ours.append((f"gpucg {target} [{i}]", float(np.median(times[i])),
                             "indices match" if ok else "INDICES DIFFER", {"indices_match": ok}))
        print_case(name, f"{name}: {x.size} float32 elements, ascending", peers, ours,
                   x.size * 8 / 1e9, results)
        keys, words = traffic_bound(shape[0], shape[1], 4, 4, 4, 8)
        traffic.append({"case": name, "sort_radix": keys + words, "sort_merge":
                        merge_traffic(*shape), "sort_merge_streamed":
                        merge_traffic(*shape, probes=False), "compulsory": x.size * 8})
    print("\nbytes the kernels load and store (from their code; not measured on a GPU):")
    for t in traffic:
        print(f"  {t['case']:<24} sort_radix {t['sort_radix'] / 2**20:9.1f} MiB"
              f" ({t['sort_radix'] / t['compulsory']:.1f}x)   sort_merge "
              f"{t['sort_merge'] / 2**20:9.1f} MiB ({t['sort_merge'] / t['compulsory']:.1f}x; "
              f"{t['sort_merge_streamed'] / 2**20:.1f} MiB without the probes)"
              f"   compulsory {t['compulsory'] / 2**20:.1f} MiB")
    if args.json:
        print(json.dumps({"results": results, "traffic": traffic}, indent=1))
    return 0 if all(r.get("indices_match", True) for r in results) else 1
