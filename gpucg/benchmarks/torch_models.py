"""``gpucg bench models --torch``: PyTorch models three ways side by side on the CPU, in one
process: eager torch, ``torch.compile`` with inductor (torch's own back end: C++ from gcc on
the CPU; where no C++ compiler is found, its rows say so) and
``torch.compile(backend="gpucg")`` on each usable gpucg target (default numpy and opencl).
The models are transformers' BERT, GPT-2, LLaMA and ViT and torchvision's ResNet-18, from
their classes with random weights (tests/model_zoo.py, ``size="bench"``: their own widths,
the transformers with 2 layers), batch 3 and sequence 128 (images 224x224), the batch and
sequence dimensions marked dynamic (``torch._dynamo.mark_dynamic``) for every back end. Every
row's output is checked against eager torch's; each says how long its first call (the
compile) took and (gpucg) how many operators it compiled. One thread each: torch's intra-op
threads are set to 1, NumPy's BLAS takes OPENBLAS_NUM_THREADS=1 from the environment (set it;
the banner prints it); times are the process's CPU time a call, the rows of a model taken in
turns. CUDA rows say "not measured on a GPU" where there is none. ``--size tiny`` takes the
tests' tiny configs (sequence 8, images 32x32): a check that the table runs, not a timing.
"""

from __future__ import annotations

import json
import os
import time

from ..runtime import backend_status
from .common import banner, interleaved_times, parser, tests_module
from .lowp import NOT_MEASURED, gpu_present
from .zoo import BATCH, SEQ

#: the table's rows: (model_zoo builder, what it stands for)
ROWS = (("bert", "BERT-base (2 layers)"), ("gpt2", "GPT-2 (2 layers)"),
        ("llama", "LLaMA GQA 16/4 heads, 1024 wide (2 layers)"),
        ("vit", "ViT-B/16 (2 layers)"), ("resnet18", "ResNet-18"))


#: the sequence length of each size (tiny configs have 64 positions)
SEQS = {"bench": SEQ, "tiny": 8}


def _inputs(torch, spec, size: str):
    """The model's inputs, their batch (and sequence) dimensions marked dynamic."""
    side = spec.inputs.get("x")
    feeds = spec.feeds(BATCH, int(side.shape[-1]) if side is not None else SEQS[size], seed=0)
    args = [torch.from_numpy(v) for v in feeds.values()]
    for a in args:
        for axis in range(1 if side is not None else 2):
            torch._dynamo.mark_dynamic(a, axis)
    return args


def inductor_missing() -> str | None:
    """Why inductor cannot compile on this machine's CPU (it builds C++ with the compiler of
    ``torch._inductor.config.cpp.cxx``), or None where it can."""
    from torch._inductor import cpp_builder
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        cpp_builder.get_cpp_compiler()
    except InvalidCxxCompiler as exc:
        return f"not measured: inductor needs a C++ compiler on the CPU ({exc})"
    return None


def _compiled(torch, module, backend: str, args, want, **kw):
    """(callable, compile seconds, relative error, note) of ``module`` under torch.compile."""
    import gpucg.torch as gtorch

    gtorch.reset()
    fast = torch.compile(module, backend=backend, **kw)
    t0 = time.perf_counter()
    with torch.no_grad():
        got = fast(*args)
    took = time.perf_counter() - t0
    err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
    note = ""
    if backend == "gpucg":
        c = gtorch.counters()
        falls = sum(len(g.fallbacks) for g in gtorch.graphs())
        note = f"; {c['gpucg_compiles']} gpucg operators, {falls} node(s) run by torch"
    return (lambda: fast(*args)), took, err, note


def run_row(torch, zoo, name: str, label: str, targets, repeat: int, results: list,
            size: str = "bench", layers: int | None = None) -> None:
    spec = zoo.BUILDERS[name](size, layers=layers)
    if size == "tiny" or layers:
        widths = "the tests' tiny config" if size == "tiny" else "own widths"
        stack = "blocks a stage" if name.startswith("resnet") else "layers"
        label = f"{name} ({widths}, {layers or 2} {stack})"
    args = _inputs(torch, spec, size)
    with torch.no_grad():
        want = spec.module(*args)
    calls = {"eager": lambda: spec.module(*args)}
    info = {}
    missing = inductor_missing()
    ways = [("inductor", "inductor", {})] * (missing is None) + \
        [(f"gpucg {t}", "gpucg", {"options": {"target": t}}) for t in targets]
    for key, backend, kw in ways:
        try:
            fn, took, err, note = _compiled(torch, spec.module, backend, args, want, **kw)
        except Exception as exc:  # noqa: BLE001  a row that does not compile says why
            msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            print(f"  {name:<9} {key:<13} FAILED {msg}")
            results.append({"model": name, "impl": key, "error": msg})
            continue
        calls[key], info[key] = fn, (took, err, note)
    with torch.no_grad():
        times = interleaved_times(calls, repeat)
    base = times["eager"][2]
    shape = ", ".join("x".join(map(str, a.shape)) for a in args)
    print(f"\n{label} ({shape})")
    print(f"  {'eager torch':<22} {base * 1e3:10.1f} ms CPU")
    results.append({"model": name, "impl": "eager", "cpu_seconds": base,
                    "seconds": times["eager"][0]})
    if missing:
        print(f"  {'torch.compile inductor':<22} {missing}")
        results.append({"model": name, "impl": "inductor", "skipped": missing})
    for key, (took, err, note) in info.items():
        wall, _, cpu = times[key]
        ok = "equal" if err < 2e-4 else "DIFFERS"
        title = "torch.compile inductor" if key == "inductor" else f"backend=gpucg {key[6:]}"
        print(f"  {title:<22} {cpu * 1e3:10.1f} ms CPU {cpu / base:6.2f}x eager  rel err "
              f"{err:.1e} ({ok}); first call {took:.1f} s{note}")
        results.append({"model": name, "impl": key, "cpu_seconds": cpu, "seconds": wall,
                        "ratio_vs_eager_cpu": cpu / base, "rel_err": err,
                        "first_call_seconds": took})
    if not gpu_present():
        for key in ("eager torch", "inductor", "gpucg"):
            print(f"  {key + ' (cuda)':<22} {NOT_MEASURED}")
            results.append({"model": name, "impl": f"{key} cuda", "skipped": NOT_MEASURED})


def main(argv=()) -> int:
    import torch

    p = parser("models --torch", "the first two models only")
    p.add_argument("--torch", action="store_true", help="(this table)")
    p.add_argument("--models", default=",".join(n for n, _ in ROWS),
                   help="comma-separated rows (default: all): " + ", ".join(n for n, _ in ROWS))
    p.add_argument("--size", choices=("bench", "tiny"), default="bench",
                   help="the models' widths: their own (bench) or the tests' tiny configs")
    p.add_argument("--layers", type=int, default=None,
                   help="layers of the transformers, blocks a stage of ResNet (default: 2)")
    p.set_defaults(targets="numpy,opencl")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",")
               if t.strip() and backend_status(t.strip())[0]]
    known = dict(ROWS)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in known:
            raise SystemExit(f"--models: unknown model {n!r}; known: {', '.join(known)}")
    torch.set_num_threads(1)
    print(banner("models --torch"))
    print(f"threads: torch 1, NumPy's BLAS OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset (its default: set it to 1)')}; "
          f"batch {BATCH}, sequence {SEQS[args.size]}; times are the process's CPU time a call "
          f"(median of {args.repeat}, the rows of one model taken in turns); "
          f"torch {torch.__version__}")
    zoo = tests_module("model_zoo")
    results: list = []
    for name in names[:2] if args.quick else names:
        run_row(torch, zoo, name, known[name], targets, args.repeat, results, args.size,
                args.layers)
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if "error" in r or r.get("rel_err", 0) > 2e-4]
    return 1 if bad else 0

