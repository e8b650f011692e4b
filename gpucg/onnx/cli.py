"""``gpucg onnx VERB MODEL.onnx ...``: the ONNX front end on the command line.

:data:`VERBS` is the dispatch table: verb -> (help, a function adding its arguments to its
sub-parser, the function running it with the parsed arguments and returning the exit status).
gpucg/cli.py calls :func:`add_verbs` once; a new verb is one more entry.
"""

from __future__ import annotations

from ..errors import InputError


def model_args(sp) -> None:
    """The arguments every verb takes: the model, the target, sizes to fix."""
    sp.add_argument("model", help="path of the .onnx file")
    sp.add_argument("--target", default=None, help="numpy, opencl, cuda (default: the first "
                    "usable)")
    sp.add_argument("--dim", action="append", default=[], metavar="NAME=INT",
                    help="fix a symbolic size (dim_param) instead of keeping it symbolic")


def parse_dims(items) -> dict:
    """``["batch=8", ...]`` as {"batch": 8}."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value.strip().lstrip("-").isdigit():
            raise InputError(f"--dim {item!r} must be NAME=INT (a dim_param and its size)")
        out[name] = int(value)
    return out


def compiled(args):
    """The model of the parsed arguments, compiled."""
    from . import compile as compile_model

    return compile_model(args.model, args.target, dims=parse_dims(args.dim))


def cmd_explain(args) -> int:
    print(compiled(args).explain())
    return 0


VERBS = {
    "explain": ("each node's gpucg operator, its implementations and the fusions taken",
                model_args, cmd_explain),
}


def add_verbs(sub) -> None:
    """``gpucg onnx`` and its verbs, on the top-level sub-parsers ``sub``."""
    sp = sub.add_parser("onnx", help="compile, inspect and run ONNX models (pip install "
                        "'gpucg[onnx]')")
    verbs = sp.add_subparsers(dest="onnx_verb", required=True)
    for name, (text, add_args, fn) in VERBS.items():
        v = verbs.add_parser(name, help=text)
        add_args(v)
        v.set_defaults(fn=fn)


# -- run and dump ---------------------------------------------------------------------------

def _run_args(sp) -> None:
    model_args(sp)
    sp.add_argument("--input", action="append", default=[], metavar="NAME=DIMS:DTYPE",
                    help="an input's shape and dtype, e.g. x=8,3,224,224:float32 (needed where "
                    "the model's shape has symbolic sizes no --dim fixes)")
    sp.add_argument("--check", action="store_true",
                    help="compare every output with onnxruntime's (when installed)")
    sp.add_argument("--repeat", type=int, default=5, help="timed runs (default 5)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the random inputs")


def parse_inputs(items, model) -> dict:
    """``["x=8,3,224,224:float32", ...]`` as {name: TensorType} for the model's inputs."""
    from ..cli_args import parse_input

    out = {}
    for item in items:
        name, eq, spec = item.partition("=")
        if not eq or name not in model.inputs:
            raise InputError(f"--input {item!r} must be NAME=DIMS:DTYPE with NAME one of the "
                             f"model's inputs: {', '.join(model.inputs)}")
        t = parse_input(spec)
        if t.symbols:
            raise InputError(f"--input {item!r}: every dimension must be an int")
        out[name] = t
    return out


def sample_feeds(model, given: dict, seed: int) -> dict:
    """Random inputs by gpucg.samples' rules (floats of magnitude 0.9-1.1 of both signs,
    integers in [-3, 3]), one an input: its --input type, else the model's own."""
    import numpy as np

    from ..samples import sample_inputs

    types = []
    for name, t in model.inputs.items():
        t = given.get(name, t)
        if t.symbols:
            raise InputError(f"input {name!r} is {t}: give its shape with --input "
                             f"{name}=DIMS:{t.dtype} or fix {', '.join(map(str, t.symbols))} "
                             f"with --dim")
        types.append(t)
    arrays = sample_inputs(types, np.random.default_rng(seed), signed=True)
    return dict(zip(model.inputs, arrays))


def check_outputs(model_path: str, feeds: dict, got: list, names: list) -> int:
    """Print each output's max abs error against onnxruntime; 1 where one is beyond
    gpucg.samples' tolerance (float32: 1e-4 of the largest magnitude), else 0."""
    import numpy as np

    from ..samples import mismatch

    try:
        import onnxruntime
    except ImportError:
        print("check: not run (onnxruntime is not installed: pip install onnxruntime)")
        return 0
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    want = session.run(names, feeds)
    status = 0
    for name, g, w in zip(names, got, want):
        err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)), initial=0.0)) \
            if g.shape == w.shape else float("inf")
        bad = mismatch(g, np.asarray(w))
        status |= bool(bad)
        print(f"check {name} against onnxruntime: max abs error {err:.3g} "
              f"({'FAIL: ' + bad if bad else 'ok'})")
    return status


def cmd_run(args) -> int:
    import time

    import numpy as np

    model = compiled(args)
    feeds = sample_feeds(model, parse_inputs(args.input, model), args.seed)
    got = model.run(None, feeds)
    times = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        model.run(None, feeds)  # outputs come back to the host: the device is done
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    print(f"{args.model} on {model.target}: inputs "
          f"{', '.join(f'{n} {x.shape} {x.dtype}' for n, x in feeds.items())}; median "
          f"{seconds * 1e3:.3f} ms over {args.repeat} runs (host arrays in and out)")
    for name, y in zip(model.outputs, got):
        print(f"output {name}: {y.shape} {y.dtype}, mean {float(np.mean(y)):.6g}" if y.size
              else f"output {name}: {y.shape} {y.dtype}")
    return check_outputs(args.model, feeds, got, model.outputs) if args.check else 0


def _dump_args(sp) -> None:
    model_args(sp)
    sp.add_argument("-o", "--output", required=True, help="the directory to write")


def cmd_dump(args) -> int:
    from ..graph.dump import dump
    from ..graph.fuse import fuse
    from ..target import resolve
    from .graph import Graph, load, require_onnx
    from .lower import Lowering

    require_onnx()
    g = Graph(load(args.model), parse_dims(args.dim))
    target = resolve(args.target)
    for path in dump(g, fuse(g, Lowering(g).run()), target, args.output,
                     f"{args.model} on {target}"):
        print(path)
    return 0


VERBS["run"] = ("run the model on random inputs, timed; --check compares with onnxruntime",
                _run_args, cmd_run)
VERBS["dump"] = ("write every kernel source and dispatcher of the compiled model, a directory "
                 "a node", _dump_args, cmd_dump)
