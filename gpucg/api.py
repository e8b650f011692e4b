"""Compiling operators for a signature, running them, and explaining the choice."""

from __future__ import annotations

import builtins
import dataclasses
import threading
from collections import OrderedDict

import numpy as np

from . import dispatch as _dispatch
from .errors import DTypeError, InputError, SignatureError, describe
from .op import get_op
from .runtime import backend_status, get_backend, stats
from .shape import TensorType, dtype_name, tensor, var
from .strategy import Selection, select
from .target import Target, require_usable, resolve


def _array_kind(x) -> str | None:
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__ or ""
    if mod.startswith("cupy") and hasattr(x, "shape"):
        return "cuda"
    if mod.startswith("pyopencl") and hasattr(x, "shape"):
        return "opencl"
    return None


def _bad_dim(name, axis, actual, expected):
    raise SignatureError(f"{name}.shape[{axis}] is {actual}, but the compiled signature needs {expected}")


def _bad_input(message):
    raise InputError(message)


def _size_checks(op, input_types, attrs) -> list:
    """The op's constraints that the shapes leave open; raises for one they decide false."""
    import sympy

    from .condition import SpecializedCondition
    from .shape import evaluate

    if op.constraints is None:
        return []
    open_ = []
    for c in op.constraints(tuple(input_types), attrs):
        decided = SpecializedCondition(c.ok).decide()
        if decided is False:
            values = [evaluate(v, {}) if not sympy.sympify(v).free_symbols else v for v in c.values]
            raise InputError(c.message.format(*values))
        if decided is None:
            open_.append(c)
    return open_


def _force(strategy, name: str, op_name: str, target):
    """A strategy of the one implementation ``name`` (with or without ".<target kind>").

    Its condition, unless the shapes decide it true, becomes a size check of the dispatcher;
    one the shapes decide false is an error here.
    """
    import sympy

    from .op import Constraint
    from .strategy import Strategy

    names = [i.name for i in strategy.implementations]
    found = [i for i in strategy.implementations if name in (i.name, i.name.rsplit(".", 1)[0])]
    if not found:
        raise InputError(f"{op_name}: impl={name!r} is not an implementation on {target}; "
                         f"allowed: {', '.join(names)}")
    chosen = found[0]
    check = []
    if chosen.condition is not None:
        verdict = chosen.condition.decide()
        if verdict is False:
            raise InputError(f"{op_name}: impl={name!r} does not apply to these shapes: "
                             f"{chosen.describe_condition()}")
        if verdict is None:
            check = [Constraint(chosen.condition.expr,
                                f"{op_name}: the forced implementation {chosen.name} needs "
                                f"{sympy.sstr(chosen.condition.expr)}, false for these sizes")]
    forced = Strategy()
    forced.add_implementation(dataclasses.replace(chosen, condition=None))
    return forced, check


class RunContext:
    """What an implementation's ``run`` sees: attrs, config, arrays, and its kernels."""

    def __init__(self, compiled: "CompiledOp", index: int, inputs, outputs, wide: bool):
        choice = compiled.selection.choices[index]
        self.compiled = compiled
        self.index = index
        self.attrs = compiled.attrs
        self.config = choice.config
        self.impl = choice.impl
        self.backend = compiled.backend
        self.inputs = inputs
        self.outputs = outputs
        self.wide = wide
        self.idx = np.int64 if wide else np.int32

    def kernel(self, key: str):
        """The compiled program for one of the implementation's kernels."""
        return self.compiled.program(self.index, key, self.wide)

    def empty(self, shape, dtype):
        """A scratch array on the backend."""
        return self.backend.empty(shape, dtype)

    def size(self, value: int):
        """A size argument in the kernel's index type."""
        return self.idx(value)

    def widened(self) -> "RunContext":
        """The same call with 64-bit indexing (for scratch that outgrows 32-bit indices)."""
        return RunContext(self.compiled, self.index, self.inputs, self.outputs, True)


class CompiledOp:
    """An operator compiled for a (possibly symbolic) signature on one target.

    Attributes:
        selection: what selection decided (see :func:`gpucg.explain`).
        dispatcher_source: the generated Python that checks the arguments and picks a kernel.
        sources: kernel name -> kernel source, for every implementation the dispatcher may run.
        last_impl: the name of the implementation the most recent call ran (None before one).
    """

    def __init__(self, op_name: str, input_types, target=None, records=None, impl=None, **attrs):
        self.op = get_op(op_name)
        self.attrs = self.op.make_attrs(**attrs)
        self.input_types = tuple(input_types)
        for i, t in enumerate(self.input_types):
            if not isinstance(t, TensorType):
                raise InputError(f"input {i} of {op_name}={describe(t)} must be a gpucg.tensor(...)")
        target = resolve(target)
        ok, _, _ = backend_status(target.backend)
        if ok and target.kind == "opencl" and "device" not in target.attrs:
            target = target.with_attrs(device=get_backend("opencl").device_type)
        self.target = target
        self.output_types = self.op.infer(self.input_types, self.attrs)
        checks = _size_checks(self.op, self.input_types, self.attrs)
        attrs_dict = dataclasses.asdict(self.attrs)
        strategy = self.op.strategy(self.attrs, self.input_types, self.output_types, target=target)
        if impl is not None:
            strategy, check = _force(strategy, impl, op_name, target)
            checks += check
        self.selection: Selection = select(op_name, strategy, self.input_types, self.output_types,
                                           attrs_dict, target, records)
        if ok:
            self._check_dtypes()
        self.dispatcher_source = _dispatch.generate(
            self.selection, self.op.input_names[:len(self.input_types)], checks)
        namespace = {"_inputs": self._inputs, "_run": self._run, "_bad_dim": _bad_dim,
                     "_bad_input": _bad_input}
        exec(builtins.compile(self.dispatcher_source, f"<gpucg dispatcher {op_name}>", "exec"), namespace)
        self._dispatch = namespace["dispatch"]
        self._programs: dict = {}
        self._specs: dict = {}
        self._lock = threading.Lock()
        self.last_impl: str | None = None

    # -- sources ----------------------------------------------------------------------------
    @property
    def backend(self):
        return get_backend(self.target.backend)

    def _check_dtypes(self) -> None:
        backend = self.backend
        if not hasattr(backend, "supports"):
            return
        storage = self.op.kernel_info.get("storage_dtypes", ())
        for t in self.input_types + self.output_types:
            if t.dtype not in storage and not backend.supports(t.dtype):
                raise DTypeError(f"{self.op.name}: dtype {t.dtype} is not supported by the "
                                 f"device of target {self.target}")

    def specs(self, index: int) -> dict:
        if index not in self._specs:
            choice = self.selection.choices[index]
            kernels = choice.impl.kernels
            self._specs[index] = dict(kernels(choice.config)) if kernels else {}
        return self._specs[index]

    def source(self, index: int, key: str, wide: bool = False) -> str:
        """The kernel source of one implementation's kernel (``wide``: 64-bit indexing)."""
        from .codegen import dialect_for, render

        choice = self.selection.choices[index]
        spec = self.specs(index)[key]
        attrs = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(self.attrs).items())
        header = (f"// gpucg: {self.op.name} ({attrs}) | {choice.impl.name} | kernel {key} | "
                  f"config {choice.config.short()} | index {'int64' if wide else 'int32'}\n")
        return render(spec, dialect_for(self.target.backend), wide, header)

    @property
    def sources(self) -> dict[str, str]:
        out = {}
        if self.target.backend == "numpy":
            return out
        for i, choice in enumerate(self.selection.choices):
            for key in self.specs(i):
                out[f"{choice.impl.name}/{key}"] = self.source(i, key, False)
                out[f"{choice.impl.name}/{key}@i64"] = self.source(i, key, True)
        return out

    def explain(self) -> Selection:
        return self.selection

    # -- running ----------------------------------------------------------------------------
    def program(self, index: int, key: str, wide: bool):
        cache_key = (index, key, wide)
        prog = self._programs.get(cache_key)
        if prog is None:
            with self._lock:
                prog = self._programs.get(cache_key)
                if prog is None:
                    spec = self.specs(index)[key]
                    impl = self.selection.choices[index].impl
                    prog = self.backend.compile(self.source(index, key, wide), spec.entry, impl.options)
                    self._programs[cache_key] = prog
        return prog

    def _inputs(self, *arrays):
        backend = self.backend
        out = []
        host = False
        for name, t, x in zip(self.op.input_names, self.input_types, arrays):
            kind = _array_kind(x)
            if kind is None:
                raise InputError(f"{self.op.name}: {name}={describe(x)} must be a numpy.ndarray, "
                                 "cupy.ndarray or pyopencl.array.Array")
            if kind == "numpy":
                host = host or self.target.backend != "numpy"
            elif kind != self.target.backend:
                raise InputError(f"{self.op.name}: {name} is a {kind} array but the target is "
                                 f"{self.target}; pass a NumPy array or an array of that target")
            if x.ndim != t.ndim:
                raise SignatureError(f"{self.op.name}: {name} has rank {x.ndim} ({tuple(x.shape)}), "
                                     f"but the compiled signature needs rank {t.ndim} ({t})")
            if np.dtype(x.dtype).name != t.dtype:
                raise SignatureError(f"{self.op.name}: {name} has dtype {np.dtype(x.dtype).name}, "
                                     f"but the compiled signature needs {t.dtype}")
            if kind == "numpy" and self.target.backend != "numpy":
                x = backend.to_device(x)
            else:
                x = backend.contiguous(x)
            out.append(x)
        return tuple(out), host

    def _run(self, index: int, inputs, out_shapes, wide: bool, host: bool):
        backend = self.backend
        outputs = tuple(backend.empty(s, t.dtype) for s, t in zip(out_shapes, self.output_types))
        impl = self.selection.choices[index].impl
        self.last_impl = impl.name
        impl.run(RunContext(self, index, inputs, outputs, wide))
        stats.bump("dispatches")
        if host:
            outputs = tuple(backend.to_host(o) for o in outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def __call__(self, *arrays):
        if len(arrays) != len(self.input_types):
            raise SignatureError(f"{self.op.name} was compiled for {len(self.input_types)} input(s) "
                                 f"({', '.join(self.op.input_names[:len(self.input_types)])}), "
                                 f"got {len(arrays)}")
        require_usable(self.target)
        return self._dispatch(*arrays)


def compile(op: str, *input_types, target=None, records=None, impl=None, **attrs) -> CompiledOp:  # noqa: A001
    """Compile an operator for input types (shapes may hold gpucg.var symbols).

    ``impl`` names one implementation to use instead of selecting (e.g. "direct"): for tests,
    comparisons and benchmarks. Its condition is still checked, at run time if need be.

    Example:
        >>> n = gpucg.var("n")
        >>> f = gpucg.compile("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="numpy")
        >>> f(np.ones((3, 1024), np.float32)).shape
        (3, 1024)
    """
    return CompiledOp(op, input_types, target=target, records=records, impl=impl, **attrs)


def explain(op: str, *input_types, target=None, records=None, **attrs) -> Selection:
    """The selection report for an operator call: every candidate, and why it won or lost."""
    return CompiledOp(op, input_types, target=target, records=records, **attrs).selection


# -- the eager path ---------------------------------------------------------------------------

_EAGER: OrderedDict = OrderedDict()
_EAGER_MAX = 256
_eager_lock = threading.Lock()


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


def call(op_name: str, arrays, target=None, **attrs):
    """Run an operator eagerly on arrays; the compiled operator is memoized by signature."""
    op = get_op(op_name)
    op.check_count(len(arrays))
    attrs_obj = op.make_attrs(**attrs)
    kinds = []
    for name, x in zip(op.input_names, arrays):
        kind = _array_kind(x)
        if kind is None:
            raise InputError(f"{op_name}: {name}={describe(x)} must be a numpy.ndarray, "
                             "cupy.ndarray or pyopencl.array.Array")
        kinds.append(kind)
    if target is None:
        device = [k for k in kinds if k != "numpy"]
        target = Target(device[0]) if device else resolve(None)
    else:
        target = Target(target)
    require_usable(target)
    static = op.static_axes(attrs_obj) if op.static_axes is not None else ()
    types = eager_signature(arrays, op.input_names, static)
    key = (op_name, attrs_obj, types, str(target))
    with _eager_lock:
        compiled = _EAGER.get(key)
        if compiled is not None:
            _EAGER.move_to_end(key)
    if compiled is None:
        compiled = CompiledOp(op_name, types, target=target, _attrs=attrs_obj)
        with _eager_lock:
            _EAGER[key] = compiled
            while len(_EAGER) > _EAGER_MAX:
                _EAGER.popitem(last=False)
    return compiled(*arrays)
