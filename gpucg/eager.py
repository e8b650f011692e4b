"""``gpucg.ops.*`` calls: compile once per signature pattern, then run with little overhead.

Two memos. The first maps a symbolic signature (sizes other than 0 and 1 become symbols,
equal sizes share one) to a CompiledOp, so calls on many sizes share one compiled operator.
The second, the fast path, maps what a call already knows (operator, attribute keywords,
target argument, and per input its type, dtype and shape) to that CompiledOp and the choice its
dispatcher made for exactly these shapes: a repeated call skips attribute validation, the
signature, the dispatcher's checks and the target lookup, and runs the chosen implementation.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

from .compiled import CompiledOp
from .interop import ingest_all
from .op import get_op
from .shape import TensorType, dtype_name, tensor, var
from .target import Target, require_usable, resolve

_MAX = 256
_COMPILED: OrderedDict = OrderedDict()
_FAST: OrderedDict = OrderedDict()
_lock = threading.Lock()


def eager_signature(arrays, names, static=()) -> tuple[TensorType, ...]:
    """Symbolic input types for arrays: 0 and 1 stay constant, equal sizes share a symbol.

    ``static[i]`` is a set of axes of input i that stay constant too (sizes the operator
    specializes on, such as conv2d's channels). Calls whose shapes differ only in the other
    sizes share one compiled operator.
    """
    symbols: dict[int, object] = {}
    types = []
    for i, (name, x) in enumerate(zip(names, arrays)):
        dims = []
        keep = static[i] if i < len(static) else ()
        for axis, d in enumerate(x.shape):
            d = int(d)
            if d in (0, 1) or axis in keep:
                dims.append(d)
            else:
                if d not in symbols:
                    symbols[d] = var(f"s{len(symbols)}")
                dims.append(symbols[d])
        types.append(tensor(tuple(dims), dtype_name(x.dtype, arg=f"{name}.dtype")))
    return tuple(types)


def _remember(memo: OrderedDict, key, value) -> None:
    with _lock:
        memo[key] = value
        while len(memo) > _MAX:
            memo.popitem(last=False)


def _fast_key(op_name, arrays, target, attrs):
    """The fast path's key, or None when an argument cannot be part of one."""
    parts = []
    for x in arrays:
        if type(x) is not np.ndarray:
            return None  # other arrays go through ingestion every call
        parts.append((x.dtype, x.shape))
    key = (op_name, target if isinstance(target, (str, type(None))) else str(target),
           os.environ.get("GPUCG_TARGET"),
           tuple((k, type(v), v) for k, v in attrs.items()), tuple(parts))  # 1 is not True
    try:
        hash(key)
    except TypeError:  # a list among the attributes
        return None
    return key


def call(op_name: str, arrays, target=None, **attrs):
    """Run an operator eagerly on arrays; the compiled operator is memoized by signature."""
    fast = _fast_key(op_name, arrays, target, attrs)
    hit = _FAST.get(fast) if fast is not None else None
    if hit is not None:
        compiled, plan = hit
        return compiled.run(plan, *arrays)
    op = get_op(op_name)
    op.check_count(len(arrays))
    attrs_obj = op.make_attrs(**attrs)
    native, kinds, framework = ingest_all(arrays, op.input_names, op_name)
    if target is None:
        device = [k for k in kinds if k != "numpy"]
        target = Target(device[0]) if device else resolve(None)
    else:
        target = Target(target)
    require_usable(target)
    static = op.static_axes(attrs_obj) if op.static_axes is not None else ()
    types = eager_signature(native, op.input_names, static)
    key = (op_name, attrs_obj, types, str(target))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = CompiledOp.with_attrs(op_name, types, attrs_obj, target=target)
        _remember(_COMPILED, key, compiled)
    else:
        with _lock:
            if key in _COMPILED:
                _COMPILED.move_to_end(key)
    if fast is not None:
        plan = compiled.plan(*native)
        _remember(_FAST, fast, (compiled, plan))
        return compiled.run(plan, *native)
    out = compiled.run(compiled.plan(*native), *native)
    if framework is None:
        return out
    return tuple(map(framework.wrap, out)) if isinstance(out, tuple) else framework.wrap(out)


def clear() -> None:
    """Forget every memoized eager compilation (tests; after registering a new strategy)."""
    with _lock:
        _COMPILED.clear()
        _FAST.clear()
