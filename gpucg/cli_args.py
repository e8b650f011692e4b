"""Argument spellings the command lines share (gpucg/cli.py, gpucg/onnx/cli.py): a tensor
type as DIMS:DTYPE, a kernel's file name."""

from __future__ import annotations

import re

from . import shape
from .errors import InputError


def parse_input(text: str):
    """``n,1024:float32`` -> tensor type (names become gpucg.var symbols)."""
    dims, sep, dtype = text.rpartition(":")
    if not sep:
        raise InputError(f"--input {text!r} must look like DIMS:DTYPE, e.g. n,1024:float32")
    out = []
    for part in dims.split(",") if dims.strip() else []:
        part = part.strip()
        if re.fullmatch(r"\d+", part):
            out.append(int(part))
        elif part.isidentifier():
            out.append(shape.var(part))
        else:
            raise InputError(f"--input {text!r}: dimension {part!r} must be an int or a name")
    return shape.tensor(tuple(out), dtype)


def file_name(key: str, ext: str) -> str:
    """A file name for a kernel key such as ``scan_rows.cuda/scan@i64``."""
    base = key.replace("/", "__").replace("@", ".")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base) + ext
