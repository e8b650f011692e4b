"""Whole models beside onnxruntime and torch on the CPU: ResNet-18 (224x224) and a BERT-base
encoder layer (seq 128), at batch 1 and 8, in one process.

The models are the test suite's builders (tests/onnx_models.py: torch modules with random
weights exported to ONNX in memory, batch and sequence dynamic; nothing downloaded) at
ResNet-18's and BERT-base's sizes, so the benchmark runs from a source checkout. Ours runs the
ONNX model through ``gpucg.onnx.compile`` on every usable target; one compiled model a target
serves both batch sizes. The ratio columns are over onnxruntime and over torch; every row's
output is checked against onnxruntime's. The rows of one batch size are timed in turns (one
call of each a round, the median of ``--repeat`` rounds), so a loaded machine slows all alike.
Goal on a CPU: the numpy target within 1.5x of onnxruntime on both models.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ..runtime import backend_status
from .common import banner, interleaved_times, parser, tests_module, torch_or_none
from .lowp import NOT_MEASURED, gpu_present

#: (model, batch sizes); --quick runs batch 1 only
MODELS = {"resnet18": (1, 8), "bert": (1, 8)}
SEQ = 128


def _builders():
    return tests_module("onnx_models")


def _build(name: str):
    """(ONNX bytes, feeds(batch) -> {input: array}, the torch module exported)."""
    zoo = _builders()
    captured = {}
    export = zoo.export

    def keep(module, *args, **kwargs):  # the module exported, kept for the torch rows
        captured["module"] = module
        return export(module, *args, **kwargs)

    zoo.export = keep
    if name == "resnet18":
        model, feeds = zoo.resnet(width=64, blocks=(2, 2, 2, 2), classes=1000, image=224)
        make = (lambda b: feeds(b, 224))
    else:
        model, feeds = zoo.bert_layer(hidden=768, heads=12, ffn=3072)
        make = (lambda b: feeds(b, SEQ))
    return model.SerializeToString(), make, captured["module"].eval()


def _ours(onnx_bytes: bytes, target: str):
    """(label, feeds -> first output as NumPy) for one target."""
    from .. import onnx as gonnx

    model = gonnx.compile(onnx_bytes, target=target)
    return "gpucg.onnx", lambda feeds: model.run(None, feeds)[0]


def _row(label, t, base, torch_t, note=""):
    torch_ratio = f"{t / torch_t:8.2f}" if torch_t else f"{'-':>8}"
    print(f"  {label:<44} {t * 1e3:10.2f} {t / base:8.2f} {torch_ratio}  {note}")


def run_model(name: str, batches, targets, repeat: int, results: list, threads=None) -> None:
    import onnxruntime as ort

    t0 = time.perf_counter()
    onnx_bytes, make, module = _build(name)
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    sess = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
    print(f"\n{name}: built and exported in {time.perf_counter() - t0:.1f} s")
    torch = torch_or_none()
    ours = {}
    for target in targets:
        if backend_status(target)[0]:
            t0 = time.perf_counter()
            ours[target] = _ours(onnx_bytes, target)
            print(f"  {target}: {ours[target][0]} compiled in {time.perf_counter() - t0:.1f} s")
    for b in batches:
        feeds = make(b)
        want = sess.run(None, feeds)[0]
        calls = {"ort": lambda: sess.run(None, feeds)}
        if torch is not None:
            args = [torch.from_numpy(x) for x in feeds.values()]

            def torch_call():
                with torch.inference_mode():
                    return module(*args)
            calls["torch"] = torch_call
        errs = {}
        for target, (label, fn) in ours.items():
            errs[target] = float(np.max(np.abs(fn(feeds) - want)))
            calls[target] = (lambda fn=fn: fn(feeds))
        times = interleaved_times(calls, repeat)
        (base, base_min, base_cpu), torch_t = times["ort"], times.get("torch", (None,))[0]
        shape = ", ".join(f"{k} {'x'.join(map(str, x.shape))}" for k, x in feeds.items())
        print(f"\n{name} batch {b} ({shape}, float32)")
        print(f"  {'implementation':<44} {'ms':>10} {'/ort':>8} {'/torch':>8}  notes")
        _row("onnxruntime (cpu)", base, base, torch_t)
        results.append({"model": name, "batch": b, "impl": "onnxruntime", "seconds": base})
        if torch_t:
            _row("torch (cpu, inference_mode)", torch_t, base, torch_t)
            results.append({"model": name, "batch": b, "impl": "torch", "seconds": torch_t})
        for target, (label, fn) in ours.items():
            err, (t, t_min, t_cpu) = errs[target], times[target]
            _row(f"gpucg {target} ({label})", t, base, torch_t, f"max abs err vs ort {err:.1e}; "
                 f"fastest calls {t_min / base_min:.2f}x ort's; CPU time {t_cpu * 1e3:.1f} ms, "
                 f"{t_cpu / base_cpu:.2f}x ort's {base_cpu * 1e3:.1f}")
            results.append({"model": name, "batch": b, "impl": f"gpucg {target}", "path": label,
                            "seconds": t, "ratio_vs_ort": t / base,
                            "ratio_vs_ort_fastest": t_min / base_min,
                            "cpu_seconds": t_cpu, "ratio_vs_ort_cpu": t_cpu / base_cpu,
                            "ratio_vs_torch": t / torch_t if torch_t else None,
                            "max_abs_err": err})
        if "cuda" not in ours and not gpu_present():
            print(f"  {'gpucg cuda':<44} {NOT_MEASURED}")
            results.append({"model": name, "batch": b, "impl": "gpucg cuda",
                            "skipped": NOT_MEASURED})


def main(argv=()) -> int:
    if "--onnx" in argv:  # issue 35's table of real architectures (gpucg/benchmarks/zoo.py)
        from .zoo import main as zoo_main

        return zoo_main(argv)
    if "--torch" in argv:  # torch.compile: eager, inductor, gpucg (benchmarks/torch_models.py)
        from .torch_models import main as torch_main

        return torch_main(argv)
    p = parser("models", "batch 1 only")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated models (default: {','.join(MODELS)})")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of onnxruntime and torch (default: theirs); NumPy's BLAS "
                   "takes OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) from the environment")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    print(banner("models"))
    blas = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    print(f"threads: onnxruntime and torch {args.threads or 'their default'}, NumPy's BLAS "
          f"{blas or 'its default'} (OPENBLAS_NUM_THREADS)")
    torch = torch_or_none()
    if args.threads and torch is not None:
        torch.set_num_threads(args.threads)
    results: list = []
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        if name not in MODELS:
            raise SystemExit(f"--models: unknown model {name!r}; known: {', '.join(MODELS)}")
        run_model(name, MODELS[name][:1] if args.quick else MODELS[name], targets,
                  args.repeat, results, args.threads)
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if (r.get("max_abs_err") or 0) > 1e-2]
    return 1 if bad else 0
