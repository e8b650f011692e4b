"""Where a CUDA call's host time goes: per-call wall time of warm compiled calls beside their
kernels' own time (CudaBackend.kernel_time), then cProfile's top functions by own time.
benchmarks/gpu_tier.sh runs it on a GPU machine (its `profile` step).

Run: python benchmarks/host_profile.py [TARGET]  (default cuda; a stand-in GPU where CuPy is
absent: the host path through gpucg.verify.cupy_standin, its arrays costing what they cost)
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import sys
import time

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend, use_backend

CASES = [("softmax", (4096, 1024), {}), ("sum", (4096, 4096), {"axis": -1}),
         ("cumsum", (1 << 24,), {"axis": 0}), ("add", (4096, 1024), {})]


def _backend():
    if backend_status("cuda")[0]:
        return contextlib.nullcontext()
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    print("no CUDA here: the stand-in GPU (host path only, kernel times 0)")
    return use_backend("cuda", CudaBackend(cupy=StandInCupy("sm_90", check=False)))


def main(calls: int = 2000) -> int:
    with _backend():
        be = get_backend("cuda")
        for op, shape, attrs in CASES:
            arrays = [be.to_device(np.ones(shape, np.float32))
                      for _ in range(2 if op == "add" else 1)]
            f = gpucg.compile(op, *(gpucg.tensor(shape, "float32") for _ in arrays),
                              target="cuda", **attrs)
            f(*arrays)
            be.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                f(*arrays)
            be.synchronize()
            per_call = (time.perf_counter() - t0) / calls
            kernels = float(np.median(be.kernel_time(lambda: f(*arrays), repeat=20)))
            print(f"{op} {shape} [{f.last_impl}]: {per_call * 1e6:.1f} us a call back to back, "
                  f"kernels {kernels * 1e6:.1f} us")
            if op == "softmax":
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls):
                    f(*arrays)
                prof.disable()
                be.synchronize()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
