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
