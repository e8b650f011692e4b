"""The operator registry: attributes, type relations, patterns, strategies, references."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Callable

from .errors import AttrError, OpError, describe
from .generic_func import GenericFunc


class OpPattern(enum.Enum):
    """How an operator's outputs depend on its inputs (as TVM's OpPattern)."""

    INJECTIVE = "injective"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    OPAQUE = "opaque"


@dataclass
class OpDef:
    """Everything gpucg knows about one operator."""

    name: str
    attrs: type
    num_inputs: int
    type_rel: Callable
    pattern: OpPattern
    reference: Callable
    input_names: tuple[str, ...]
    strategy: GenericFunc
    #: for simple elementwise and reduce ops: what the shared schedules need (see strategies/generic.py)
    kernel_info: dict = field(default_factory=dict)
    doc: str = ""
    #: ``(input_types, attrs) -> [Constraint]``: size rules the type relation cannot check
    #: while sizes are symbolic; checked at compile time when decided, else by the dispatcher
    constraints: Callable | None = None
    #: how many of the last inputs may be left out (conv2d's bias)
    optional_inputs: int = 0
    #: ``() -> (input_types, attrs dict)``: a typical call, for ``gpucg ops``
    example: Callable | None = None
    #: ``attrs -> (set of axes per input)``: sizes the eager path keeps constant
    static_axes: Callable | None = None

    def make_attrs(self, **kwargs):
        """Validated attributes from keyword arguments; unknown names are an error."""
        if isinstance(kwargs.get("_attrs"), self.attrs):
            return kwargs["_attrs"]
        names = [f.name for f in dataclasses.fields(self.attrs)]
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise AttrError(f"{self.name}: unknown attribute {unknown[0]!r}; allowed: "
                            f"{', '.join(names) or 'none'}")
        return self.attrs(**kwargs)

    def check_count(self, count: int) -> None:
        """AttrError unless ``count`` inputs are allowed (optional ones may be left out)."""
        low = self.num_inputs - self.optional_inputs
        if not low <= count <= self.num_inputs:
            takes = f"{self.num_inputs}" if not self.optional_inputs else f"{low} to {self.num_inputs}"
            optional = (f"; the last {self.optional_inputs} optional" if self.optional_inputs else "")
            raise AttrError(f"{self.name} takes {takes} input(s) ({', '.join(self.input_names)}"
                            f"{optional}), got {count}")

    def infer(self, input_types, attrs):
        """Output types from input types and attributes (the type relation)."""
        self.check_count(len(input_types))
        out = self.type_rel(tuple(input_types), attrs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclass(frozen=True)
class Constraint:
    """A rule on input sizes: ``ok`` (a SymPy boolean over shape symbols) must hold.

    ``message`` is the error text, with ``{}`` placeholders filled by the values of ``values``
    (SymPy integer expressions over the same symbols), in order.
    """

    ok: object
    message: str
    values: tuple = ()


_OPS: dict[str, OpDef] = {}


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of an operator that has none."""


def register_op(name: str, *, attrs: type = NoAttrs, num_inputs: int, type_rel: Callable,
                pattern: OpPattern, reference: Callable, input_names=None, kernel_info=None,
                doc: str = "", override: bool = False, constraints: Callable | None = None,
                optional_inputs: int = 0, example: Callable | None = None,
                static_axes: Callable | None = None) -> OpDef:
    """Register an operator.

    Args:
        name: the operator's name ("cumsum").
        attrs: a frozen dataclass whose ``__post_init__`` validates the attributes.
        num_inputs: how many tensors it takes.
        type_rel: (input types, attrs) -> output type or tuple of output types.
        pattern: an :class:`OpPattern`.
        reference: NumPy reference, ``reference(*arrays, attrs) -> array or tuple``.
        input_names: names of the inputs (default x0, x1...).
        constraints: ``(input_types, attrs) -> [Constraint]``, size rules to check when the
            sizes are known (at compile time, or in the generated dispatcher).
        kernel_info: facts the shared machinery reads; ``storage_dtypes`` lists dtypes the
            kernels only load, store or convert (never compute in), so a device without
            arithmetic in them still runs the operator.
        optional_inputs: how many trailing inputs may be left out.
        example: ``() -> (input_types, attrs)``, a typical call that ``gpucg ops`` shows.
        static_axes: ``attrs -> (axes, axes, ...)``, per input the axes that eager calls
            compile as constants (the type relation needs them constant).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise OpError(f"operator name={describe(name)} must be an identifier")
    if name in _OPS and not override:
        raise OpError(f"operator {name!r} is already registered; pass override=True")
    if not dataclasses.is_dataclass(attrs):
        raise OpError(f"{name}: attrs must be a dataclass, got {describe(attrs)}")
    names = tuple(input_names or (f"x{i}" for i in range(num_inputs)))
    op = OpDef(name, attrs, num_inputs, type_rel, OpPattern(pattern), reference, names,
               GenericFunc(f"{name}_strategy"), dict(kernel_info or {}), doc, constraints,
               optional_inputs, example, static_axes)
    _OPS[name] = op
    return op


def get_op(name: str) -> OpDef:
    """The registered operator, or OpError listing the known ones."""
    if name not in _OPS:
        _load_builtin_ops()
    if name not in _OPS:
        raise OpError(f"unknown operator {name!r}; known: {', '.join(sorted(_OPS))}")
    return _OPS[name]


def list_ops() -> list[str]:
    _load_builtin_ops()
    return sorted(_OPS)


def _load_builtin_ops() -> None:
    from . import ops  # noqa: F401  (registers the built-in operators)


def register_strategy(op_name: str, keys, func: Callable | None = None, override: bool = False):
    """Register a strategy function ``(attrs, input_types, out_types, target) -> Strategy``
    for target keys; usable as a decorator."""
    return get_op(op_name).strategy.register(keys, func, override=override)


def register_schedule(op_name: str, keys, func: Callable | None = None, override: bool = False):
    """Register a custom strategy for an operator (TVM's register_schedule): same as
    :func:`register_strategy`."""
    return register_strategy(op_name, keys, func, override)


def _register_generic(op_name: str, kind: str, override: bool) -> None:
    from .strategies import generic

    op = get_op(op_name)
    gpu, cpu = generic.make_strategies(op_name, kind)
    op.strategy.register(["gpu"], gpu, override=override)
    op.strategy.register(["cpu"], cpu, override=override)


def register_injective_schedule(op_name: str, override: bool = False) -> None:
    """Give an elementwise operator the shared injective kernel on every target.

    The operator's ``kernel_info["expr"]`` is a function ``(x: str, dtype: str) -> C expr``.
    """
    _register_generic(op_name, "injective", override)


def register_broadcast_schedule(op_name: str, override: bool = False) -> None:
    """Give a binary operator the shared NumPy-broadcasting kernel on every target.

    The operator's ``kernel_info["expr"]`` is ``(a: str, b: str, dtype: str) -> C expr``.
    """
    _register_generic(op_name, "broadcast", override)


def register_reduce_schedule(op_name: str, override: bool = False) -> None:
    """Give a one-axis reduction the shared reduce kernel on every target.

    The operator's ``kernel_info`` holds ``combine`` ``(a, b) -> C expr`` and ``identity``
    (a C literal); its attrs have ``axis``.
    """
    _register_generic(op_name, "reduce", override)
