"""The parts of a record's key: the input signature, the device, the template hash."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re

import numpy as np
import sympy

from ..shape import TensorType

_SYM = re.compile(r"\$(\d+)")


def symbols_in_order(input_types) -> list:
    """The shape symbols of the inputs in order of first appearance (left to right)."""
    out: list = []
    for t in input_types:
        for d in t.shape:
            if isinstance(d, int):
                continue
            for s in sorted(d.free_symbols, key=lambda s: s.name):
                if s not in out:
                    out.append(s)
    return out


def signature(input_types) -> tuple[tuple[str, ...], dict]:
    """Canonical input strings (``"float32[$0,1024]"``) and symbol -> canonical name.

    Symbols are renamed by order of first appearance, so ``(n, 1024)`` and ``(m, 1024)`` name
    the same workload.
    """
    names = {s: f"${i}" for i, s in enumerate(symbols_in_order(input_types))}
    dummies = {s: sympy.Symbol(n) for s, n in names.items()}
    parts = []
    for t in input_types:
        dims = [str(d) if isinstance(d, int) else str(d.subs(dummies)) for d in t.shape]
        parts.append(f"{t.dtype}[{','.join(dims)}]")
    return tuple(parts), names


def _parse(sig: str):
    """``"float32[$0,1024]"`` -> ("float32", [ "$0", 1024 ]); None for expression dims."""
    dtype, _, rest = sig.partition("[")
    dims = []
    for part in rest.rstrip("]").split(",") if rest.rstrip("]") else []:
        if part.isdigit():
            dims.append(int(part))
        elif _SYM.fullmatch(part):
            dims.append(part)
        else:
            return None
    return dtype, dims


def unify(record_inputs: tuple, input_types) -> tuple[dict, list] | None:
    """Match a record's signature to a compile's input types.

    Returns (record symbol -> the compile's size expression or int, equalities the compile's
    sizes must satisfy for the record to apply), or None when the signatures cannot match
    (other dtypes, ranks or constant sizes).
    """
    if len(record_inputs) != len(input_types):
        return None
    binding: dict = {}
    equal: list = []
    for sig, t in zip(record_inputs, input_types):
        parsed = _parse(sig)
        if parsed is None:  # expression dims: only the identical signature matches
            mine, names = signature(input_types)
            if mine != tuple(record_inputs):
                return None
            return {v: k for k, v in names.items()}, []
        dtype, dims = parsed
        if dtype != t.dtype or len(dims) != t.ndim:
            return None
        for rd, d in zip(dims, t.shape):
            if isinstance(rd, int):
                if isinstance(d, int):
                    if d != rd:
                        return None
                else:
                    equal.append(sympy.Eq(d, rd))
            elif rd in binding:
                if binding[rd] != d:
                    equal.append(sympy.Eq(binding[rd], d))
            else:
                binding[rd] = d
    return binding, equal


def concrete(input_types, bucket: dict) -> tuple[TensorType, ...]:
    """The input types with every symbol replaced by its bucket value."""
    from ..shape import evaluate

    out = []
    for t in input_types:
        out.append(TensorType(tuple(d if isinstance(d, int) else int(evaluate(d, bucket))
                                    for d in t.shape), t.dtype))
    return tuple(out)


# -- the device ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def device_identity(backend_name: str) -> tuple[str, str] | None:
    """(device name, driver and compiler versions) of the backend's device here, or None when
    the backend is not usable here (records for it then cannot be matched to a device)."""
    from ..runtime import backend_status, get_backend

    ok, described, _ = backend_status(backend_name)
    if not ok:
        return None
    backend = get_backend(backend_name)
    own = getattr(backend, "tuning_identity", None)
    if callable(own):
        return own()
    if backend_name == "opencl":
        d = backend.device
        return d.name.strip(), f"{d.driver_version.strip()}; {backend.platform.version.strip()}"
    if backend_name == "cuda":
        cupy = backend.cupy
        rt = cupy.cuda.runtime
        return (f"{backend.device_name} ({backend.arch})",
                f"driver {rt.driverGetVersion()}; runtime {rt.runtimeGetVersion()}; "
                f"cupy {cupy.__version__}")
    return described, f"numpy {np.__version__}"


# -- the templates ------------------------------------------------------------------------------

def _template_texts(names) -> dict[str, str]:
    """Each template and every template it imports or includes, by name."""
    from jinja2 import meta

    from ..codegen.render import environment

    env = environment()
    texts: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in texts:
            continue
        src = env.loader.get_source(env, name)[0]
        texts[name] = src
        todo.extend(r for r in meta.find_referenced_templates(env.parse(src)) if r)
    return texts


@functools.lru_cache(maxsize=1024)
def _hash(templates: tuple, run) -> str:
    h = hashlib.sha256()
    for name, text in sorted(_template_texts(templates).items()):
        h.update(f"{name}\0{text}\0".encode())
    try:
        h.update(inspect.getsource(run).encode())
    except (OSError, TypeError):  # defined in exec'd code: its name is all there is
        h.update(getattr(run, "__qualname__", repr(run)).encode())
    return h.hexdigest()[:16]


def template_hash(impl) -> str:
    """A hash of the implementation's kernel templates (with the macro files they import) and
    of its launch function's source: a record of another hash is stale."""
    templates = tuple(sorted({k.template for k in impl.kernels.values()}))
    return _hash(templates, impl.run)
