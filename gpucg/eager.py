"""``gpucg.ops.*`` calls: compile once per signature pattern, then run with little overhead.

Two memos. The first maps a symbolic signature (sizes other than 0 and 1 become symbols,
equal sizes share one) to a CompiledOp, so calls on many sizes share one compiled operator.
The second, the fast path, maps what a call already knows (operator, attribute keywords,
target argument, and per input its type, dtype and shape) to that CompiledOp and the choice its
dispatcher made for exactly these shapes: a repeated call skips attribute validation, the
signature, the dispatcher's checks and the target lookup, and runs the chosen implementation.
It serves NumPy arrays, device arrays (pyopencl, CuPy: their context or device is still checked
on every call) and DLPack tensors (torch: taken in and given back without a copy every call).

Errors of a call name the shapes passed, not the symbols of the signature it shares: when the
symbolic compile fails, the same compile for the call's very shapes says why.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from functools import partial

import numpy as np

from . import counters
from .compiled import CompiledOp
from .errors import GpucgError
from .half import is_ml_dtype
from .interop import Framework, ingest, ingest_all, native_kind, wrap
from .op import get_op
from .runtime import alignment_of
from .shape import MAX_ALIGN, TensorType, dtype_name, tensor, var
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


_DEVICE, _DLPACK, _TORCH = 1, 2, 3
_KINDS: dict = {}  # type -> _DEVICE, _DLPACK, _TORCH or None (not on the fast path)


def _kind_of(x):
    t = type(x)
    kind = _KINDS.get(t, -1)
    if kind == -1:
        if isinstance(x, np.ndarray):  # subclasses (np.matrix, masked arrays) take the long way
            kind = None
        elif native_kind(x) is not None:
            kind = _DEVICE
        elif t.__module__ == "torch" and t.__name__ == "Tensor":
            kind = _TORCH
        elif all(hasattr(x, a) for a in ("__dlpack__", "__dlpack_device__", "shape", "dtype")):
            kind = _DLPACK
        else:
            kind = None
        _KINDS[t] = kind
    return kind


def _fast_key(op_name, arrays, target, attrs):
    """The fast path's key, or None when an argument cannot be part of one."""
    parts = []
    for x in arrays:
        if type(x) is np.ndarray:
            parts.append((x.dtype, x.shape))
            continue
        kind = _kind_of(x)
        if kind is None:
            return None  # other objects go through ingestion, and its errors, every call
        if kind == _DLPACK:
            return None  # no cheap address: its alignment may choose another kernel
        where = () if kind == _DEVICE else x.device
        # the dispatcher picks vector kernels by the address's alignment: part of the key
        parts.append((type(x), x.dtype, x.shape, where, _alignment(x, kind)))
    key = (op_name, target if isinstance(target, (str, type(None))) else str(target),
           os.environ.get("GPUCG_TARGET"),
           tuple((k, type(v), v) for k, v in attrs.items()), tuple(parts))  # 1 is not True
    try:
        hash(key)
    except TypeError:  # a list among the attributes
        return None
    return key


def _alignment(x, kind) -> int:
    """The byte alignment of a device array's or tensor's address (at most MAX_ALIGN)."""
    if kind == _TORCH:
        ptr = x.data_ptr()
        return MAX_ALIGN if ptr == 0 else min(MAX_ALIGN, ptr & -ptr)
    return alignment_of(x)


def _checked(check, what, x):
    check(x, what)
    return x


def _steps(compiled, arrays, native):
    """What a fast call does to each input before running: None (a NumPy array: nothing), or
    a function of the input giving the array to run on: a device array's context check, a
    framework tensor's conversion (as ingest did it); None for all NumPy arrays."""
    op = compiled.op.name
    steps = []
    for name, x, a in zip(compiled.op.input_names, arrays, native):
        kind = None if type(x) is np.ndarray else _kind_of(x)
        if kind is None:
            steps.append(None)
        elif kind == _DEVICE:
            steps.append(partial(_checked, compiled.backend.check_array, f"{op}: {name}"))
        elif kind == _TORCH and type(a) is np.ndarray and not is_ml_dtype(a.dtype):
            steps.append(type(x).numpy)  # a CPU tensor's NumPy view, as DLPack gave
        else:
            steps.append(lambda x, name=name: ingest(x, name, op)[0])
    return None if all(s is None for s in steps) else tuple(steps)


def _fast_call(hit, arrays):
    compiled, plan, steps, origin = hit
    counters.bump("fast_calls")
    if steps is None:
        return compiled.run(plan, *arrays)
    native = [x if step is None else step(x) for x, step in zip(arrays, steps)]
    out = compiled.run(plan, *native)
    # the framework, with this call's input as its sample: the memo keeps no user arrays alive
    return out if origin is None else wrap(Framework(origin[0], arrays[origin[1]]), out)


def _with_shapes(exc, op_name, native, attrs, target):
    """The error that the compile for these arrays' very shapes, or its dispatcher, raises
    (it names them), or ``exc`` when that compile takes them."""
    names = get_op(op_name).input_names
    types = tuple(tensor(tuple(int(d) for d in x.shape), dtype_name(x.dtype, arg=f"{n}.dtype"))
                  for n, x in zip(names, native))
    try:
        CompiledOp.with_attrs(op_name, types, attrs, target=target).plan(*native)
    except GpucgError as concrete:
        return concrete
    return exc


def _compiled(key, op_name, types, attrs, target) -> CompiledOp:
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = CompiledOp.with_attrs(op_name, types, attrs, target=target)
        _remember(_COMPILED, key, compiled)
    else:
        with _lock:
            if key in _COMPILED:
                _COMPILED.move_to_end(key)
    return compiled


def call(op_name: str, arrays, target=None, **attrs):
    """Run an operator eagerly on arrays; the compiled operator is memoized by signature."""
    fast = _fast_key(op_name, arrays, target, attrs)
    hit = _FAST.get(fast) if fast is not None else None
    if hit is not None:
        return _fast_call(hit, arrays)
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
    try:
        compiled = _compiled(key, op_name, types, attrs_obj, target)
        plan = compiled.plan(*native)
    except GpucgError as exc:
        if not any(t.symbols for t in types):
            raise
        raise _with_shapes(exc, op_name, native, attrs_obj, target) from None
    if fast is not None:
        origin = None if framework is None else \
            (framework.name, next(i for i, x in enumerate(arrays) if x is framework.sample))
        _remember(_FAST, fast, (compiled, plan, _steps(compiled, arrays, native), origin))
    return wrap(framework, compiled.run(plan, *native))


def clear() -> None:
    """Forget every memoized eager compilation (tests; after registering a new strategy)."""
    with _lock:
        _COMPILED.clear()
        _FAST.clear()
