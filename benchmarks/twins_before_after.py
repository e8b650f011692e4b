"""The OpenCL twins of the tensor-core kernels (forced with impl=, as the tests run them), timed
on PoCL from two checkouts of gpucg, interleaved, and compared.

    python benchmarks/twins_before_after.py --before /path/old --after /path/new [--rounds 3]

The twins are the CUDA kernels with the warp operations emulated for 32-work-item warps
(never chosen by default on OpenCL); this shows a change to the tile layer left none of them
slower. Each round runs every case once from each checkout (the order alternates between
rounds), each checkout in its own interpreter with PYTHONPATH set to it and a kernel cache of
its own; the first call of a case compiles and is not timed. A row is flagged "slower" only
when after/before exceeds the noise: the larger spread (max/min) of either checkout's own
times over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

#: (label, op, input shapes, dtype, attrs, impl): each a twin at its own default config
CASES = [
    ("dense f16 (130, 64) x (136, 64)", "dense", [(130, 64), (136, 64)], "float16", {},
     "gemm_mma"),
    ("dense tf32 (96, 64) x (80, 64)", "dense", [(96, 64), (80, 64)], "float32",
     {"allow_tf32": True}, "gemm_mma"),
    ("conv2d f16 NHWC (2, 9, 9, 16) 3x3 -> 24", "conv2d", [(2, 9, 9, 16), (3, 3, 16, 24)],
     "float16", {"padding": 1, "data_layout": "NHWC", "kernel_layout": "HWIO"}, "direct_mma"),
    ("attention f16 (1, 2, 40, 64) causal", "attention", [(1, 2, 40, 64)] * 3, "float16",
     {"causal": True}, "flash_mma"),
]

CHILD = r"""
import json, sys, time
import numpy as np
import gpucg
cases, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
out = []
for label, op, shapes, dtype, attrs, impl in cases:
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    f = gpucg.compile(op, *(gpucg.tensor(s, dtype) for s in shapes), target="opencl",
                      impl=impl, **attrs)
    f(*arrays)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*arrays)
        times.append(time.perf_counter() - t0)
    out.append({"case": label, "seconds": min(times),
                "config": f.selection.choices[0].config.short()})
print(json.dumps(out))
"""


def _run(tree: str, repeat: int, cache: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=tree, GPUCG_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES), str(repeat)],
                         env=env, cwd=tree, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the twins in {tree} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    times: dict = {"before": {}, "after": {}}
    configs: dict = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                tree = getattr(args, which)
                for row in _run(tree, args.repeat, os.path.join(tmp, which)):
                    times[which].setdefault(row["case"], []).append(row["seconds"])
                    configs[which][row["case"]] = row["config"]
    slower = 0
    print(f"{'case':<44} {'before s':>9} {'after s':>9} {'after/before':>12} {'noise':>6}")
    for label, *_ in CASES:
        b, a = times["before"][label], times["after"][label]
        ratio = min(a) / min(b)
        noise = max(max(b) / min(b), max(a) / min(a))
        flag = ratio > noise
        slower += flag
        print(f"{label:<44} {min(b):9.4f} {min(a):9.4f} {ratio:12.2f} {noise:6.2f}"
              + ("  slower" if flag else ""))
        print(f"  configs: before {configs['before'][label]}; after {configs['after'][label]}")
    print(f"rows slower beyond the noise: {slower}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
