"""A kernel's parameter list, read from its own rendered source: the one declaration of its
parameters (the template writes it), which launches pass arguments to by name.

``parameters(source, entry)`` gives each parameter's name and kind: "array" (a global pointer),
"int32", "int64", "uint32", "float32", "float64" (scalars, checked against the NumPy scalar
a launch passes), or "local" (OpenCL's dynamic ``__local`` buffer, which the backend appends
itself and launches do not name). :func:`order` turns a launch's named arguments into the
positional list the backend takes, and says which names are missing, extra or of the wrong
kind. Launches name every argument: one by position is an error (the run function would
restate the parameter list, in order, a second time).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ..errors import StrategyError

#: the C spellings of the scalar kinds (both dialects), longest first
_SCALARS = (("unsigned long long", "uint64"), ("long long", "int64"), ("unsigned int", "uint32"),
            ("unsigned", "uint32"), ("ulong", "uint64"), ("long", "int64"), ("uint", "uint32"),
            ("int", "int32"), ("float", "float32"), ("double", "float64"))
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _kind(decl: str) -> str:
    if "__local" in decl:
        return "local"
    if "*" in decl:
        return "array"
    words = " ".join(w for w in re.findall(r"[A-Za-z_]\w*", decl)[:-1]
                     if w not in ("const", "restrict", "__restrict__", "__grid_constant__"))
    for spelling, kind in _SCALARS:
        if words == spelling:
            return kind
    return words  # a struct passed by value (a TMA tensor map): passed as given


@functools.lru_cache(maxsize=4096)
def parameters(source: str, entry: str) -> tuple[tuple[str, str], ...]:
    """(name, kind) of each parameter of kernel ``entry`` in ``source``, in order."""
    code = _COMMENT.sub(" ", source)
    m = re.search(rf"\b{re.escape(entry)}\s*\(", code)
    if m is None:
        raise StrategyError(f"kernel {entry!r} is not declared in its source")
    depth, i = 1, m.end()
    start = i
    while depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    params = [p.strip() for p in code[start:i - 1].split(",") if p.strip()]
    return tuple((re.findall(r"[A-Za-z_]\w*", p)[-1], _kind(p)) for p in params)


@functools.lru_cache(maxsize=None)
def _type_name(t: type) -> str:
    """A scalar argument's type as the kernel's parameter kinds spell it (NumPy's dtype names)."""
    return np.dtype(t).name if issubclass(t, np.generic) else t.__name__


def order(entry: str, params, named: dict, positional: tuple = ()) -> tuple:
    """The launch's arguments, given by name, in the kernel's order; StrategyError naming
    what is missing, extra or of the wrong kind, or any argument given by position."""
    wanted = [(n, k) for n, k in params if k != "local"]
    names = [n for n, _ in wanted]
    if positional:
        raise StrategyError(f"launch of {entry}: {len(positional)} argument(s) by position; "
                            f"pass each by the name the kernel declares (it declares {names})")
    missing = [n for n in names if n not in named]
    extra = [n for n in named if n not in names]
    if missing or extra:
        raise StrategyError(f"launch of {entry}: "
                            + (f"missing arguments {missing}" if missing else "")
                            + ("; " if missing and extra else "")
                            + (f"arguments {extra} the kernel does not declare" if extra else "")
                            + f" (it declares {names})")
    out = []
    for name, kind in wanted:
        value = named[name]
        if kind.startswith(("int", "uint", "float")):
            got = _type_name(type(value))
            if got != kind:
                raise StrategyError(f"launch of {entry}: argument {name} is {got} "
                                    f"({value!r}); the kernel declares {kind}")
        out.append(value)
    return tuple(out)
