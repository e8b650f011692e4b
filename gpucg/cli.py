"""The ``gpucg`` command: targets, ops, dump, explain, resources, run, demo, bench, tune,
records."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import compiled as api, shape
from .cli_args import file_name, parse_input
from .errors import GpucgError, InputError
from .samples import sample_inputs


def parse_attr(text: str) -> tuple[str, object]:
    """``axis=1`` -> ("axis", 1); the value is JSON when it parses, else a plain string."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise InputError(f"--attr {text!r} must look like NAME=VALUE, e.g. axis=1")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    if isinstance(parsed, list):
        parsed = tuple(parsed)
    return name, parsed


def _compile(args) -> api.CompiledOp:
    types = [parse_input(t) for t in args.input]
    attrs = dict(parse_attr(a) for a in args.attr)
    return api.compile(args.op, *types, target=args.target, **attrs)


def cmd_targets(args) -> int:
    from .target import default_target, targets

    for t in targets():
        state = "usable" if t.usable else "not usable"
        print(f"{t.name:<7} {state:<11} {t.device or t.reason}")
    print(f"default: {default_target()}")
    return 0


def cmd_ops(args) -> int:
    from .op import get_op, list_ops
    from .target import Target

    n, m = shape.var("n"), shape.var("m")
    for name in list_ops():
        op = get_op(name)
        print(f"{name} ({op.pattern.value}, inputs: {', '.join(op.input_names)}): {op.doc}")
        if op.example is not None:
            sample, attrs = op.example()
        else:
            sample, attrs = tuple(shape.tensor((n, m), "float32") for _ in op.input_names), {}
        shown = ", ".join(map(str, sample)) + "".join(f", {k}={v!r}" for k, v in attrs.items())
        for target in ("cuda", "opencl", "opencl -device=cpu", "numpy"):
            t = Target(target)
            try:
                outs = op.infer(sample, op.make_attrs(**attrs))
                strategy = op.strategy(op.make_attrs(**attrs), sample, outs, target=t)
            except Exception as exc:  # a user-registered strategy may fail; keep listing
                print(f"  {target}: {type(exc).__name__}: {exc}")
                continue
            for impl in strategy.offered():
                cond = impl.describe_condition()
                print(f"  {target:<18} {impl.name:<22} plevel {impl.plevel:>3}  if {cond}"
                      f"  (for {shown})")
    return 0


def cmd_dump(args) -> int:
    compiled = _compile(args)
    from .codegen import dialect_for

    ext = dialect_for(compiled.target.backend).source_ext if compiled.target.backend != "numpy" else ""
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for key, src in compiled.sources.items():
            path = out / file_name(key, ext)
            path.write_text(src)
            written.append(path)
        path = out / "dispatcher.py"
        path.write_text(compiled.dispatcher_source)
        written.append(path)
        for p in written:
            print(p)
        return 0
    for key, src in compiled.sources.items():
        print(f"// ===== {key} =====")
        print(src)
    print("# ===== dispatcher =====")
    print(compiled.dispatcher_source)
    return 0


def cmd_explain(args) -> int:
    compiled = _compile(args)
    print(compiled.selection)
    spaces = [c for c in compiled.selection.choices if c.impl.space.why is not None]
    if spaces:
        print("config spaces (what the target's limits rule out):")
    for choice in spaces:
        counts = choice.impl.space.pruned()
        kept = counts.pop("", 0)
        out = ", ".join(f"{n} {why}" for why, n in sorted(counts.items(), key=lambda x: -x[1]))
        print(f"  {choice.impl.name}: config {choice.config.short()}; {kept} configs of "
              f"{kept + sum(counts.values())}" + (f", pruned: {out}" if out else ""))
    from .verify import nvrtc

    if compiled.target.kind == "cuda" and nvrtc.available()[0]:
        from .verify.resources import explain_lines

        print("resources (ptxas via NVRTC; `gpucg resources` for every implementation):")
        print("\n".join(explain_lines(compiled)))
    return 0


def cmd_resources(args) -> int:
    from .verify import resources as res

    sizes = dict(_size(t) for t in args.size)
    types = [_bind(parse_input(t), sizes) for t in args.input]
    attrs = dict(parse_attr(a) for a in args.attr)
    rows = res.resources(args.op, *types, target=f"cuda -arch={args.arch}", impl=args.impl,
                         all_configs=args.all_configs, sass=args.sass, **attrs)
    bank_data = _banks(args, types, attrs, rows) if args.banks else []
    results = []
    if args.traffic:
        from .verify import oclgrind

        ok, why = oclgrind.available()
        if not ok:
            raise InputError(f"--traffic needs Oclgrind: {why}")
        results = oclgrind.traffic([args.op])
    if args.json:
        print(json.dumps({"rows": [dict(vars(r), spills=r.spills) for r in rows],
                          "traffic": [{"case": r.label, "impl": r.impl, "loaded": r.loaded,
                                       "stored": r.stored, "compulsory": r.compulsory,
                                       "error": r.error} for r in results],
                          "banks": [{"impl": i, "config": c, "kernel": k,
                                     "requests": [dict(vars(r), conflict_free=r.conflict_free)
                                                  for r in reps]}
                                    for i, c, k, reps in bank_data]}, indent=1))
        return 0
    print(f"{args.op} on {args.arch} (ptxas via NVRTC; * = what selection picks):")
    print(res.format_rows(rows))
    if args.banks:
        for line in _bank_lines(bank_data):
            print(line)
    if args.sass:
        from .verify.sass import format_mix, version

        print(f"SASS instruction mix (cuobjdump, {version()}):")
        print(format_mix(rows, [r.sass for r in rows]))
    if args.traffic:
        print(f"global memory traffic on Oclgrind, the {args.op} small cases:")
        for r in results:
            print("  " + oclgrind.traffic_line(r))
    return 0


def _banks(args, types, attrs, rows) -> list:
    """(implementation, config, kernel, reports) of each implementation's default config:
    wavefronts per shared-memory request of one warp (gpucg.verify.banks)."""
    from .compiled import compile as compile_op
    from .verify import banks

    out = []
    for name in sorted({r.impl.rsplit(".", 1)[0] for r in rows}):
        compiled = compile_op(args.op, *types, target=f"cuda -arch={args.arch}", impl=name,
                              records=False, **attrs)
        config = compiled.selection.choices[0].config.short()
        out += [(impl, config, kernel, reports)
                for impl, kernel, reports in banks.kernel_reports(compiled)]
    return out


def _bank_lines(data) -> list[str]:
    out = ["shared-memory requests of one warp (gpucg.verify.banks; ideal: one wavefront a "
           "phase of 32, 16 or 8 lanes for 4, 8 or 16 bytes):"]
    if not data:
        out.append("  no kernel here has a shared-memory model")
    for impl, config, kernel, reports in data:
        out.append(f"  {impl}/{kernel} {config}:")
        out += ["    " + r.line() for r in reports]
    return out


def _size(text: str):
    name, _, value = text.partition("=")
    if not value.isdigit() or not name.isidentifier():
        raise InputError(f"--size {text!r} must look like NAME=INT")
    return shape.var(name), int(value)


def _bind(t, sizes):
    """A tensor type with the --size values put in for its symbols."""
    return shape.tensor(tuple(int(shape.evaluate(d, sizes)) if all(s in sizes for s in
                                                                     getattr(d, "free_symbols", ()))
                              else d for d in t.shape), t.dtype)


def cmd_run(args) -> int:
    compiled = _compile(args)
    sizes = {}
    for text in args.size:
        name, _, value = text.partition("=")
        if not value.isdigit():
            raise InputError(f"--size {text!r} must look like NAME=INT")
        sizes[shape.var(name)] = int(value)
    for t in compiled.input_types:
        for s in t.symbols:
            sizes.setdefault(s, 1000)
    rng = np.random.default_rng(0)
    inputs = sample_inputs(compiled.input_types, rng, sizes=sizes, op=compiled.op,
                           attrs=compiled.attrs)
    result = compiled(*inputs)
    times = compiled.backend.time(lambda: compiled(*inputs), repeat=args.repeat, warmup=1)
    print(f"{compiled.op.name} on {compiled.target}: shapes "
          f"{', '.join(str(x.shape) for x in inputs)}; median {np.median(times) * 1e3:.3f} ms "
          f"over {args.repeat} runs (host arrays in and out)")
    if args.check:
        ref = compiled.op.reference(*inputs, compiled.attrs)
        outs = result if isinstance(result, tuple) else (result,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        worst = 0.0
        for o, r in zip(outs, refs):
            if o.shape != r.shape or o.dtype != r.dtype:
                print(f"MISMATCH: got {o.shape} {o.dtype}, NumPy gives {r.shape} {r.dtype}")
                return 1
            if o.size:
                worst = max(worst, float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))))
        tol = 1e-3 * max(1.0, max(float(np.max(np.abs(r))) if r.size else 0 for r in refs))
        print(f"check against NumPy: max abs error {worst:.3g} ({'ok' if worst <= tol else 'FAIL'})")
        return 0 if worst <= tol else 1
    return 0


def cmd_demo(args) -> int:
    from .verify import nvrtc
    from .target import default_target, targets

    print("gpucg demo")
    for t in targets():
        print(f"  target {t.name}: {'usable on ' + t.device if t.usable else 'not usable (' + t.reason + ')'}")
    n = shape.var("n")
    typ = shape.tensor((n, 1024), "float32")
    out = Path(args.output)
    for tgt in ("cuda", "opencl"):
        compiled = api.compile("cumsum", typ, axis=1, target=tgt)
        d = out / tgt
        d.mkdir(parents=True, exist_ok=True)
        ext = ".cu" if tgt == "cuda" else ".cl"
        for key, src in compiled.sources.items():
            (d / file_name(key, ext)).write_text(src)
        (d / "dispatcher.py").write_text(compiled.dispatcher_source)
        impls = ", ".join(c.impl.name for c in compiled.selection.choices)
        print(f"  wrote {len(compiled.sources)} {tgt} kernels for cumsum over {typ}, axis=1 "
              f"to {d}/ (dispatcher picks among {impls})")
        if tgt == "cuda":
            ok, why = nvrtc.available()
            if ok:
                for arch in ("sm_80", "sm_90"):
                    for key, src in compiled.sources.items():
                        nvrtc.compile_to_ptx(src, arch)
                print(f"  NVRTC {why} compiled all {len(compiled.sources)} CUDA kernels to PTX "
                      "for sm_80 and sm_90")
            else:
                print(f"  NVRTC check skipped: {why}")
    from .target import Target

    run_on = [default_target()]
    if run_on[0].kind != "opencl" and any(t.name == "opencl" and t.usable for t in targets()):
        run_on.append(Target("opencl"))  # show the generated kernels running too
    ok = True
    rng = np.random.default_rng(0)
    for target in run_on:
        compiled = api.compile("cumsum", typ, axis=1, target=target)
        worst = 0.0
        for rows in (1, 37, 300):
            x = rng.standard_normal((rows, 1024)).astype(np.float32)
            worst = max(worst, float(np.max(np.abs(compiled(x) - np.cumsum(x, axis=1)))))
        good = worst < 1e-3
        ok = ok and good
        print(f"  ran cumsum on target {compiled.target} for n = 1, 37, 300 with one compiled "
              f"operator; max abs error against np.cumsum {worst:.2e}: {'ok' if good else 'FAIL'}")
    print(f"  counters: {api_stats()}")
    return 0 if ok else 1


def api_stats() -> str:
    from . import counters as stats

    s = stats.snapshot()
    return ", ".join(f"{k} {v}" for k, v in s.items())


def cmd_bench(args) -> int:
    from .benchmarks import run_benchmark

    return run_benchmark(args.op, args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpucg", description="GPU-first operator code generator")
    sub = p.add_subparsers(dest="verb", required=True)
    sub.add_parser("targets", help="which targets are usable here").set_defaults(fn=cmd_targets)
    sub.add_parser("ops", help="operators, implementations, plevels, conditions").set_defaults(fn=cmd_ops)

    def op_args(sp):
        sp.add_argument("op")
        sp.add_argument("--input", action="append", default=[], required=True,
                        help="DIMS:DTYPE, e.g. n,1024:float32 (once per input)")
        sp.add_argument("--attr", action="append", default=[], help="NAME=VALUE (JSON or string)")
        sp.add_argument("--target", default=None)

    sp = sub.add_parser("dump", help="kernel sources and dispatcher")
    op_args(sp)
    sp.add_argument("-o", "--output", help="directory: one file per kernel plus dispatcher.py")
    sp.set_defaults(fn=cmd_dump)
    sp = sub.add_parser("explain", help="the selection report")
    op_args(sp)
    sp.set_defaults(fn=cmd_explain)
    sp = sub.add_parser("resources", help="registers, shared memory, spills and occupancy of "
                        "each CUDA kernel, from ptxas (no GPU needed)")
    sp.add_argument("op")
    sp.add_argument("--input", action="append", default=[], required=True,
                    help="DIMS:DTYPE with constant sizes (or --size), once per input")
    sp.add_argument("--attr", action="append", default=[], help="NAME=VALUE (JSON or string)")
    sp.add_argument("--size", action="append", default=[], help="NAME=INT for symbolic dims")
    sp.add_argument("--arch", default="sm_90", help="CUDA architecture (sm_80, sm_86, sm_89, "
                    "sm_90, ...)")
    sp.add_argument("--impl", help="one implementation (default: every one that applies)")
    sp.add_argument("--all-configs", action="store_true", help="every config of each space")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--sass", action="store_true", help="also each kernel's SASS instruction "
                    "mix (HMMA, LDSM, LDGSTS, 128-bit loads, FFMA, local memory...; cuobjdump "
                    "from pip install 'gpucg[sass]')")
    sp.add_argument("--banks", action="store_true", help="also the shared-memory wavefronts "
                    "of each warp request of the GEMM tiles' default configs (bank conflicts)")
    sp.add_argument("--traffic", action="store_true", help="also the global memory bytes the "
                    "selected kernels move on the operator's small cases (Oclgrind)")
    sp.set_defaults(fn=cmd_resources)
    sp = sub.add_parser("run", help="run on random inputs, time, and --check against NumPy")
    op_args(sp)
    sp.add_argument("--size", action="append", default=[], help="NAME=INT for symbolic dims")
    sp.add_argument("--check", action="store_true")
    sp.add_argument("--repeat", type=int, default=5)
    sp.set_defaults(fn=cmd_run)
    sp = sub.add_parser("demo", help="a short tour on this machine")
    sp.add_argument("-o", "--output", default="gpucg-demo")
    sp.set_defaults(fn=cmd_demo)
    sp = sub.add_parser("bench", help="benchmark an operator beside its peers")
    from .benchmarks import BENCHMARKS

    sp.add_argument("op", choices=sorted(BENCHMARKS))
    sp.add_argument("rest", nargs=argparse.REMAINDER)
    sp.set_defaults(fn=cmd_bench)
    from .autotune.cli import add_verbs  # tune, records
    from .onnx.cli import add_verbs as onnx_verbs  # onnx explain, run, dump
    add_verbs(sub, op_args, parse_input, parse_attr)
    onnx_verbs(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except GpucgError as exc:
        first = str(exc).strip().splitlines()
        print(f"gpucg: error: {first[0] if first else type(exc).__name__}", file=sys.stderr)
        for line in first[1:]:
            print(f"  {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
