"""What an implementation's launch code sees while a compiled operator runs: RunContext (the
call's attrs, config, fixed parameters, arrays) and a Launcher per kernel."""

from __future__ import annotations

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
        compiled = ctx.compiled
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

    def __init__(self, compiled, index: int, inputs, out_shapes, wide: bool):
        choice = compiled.selection.choices[index]
        self.compiled = compiled
        self.index = index
        self.attrs = compiled.attrs
        self.config = choice.config
        self.impl = choice.impl
        self.fixed = choice.impl.fixed
        self.info = choice.impl.info
        self.backend = compiled.backend
        self.inputs = inputs
        self.out_shapes = out_shapes
        self._outputs = None
        self.wide = wide
        self.idx = np.int64 if wide else np.int32

    @property
    def outputs(self) -> tuple:
        if self._outputs is None:
            inplace = dict(self.compiled.op.inplace)  # those are inputs, written in place
            self._outputs = tuple(self.inputs[inplace[i]] if i in inplace else
                                  self.backend.empty(s, t.dtype) for i, (s, t) in
                                  enumerate(zip(self.out_shapes, self.compiled.output_types)))
        return self._outputs

    def kernels(self) -> dict:
        """A launcher per kernel of the implementation, by key."""
        return {key: Launcher(self, key) for key in self.impl.kernels}

    def empty(self, shape, dtype):
        """A scratch array on the backend."""
        return self.backend.empty(shape, dtype)

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
        self.wide = True
        self.idx = np.int64
