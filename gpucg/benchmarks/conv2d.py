"""conv2d beside torch.nn.functional.conv2d and a NumPy peer: times, ratios, TFLOP/s.

TFLOP/s counts the direct convolution's FLOPs (2 * N * O * OH * OW * C/groups * KH * KW)
for every row, Winograd's included, so the column compares times. On a GPU torch runs with
cudnn.benchmark = True and TF32 off for convolutions and matmul, like ours (float32 sums).
Device timings keep the data on the device; the NumPy rows time host arrays. Each case also
has float16, bfloat16 and TF32 rows (gpucg.benchmarks.lowp: cuDNN through torch beside gpucg's
CUDA kernels), "not measured on a GPU" without one.

The NumPy peer is the usual way to write a convolution in NumPy: an einsum over a strided
window view; its result checks every gpucg row.
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.ops.conv2d import BENCH_LAYERS
from gpucg.runtime import backend_status, get_backend

from . import lowp
from .common import (banner, median_time, parser, print_case, print_traffic, torch_cuda_time,
                     torch_or_none)

#: (name, batch, C, H, W, O, K, stride, pad, groups): the layers conv2d declares as its
#: "bench" cases (gpucg/ops/conv2d.py)
CASES = BENCH_LAYERS


def flops(n, c, h, w, o, k, stride, pad, groups) -> float:
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    return 2.0 * n * o * oh * ow * (c // groups) * k * k


def numpy_einsum_conv(x, w, stride, pad, groups):
    """The NumPy peer: einsum over a strided window view, per group."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    n, c = x.shape[:2]
    o = w.shape[0]
    win = win.reshape(n, groups, c // groups, *win.shape[2:])
    wg = w.reshape(groups, o // groups, c // groups, k, k)
    y = np.einsum("ngchwrs,gocrs->ngohw", win, wg, optimize=True)
    return y.reshape(n, o, y.shape[-2], y.shape[-1])


def _peers(x, w, stride, pad, groups, repeat):
    rows = [("numpy einsum (window view)",
             median_time(lambda: numpy_einsum_conv(x, w, stride, pad, groups), repeat=repeat))]
    torch = torch_or_none()
    if torch is not None:
        import torch.nn.functional as F

        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        rows.append(("torch conv2d (cpu)", median_time(
            lambda: F.conv2d(tx, tw, stride=stride, padding=pad, groups=groups), repeat=repeat)))
        if torch.cuda.is_available():
            torch.backends.cudnn.benchmark = True
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            gx, gw = tx.cuda(), tw.cuda()
            rows.append(("torch conv2d (cuda, cudnn)", torch_cuda_time(
                lambda: F.conv2d(gx, gw, stride=stride, padding=pad, groups=groups), repeat)))
    return rows


def _torch_conv(stride, pad, groups):
    """cuDNN's convolution through torch, for the reduced-precision rows."""
    def run(x, w):
        import torch.nn.functional as F

        return F.conv2d(x, w, stride=stride, padding=pad, groups=groups)
    return run


def _ours(x, w, attrs, want, repeat, targets, guard_wino, forced=()):
    rows = []
    for target in targets:
        if not backend_status(target)[0]:
            continue
        types = (gpucg.tensor(x.shape), gpucg.tensor(w.shape))
        impls = [None]
        if target != "numpy" and guard_wino:
            impls.append("direct")  # the direct kernel beside Winograd on the 3x3 layers
        if target != "numpy" and forced:
            sel = gpucg.explain("conv2d", *types, target=target, **attrs)
            able = {c.name.rsplit(".", 1)[0] for c in sel.candidates if c.verdict != "excluded"}
            impls = [None] + [i for i in forced if i in able]
        for impl in impls:
            f = gpucg.compile("conv2d", *types, target=target, impl=impl, **attrs)
            be = get_backend(target)
            xd, wd = (be.to_device(x), be.to_device(w)) if target != "numpy" else (x, w)
            y = be.to_host(f(xd, wd))
            err = float(np.max(np.abs(y - want)) / max(1e-30, float(np.max(np.abs(want)))))
            t = float(np.median(be.time(lambda: f(xd, wd), repeat=repeat, warmup=1)))
            rows.append((f"gpucg {target} [{f.last_impl}]", t, err))
    return rows


def main(argv=()) -> int:
    p = parser("conv2d", "batch 1 and a quarter of the channels")
    p.add_argument("--cases", default="", help="comma-separated substrings: run matching cases only")
    p.add_argument("--impls", default="",
                   help="comma-separated implementations to force beside the selected one on "
                        "the device targets, where they apply (default: direct on 3x3 layers)")
    args = p.parse_args(list(argv))
    forced = tuple(i.strip() for i in args.impls.split(",") if i.strip())
    cases = CASES
    if args.cases:
        keys = [k.strip() for k in args.cases.split(",") if k.strip()]
        cases = [c for c in cases if any(k in c[0] for k in keys)]
    if args.quick:
        cases = [(name + " /quick", 1, max(1, c // 4) if g == 1 else max(1, c // 4), h // 2, w // 2,
                  max(1, o // 4), k, s, pad, 1 if g == 1 else max(1, c // 4))
                 for name, n, c, h, w, o, k, s, pad, g in cases]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rng = np.random.default_rng(0)
    results = []
    ok = True
    print(banner("conv2d"))
    for name, n, c, h, w, o, k, stride, pad, groups in cases:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = (rng.standard_normal((o, c // groups, k, k)) / np.sqrt(c // groups * k * k)).astype(np.float32)
        attrs = dict(strides=stride, padding=pad, groups=groups)
        want = numpy_einsum_conv(x, wt, stride, pad, groups)  # the peer checks every row
        tflop = flops(n, c, h, w, o, k, stride, pad, groups) / 1e12
        peers = _peers(x, wt, stride, pad, groups, args.repeat)
        guard = k == 3 and stride == 1 and groups == 1
        ours = []
        for label, t, err in _ours(x, wt, attrs, want, args.repeat, targets, guard, forced):
            good = err < 1e-3
            ok = ok and good
            ours.append((label, t, f"max rel err {err:.1e}" + ("" if good else " TOO LARGE"),
                         {"max_rel_err": err}))
        print_case(name, f"{name}: batch {n}, {c}->{o} channels, {h}x{w}, {k}x{k}/{stride}, "
                   f"groups {groups}; {tflop * 1e3:.3g} GFLOP", peers, ours, tflop, results,
                   unit="TFLOP/s")
        lowp.print_rows(name, "conv2d", [x, wt], attrs, want, _torch_conv(stride, pad, groups),
                        args.repeat, tflop, results)
    traffic = print_traffic(["conv2d"], not args.no_traffic)
    if args.json:
        print(json.dumps({"results": results, "traffic": traffic}, indent=1))
    return 0 if ok else 1
