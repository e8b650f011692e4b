"""A selection made runnable: CompiledOp (sources, programs, the dispatcher) and RunContext.

``gpucg.compile`` builds a CompiledOp: the operator's type relation gives the output types,
its strategy the implementations, selection the choices, and the generated dispatcher (Python
source, exec'd once) the code that checks the arguments of a call and picks a choice.
"""

from __future__ import annotations

import builtins
import dataclasses
import threading

import numpy as np

from . import codegen, counters as stats, dispatch as _dispatch, half as _half
from .dispatch import Plan, bad_dim, bad_input, make_plan
from .records import store as _records
from .errors import DTypeError, InputError, SignatureError, StrategyError, describe
from .interop import ingest_all, native_kind, wrap
from .derived import derive
from .op import get_op
from .runtime import backend_status, get_backend
from .shape import TensorType
from .strategy import Selection, force, select, size_checks
from .run_context import CallsAgain, RunContext, replay_key
from .target import require_usable, resolve

INDEX_MODES = ("auto", "int32", "int64")
#: replays kept by one compiled operator (one per shape signature called), then begun anew
REPLAYS = 64


class CompiledOp:
    """An operator compiled for a (possibly symbolic) signature on one target.

    Attributes:
        selection: what selection decided (see :func:`gpucg.explain`).
        dispatcher_source: the generated Python that checks the arguments and picks a kernel.
        sources: kernel name -> kernel source, for every choice the dispatcher may run.
        last_impl: the implementation the most recent call ran (None before one).
        launch_check: None, or ``f(program, key, grid, block, shared)``, run before each
            launch (``shared``: its dynamic local bytes); it
            may raise to stop it (the tuner's device-limit checks).
    """

    def __init__(self, op_name: str, input_types, target=None, records=None, impl=None,
                 index: str = "auto", config=None, **attrs):
        op = get_op(op_name)
        self._setup(op, op.make_attrs(**attrs), input_types, target, records, impl, index,
                    config)

    @classmethod
    def with_attrs(cls, op_name: str, input_types, attrs, target=None, records=None,
                   impl=None, index: str = "auto", config=None) -> "CompiledOp":
        """As ``CompiledOp(op_name, input_types, ..., **attrs)``, from the operator's
        attributes object (``get_op(op_name).make_attrs(...)``, already validated: the eager
        path and the tuner have one)."""
        op = get_op(op_name)
        if not isinstance(attrs, op.attrs):
            raise InputError(f"{op_name}: attrs={describe(attrs)} must be a {op.attrs.__name__}"
                             f" (gpucg.get_op({op_name!r}).make_attrs(...))")
        self = cls.__new__(cls)
        self._setup(op, attrs, input_types, target, records, impl, index, config)
        return self

    def _setup(self, op, attrs, input_types, target, records, impl, index, config) -> None:
        op_name, self.op, self.attrs, self.input_types = op.name, op, attrs, tuple(input_types)
        for i, t in enumerate(self.input_types):
            if not isinstance(t, TensorType):
                raise InputError(f"input {i} of {op_name}={describe(t)} must be a gpucg.tensor(...)")
        if index not in INDEX_MODES:
            raise InputError(f"index={describe(index)} is not allowed; allowed: "
                             f"{', '.join(map(repr, INDEX_MODES))}")
        self.index_mode = index
        self.target = resolve(target)
        names = self.op.input_names[:len(self.input_types)]
        # derived sizes (floor(h/2 - 1/2) + 1 with h no input's whole dimension) become size
        # symbols of their own for the type relation, the strategy and the dispatcher
        derivation = derive(self.input_types)
        types = derivation.types
        out_types = self.op.infer(types, self.attrs)
        self.output_types = derivation.shown_types(out_types)
        checks = size_checks(self.op, types, self.attrs)
        strategy = self.op.strategy(self.attrs, types, out_types, target=self.target)
        if config is not None and impl is None:
            raise InputError(f"{op_name}: config={config!r} needs impl= (the implementation "
                             "whose knobs it sets)")
        if impl is not None:
            strategy, check = force(strategy, impl, op_name, self.target, config)
            checks += check
        records = None if config is not None else _records.resolve(records)
        self.selection: Selection = select(op_name, strategy, types, out_types,
                                           dataclasses.asdict(self.attrs), self.target, records)
        if backend_status(self.target.backend)[0]:
            self._check_dtypes()
        wide = {"auto": None, "int32": False, "int64": True}[index]
        self.dispatcher_source = _dispatch.generate(self.selection, names, checks, wide,
                                                    derivation)
        code = builtins.compile(self.dispatcher_source, f"<gpucg dispatcher {op_name}>", "exec")
        # the dispatcher checks a call's arrays and decides; it returns the Plan that run takes
        ns = {"_bad_dim": bad_dim, "_bad_input": bad_input, "_inputs": self._check_inputs,
              "_plan": make_plan, "_align": lambda x: self.backend.alignment(x)}
        exec(code, ns)
        self._plan = ns["dispatch"]
        self._programs: dict = {}
        #: (index, key, wide) -> the kernel's parameters (gpucg.codegen.signature), read once
        self.launch_params: dict = {}
        #: (index, wide, output shapes, input shapes and dtypes) -> its run's launches
        self._replays: dict = {}
        self._calls = CallsAgain()
        self._specs: dict = {}
        self._out_dtypes = tuple(_half.numpy_dtype(t.dtype) for t in self.output_types)
        self._in_dtypes = tuple(_half.numpy_dtype(t.dtype) for t in self.input_types)
        self._lock = threading.Lock()
        self.last_impl: str | None = None
        self.launch_check = None

    # -- sources ----------------------------------------------------------------------------
    @property
    def backend(self):
        """The runtime backend of the target (looked up once, then kept)."""
        backend = self.__dict__.get("_backend")
        if backend is None:
            backend = self.__dict__["_backend"] = get_backend(self.target.backend)
        return backend

    def _check_dtypes(self) -> None:
        backend = self.backend
        if not hasattr(backend, "supports"):
            return
        storage = self.op.kernel_info.storage_dtypes
        for t in self.input_types + self.output_types:
            if t.dtype not in storage and not backend.supports(t.dtype):
                raise DTypeError(f"{self.op.name}: dtype {t.dtype} is not supported by the "
                                 f"device of target {self.target}")

    def entry(self, index: int, key: str) -> str:
        """The kernel's entry name: gpucg_{op}_{impl}_{kernel}."""
        return f"gpucg_{self.op.name}_{self.selection.choices[index].impl.short_name}_{key}"

    def specs(self, index: int) -> dict:
        """Kernel key -> KernelSpec of one choice (its template and parameters)."""
        if index not in self._specs:
            choice = self.selection.choices[index]
            self._specs[index] = {
                key: codegen.KernelSpec.make(
                    k.template, self.entry(index, key),
                    choice.impl.dynamic_local(key, choice.config),
                    **choice.impl.template_params(key, choice.config))
                for key, k in choice.impl.kernels.items()}
        return self._specs[index]

    def source(self, index: int, key: str, wide: bool = False) -> str:
        """The kernel source of one implementation's kernel (``wide``: 64-bit indexing)."""
        choice = self.selection.choices[index]
        spec = self.specs(index)[key]
        attrs = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(self.attrs).items())
        doc = choice.impl.kernels[key].doc
        header = (f"{spec.entry}: {self.op.name}({attrs})\n"
                  f"implementation {choice.impl.name}, kernel {key}{': ' + doc if doc else ''}\n"
                  f"config {choice.config.short()}; {'64' if wide else '32'}-bit indexing")
        return codegen.render(spec, codegen.dialect_for(self.target.backend), wide, header)

    @property
    def sources(self) -> dict[str, str]:
        """Every kernel the dispatcher may launch, 32- and 64-bit-index variants ("...@i64")."""
        if self.target.backend == "numpy":
            return {}
        widths = {"auto": (False, True), "int32": (False,), "int64": (True,)}[self.index_mode]
        out, named = {}, [c.impl.name for c in self.selection.choices]
        for i, c in enumerate(self.selection.choices):  # an impl chosen twice: + its config
            name = c.impl.name + ("" if named.index(c.impl.name) == i else f"[{c.config.short()}]")
            for key in c.impl.kernels:
                for wide in widths:
                    out[f"{name}/{key}" + ("@i64" if wide else "")] = self.source(i, key, wide)
        return out

    @property
    def programs(self) -> list[tuple[str, str, str]]:
        """(implementation, kernel key, index type) of every kernel compiled so far."""
        return sorted((self.selection.choices[i].impl.name, key, "int64" if wide else "int32")
                      for i, key, wide in self._programs)

    def explain(self) -> Selection:
        return self.selection

    @property
    def dispatcher(self):
        """The function compiled from :attr:`dispatcher_source`: it checks a call's arrays and
        returns the :class:`Plan` that :meth:`run` carries out."""
        return self._plan

    # -- running ----------------------------------------------------------------------------
    def program(self, index: int, key: str, wide: bool):
        """The compiled program of one kernel (compiled once, then cached)."""
        cache_key = (index, key, wide)
        prog = self._programs.get(cache_key)
        if prog is None:
            with self._lock:
                prog = self._programs.get(cache_key)
                if prog is None:
                    spec = self.specs(index)[key]
                    impl = self.selection.choices[index].impl
                    prog = self.backend.compile(self.source(index, key, wide), spec.entry,
                                                impl.options)
                    self._programs[cache_key] = prog
        return prog

    def _check_inputs(self, *arrays):
        """Rank and dtype of native arrays against the signature; (arrays, copy back to host)."""
        host = False
        for name, t, want, x in zip(self.op.input_names, self.input_types, self._in_dtypes,
                                    arrays):
            if x.ndim != t.ndim:
                raise SignatureError(f"{self.op.name}: {name} has rank {x.ndim} ({tuple(x.shape)}), "
                                     f"but the compiled signature needs rank {t.ndim} ({t})")
            if x.dtype != want and np.dtype(x.dtype).name != t.dtype:
                raise SignatureError(f"{self.op.name}: {name} has dtype {np.dtype(x.dtype).name}, "
                                     f"but the compiled signature needs {t.dtype}")
            if isinstance(x, np.ndarray):
                host = host or self.target.backend != "numpy"
            elif self.target.backend == "numpy" or not self.backend.owns(x):
                raise InputError(f"{self.op.name}: {name} is a {native_kind(x)} array but the "
                                 f"target is {self.target}; pass a NumPy array or an array of "
                                 "that target")
            else:
                self.backend.check_array(x, f"{self.op.name}: {name}")
        return arrays, host

    def prepare(self, arrays, index: int | None = None, borrow: bool = True) -> tuple:
        """Native arrays as the backend runs them: NumPy moved to the device (``borrow``: for
        this call only, in place where the device shares host memory), contiguous (packed on
        the device) unless choice ``index`` reads strides."""
        backend, device = self.backend, self.target.backend != "numpy"
        move = backend.borrow if borrow else backend.to_device
        strided = index is not None and self.selection.choices[index].impl.strided
        written = {j for _, j in self.op.inplace}
        for j in written:  # written in place: a copy would take the writes
            x = arrays[j]
            if not isinstance(x, np.ndarray) and backend.contiguous(x) is not x:
                raise InputError(f"{self.op.name}: {self.op.input_names[j]} is a view that is not "
                                 "contiguous; it cannot be written in place: pass a contiguous "
                                 "array")
        return tuple((backend.to_device if j in written else move)(x)
                     if device and isinstance(x, np.ndarray)
                     else x if strided else backend.contiguous(x) for j, x in enumerate(arrays))

    def plan(self, *native_arrays) -> Plan:
        """What the dispatcher picks for these arrays (NumPy or of the target), checked
        against the signature, without running anything. A plan holds for any arrays of the
        same dtypes, shapes and (on a device) address alignment: callers that memoize it (the
        eager path, keyed so) skip the checks."""
        return self._plan(*native_arrays)

    def run(self, plan: Plan, *native_arrays):
        """Run a plan on arrays of its dtypes and shapes (NumPy ones go to the device and back)."""
        inputs = self.prepare(native_arrays, plan.index)
        out = self._execute(plan.index, inputs, plan.out_shapes, plan.wide, plan.host)
        if not self.op.inplace:
            return out
        out = list(out) if isinstance(out, tuple) else [out]
        for i, j in self.op.inplace:  # the caller's arrays are the results
            if isinstance(native_arrays[j], np.ndarray) and out[i] is not native_arrays[j]:
                np.copyto(native_arrays[j], out[i])
            out[i] = native_arrays[j]
        return out[0] if len(out) == 1 else tuple(out)

    def _execute(self, index: int, inputs, out_shapes, wide: bool, host: bool):
        impl = self.selection.choices[index].impl
        self.last_impl = impl.name
        key = replay = None
        if impl.kernels and self.backend.replays and not impl.strided and \
                self.launch_check is None:
            key = replay_key(index, wide, out_shapes, inputs)
            replay = self._replays.get(key)
        if replay is not None:
            made = replay.arrays(self.backend, inputs)
            replay.launch(self.backend, made)
            outputs = made["out"]
            stats.bump("replays")
        elif impl.kernels:
            ctx = RunContext(self, index, inputs, out_shapes, wide, record=key is not None)
            outputs = ctx.outputs
            try:
                impl.run(ctx, **ctx.kernels())
            except BaseException:
                # kernels already queued may still read inputs borrowed in place, which the
                # caller frees once this raises: let them finish first
                self.backend.synchronize()
                raise
            replay = key is not None and ctx.replay()
            if replay:
                if len(self._replays) >= REPLAYS:
                    self._replays.clear()
                self._replays[key] = replay
        else:
            ctx = RunContext(self, index, inputs, out_shapes, wide)
            result = impl.run(ctx)
            views = result if isinstance(result, tuple) else (result,)  # a view impl's
            outputs = views if impl.views else ctx.outputs if result is None else \
                self._host_outputs(impl, result, out_shapes)
        stats.bump("runs")
        return self._deliver(outputs, host)

    def _deliver(self, outputs, host: bool):
        """A run's outputs as the caller gets them: host copies for host inputs, else the
        backend's public arrays; one output alone."""
        backend = self.backend
        outputs = tuple((backend.to_host if host else backend.export)(o) for o in outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def _host_outputs(self, impl, result, out_shapes) -> tuple:
        outs = result if isinstance(result, tuple) else (result,)
        fixed = []
        for out, shape, dtype in zip(outs, out_shapes, self._out_dtypes):
            out = np.asarray(out)  # NumPy returns scalars for 0-d results
            if out.shape != shape:
                raise StrategyError(f"{impl.name} returned shape {tuple(out.shape)} for an output "
                                    f"of shape {tuple(shape)}")
            fixed.append(out if out.dtype == dtype else out.astype(dtype))
        return tuple(fixed)

    def __call__(self, *arrays):
        if len(arrays) != len(self.input_types):
            raise SignatureError(f"{self.op.name} was compiled for {len(self.input_types)} input(s) "
                                 f"({', '.join(self.op.input_names[:len(self.input_types)])}), "
                                 f"got {len(arrays)}")
        if self.launch_check is None:
            hit = self._calls.find(self.backend, arrays)
            if hit is not None:
                return self._call_again(hit, arrays)
        require_usable(self.target)
        native, _, framework = ingest_all(arrays, self.op.input_names, self.op.name)
        plan = self._plan(*native)
        out = self.run(plan, *native)
        if self.backend.replays and framework is None and self.launch_check is None:
            self._calls.remember(self.backend, arrays, native, plan, self._replays,
                                 self.selection.choices[plan.index].impl.name, REPLAYS)
        return wrap(framework, out)

    def _call_again(self, hit, arrays):
        """A call made again (gpucg.run_context.CallsAgain): straight to its replay."""
        plan, replay, name = hit
        backend = self.backend
        # prepare() for arguments the key proved whole: only NumPy arrays move (borrowed)
        inputs = tuple([backend.borrow(x) if type(x) is np.ndarray else x for x in arrays])
        made = replay.arrays(backend, inputs)
        # device results exported first: on PoCL a kernel's worker can wait for the CPU this
        # thread keeps busy after the enqueue (a 300 us spin delayed the start as much, 3 in 5)
        result = None if plan.host else self._deliver(made["out"], False)
        self.last_impl = name
        replay.launch(backend, made)
        stats.bump_each(("replays", "runs"))
        return self._deliver(made["out"], True) if plan.host else result

    def bind(self, *native_arrays):
        """A function of no arguments running this operator on arrays of its target, the
        dispatcher's checks done once, here (timing loops: the tuner); it returns a call's."""
        plan = self._plan(*native_arrays)
        inputs = self.prepare(native_arrays, plan.index, borrow=False)  # kept: copies
        return lambda: self._execute(plan.index, inputs, plan.out_shapes, plan.wide, False)


def compile(op: str, *input_types, target=None, records=None, impl=None, index="auto",  # noqa: A001
            config=None, **attrs) -> CompiledOp:
    """Compile an operator for input types (shapes may hold gpucg.var symbols).

    Args:
        op: the operator's name ("cumsum").
        input_types: one ``gpucg.tensor(shape, dtype)`` per input.
        target: "cuda", "opencl", "numpy" (with options such as "cuda -arch=sm_90"), or None.
        records: tuning records to select with: None for the default location (GPUCG_RECORDS,
            read once per process), False for none, a path, or a gpucg.autotune.RecordList.
        impl: the name of one implementation to use instead of selecting (e.g. "direct"), for
            tests, comparisons and benchmarks; its condition is still checked, at run time if
            need be.
        index: "auto" (64-bit indexing only when a size needs it), "int32" or "int64" (always).
        config: with ``impl``, its knobs (``{"wg": 128}``) instead of its default config or a
            tuned one.
        attrs: the operator's attributes.

    Example:
        >>> n = gpucg.var("n")
        >>> f = gpucg.compile("cumsum", gpucg.tensor((n, 1024), "float32"), axis=1, target="numpy")
        >>> f(np.ones((3, 1024), np.float32)).shape
        (3, 1024)
    """
    return CompiledOp(op, input_types, target=target, records=records, impl=impl, index=index,
                      config=config, **attrs)


def explain(op: str, *input_types, target=None, records=None, **attrs) -> Selection:
    """The selection report for an operator call: every candidate, and why it won or lost."""
    return CompiledOp(op, input_types, target=target, records=records, **attrs).selection
