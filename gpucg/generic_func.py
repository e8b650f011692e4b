"""Generic functions keyed by target: the lookup walks a target's keys in order."""

from __future__ import annotations

from typing import Callable

from .errors import StrategyError


class GenericFunc:
    """A function with one implementation per target key and an optional default.

    ``f.register(["cuda", "gpu"])(impl)`` adds an implementation; calling ``f(*args,
    target=t)`` runs the one registered for the first of ``t.keys`` that has one, else the
    default. Registering a key twice is an error unless ``override=True``.
    """

    def __init__(self, name: str, default: Callable | None = None):
        self.name = name
        self._default = default
        self._table: dict[str, Callable] = {}

    def set_default(self, func: Callable, override: bool = False) -> Callable:
        if self._default is not None and not override:
            raise StrategyError(f"{self.name}: default already set; pass override=True")
        self._default = func
        return func

    def register(self, keys, func: Callable | None = None, override: bool = False):
        """Register ``func`` for each key (a string or list); usable as a decorator."""
        if isinstance(keys, str):
            keys = [keys]
        keys = list(keys)

        def _do(f: Callable) -> Callable:
            for key in keys:
                if key in self._table and not override:
                    raise StrategyError(
                        f"{self.name}: key {key!r} is already registered; pass override=True"
                    )
            for key in keys:
                self._table[key] = f
            return f

        return _do(func) if func is not None else _do

    def lookup(self, target) -> Callable:
        """The implementation that ``target`` (a Target) resolves to."""
        for key in target.keys:
            if key in self._table:
                return self._table[key]
        if self._default is not None:
            return self._default
        raise StrategyError(
            f"{self.name}: nothing registered for target {str(target)!r} "
            f"(keys {', '.join(target.keys)}); registered keys: "
            f"{', '.join(sorted(self._table)) or 'none'}"
        )

    def registered_keys(self) -> list[str]:
        return sorted(self._table)

    def __call__(self, *args, target, **kwargs):
        return self.lookup(target)(*args, target=target, **kwargs)
