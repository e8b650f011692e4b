"""Issue 35 item 6's case on OpenCL (PoCL on the CPU) beside NumPy, in one process: argmax,
argmin, sum over rows, sum over axis 0 and softmax of a (256, 32000) float32 array.

    PYTHONPATH=CHECKOUT python benchmarks/pocl_reductions.py [--repeat 15] [--json]
    python benchmarks/before_after.py --before OLD --after NEW --targets opencl \
        --script benchmarks/pocl_reductions.py --peer numpy --rounds 12 reductions

Each case times gpucg with the input already on the device ("device") and from the host
array ("host": the call borrows or copies it and brings the result back), and NumPy on the
host array, call by call in turn (so that the machine's load falls on all three alike); a row
gives the median and the fastest of its calls. Results are checked against NumPy (indices
equal). Only the public API is used, so any checkout of gpucg runs it.

The input (31.25 MiB) about fills a 32 MiB last-level cache, so what ran just before a call
decides how much of its input is still cached: timed in turn with nothing between, NumPy
always followed the host call, which had read the same array, and the device call followed
NumPy, which had read the other one. ``--cache cold`` (the default) reads a scratch array twice
the cache's size before each timed call, so that every call starts from memory alike; ``--cache
warm`` makes the same call once, untimed, before each timed one (its input as cached as it gets);
``--cache none`` times the calls back to back in turn (this script's figures before 2026-11-28d).

``--floor`` adds a row to each row-reduction case: a plain pyopencl kernel that only streams the
device-resident input (float8 loads, a sum a row: the least any kernel reducing those rows
reads), launched and waited for like the device call. It is what this OpenCL device and its
launch cost give before any reduction's own work, and is timed in the same turn.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import gpucg
from gpucg.benchmarks.common import banner
from gpucg.runtime import get_backend

SHAPE = (256, 32000)


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


#: (name, op, attrs, NumPy's version)
CASES = [("argmax axis -1", "argmax", {"axis": -1}, lambda x: np.argmax(x, axis=-1)),
         ("argmin axis -1", "argmin", {"axis": -1}, lambda x: np.argmin(x, axis=-1)),
         ("sum axis -1", "sum", {"axis": -1}, lambda x: np.sum(x, axis=-1)),
         ("sum axis 0", "sum", {"axis": 0}, lambda x: np.sum(x, axis=0)),
         ("softmax axis -1", "softmax", {"axis": -1}, _softmax)]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


#: bytes read before each timed call under --cache cold (twice a 32 MiB last-level cache)
EVICT_BYTES = 64 << 20


#: the floor's kernel: work-group r sums row r of n8 float8s (four in flight)
FLOOR_SOURCE = """
__kernel void stream_rows(__global const float8* x, __global float* y, const int n8) {
    const int r = get_group_id(0);
    __global const float8* p = x + (long)r * n8;
    float8 a = 0, b = 0, c = 0, d = 0;
    for (int j = 0; j + 3 < n8; j += 4) { a += p[j]; b += p[j + 1]; c += p[j + 2]; d += p[j + 3]; }
    a = (a + b) + (c + d);
    y[r] = ((a.s0 + a.s1) + (a.s2 + a.s3)) + ((a.s4 + a.s5) + (a.s6 + a.s7));
}
"""


def _floor(be, xd):
    """The floor row's call (see the module's docstring) on gpucg's device array ``xd``."""
    import pyopencl as cl

    kernel = cl.Program(be.context, FLOOR_SOURCE).build().stream_rows
    rows, n = SHAPE
    out = cl.Buffer(be.context, cl.mem_flags.READ_WRITE, rows * 4)
    buf = getattr(xd, "data", None) or xd.base_data
    kernel.set_args(buf, out, np.int32(n // 8))
    got = np.empty(rows, np.float32)
    cl.enqueue_nd_range_kernel(be.queue, kernel, (rows,), (1,))
    cl.enqueue_copy(be.queue, got, out)
    ok = np.allclose(got, be.to_host(xd).sum(axis=-1), rtol=1e-3, atol=1e-3)
    # (the lambda holds ``out``: a kernel's argument does not keep its buffer alive)
    return (lambda: (out, cl.enqueue_nd_range_kernel(be.queue, kernel, (rows,), (1,)).wait())), ok


def run(repeat: int, cache: str = "cold", floor: bool = False) -> list[dict]:
    be = get_backend("opencl")
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    xd = be.to_device(x)
    scratch = np.ones(EVICT_BYTES // 4, np.float32)
    stream, stream_ok = _floor(be, xd) if floor else (None, True)
    rows = []
    for name, op, attrs, ref in CASES:
        f = gpucg.compile(op, gpucg.tensor(SHAPE, "float32"), target="opencl", **attrs)
        want, got = ref(x), be.to_host(f(xd))
        ok = (np.array_equal(got, want) if op.startswith("arg")
              else np.allclose(got, want, rtol=1e-4, atol=1e-6 * SHAPE[0]))
        calls = {"device": lambda: (f(xd), be.synchronize()),
                 "host": lambda: be.to_host(f(x)), "numpy": lambda: ref(x)}
        if stream is not None and attrs["axis"] == -1 and op != "softmax":
            calls["floor"] = stream
        for fn in calls.values():  # warm-up: compiled, cached, pages touched
            fn()
        times = {k: [] for k in calls}
        for _ in range(repeat):
            for k, fn in calls.items():
                if cache == "cold":
                    np.add.reduce(scratch)
                elif cache == "warm":
                    fn()
                times[k].append(_timed(fn))
        case = f"{op} {SHAPE} {name.split(' ', 1)[1]}"
        for k, t in times.items():
            label = {"numpy": "numpy", "floor": "opencl floor: stream the rows (pyopencl)"}.get(
                k, f"gpucg opencl {k} [{f.last_impl}]")
            rows.append({"case": case, "label": label, "seconds": float(np.median(t)),
                         "min_seconds": min(t),
                         "matches": bool(stream_ok if k == "floor" else ok)})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=15, help="calls of each, in turn")
    p.add_argument("--json", action="store_true", help="also print the rows as JSON")
    p.add_argument("--cache", choices=("cold", "warm", "none"), default="cold",
                   help="before each timed call: evict the cache, make the call once, or nothing")
    p.add_argument("--floor", action="store_true",
                   help="also time a plain kernel that only streams the rows (the device's floor)")
    p.add_argument("groups", nargs="*", help="ignored (before_after.py passes a family name)")
    args = p.parse_args(argv)
    rows = run(args.repeat, args.cache, args.floor)
    print(banner("pocl_reductions"))
    for r in rows:
        print(f"{r['case']:<34} {r['label']:<44} median {r['seconds'] * 1e3:8.3f} ms  "
              f"min {r['min_seconds'] * 1e3:8.3f} ms{'' if r['matches'] else '  DIFFERS'}")
    if args.json:
        print(json.dumps({"results": rows}))
    return 0 if all(r["matches"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
