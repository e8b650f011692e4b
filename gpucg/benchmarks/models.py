"""Whole models beside onnxruntime and torch on the CPU: ResNet-18 (224x224) and a BERT-base
encoder layer (seq 128), at batch 1 and 8, in one process.

The models are built here (gpucg/benchmarks/model_zoo.py: torch modules with random weights,
exported to ONNX in memory; nothing downloaded). Ours runs the exported ONNX model through
``gpucg.onnx.compile`` on each target where that package is present, else the same model
written with gpucg's operators called one by one (the row says which). One compiled model a
target serves both batch sizes (batch and sequence are symbolic). The ratio columns are ours
over onnxruntime and over torch; every row's output is checked against onnxruntime's.
Goal on a CPU: the numpy target within 1.5x of onnxruntime on both models.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ..runtime import backend_status, get_backend
from . import model_zoo
from .common import banner, median_time, parser, torch_or_none
from .lowp import NOT_MEASURED, gpu_present

#: (model, batch sizes); --quick runs batch 1 only
MODELS = {"resnet18": (1, 8), "bert": (1, 8)}
SEQ = 128


def _build(name: str):
    """(torch module, onnx bytes, input name, example maker(batch))."""
    rng = np.random.default_rng(0)
    if name == "resnet18":
        module = model_zoo.resnet18()
        make = (lambda b: rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
        return module, model_zoo.to_onnx(module, make(1), "x", {0: "n"}), "x", make
    module = model_zoo.bert_layer()
    make = (lambda b: rng.standard_normal((b, SEQ, model_zoo.BERT_HIDDEN)).astype(np.float32))
    return module, model_zoo.to_onnx(module, make(1), "x", {0: "n", 1: "s"}), "x", make


def _ours(name: str, module, onnx_bytes: bytes, target: str):
    """(label, x -> numpy output) for one target: the ONNX front end where there is one."""
    try:
        from .. import onnx as gonnx
        compile_model = gonnx.compile
    except (ImportError, AttributeError):
        compile_model = None
    be = get_backend(target)
    if compile_model is not None:
        import onnx

        model = compile_model(onnx.load_from_string(onnx_bytes), target=target)
        label = "gpucg.onnx"

        def run(x):
            return model.run(None, {"x": x})[0]
    else:
        label = "gpucg.ops one by one"
        fn = (model_zoo.resnet18_ops if name == "resnet18" else model_zoo.bert_ops)(module,
                                                                                    target)

        def run(x):
            return fn(x if target == "numpy" else be.to_device(x))
    return label, lambda x: np.asarray(be.to_host(run(x)))


def _row(label, t, base, torch_t, note=""):
    torch_ratio = f"{t / torch_t:8.2f}" if torch_t else f"{'-':>8}"
    print(f"  {label:<44} {t * 1e3:10.2f} {t / base:8.2f} {torch_ratio}  {note}")


def run_model(name: str, batches, targets, repeat: int, results: list, threads=None) -> None:
    import onnxruntime as ort

    t0 = time.perf_counter()
    module, onnx_bytes, _, make = _build(name)
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
            ours[target] = _ours(name, module, onnx_bytes, target)
            print(f"  {target}: {ours[target][0]} prepared in {time.perf_counter() - t0:.1f} s")
    for b in batches:
        x = make(b)
        want = sess.run(None, {"x": x})[0]
        base = median_time(lambda: sess.run(None, {"x": x}), repeat=repeat, warmup=1)
        torch_t = None
        if torch is not None:
            tx = torch.from_numpy(x)
            with torch.inference_mode():
                torch_t = median_time(lambda: module(tx), repeat=repeat, warmup=1)
        shape = "x".join(str(d) for d in x.shape)
        print(f"\n{name} batch {b} (input {shape}, float32)")
        print(f"  {'implementation':<44} {'ms':>10} {'/ort':>8} {'/torch':>8}  notes")
        _row("onnxruntime (cpu)", base, base, torch_t)
        results.append({"model": name, "batch": b, "impl": "onnxruntime", "seconds": base})
        if torch_t:
            _row("torch (cpu, inference_mode)", torch_t, base, torch_t)
            results.append({"model": name, "batch": b, "impl": "torch", "seconds": torch_t})
        for target, (label, fn) in ours.items():
            err = float(np.max(np.abs(fn(x) - want)))
            t = median_time(lambda: fn(x), repeat=repeat, warmup=1)
            _row(f"gpucg {target} ({label})", t, base, torch_t, f"max abs err vs ort {err:.1e}")
            results.append({"model": name, "batch": b, "impl": f"gpucg {target}", "path": label,
                            "seconds": t, "ratio_vs_ort": t / base,
                            "ratio_vs_torch": t / torch_t if torch_t else None,
                            "max_abs_err": err})
        if "cuda" not in ours and not gpu_present():
            print(f"  {'gpucg cuda':<44} {NOT_MEASURED}")


def main(argv=()) -> int:
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
