"""What the numpy target cannot go below on a model, measured on this machine (issue 35 item 3).

    OPENBLAS_NUM_THREADS=1 python benchmarks/numpy_floor.py [--models efficientnet_b0,mobilenet_v3]

One forward of the model's numpy-target program records every conv2d and dense call (shapes,
groups, activation, output). Then, in this process, it times only the work those calls cannot
avoid in NumPy, each on arrays of the call's own sizes, median of --repeat runs:
- GEMMs: a bare np.matmul of the call's product (a pointwise conv's (n*h*w x c) @ (c x o), an
  im2col conv's product on columns already made, a dense layer's);
- depthwise taps: einsums over the padded NHWC window (the best NumPy form found: the fastest
  here of the weights tiled along a row or read with stride 0, over whole images or blocks of
  rows), the padding copy left out;
- activations: the epilogue's own block functions (gpucg.ops._unary.BLOCKS: SiLU's exp,
  hardswish's clip) over an array of the output's size.
Everything else (padding and phase copies, bias adds, squeeze-excite products, pools, Python
between calls) counts as zero, so the sum is a lower bound of a forward in NumPy alone. It is
printed beside onnxruntime's forward and gpucg's, in NumPy alone (GPUCG_HOST_C=0) and with its
C kernels (gpucg/ops/_host_c.py), interleaved in this process, one thread each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _median(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def record(compiled, feeds) -> list:
    """(op name, attrs, input shapes, output array) of every conv2d and dense call of one
    forward."""
    import gpucg.compiled as cmod

    calls, run = [], cmod.CompiledOp.run

    def recorded(self, plan, *args):
        out = run(self, plan, *args)
        if self.op.name in ("conv2d", "dense"):
            calls.append((self.op.name, self.attrs, [np.shape(a) for a in args], out))
        return out

    cmod.CompiledOp.run = recorded
    try:
        compiled.run(None, feeds)
    finally:
        cmod.CompiledOp.run = run
    return calls


def _depthwise(n, c, oh, ow, kh, kw, sh, sw, repeat):
    """The fastest of four einsum forms over the window view gpucg's depthwise path reads
    (conv2d_host.window_view): the weights tiled along an output row or read with stride 0,
    over whole images or blocks of output rows of 256 KiB (in cache)."""
    from gpucg.strategies.conv2d_host import window_view

    rng = np.random.default_rng(0)
    hp, wp = (oh - 1) * sh + kh, (ow - 1) * sw + kw
    xp = rng.standard_normal((n, hp, wp, c)).astype(np.float32)
    k = rng.standard_normal((kh, kw, c)).astype(np.float32)
    tiled = np.ascontiguousarray(np.broadcast_to(k[:, :, None], (kh, kw, ow, c)))
    y = np.empty((oh, ow, c), np.float32)
    it = 4

    def form(subscripts, weights, rows):
        def run():
            for i in range(n):
                for i0 in range(0, oh, rows):
                    m = min(rows, oh - i0)
                    view = window_view(xp[i, i0 * sh:], kh, kw, m, ow, sh, sw)
                    np.einsum(subscripts, view, weights, out=y[i0:i0 + m])
        return run

    block = max(1, min(oh, (256 << 10) // (it * ow * c)))
    return min(_median(form(s, w, rows), repeat) for rows in (oh, block)
               for s, w in (("rqmjc,rqjc->mjc", tiled), ("rqmjc,rqc->mjc", k)))


def floor(calls, repeat: int) -> dict:
    """Seconds a category (gemm, depthwise, and one per activation) of a forward at least."""
    from gpucg.ops import _unary

    rng = np.random.default_rng(0)
    out = defaultdict(float)
    for name, attrs, shapes, y in calls:
        act = getattr(attrs, "activation", None)
        if name == "dense":
            m, k = int(np.prod(shapes[0][:-1])), shapes[0][-1]
            o = shapes[1][0]  # dense weights are (units, k), as TVM's
            a, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, o)))
            out["gemm"] += _median(lambda: np.matmul(a, b), repeat)
        else:
            (n, c, _, _), (o, i, kh, kw) = shapes[0], shapes[1]
            oh, ow = (y.shape[2:] if attrs.data_layout == "NCHW" else y.shape[1:3])
            if i == 1 and attrs.groups == c == o:
                out["depthwise"] += _depthwise(n, c, oh, ow, kh, kw, *attrs.strides, repeat)
            else:
                g = attrs.groups
                a = rng.standard_normal((g, n * oh * ow, i * kh * kw)).astype(np.float32)
                b = rng.standard_normal((g, i * kh * kw, o // g)).astype(np.float32)
                out["gemm"] += _median(lambda: np.matmul(a, b), repeat)
        if act in _unary.BLOCKS or act == "relu":
            z = rng.standard_normal(y.size).astype(np.float32)
            fn = _unary.BLOCKS.get(act) or (lambda v, t: np.maximum(v, np.float32(0), out=v))
            out[act] += _median(lambda: _unary.in_blocks(z, fn), repeat)
    return dict(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="efficientnet_b0,mobilenet_v3")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--batch", type=int, default=3)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import model_zoo as zoo
    import onnxruntime as ort

    from gpucg import onnx as gonnx
    from gpucg import settings

    for model in args.models.split(","):
        spec = zoo.BUILDERS[model]("bench")
        proto = zoo.export(spec, dynamo=False).SerializeToString()
        feeds = spec.feeds(args.batch, 224, seed=0)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"])
        compiled = gonnx.compile(proto, target="numpy")
        parts = floor(record(compiled, feeds), args.repeat)
        def gpucg_run(host_c):
            def run():
                with settings.scope(GPUCG_HOST_C=host_c):
                    compiled.run(None, feeds)
            return run

        runs = {"onnxruntime": lambda: sess.run(None, feeds),
                "NumPy alone": gpucg_run("0"), "with C kernels": gpucg_run("1")}
        times = {k: [] for k in runs}
        for r in range(2 * args.repeat + 1):
            for k in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[k].append(_median(runs[k], 1))
        ort_t, alone, with_c = (statistics.median(times[k]) for k in runs)
        total = sum(parts.values())
        print(f"{model} (batch {args.batch}): onnxruntime {ort_t * 1e3:.1f} ms; gpucg numpy "
              f"target, NumPy alone {alone * 1e3:.1f} ms ({alone / ort_t:.2f}x), with its C "
              f"kernels {with_c * 1e3:.1f} ms ({with_c / ort_t:.2f}x); NumPy floor "
              f"{total * 1e3:.1f} ms ({total / ort_t:.2f}x onnxruntime, {total / alone:.0%} of "
              f"NumPy alone's forward)")
        for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {k:10s} {v * 1e3:7.1f} ms  ({v / ort_t:.2f}x onnxruntime's whole forward)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
