"""A compiled graph written out for people: one directory a gpucg call with its kernel
sources and its dispatcher, and an ``index.txt`` mapping the front end's nodes to the
directories (``gpucg onnx dump``, ``gpucg.torch``'s dump). Nothing runs, so a CUDA dump needs
no GPU."""

from __future__ import annotations

import re
from pathlib import Path

from ..cli_args import file_name
from ..codegen import dialect_for
from .program import compile_calls


def step_dir(k: int, call) -> str:
    """A step's directory: its index, operator and first node (file-name safe)."""
    first = (call.nodes or ["added"])[0].split(" (")[0]  # "/q/MatMul (MatMul)"
    node = re.sub(r"[^A-Za-z0-9_.-]", "_", first).strip("_.")
    return f"{k:03d}_{call.op}_{node}"[:96]


def dump(g, calls: list, target, root, title: str) -> list:
    """Every call of graph ``g`` compiled for ``target`` and written under ``root``; ``title``
    heads index.txt. Returns the paths written (the directories, then index.txt)."""
    ext = dialect_for(target.backend).source_ext if target.backend != "numpy" else ""
    root = Path(root)
    index = [f"# {title}: one directory a gpucg call (its kernels and its dispatcher), named "
             "by step, operator and first node"]
    written = []
    for k, (call, op) in enumerate(compile_calls(g, calls, target)):
        nodes = ", ".join(call.nodes) or "(added)"
        if call.fn is not None:
            index.append(f"{k:03d} run by the front end ({call.on}): {nodes}: {call.why}")
            continue
        if op is None:
            index.append(f"{k:03d} reshape (a view, no kernel): {nodes}")
            continue
        out = root / step_dir(k, call)
        out.mkdir(parents=True, exist_ok=True)
        files = []
        for key, src in op.sources.items():
            (out / file_name(key, ext)).write_text(src)
            files.append(file_name(key, ext))
        (out / "dispatcher.py").write_text(op.dispatcher_source)
        files.append("dispatcher.py")
        index.append(f"{k:03d} {call.op}: {nodes} -> {out.name}/ {' '.join(files)}")
        written.append(out)
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.txt").write_text("\n".join(index) + "\n")
    return written + [root / "index.txt"]
