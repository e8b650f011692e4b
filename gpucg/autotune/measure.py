"""Measuring one candidate, in whatever process runs it (a local worker, a Ray actor).

A candidate is compiled, run once under the device-limit checks and compared against the
operator's NumPy reference on the tuning inputs, then timed with the backend's own timer
(OpenCL profiling events, CUDA events; the host clock for NumPy): warm-up runs, then repeats
until a minimum time, keeping the median and the interquartile range.
"""

from __future__ import annotations

import importlib
import math
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError, GpucgError


@dataclass(frozen=True)
class Timing:
    """How a candidate is timed: warm-up runs, then repeats until both minimums are met."""

    warmup: int = 1
    min_repeats: int = 3
    max_repeats: int = 50
    min_time_s: float = 0.05


@dataclass(frozen=True)
class Task:
    """One candidate to measure: the call (concrete shapes), the implementation and config."""

    op: str
    modules: tuple
    target: str
    input_types: tuple
    attrs: object
    impl: str
    config: dict
    seed: int = 0
    timing: Timing = field(default_factory=Timing)
    data: str | None = None  # an .npz of the user's inputs, instead of random ones

    @property
    def workload(self) -> tuple:
        return (self.op, self.target, self.input_types, repr(self.attrs), self.seed, self.data)


@dataclass(frozen=True)
class Result:
    """What measuring a candidate gave: a cost (median seconds) or an error kind."""

    cost: float | None = None
    spread: float = 0.0
    repeats: int = 0
    error: str | None = None
    message: str = ""
    timer: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.cost is not None and math.isfinite(self.cost)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def random_inputs(input_types, seed: int) -> list[np.ndarray]:
    """Deterministic inputs: floats in [0.9, 1.1] (sums and products stay in range), small
    integers, random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for t in input_types:
        dims = tuple(int(d) for d in t.shape)
        if t.dtype == "bool":
            out.append(rng.random(dims) < 0.5)
        elif t.dtype.startswith(("int", "uint")):
            low = 0 if t.dtype.startswith("uint") else -3
            out.append(rng.integers(low, 4, size=dims).astype(t.dtype))
        else:
            out.append(rng.uniform(0.9, 1.1, size=dims).astype(t.dtype))
    return out


def check_outputs(got, ref) -> str:
    """'' when the outputs match the reference, else what differs."""
    gots = got if isinstance(got, tuple) else (got,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    if len(gots) != len(refs):
        return f"{len(gots)} outputs, the reference has {len(refs)}"
    for i, (g, r) in enumerate(zip(gots, refs)):
        g, r = np.asarray(g), np.asarray(r)
        if g.shape != r.shape:
            return f"output {i} has shape {g.shape}, the reference {r.shape}"
        if r.dtype.kind in "biu":
            if not np.array_equal(g, r):
                return f"output {i}: {int(np.sum(g != r))} of {r.size} elements differ"
            continue
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        finite = np.isfinite(r64)
        scale = max(1.0, float(np.max(np.abs(r64[finite]))) if finite.any() else 1.0)
        tol = {2: 2e-2, 4: 2e-3}.get(r.dtype.itemsize, 1e-8)
        nan_ok = np.array_equal(np.isnan(g64), np.isnan(r64))
        err = np.abs(g64 - r64)[finite]
        worst = float(np.max(err)) if err.size else 0.0
        if not nan_ok or worst > tol * scale or not np.array_equal(g64[~finite], r64[~finite],
                                                                    equal_nan=True):
            return f"output {i}: max abs error {worst:.3g} (allowed {tol * scale:.3g})"
    return ""


def device_timer(backend):
    """(name, fn -> seconds of one call) with the backend's own clock."""
    if backend.name == "opencl":
        cl = backend.cl
        if backend.queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
            def opencl_events(fn):
                start = cl.enqueue_marker(backend.queue)
                fn()
                end = cl.enqueue_marker(backend.queue)
                end.wait()
                return (end.profile.end - start.profile.end) * 1e-9
            return "opencl events", opencl_events
    if backend.name == "cuda":
        return "cuda events", lambda fn: backend.time(fn, repeat=1, warmup=0)[0]

    def host(fn):
        t0 = time.perf_counter()
        fn()
        backend.synchronize()
        return time.perf_counter() - t0
    return "host clock", host


class Measurer:
    """Measures tasks in this process; keeps the inputs and reference of the last workload."""

    def __init__(self):
        self._workload = None
        self._inputs = None
        self._ref = None
        self._state = None

    def _data(self, task: Task):
        if self._workload != task.workload:
            from ..op import get_op

            for mod in task.modules:
                importlib.import_module(mod)
            if task.data:
                with np.load(task.data) as z:
                    inputs = [z[f"arr_{i}"] for i in range(len(z.files))]
            else:
                inputs = random_inputs(task.input_types, task.seed)
            ref = get_op(task.op).reference(*inputs, task.attrs)
            self._workload, self._inputs, self._ref = task.workload, inputs, ref
        return self._inputs, self._ref

    def prepare(self, task: Task) -> Result | None:
        """Compile the candidate (no device time); an error Result, or None when ready."""
        from ..compiled import CompiledOp
        from ..runtime import get_backend

        self._state = None
        try:
            inputs, ref = self._data(task)
            compiled = CompiledOp(task.op, task.input_types, target=task.target,
                                  impl=task.impl, config=task.config, _attrs=task.attrs)
            backend = get_backend(compiled.target.backend)
            device = compiled.target.backend != "numpy"
            arrays = [backend.to_device(x) if device else x for x in inputs]
            index, _, wide = compiled.plan(*arrays)
            for key in compiled.selection.choices[index].impl.kernels:
                compiled.program(index, key, wide)
        except CompileError as exc:
            return Result(error="compile", message=_first_line(exc))
        except Exception as exc:  # noqa: BLE001 - any failure is this candidate's
            return Result(error="compile", message=_first_line(exc))
        self._state = (task, compiled, backend, arrays, ref)
        return None

    def run(self) -> Result:
        """Check the prepared candidate against the reference, then time it."""
        from .checks import Dropped, launch_checker

        task, compiled, backend, arrays, ref = self._state
        self._state = None
        compiled.launch_check = launch_checker(backend)
        try:
            fn = compiled.bind(*arrays)
            out = fn()
            got = tuple(backend.to_host(o) for o in out) if isinstance(out, tuple) \
                else backend.to_host(out)
        except Dropped as exc:
            return Result(error="dropped", message=exc.reason)
        except GpucgError as exc:
            return Result(error="launch", message=_first_line(exc))
        except Exception as exc:  # noqa: BLE001
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            return Result(error="launch", message=f"{_first_line(exc)} ({tb.name}:{tb.lineno})")
        finally:
            compiled.launch_check = None
        wrong = check_outputs(got, ref)
        if wrong:
            return Result(error="wrong", message=wrong)
        name, timer = device_timer(backend)
        t = task.timing
        try:
            for _ in range(t.warmup):
                fn()
            backend.synchronize()
            times: list[float] = []
            while len(times) < t.max_repeats and (len(times) < t.min_repeats
                                                  or sum(times) < t.min_time_s):
                times.append(timer(fn))
        except Exception as exc:  # noqa: BLE001
            return Result(error="launch", message=_first_line(exc))
        q1, med, q3 = np.percentile(times, [25, 50, 75])
        return Result(cost=float(med), spread=float(q3 - q1), repeats=len(times), timer=name)

    def measure(self, task: Task) -> Result:
        """prepare, then run."""
        return self.prepare(task) or self.run()
