"""The kernels compute-sanitizer should see on a GPU (benchmarks/gpu_tier.sh runs this under
memcheck, racecheck and synccheck): the ones whose work-groups meet through global memory
(look-back scan, split norms, onesweep radix sort, radix top-k, split reductions), the tensor
core kernels (gemm_mma, flash_mma) and the fused Winograd convolution, each on a small shape
that still takes several blocks, checked against NumPy so a wrong result is seen too.

Run: python benchmarks/sanitize.py [TARGET]  (default cuda; opencl runs the same calls on PoCL;
exits 1 on a wrong result)
"""

from __future__ import annotations

import sys

import numpy as np

import gpucg


def main(target: str = "cuda") -> int:
    rng = np.random.default_rng(0)
    f32 = np.float32
    bad = []

    def check(name, got, want, **tol):
        ok = np.allclose(np.asarray(got, np.float64), want, equal_nan=True, **tol)
        print(f"{name:<44} {'ok' if ok else 'WRONG'}", flush=True)
        if not ok:
            bad.append(name)

    def run(op, *args, impl=None, **attrs):
        types = [gpucg.tensor(a.shape, str(a.dtype)) for a in args]
        f = gpucg.compile(op, *types, target=target, impl=impl, **attrs)
        out = f(*args)
        label = f"{op} [{f.last_impl}]"
        return label, out

    x = rng.standard_normal(1 << 18).astype(f32)
    label, y = run("cumsum", x, axis=0, impl="scan_lookback")
    check(label, y, np.cumsum(x.astype(np.float64)), rtol=1e-3, atol=1e-2)

    c = rng.standard_normal((600, 96)).astype(f32)
    label, y = run("cumsum", c, axis=0, impl="scan_cols_lookback")
    check(label, y, np.cumsum(c.astype(np.float64), axis=0), rtol=1e-3, atol=1e-3)

    r = rng.standard_normal((3, 40009)).astype(f32)
    label, y = run("softmax", r, impl="norm_split")
    e = np.exp(r - r.max(-1, keepdims=True))
    check(label, y, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-7)
    g, b = rng.standard_normal(40009).astype(f32), rng.standard_normal(40009).astype(f32)
    label, y = run("layer_norm", r, g, b, impl="norm_split")
    r64 = r.astype(np.float64)
    want = (r64 - r64.mean(-1, keepdims=True)) / np.sqrt(r64.var(-1, keepdims=True) + 1e-5) * g + b
    check(label, y, want, rtol=1e-3, atol=1e-3)

    s = rng.standard_normal(1 << 16).astype(f32)
    label, y = run("argsort", s, impl="sort_radix")
    check(label, y, np.argsort(s, kind="stable"), rtol=0, atol=0)

    t = rng.standard_normal((4, 30000)).astype(f32)
    label, (vals, _) = run("topk", t, k=200, impl="topk_radix")
    check(label, vals, -np.sort(-t, axis=-1)[:, :200], rtol=0, atol=0)
    t = rng.standard_normal((64, 1024)).astype(f32)
    label, (vals, _) = run("topk", t, k=8, impl="topk_warp")
    check(label, vals, -np.sort(-t, axis=-1)[:, :8], rtol=0, atol=0)

    v = rng.standard_normal(1 << 20).astype(f32)
    label, y = run("sum", v, impl="reduce_split")
    check(label, y, v.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)
    m = rng.standard_normal((2048, 130)).astype(f32)
    label, y = run("sum", m, axis=0, impl="reduce_cols")
    check(label, y, m.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)

    a = rng.standard_normal((200, 136)).astype(np.float16)
    w = rng.standard_normal((72, 136)).astype(np.float16)
    label, y = run("dense", a, w, impl="gemm_mma")
    check(label, y, a.astype(np.float64) @ w.astype(np.float64).T, rtol=2e-2, atol=5e-2)

    q, k, val = (rng.standard_normal((1, 2, 200, 64)).astype(np.float16) for _ in range(3))
    label, y = run("attention", q, k, val, impl="flash_mma")
    q64, k64, v64 = (z.astype(np.float64) for z in (q, k, val))
    sc = q64 @ k64.transpose(0, 1, 3, 2) / 8.0
    p = np.exp(sc - sc.max(-1, keepdims=True))
    check(label, y, (p / p.sum(-1, keepdims=True)) @ v64, rtol=2e-2, atol=2e-2)

    img = rng.standard_normal((1, 16, 20, 20)).astype(f32)
    wts = rng.standard_normal((16, 16, 3, 3)).astype(f32)
    for impl in ("winograd_fused_2x2", "winograd_fused_4x4"):
        label, y = run("conv2d", img, wts, padding=1, impl=impl)
        check(label, y, gpucg.ops.conv2d(img, wts, padding=1, target="numpy"), rtol=1e-3,
              atol=1e-3)

    print("wrong:", bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
