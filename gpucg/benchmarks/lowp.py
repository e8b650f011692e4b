"""The reduced-precision rows of the GEMM-shaped benchmarks (dense, conv2d): float16, bfloat16
and TF32, cuBLAS / cuDNN through torch beside gpucg's CUDA kernels. They need a CUDA GPU; with
none, each case says "not measured on a GPU" (the tensor-core goals are GPU figures) and names
the kernel an H100 would run (sm_90; and sm_90a's where it differs: gemm_wgmma).

bfloat16 rows run where both torch and gpucg know the dtype, TF32 rows where the operator
takes ``allow_tf32``; otherwise the row names what is missing.
"""

from __future__ import annotations

import numpy as np

import gpucg
from gpucg.errors import GpucgError
from gpucg.runtime import backend_status, get_backend

from .common import torch_cuda_time, torch_or_none

PRECISIONS = ("float16", "bfloat16", "tf32")
NOT_MEASURED = "not measured on a GPU"
#: the arch-specific target whose plan is shown too where it picks another kernel
HOPPER_TARGET = "cuda -arch=sm_90a"


def gpu_present() -> bool:
    torch = torch_or_none()
    return bool(backend_status("cuda")[0] or (torch is not None and torch.cuda.is_available()))


def _torch_rows(precision, peer, arrays, repeat):
    """torch's row: peer(tensors) on the GPU in the precision (TF32: float32, TF32 allowed)."""
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        return []
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "tf32": torch.float32}
    t = [torch.from_numpy(a).cuda().to(dtype[precision]) for a in arrays]
    tf32 = precision == "tf32"
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        return [(f"torch (cuda, {precision})", torch_cuda_time(lambda: peer(*t), repeat))]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _ours_row(precision, op, arrays, attrs, want, repeat):
    """gpucg's CUDA row in the precision, or (label, None, reason) where it cannot run."""
    dtype = "float32" if precision == "tf32" else precision
    at = dict(attrs, allow_tf32=True) if precision == "tf32" else dict(attrs)
    label = f"gpucg cuda {precision}"
    try:
        types = [gpucg.tensor(a.shape, dtype) for a in arrays]
        f = gpucg.compile(op, *types, target="cuda", **at)
        be = get_backend("cuda")
        dev = [be.to_device(np.asarray(a, dtype=np.float32).astype(t.dtype))
               for a, t in zip(arrays, f.input_types)]
    except (GpucgError, TypeError, ValueError) as exc:  # a dtype or attribute not here yet
        return (label, None, f"skipped: {exc}")
    y = np.asarray(be.to_host(f(*dev)), dtype=np.float64)
    err = float(np.max(np.abs(y - want)) / max(1e-30, float(np.max(np.abs(want)))))
    t = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=1)))
    return (f"{label} [{f.last_impl}]", t, f"max rel err {err:.1e}")


def planned(precision, op, arrays, attrs, target="cuda -arch=sm_90") -> tuple[str, str]:
    """(label, what would run): the implementation selection picks for the case on
    ``target`` (no GPU needed), its config and its dynamic shared memory."""
    dtype = "float32" if precision == "tf32" else precision
    at = dict(attrs, allow_tf32=True) if precision == "tf32" else dict(attrs)
    try:
        f = gpucg.compile(op, *(gpucg.tensor(a.shape, dtype) for a in arrays), target=target,
                          records=False, **at)
    except (GpucgError, TypeError, ValueError) as exc:
        return f"gpucg cuda {precision}", f"skipped: {exc}"
    c = f.selection.choices[0]
    smem = max((c.impl.dynamic_local(k, c.config) for k in c.impl.kernels), default=0)
    extra = f", {smem // 1024} KiB dynamic shared memory" if smem else ""
    return (f"gpucg cuda {precision} [{c.impl.name}]",
            f"{target.split('=')[-1]}: {c.config.short()}{extra}")


def print_rows(case, op, arrays, attrs, want, peer, repeat, work, results) -> None:
    """Print (and add to ``results``) the float16, bfloat16 and TF32 rows of one case:
    ``peer(*torch tensors)`` is the cuBLAS/cuDNN call, ``work`` the case's TFLOP."""
    if not gpu_present():
        for precision in PRECISIONS:
            label, plan = planned(precision, op, arrays, attrs)
            rows = [(label, plan)]
            hopper = planned(precision, op, arrays, attrs, HOPPER_TARGET)
            if hopper[0] != label:  # an implementation of Hopper's own instructions (wgmma)
                rows.append(hopper)
            for label, plan in rows:
                print(f"  {label:<42} {NOT_MEASURED}: {plan}")
                results.append({"case": case, "impl": label, "skipped": NOT_MEASURED,
                                "plan": plan})
        return
    for precision in PRECISIONS:
        rows = _torch_rows(precision, peer, arrays, repeat)
        if backend_status("cuda")[0]:
            rows.append(_ours_row(precision, op, arrays, attrs, want, repeat))
        for label, t, *note in rows:
            if t is None:
                print(f"  {label:<42} {note[0]}")
                results.append({"case": case, "impl": label, "skipped": note[0]})
                continue
            print(f"  {label:<42} {t * 1e3:9.3f} {'':>8} {work / t:8.3f}  {' '.join(note)}")
            results.append({"case": case, "impl": label, "seconds": t, "tflops": work / t})
