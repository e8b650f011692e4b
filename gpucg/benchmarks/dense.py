"""dense / matmul / batch_matmul beside np.matmul (BLAS), torch, and cuBLAS through CuPy and
torch on a GPU: times, ratios, TFLOP/s (2 * batch * m * n * k per product).

Each case also has float16, bfloat16 and TF32 rows (gpucg.benchmarks.lowp: cuBLAS through
torch beside gpucg's CUDA kernels), "not measured on a GPU" without one; then dense_fp8 beside
torch._scaled_mm (gpucg.benchmarks.fp8; ``--cases fp8`` runs those alone).

The BERT FFN case runs the fused bias + gelu beside our plain GEMM of the same shape, so the
cost of the epilogue shows. On a GPU torch runs with TF32 off (float32 sums, as ours), and
device rows keep the data on the device. Every gpucg row is checked against np.matmul.
"""

from __future__ import annotations

import json
import math

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from . import fp8, lowp
from .common import banner, median_time, parser, print_case, torch_cuda_time, torch_or_none

#: (name, op, batch, m, n, k, attrs, GPU only)
CASES = [
    ("square 1024", "dense", 1, 1024, 1024, 1024, {}, False),
    ("square 4096", "dense", 1, 4096, 4096, 4096, {}, True),
    ("small m (16, 4096) x (4096, 4096)", "dense", 1, 16, 4096, 4096, {}, False),
    ("BERT-base FFN (1024, 768) x (768, 3072) + bias + gelu", "dense", 1, 1024, 3072, 768,
     {"activation": "gelu"}, False),
    ("batch_matmul (64, 128, 64) x (64, 64, 128)", "batch_matmul", 64, 128, 128, 64, {}, False),
]


def _operands(op, batch, m, n, k, rng):
    if op == "dense":
        return [rng.standard_normal((m, k)).astype(np.float32),
                (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32)]
    return [rng.standard_normal((batch, m, k)).astype(np.float32),
            (rng.standard_normal((batch, k, n)) / math.sqrt(k)).astype(np.float32)]


def _numpy_peer(op, a, b, bias):
    """The product (and bias + gelu) as NumPy writes it."""
    y = a @ b.T if op == "dense" else np.matmul(a, b)
    if bias is not None:
        y += bias
        y = 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))  # no erf in NumPy
    return y


def _peers(op, a, b, bias, repeat):
    rows = [("numpy matmul (BLAS)" + (" + bias + gelu" if bias is not None else ""),
             median_time(lambda: _numpy_peer(op, a, b, bias), repeat=repeat))]
    torch = torch_or_none()
    if torch is None:
        return rows

    def run(ta, tb, tbias):
        y = ta @ tb.T if op == "dense" else torch.bmm(ta, tb)
        return torch.nn.functional.gelu(y + tbias) if tbias is not None else y
    t = [torch.from_numpy(v) for v in (a, b)] + [None if bias is None else torch.from_numpy(bias)]
    rows.append(("torch (cpu)", median_time(lambda: run(*t), repeat=repeat)))
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        g = [None if v is None else v.cuda() for v in t]
        rows.append(("torch (cuda, TF32 off)", torch_cuda_time(lambda: run(*g), repeat)))
    return rows


def _cupy_peer(op, a, b, repeat):
    """cuBLAS through CuPy, timed with CUDA events (None without a GPU)."""
    if not backend_status("cuda")[0]:
        return None
    import cupy

    ga, gb = cupy.asarray(a), cupy.asarray(b)
    fn = (lambda: ga @ gb.T) if op == "dense" else (lambda: cupy.matmul(ga, gb))
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(cupy.cuda.get_elapsed_time(s, e) / 1e3)
    return ("cupy matmul (cuBLAS)", float(np.median(times)))


def _ours(op, arrays, attrs, want, plain, repeat, targets):
    """Our rows; with an epilogue, our plain GEMM of the same shape too (the fused cost)."""
    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        be = get_backend(target)
        variants = [("", arrays, attrs, want)]
        if attrs:
            variants.append((" plain GEMM", arrays[:2], {}, plain))
        for suffix, ins, at, ref in variants:
            f = gpucg.compile(op, *[gpucg.tensor(x.shape) for x in ins], target=target, **at)
            dev = [be.to_device(x) if target != "numpy" else x for x in ins]
            y = be.to_host(f(*dev))
            err = float(np.max(np.abs(y - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
            t = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=1)))
            rows.append((f"gpucg {target} [{f.last_impl}]{suffix}", t, err))
    return rows


def main(argv=()) -> int:
    p = parser("dense", "a quarter of every size")
    p.add_argument("--cases", default="",
                   help="comma-separated substrings: run matching cases only")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    gpu = backend_status("cuda")[0] and "cuda" in targets
    cases = [c for c in CASES if gpu or not c[7]]
    if args.cases:
        keys = [k.strip() for k in args.cases.split(",") if k.strip()]
        cases = [c for c in cases if any(k in c[0] for k in keys)]
    rng = np.random.default_rng(0)
    results, ok = [], True
    print(banner("dense"))
    if not gpu:
        print("no CUDA GPU: the GPU-only cases (square 4096) and the cuBLAS peers are skipped")
    for name, op, batch, m, n, k, attrs, _ in cases:
        if args.quick:
            name, m, n, k = name + " /quick", max(1, m // 4), max(1, n // 4), max(1, k // 4)
            batch = max(1, batch // 4)
        a, b = _operands(op, batch, m, n, k, rng)
        bias = rng.standard_normal(n).astype(np.float32) if attrs else None
        arrays = [a, b] + ([bias] if bias is not None else [])
        plain = a @ b.T if op == "dense" else np.matmul(a, b)
        want = gpucg.get_op(op).reference(*arrays, gpucg.get_op(op).make_attrs(**attrs)) \
            if attrs else plain
        peers = _peers(op, a, b, bias, args.repeat)
        cupy_row = _cupy_peer(op, a, b, args.repeat)
        if cupy_row:
            peers.insert(1, cupy_row)
        ours = []
        for label, t, err in _ours(op, arrays, attrs, want, plain, args.repeat, targets):
            good = err < 1e-4
            ok = ok and good
            ours.append((label, t, f"max rel err {err:.1e}" + ("" if good else " TOO LARGE"),
                         {"max_rel_err": err}))
        tflop = 2.0 * batch * m * n * k / 1e12
        print_case(name, f"{name}: {op}, batch {batch}, m {m}, n {n}, k {k}; "
                   f"{tflop * 1e3:.3g} GFLOP", peers, ours, tflop, results, unit="TFLOP/s")
        lowp.print_rows(name, op, [a, b], {}, plain,
                        (lambda x, w: x @ w.T) if op == "dense" else (lambda x, w: x @ w),
                        args.repeat, tflop, results)
    if not args.cases or any("fp8" in key.lower() for key in args.cases.split(",")):
        ok = fp8.print_rows(args, targets, rng, results) and ok
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    return 0 if ok else 1
