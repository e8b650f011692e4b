"""``gpucg bench models --onnx``: issue 35's model table. Real architectures from torchvision's
and transformers' classes at their own widths (tests/model_zoo.py, ``size="bench"``: random
weights, nothing downloaded; the transformers with 2 layers), exported by torch's TorchScript
exporter (``--export dynamo`` or ``both`` for the dynamo exporter), each compiled once by
``gpucg.onnx.compile`` and run beside onnxruntime on the CPU in one process: every row says
whether it compiled, its largest error relative to onnxruntime's output, and the time ratio.
One thread each: onnxruntime's intra-op threads are set to 1, and NumPy's BLAS takes
OPENBLAS_NUM_THREADS=1 from the environment (set it; the banner prints it). Goal (issue 35):
the numpy target within 2.5x of onnxruntime on every row.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ..runtime import backend_status
from .common import banner, interleaved_times, parser, tests_module

#: the table's rows: (model, what it stands for); the transformers take (batch, SEQ)
ROWS = (("resnet50", "ResNet-50"), ("efficientnet_b0", "EfficientNet-B0"),
        ("convnext_tiny", "ConvNeXt-T"), ("bert", "BERT-base (2 layers)"),
        ("gpt2", "GPT-2 (2 layers)"), ("gpt2_past", "GPT-2 with past key values"),
        ("llama", "LLaMA GQA 16/4 heads, 1024 wide (2 layers)"),
        ("vit", "ViT-B/16 (2 layers)"), ("mobilenet_v3", "MobileNetV3-small"),
        ("whisper_encoder", "Whisper-base encoder (1-D convolutions, 2 layers)"),
        ("swin", "Swin-T (windowed attention)"))
SEQ = 128
BATCH = 3


def _size(spec) -> int:
    x = spec.inputs.get("x")
    return SEQ if x is None else int(x.shape[-1])


def run_row(zoo, name: str, way: str, targets, repeat: int, results: list) -> None:
    import onnxruntime as ort

    from .. import onnx as gonnx

    row = {"model": name, "export": way, "batch": BATCH}
    t0 = time.perf_counter()
    try:
        spec = zoo.BUILDERS[name]("bench")
        model = zoo.export(spec, dynamo=way == "dynamo")
    except Exception as exc:  # noqa: BLE001  the exporter's failure, reported as a row
        print(f"  {name:<18} {way:<11} export failed: {type(exc).__name__}: {exc}"[:300])
        results.append({**row, "error": f"export: {exc}"[:500]})
        return
    exported = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    feeds = spec.feeds(BATCH, _size(spec), seed=0)
    want = sess.run(None, feeds)
    calls = {"ort": lambda: sess.run(None, feeds)}
    compiled, errs = {}, {}
    for target in targets:
        try:
            t1 = time.perf_counter()
            m = gonnx.compile(model, target=target)
            compiled[target] = (m, time.perf_counter() - t1)
            got = m.run(None, feeds)
            errs[target] = max(float(np.max(np.abs(g - w)) / max(1e-30, np.max(np.abs(w))))
                               for g, w in zip(got, want))
            calls[target] = (lambda m=m: m.run(None, feeds))
        except Exception as exc:  # noqa: BLE001  a row that does not compile says why
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            print(f"  {name:<18} {way:<11} {target:<7} FAILED {msg}")
            results.append({**row, "impl": f"gpucg {target}", "error": msg})
    times = interleaved_times(calls, repeat)
    base = times["ort"][2]
    shape = ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in feeds.items())
    print(f"  {name:<18} {way:<11} {'ort':<7} {base * 1e3:10.1f} ms CPU        "
          f"(export {exported:.0f} s; {shape[:70]})")
    results.append({**row, "impl": "onnxruntime", "cpu_seconds": base,
                    "seconds": times["ort"][0]})
    for target, (m, took) in compiled.items():
        if target not in times:
            continue
        wall, fastest, cpu = times[target]
        ok = "equal" if errs[target] < 1e-4 else "DIFFERS"
        print(f"  {name:<18} {way:<11} {target:<7} {cpu * 1e3:10.1f} ms CPU {cpu / base:6.2f}x ort"
              f"  rel err {errs[target]:.1e} ({ok}); compiled in {took:.1f} s, "
              f"{m.compiles} operators; wall {wall / times['ort'][0]:.2f}x")
        results.append({**row, "impl": f"gpucg {target}", "cpu_seconds": cpu, "seconds": wall,
                        "ratio_vs_ort_cpu": cpu / base, "ratio_vs_ort": wall / times["ort"][0],
                        "rel_err": errs[target], "compiles": m.compiles})


def main(argv=()) -> int:
    p = parser("models --onnx", "the first three models only")
    p.add_argument("--onnx", action="store_true", help="(this table)")
    p.add_argument("--models", default=",".join(n for n, _ in ROWS),
                   help="comma-separated rows (default: all): " + ", ".join(n for n, _ in ROWS))
    p.add_argument("--export", default="torchscript", choices=("torchscript", "dynamo", "both"),
                   help="torch's exporter(s) (default torchscript)")
    p.set_defaults(targets="numpy")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",")
               if t.strip() and backend_status(t.strip())[0]]
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    known = dict(ROWS)
    for n in names:
        if n not in known:
            raise SystemExit(f"--models: unknown model {n!r}; known: {', '.join(known)}")
    if args.quick:
        names = names[:3]
    ways = ("torchscript", "dynamo") if args.export == "both" else (args.export,)
    print(banner("models --onnx"))
    print(f"threads: onnxruntime 1, NumPy's BLAS OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset (its default: set it to 1)')}; "
          f"batch {BATCH}, sequence {SEQ}; times are the process's CPU time a call (median of "
          f"{args.repeat}, the rows of one model taken in turns)")
    zoo = tests_module("model_zoo")
    results: list = []
    for name in names:
        print(f"\n{known[name]}")
        for way in ways:
            run_row(zoo, name, way, targets, args.repeat, results)
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if "error" in r or r.get("rel_err", 0) > 1e-4]
    return 1 if bad else 0
