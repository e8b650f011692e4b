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
from ..samples import mismatch, sample_inputs


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


#: the tuner's tolerance (of gpucg.samples.mismatch): a config may sum in another order, and
#: its inputs are all positive, so a wrong kernel is far outside it
TOLERANCE = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 2e-3, "float64": 1e-8}


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
                inputs = sample_inputs(task.input_types, np.random.default_rng(task.seed),
                                       op=get_op(task.op), attrs=task.attrs)
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
            compiled = CompiledOp.with_attrs(task.op, task.input_types, task.attrs,
                                             target=task.target, impl=task.impl,
                                             config=task.config)
            backend = get_backend(compiled.target.backend)
            device = compiled.target.backend != "numpy"
            arrays = [backend.to_device(x) if device else x for x in inputs]
            plan = compiled.plan(*arrays)
            for key in compiled.selection.choices[plan.index].impl.kernels:
                compiled.program(plan.index, key, plan.wide)
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
        wrong = mismatch(got, ref, TOLERANCE)
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
