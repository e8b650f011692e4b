"""One process, two versions of a host module: a model's numpy-target forward with a module's
functions as they were at a git revision and as they are now, swapped in turns under one
compiled model, beside onnxruntime (one thread each).

    OPENBLAS_NUM_THREADS=1 python benchmarks/host_ab.py --rev 28427f4 \
        --module gpucg/strategies/conv2d_host.py --swap gpucg.strategies.conv2d:numpy_conv2d \
        --models efficientnet_b0,mobilenet_v3 [--rounds 11]

benchmarks/before_after.py compares two checkouts, each in its own interpreter, so on a loaded
machine the rounds of the two sides see different loads; here the before and after calls
alternate within one process on the same compiled model and inputs (the rest of gpucg is the
checkout's), so the machine's load falls on both alike. ``--swap MODULE:NAME`` names where the
model's code reads the function (the module that imported it by name), and NAME is taken from
the old source of ``--module``. Prints the medians of the process's CPU time a call and the
ratio; each round also checks that both versions give onnxruntime's output.

``--toggle ENV`` compares a setting instead: before with ENV=0, after with ENV=1 (e.g.
GPUCG_HOST_C, the numpy target's C kernels), in turns under one compiled model:

    OPENBLAS_NUM_THREADS=1 python benchmarks/host_ab.py --toggle GPUCG_HOST_C --models ...
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def old_module(rev: str, path: str):
    """The module at ``path`` as it was at git revision ``rev``, loaded beside today's (its
    relative imports resolve in today's package)."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    parts = Path(path).with_suffix("").parts
    package = ".".join(parts[:-1])
    importlib.import_module(package)
    spec = importlib.util.spec_from_loader(f"{package}._ab_before_{parts[-1]}", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)  # noqa: S102 - our source
    return module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", help="git revision of the 'before' module")
    p.add_argument("--module", help="its path, e.g. gpucg/strategies/x.py")
    p.add_argument("--swap", help="MODULE:NAME the model's code calls")
    p.add_argument("--toggle", help="a setting: before with it 0, after with it 1")
    p.add_argument("--models", default="efficientnet_b0,mobilenet_v3")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--batch", type=int, default=3)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import onnxruntime as ort

    import model_zoo as zoo
    from gpucg import onnx as gonnx

    if args.toggle:
        target, name = os.environ, args.toggle
        versions = {"before": "0", "after": "1"}
        print(f"{name}=0 (before) and {name}=1 (after) in {ROOT}; {args.rounds} rounds, batch "
              f"{args.batch}, CPU time a call (medians)")
    else:
        where, name = args.swap.split(":")
        target = importlib.import_module(where)
        versions = {"before": getattr(old_module(args.rev, args.module), name),
                    "after": getattr(target, name)}
        print(f"{args.module} at {args.rev} (before) and in {ROOT} (after), {name} swapped in "
              f"{where}; {args.rounds} rounds, batch {args.batch}, CPU time a call (medians)")
    put = target.__setitem__ if args.toggle else functools.partial(setattr, target)
    for model in args.models.split(","):
        spec = zoo.BUILDERS[model]("bench")
        proto = zoo.export(spec, dynamo=False).SerializeToString()
        x = spec.inputs.get("x")  # images and audio at their export size, text at 128 tokens
        feeds = spec.feeds(args.batch, 128 if x is None else int(x.shape[-1]), seed=0)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"])
        compiled = gonnx.compile(proto, target="numpy")
        want = sess.run(None, feeds)[0]
        calls = {"onnxruntime": lambda: sess.run(None, feeds)}
        for tag, fn in versions.items():
            def call(fn=fn):
                put(name, fn)
                return compiled.run(None, feeds)[0]
            err = float(np.max(np.abs(call() - want)) / np.max(np.abs(want)))
            print(f"  {model} {tag}: rel err against onnxruntime {err:.1e}")
            calls[tag] = call
        cpu: dict = {k: [] for k in calls}
        for r in range(args.rounds):
            order = list(calls) if r % 2 == 0 else list(calls)[::-1]
            for k in order:
                c0 = time.process_time()
                calls[k]()
                cpu[k].append(time.process_time() - c0)
        put(name, versions["after"])
        med = {k: statistics.median(v) for k, v in cpu.items()}
        base = med["onnxruntime"]
        print(f"{model}: onnxruntime {base * 1e3:.1f} ms; before {med['before'] * 1e3:.1f} ms "
              f"({med['before'] / base:.2f}x); after {med['after'] * 1e3:.1f} ms "
              f"({med['after'] / base:.2f}x); after/before {med['after'] / med['before']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
