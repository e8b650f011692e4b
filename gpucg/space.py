"""Declarative config spaces: named knobs with candidate values, plus constraints."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Callable

from .errors import InputError


class Config(Mapping):
    """A frozen, hashable mapping from knob names to chosen values."""

    __slots__ = ("_items",)

    def __init__(self, values=()):
        items = dict(values)
        for k, v in items.items():
            if not isinstance(v, (int, str, bool)):
                raise InputError(f"config {k}={v!r} must be an int, str or bool")
        self._items = tuple(sorted(items.items()))

    def __getitem__(self, key):
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"

    def short(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self._items) or "-"


class ConfigSpace:
    """Named knobs with candidate values, a default config and an optional constraint.

    Args:
        knobs: knob name -> candidate values.
        default: knob name -> the default value (must be a candidate), or a function of no
            arguments giving that mapping, called (and checked) when the default is first read:
            a default that costs time to choose (a search over the space) is chosen only for
            an implementation that selection reaches.
        constraint: config -> bool; configs for which it is False are not in the space.
        added: knob name -> the value a config that leaves the knob out stands for, for a
            knob added after configs were recorded without it (the kernel they measured);
            a knob not named here is filled with its default.
        why: config -> "" or why it is not in the space (a short reason shared by the configs
            a limit rules out: "shared memory over 163 KiB"); the constraint where none is
            given. :meth:`pruned` counts the configs by it (``gpucg explain`` prints them).
    """

    def __init__(self, knobs: dict | None = None, default: dict | Callable | None = None,
                 constraint: Callable[[Config], bool] | None = None,
                 added: dict | None = None, why: Callable[[Config], str] | None = None):
        self.knobs = {k: tuple(v) for k, v in (knobs or {}).items()}
        self.why = why
        if constraint is None and why is not None:
            constraint = lambda c: not why(c)  # noqa: E731
        self.constraint = constraint
        self.added = {k: v for k, v in (added or {}).items() if k in self.knobs}
        self._default = None
        self._choose = default if callable(default) else None
        if self._choose is None:
            self._set_default(default)

    def _set_default(self, default) -> None:
        default = dict(default or {})
        if set(default) != set(self.knobs):
            raise InputError(
                f"config space default names {sorted(default)} must equal knobs {sorted(self.knobs)}"
            )
        self._default = Config(default)
        self.validate(self._default)

    @property
    def default(self) -> Config:
        """The default config (chosen now if the space was given a function for it)."""
        if self._default is None:
            self._set_default(self._choose())
        return self._default

    def complete(self, config) -> Config:
        """``config`` with every knob it leaves out at the default's value (or the value the
        space declares for configs older than the knob: ``added``), so that a knob added to
        the space later keeps older configs (tuning records, forced configs) working. A knob
        the space does not have is an InputError naming it and the allowed ones."""
        config = Config(config)
        unknown = sorted(set(config) - set(self.knobs))
        if unknown:
            raise InputError(f"config knob {unknown[0]!r} (in {config.short()}) is not a knob of "
                             f"this space; allowed: {', '.join(self.knobs) or 'none'}")
        if len(config) == len(self.knobs):
            return config
        return Config({**dict(self.default), **self.added, **dict(config)})

    def validate(self, config) -> Config:
        """A Config if ``config`` is in the space (knobs it leaves out take the default's
        value: :meth:`complete`), else InputError naming the bad knob."""
        config = self.complete(config)
        for k, v in config.items():
            if v not in self.knobs[k]:
                raise InputError(f"config {k}={v!r} is not allowed; candidates: {self.knobs[k]}")
        if self.constraint is not None and not self.constraint(config):
            raise InputError(f"config {config.short()} violates the space's constraint")
        return config

    def __iter__(self):
        names = list(self.knobs)
        for values in itertools.product(*(self.knobs[n] for n in names)):
            cfg = Config(zip(names, values))
            if self.constraint is None or self.constraint(cfg):
                yield cfg

    def __len__(self) -> int:
        """How many configs the space holds (it enumerates them: not for hot paths)."""
        return sum(1 for _ in self)

    def pruned(self) -> dict:
        """reason -> how many configs of the knobs' product it rules out (with ``why``; else
        one reason, "the constraint"); "" counts the configs in the space. Enumerates the
        product: for reports, not hot paths."""
        names = list(self.knobs)
        out: dict = {}
        for values in itertools.product(*(self.knobs[n] for n in names)):
            cfg = Config(zip(names, values))
            if self.why is not None:
                reason = self.why(cfg)
            else:
                reason = "" if self.constraint is None or self.constraint(cfg) else "the constraint"
            out[reason] = out.get(reason, 0) + 1
        return out

    def __bool__(self) -> bool:
        return True  # the default is always in the space; `space or ...` must not count it

    def __repr__(self) -> str:
        return f"ConfigSpace({self.knobs}, default={self.default.short()})"
