"""The FP8 rows of ``gpucg bench dense``: dense_fp8 beside torch._scaled_mm (torch's FP8 GEMM:
cuBLASLt on a GPU; torch 2.13 has a CPU kernel too, per-tensor scales), on every usable
target, each row checked against the float64 reference of the scaled product. The GPU rows
(torch's cuBLASLt and gpucg's CUDA kernels) say "not measured on a GPU" without one.
"""

from __future__ import annotations

import numpy as np

import gpucg
from gpucg.half import numpy_dtype
from gpucg.runtime import backend_status, get_backend

from .common import median_time, print_case, torch_cuda_time, torch_or_none
from .lowp import NOT_MEASURED, gpu_present

#: (name, m, n, k, block_size): per-tensor scales (what torch._scaled_mm takes on the CPU)
#: and DeepGEMM's blockwise ones
CASES = [("FP8 e4m3 (1024, 1024) x (1024, 1024), per-tensor scales", 1024, 1024, 1024, None),
         ("FP8 e4m3 (1024, 1024) x (1024, 1024), 1x128 / 128x128 block scales", 1024, 1024,
          1024, (128, 128))]


def _operands(m, n, k, block, rng):
    e4 = numpy_dtype("float8_e4m3fn")
    x = (rng.standard_normal((m, k)) * 8).astype(np.float32).astype(e4)
    w = (rng.standard_normal((n, k)) * 8).astype(np.float32).astype(e4)
    if block is None:
        return x, w, np.float32([0.02]), np.float32([0.03])
    kb, nb = -(-k // block[1]), -(-n // block[0])
    return (x, w, rng.uniform(0.01, 0.03, (m, kb)).astype(np.float32),
            rng.uniform(0.01, 0.03, (nb, kb)).astype(np.float32))


def _torch_rows(x, w, xs, ws, repeat):
    """torch._scaled_mm on the CPU (and the GPU where there is one); [] where torch lacks it."""
    torch = torch_or_none()
    fn = getattr(torch, "_scaled_mm", None) if torch is not None else None
    if fn is None or xs.size != 1 or ws.size != 1:
        return []
    a = torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn)
    b = torch.from_numpy(w.view(np.uint8)).view(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor(float(xs[0])), torch.tensor(float(ws[0]))
    rows = []
    try:
        rows.append(("torch._scaled_mm (cpu)", median_time(
            lambda: fn(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), repeat=repeat)))
    except RuntimeError:  # a build without the CPU kernel
        pass
    if torch.cuda.is_available():
        g = [t.cuda() for t in (a, b, sa, sb)]
        rows.append(("torch._scaled_mm (cuda, cuBLASLt)", torch_cuda_time(
            lambda: fn(g[0], g[1], scale_a=g[2], scale_b=g[3], out_dtype=torch.bfloat16),
            repeat)))
    return rows


def print_rows(args, targets, rng, results) -> bool:
    """Print the FP8 cases; False where a gpucg row is off the reference beyond the bound."""
    ok = True
    ref_of = gpucg.get_op("dense_fp8").reference
    for name, m, n, k, block in CASES:
        if args.quick:
            name, m, n, k = name + " /quick", m // 4, n // 4, k // 4
        x, w, xs, ws = _operands(m, n, k, block, rng)
        attrs = gpucg.get_op("dense_fp8").make_attrs(out_dtype="float32", block_size=block)
        want = ref_of(x, w, xs, ws, attrs).astype(np.float64)
        peers = _torch_rows(x, w, xs, ws, args.repeat)
        ours = []
        for target in targets:
            if not backend_status(target)[0] or target == "cuda":
                continue
            be = get_backend(target)
            f = gpucg.compile("dense_fp8", *[gpucg.tensor(a.shape, a.dtype.name)
                                             for a in (x, w, xs, ws)],
                              target=target, out_dtype="float32", block_size=block)
            dev = [be.to_device(a) if target != "numpy" else a for a in (x, w, xs, ws)]
            err = float(np.max(np.abs(np.asarray(be.to_host(f(*dev)), np.float64) - want))
                        / max(1e-30, float(np.max(np.abs(want)))))
            good = err < 1e-4  # float32 sums of exact FP8 products
            ok = ok and good
            t = float(np.median(be.time(lambda: f(*dev), repeat=args.repeat, warmup=1)))
            ours.append((f"gpucg {target} [{f.last_impl}]", t,
                         f"max rel err {err:.1e}" + ("" if good else " TOO LARGE"),
                         {"max_rel_err": err}))
        tflop = 2.0 * m * n * k / 1e12
        if not peers:  # torch._scaled_mm takes per-tensor scales alone on the CPU
            print(f"\n  (no torch row for {name}: torch._scaled_mm's CPU kernel takes "
                  "per-tensor scales)")
            peers = [(ours[0][0], ours[0][1])] if ours else []
            ours = ours[1:]
        if peers:
            print_case(name, f"{name}: {tflop * 1e3:.3g} GFLOP", peers, ours, tflop, results,
                       unit="TFLOP/s")
        gpu_rows = [("gpucg cuda dense_fp8", "skipped: CuPy holds no FP8 arrays (the CUDA "
                                             "kernels compile and are checked with NVRTC)")]
        if not gpu_present():
            gpu_rows = [(label, f"{NOT_MEASURED} (no CUDA GPU here)") for label in
                        ("torch._scaled_mm (cuda, cuBLASLt)", "gpucg cuda dense_fp8")]
            for arch in ("sm_90", "sm_90a"):
                c = gpucg.compile("dense_fp8", *(gpucg.tensor(a.shape, a.dtype.name)
                                                 for a in (x, w, xs, ws)),
                                  target=f"cuda -arch={arch}", records=False,
                                  out_dtype="float32", block_size=block).selection.choices[0]
                gpu_rows.append((f"gpucg cuda dense_fp8 [{c.impl.name}]",
                                 f"{NOT_MEASURED}: {arch}: {c.config.short()}"))
        for label, why in gpu_rows:
            print(f"  {label:<42} {why}")
            results.append({"case": name, "impl": label, "skipped": why})
    return ok
