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


class Replay:
    """The launches of one recorded run (RunContext.replay), made again on new arrays of the
    same shapes: fresh outputs and scratch, the same programs, grids and scalars. CompiledOp
    keeps one per (choice, index width, input and output shapes and dtypes) where the backend
    allows it (Backend.replays: arrays whose shape and dtype are all the launch code may read
    of them)."""

    __slots__ = ("outputs", "scratch", "launches", "runs", "_new")

    def __init__(self, outputs, scratch, launches):
        self.outputs = outputs
        self.scratch = scratch
        self.launches = launches
        #: each launch bound to its program (Program.bind): only the arrays are set per call
        self.runs = tuple(program.bind(refs, grid, block, shared)
                          for program, refs, grid, block, shared in launches)
        # (shape, dtype, bytes) of the outputs, then of the scratch arrays
        self._new = [tuple((tuple(map(int, s)), d, math.prod(s) * d.itemsize)
                           for s, d in ((s, np.dtype(d)) for s, d in arrays))
                     for arrays in (outputs, scratch)]

    def __call__(self, backend, inputs) -> tuple:
        arrays = self.arrays(backend, inputs)
        self.launch(arrays)
        return arrays["out"]

    def arrays(self, backend, inputs) -> dict:
        """The call's arrays by role: its inputs, fresh outputs and scratch."""
        new = backend.fresh
        outs, tmps = self._new
        return {"in": inputs, "out": tuple([new(*o) for o in outs]),
                "tmp": [new(*t) for t in tmps]}

    def launch(self, arrays) -> None:
        """The launches on these arrays. (On PoCL a kernel may not start while the calling
        thread keeps its CPU busy: callers do their own work first.)"""
        for run in self.runs:
            run(arrays)
