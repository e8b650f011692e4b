"""One exception hierarchy for gpucg.

Every error a user can cause is a :class:`GpucgError`. Messages name the argument, the value and
what is allowed. Errors are picklable (they cross process pools during tuning): each class keeps
the constructor arguments it was given in ``self.args`` so the default pickling protocol
rebuilds it.
"""

from __future__ import annotations


class GpucgError(Exception):
    """Base class of every gpucg error."""


class InputError(GpucgError, ValueError):
    """An argument has a wrong value (shape, axis, size, dtype, array type...)."""


class DTypeError(InputError, TypeError):
    """A dtype is not in the whitelist, or not supported by the operator or target."""


class AttrError(InputError, TypeError):
    """An operator attribute has the wrong type or value."""


class SignatureError(InputError):
    """Call arguments do not fit a compiled operator's signature (count, rank, dtype, sizes)."""


class RecordsError(InputError):
    """A records file that cannot be read or written (a directory, no permission)."""


class TuneError(GpucgError):
    """Tuning could not go on (a measuring worker cannot start)."""


class TargetError(GpucgError, ValueError):
    """A target string cannot be parsed or names an unknown kind."""


class TargetUnavailableError(GpucgError, RuntimeError):
    """A known target cannot run on this machine (no device, missing package)."""


class ConditionError(GpucgError, ValueError):
    """A specialized condition is malformed (non-shape symbols, not a boolean)."""


class StrategyError(GpucgError, RuntimeError):
    """A strategy or generic function is malformed or has nothing for a target."""


class OpError(GpucgError, KeyError):
    """An operator is unknown or registered twice."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0]) if self.args else ""


class BackendUnavailableError(TargetUnavailableError):
    """A backend's Python package is missing; the message says which extra to install."""


class CompileError(GpucgError, RuntimeError):
    """A kernel failed to compile. Carries the source, the options and the compiler log."""

    def __init__(self, message: str, source: str = "", options: tuple = (), log: str = ""):
        super().__init__(message, source, tuple(options), log)
        self.message = message
        self.source = source
        self.options = tuple(options)
        self.log = log

    def numbered_source(self) -> str:
        """The source with line numbers, as compilers report them."""
        lines = self.source.splitlines()
        width = len(str(len(lines)))
        return "\n".join(f"{i + 1:>{width}} | {line}" for i, line in enumerate(lines))

    def __str__(self) -> str:
        text = self.message
        if self.options:
            text += f"\noptions: {' '.join(self.options)}"
        if self.log:
            text += f"\ncompiler log:\n{self.log.strip()}"
        return text


class ResourceError(GpucgError, RuntimeError):
    """A launch exceeds a device limit; the message names the limit and what to lower."""

    def __init__(self, message: str, limit: str = "", value: object = None, allowed: object = None):
        super().__init__(message, limit, value, allowed)
        self.message = message
        self.limit = limit
        self.value = value
        self.allowed = allowed

    def __str__(self) -> str:
        return self.message


class LaunchError(GpucgError, RuntimeError):
    """A kernel launch failed on the device."""


def describe(value: object, limit: int = 60) -> str:
    """A short repr of a value for error messages."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{text} ({type(value).__name__})"


def require_int(name: str, value) -> int:
    """``value`` as an int, or AttrError naming the attribute (bools are not ints here)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise AttrError(f"{name}={describe(value)} must be an int")
    return int(value)


def require_bool(name: str, value) -> bool:
    """``value`` as a bool, or AttrError naming the attribute."""
    import numpy as np

    if not isinstance(value, (bool, np.bool_)):
        raise AttrError(f"{name}={describe(value)} must be a bool")
    return bool(value)
