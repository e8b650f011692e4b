"""What an implementation's launch code sees while a compiled operator runs: RunContext (the
call's attrs, config, fixed parameters, arrays) and a Launcher per kernel; and Replay, the
launches of one run kept to be made again for arrays of the same shapes without running the
implementation's launch code (its Python costs a small call more than the launch itself)."""

from __future__ import annotations

import math

import numpy as np

from .codegen.signature import order, parameters


class Launcher:
    """One kernel of the running implementation: call it to launch; compiled on first use."""

    __slots__ = ("ctx", "key")

    def __init__(self, ctx: "RunContext", key: str):
        self.ctx = ctx
        self.key = key

    def __call__(self, *positional, grid, block: int, **named) -> None:
        """Launch on ``grid`` work-groups (an int or (x, y, z)) of ``block``, every argument
        by name (``named``): the kernel's own parameter list (gpucg.codegen.signature), the
        one declaration of its parameters, orders and checks them. An argument by position
        is a StrategyError."""
        ctx = self.ctx
        compiled = ctx._compiled
        program = compiled.program(ctx.index, self.key, ctx.wide)
        spec = compiled.specs(ctx.index)[self.key]
        shared = spec.dynamic_local
        cache_key = (ctx.index, self.key, ctx.wide)
        params = compiled.launch_params.get(cache_key)
        if params is None:
            params = compiled.launch_params[cache_key] = parameters(
                compiled.source(ctx.index, self.key, ctx.wide), spec.entry)
        args = order(spec.entry, params, named, positional)
        if compiled.launch_check is not None:
            compiled.launch_check(program, self.key, grid, block, shared)
        if ctx._launches is not None:
            ctx._launches.append((program, args, grid, block, shared))
        program(*args, grid=grid, block=block, shared=shared)


class RunContext:
    """What an implementation's ``run`` sees: attrs, config, fixed parameters, arrays, index
    width.

    Attributes:
        attrs: the operator's attributes; config: the chosen config (knob -> value); fixed: the
            fixed template parameters of this call; info: the strategy's host-side facts.
        inputs: the input arrays on the backend; outputs: output arrays to fill (allocated on
            first use: host implementations may return their results instead).
        wide: 64-bit indexing; idx: the NumPy type of size arguments.
    """

    def __init__(self, compiled, index: int, inputs, out_shapes, wide: bool,
                 record: bool = False):
        choice = compiled.selection.choices[index]
        self._compiled = compiled
        self.index = index
        self.attrs = compiled.attrs
        self.config = choice.config
        self.impl = choice.impl
        self.fixed = choice.impl.fixed
        self.info = choice.impl.info
        self._backend = compiled.backend
        self.inputs = inputs
        self.out_shapes = out_shapes
        self._outputs = None
        self.wide = wide
        self.idx = np.int64 if wide else np.int32
        #: recording (see replay): each launch, and each scratch array's (shape, dtype)
        self._launches = [] if record else None
        self._scratch = []

    # a run that reaches the backend or the compiled operator itself (to read data back, count
    # bad input, upload a table) does more than launch: it is not recorded for replay
    @property
    def backend(self):
        self._launches = None
        return self._backend

    @property
    def compiled(self):
        self._launches = None
        return self._compiled

    @property
    def outputs(self) -> tuple:
        if self._outputs is None:
            compiled = self._compiled
            inplace = dict(compiled.op.inplace)  # those are inputs, written in place
            self._outputs = tuple(self.inputs[inplace[i]] if i in inplace else
                                  self._backend.empty(s, t.dtype) for i, (s, t) in
                                  enumerate(zip(self.out_shapes, compiled.output_types)))
        return self._outputs

    def kernels(self) -> dict:
        """A launcher per kernel of the implementation, by key."""
        return {key: Launcher(self, key) for key in self.impl.kernels}

    def empty(self, shape, dtype):
        """A scratch array on the backend."""
        out = self._backend.empty(shape, dtype)
        if self._launches is not None:  # recording: the replay makes it anew
            self._scratch.append((out, shape, dtype))
        return out

    def counter(self):
        """A zeroed 32-bit word on the backend that a kernel counts bad input into (an atomic
        add where it finds some); :meth:`count` reads it back after the launch."""
        return self.backend.to_device(np.zeros(1, np.uint32))

    def count(self, word) -> int:
        """The value of a :meth:`counter` word (read back: waits for the kernels before)."""
        return int(self.backend.to_host(word)[0])

    def size(self, value: int):
        """A size argument in the kernel's index type."""
        return self.idx(value)

    def widen(self) -> None:
        """Switch later launches to the 64-bit-index kernels (scratch that outgrows 32 bits)."""
        self._launches = None
        self.wide = True
        self.idx = np.int64

    def replay(self) -> "Replay | None":
        """The recorded run as a Replay, or None where it cannot be made again from shapes
        alone: a run that was not recorded or reached the backend (see ``backend``), an
        argument that is none of this call's inputs, outputs or scratch (or a scalar), or one
        array in two of those roles (an input twice, an output written in place)."""
        if self._launches is None:
            return None
        roles = {}
        arrays = [("in", i, a) for i, a in enumerate(self.inputs)]
        arrays += [("out", i, a) for i, a in enumerate(self.outputs)]
        arrays += [("tmp", i, a) for i, (a, _, _) in enumerate(self._scratch)]
        for kind, i, a in arrays:
            if id(a) in roles:
                return None
            roles[id(a)] = (kind, i)
        launches = []
        for program, args, grid, block, shared in self._launches:
            refs = []
            for a in args:
                if isinstance(a, (int, float, np.generic)):
                    refs.append((None, a))
                elif id(a) in roles:
                    refs.append(roles[id(a)])
                else:
                    return None
            launches.append((program, tuple(refs), grid, block, shared))
        return Replay(tuple((s, t.dtype) for s, t in zip(self.out_shapes,
                                                         self._compiled.output_types)),
                      tuple((s, d) for _, s, d in self._scratch), tuple(launches))


def replay_key(index, wide, out_shapes, inputs) -> tuple:
    """What a compiled operator keeps a Replay by: the choice, index width, output shapes,
    input shapes and dtypes (all its launch code may read where Backend.replays holds)."""
    return index, wide, out_shapes, tuple((x.shape, x.dtype) for x in inputs)


class Replay:
    """The launches of one recorded run (RunContext.replay), made again on new arrays of the
    same shapes: fresh outputs and scratch, the same programs, grids and scalars. CompiledOp
    keeps one per (choice, index width, input and output shapes and dtypes) where the backend
    allows it (Backend.replays: arrays whose shape and dtype are all the launch code may read
    of them)."""

    __slots__ = ("runs", "_new")

    def __init__(self, outputs, scratch, launches):
        #: each launch bound to its program (Program.bind): only the arrays are set per call
        self.runs = tuple(program.bind(refs, grid, block, shared)
                          for program, refs, grid, block, shared in launches)
        # (shape, dtype, bytes) of the outputs, then of the scratch arrays
        self._new = [tuple((tuple(map(int, s)), d, math.prod(s) * d.itemsize)
                           for s, d in ((s, np.dtype(d)) for s, d in arrays))
                     for arrays in (outputs, scratch)]

    def arrays(self, backend, inputs) -> dict:
        """The call's arrays by role: its inputs, fresh outputs and scratch."""
        new = backend.fresh
        outs, tmps = self._new
        return {"in": inputs, "out": tuple([new(*o) for o in outs]),
                "tmp": [new(*t) for t in tmps]}

    def launch(self, backend, arrays) -> None:
        """The launches on these arrays (on PoCL a kernel may wait while the calling thread
        keeps its CPU busy: callers do their own work first)."""
        try:
            for run in self.runs:
                run(arrays)
        except BaseException:
            # kernels already queued may read inputs borrowed in place: let them finish first
            backend.synchronize()
            raise


class CallsAgain:
    """Calls made again: a compiled operator's call whose arguments have the kinds, shapes and
    dtypes (Backend.call_key) of an earlier call that ran a Replay goes straight to it,
    without the ingest, dispatcher checks and preparation that call passed, which decided the
    same for such arguments (on PoCL they cost a 2 ms call ~0.2 ms of host time with the
    interpreter's code out of the caches, as it is after a call that streamed its input)."""

    __slots__ = ("memo",)

    def __init__(self):
        #: the arguments' keys -> (the dispatcher's plan, its Replay, the implementation's name)
        self.memo: dict = {}

    @staticmethod
    def key(backend, arrays):
        key = backend.call_key
        try:
            return tuple([key(x) for x in arrays])
        except TypeError:  # an argument the backend does not describe: none remembered
            return None

    def find(self, backend, arrays):
        """The entry of an earlier call like this one, or None."""
        return self.memo.get(self.key(backend, arrays)) if self.memo else None

    def remember(self, backend, arrays, native, plan, replays: dict, name: str,
                 limit: int) -> None:
        """After a call of ``arrays`` (``native``: as ingested) ran ``plan``: keep its replay
        (from ``replays``, see replay_key) for calls like it, if it was replayed and took its
        arguments as they came (at most ``limit`` kept, then begun anew)."""
        if any(a is not x for a, x in zip(arrays, native)):
            return
        replay = replays.get(replay_key(plan.index, plan.wide, plan.out_shapes, native))
        key = self.key(backend, arrays)
        if replay is not None and key is not None:
            if len(self.memo) >= limit:
                self.memo.clear()
            self.memo[key] = (plan, replay, name)
