"""The operator registry: attributes, type relations, patterns, strategies, references.

The registry knows no operator: ``gpucg.builtin`` registers the built-in families, and a user
registers more with :func:`register_op` and :func:`register_strategy`.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
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


@dataclass(frozen=True)
class KernelInfo:
    """What the shared schedules (gpucg.strategies.generic) and the runtime read of an operator.

    Attributes:
        storage_dtypes: dtypes the kernels only load, store or convert (never compute in), so
            a device without arithmetic in them still runs the operator.
        expr: elementwise operators: ``(operand C expressions..., C type) -> C expression``.
        combine: reductions: ``(accumulator, value) -> C expression`` of the combined value.
        identity: reductions: the C literal the accumulator starts from.
        valid_samples: ``(arrays, attrs, rng) -> arrays``: the random inputs the checking
            tools draw (gpucg.samples.sample_inputs: Oclgrind, the tuner, ``gpucg run``) made
            valid for the operator, such as indices into a table brought into its range.
    """

    storage_dtypes: tuple = ()
    expr: Callable | None = None
    combine: Callable | None = None
    identity: str | None = None
    valid_samples: Callable | None = None


@dataclass(frozen=True)
class Case:
    """A representative call of an operator, with constant shapes.

    The checks that run every implementation use them: "bench" cases are the benchmark's
    sizes (resources and occupancy, memory traffic, tuning), "small" cases awkward small sizes
    (1, primes, just over a tile) that a simulator (Oclgrind) runs in seconds.
    """

    inputs: tuple
    attrs: dict = field(default_factory=dict)
    kind: str = "bench"
    label: str = ""
    #: ``{implementation: reason}``: implementations the Oclgrind check does not simulate on
    #: this case (they must be simulated on another case of the operator)
    not_simulated: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in ("bench", "small"):
            raise OpError(f"Case kind={self.kind!r} must be 'bench' or 'small'")


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
    #: what the shared schedules and the runtime read (see :class:`KernelInfo`)
    kernel_info: KernelInfo = field(default_factory=KernelInfo)
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
    #: the module that registered the operator ("gpucg.ops.scan")
    module: str = ""
    #: ``() -> [Case]``: representative calls (see :class:`Case`)
    cases: Callable | None = None
    #: ``(ctx: gpucg.autodiff.GradContext) -> tuple of input gradients`` (see register_gradient)
    gradient: Callable | None = None
    #: ((output, input), ...): outputs that are inputs written in place
    inplace: tuple = ()
    #: ``(arrays, outputs) -> bytes``: the least global traffic of a call, where it is not
    #: every input read and every output written once (a gather reads a part of its input)
    compulsory: Callable | None = None

    def representative(self, kind: str | None = None) -> list[Case]:
        """The operator's representative calls, of one kind or all."""
        cases = list(self.cases()) if self.cases is not None else []
        return [c for c in cases if kind is None or c.kind == kind]

    def make_attrs(self, **kwargs):
        """Validated attributes from keyword arguments; unknown names are an error."""
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
                reference: Callable, pattern: OpPattern = OpPattern.OPAQUE, input_names=None, kernel_info=None,
                doc: str = "", override: bool = False, constraints: Callable | None = None,
                optional_inputs: int = 0, example: Callable | None = None,
                static_axes: Callable | None = None, cases: Callable | None = None,
                inplace: dict | None = None,
                compulsory: Callable | None = None) -> OpDef:
    """Register an operator.

    Args:
        name: the operator's name ("cumsum").
        attrs: a frozen dataclass whose ``__post_init__`` validates the attributes.
        num_inputs: how many tensors it takes.
        type_rel: (input types, attrs) -> output type or tuple of output types.
        reference: NumPy reference, ``reference(*arrays, attrs) -> array or tuple``.
        pattern: an :class:`OpPattern`, how the outputs depend on the inputs. Descriptive:
            ``gpucg ops`` prints it and nothing selects by it; OPAQUE (nothing claimed) unless
            given.
        input_names: names of the inputs (default x0, x1...).
        constraints: ``(input_types, attrs) -> [Constraint]``, size rules to check when the
            sizes are known (at compile time, or in the generated dispatcher).
        kernel_info: a :class:`KernelInfo`: facts the shared machinery reads.
        optional_inputs: how many trailing inputs may be left out.
        example: ``() -> (input_types, attrs)``, a typical call that ``gpucg ops`` shows.
        static_axes: ``attrs -> (axes, axes, ...)``, per input the axes that eager calls
            compile as constants (the type relation needs them constant).
        cases: ``() -> [Case]``: representative calls for the checks that run every
            implementation (resources, Oclgrind, memory traffic, tuning benchmarks).
        inplace: ``{output: input}``: outputs that are inputs written in place (the caller's
            arrays are the results, on every target; gpucg.compiled writes NumPy ones back).
        compulsory: ``(arrays, outputs) -> bytes``: the least global memory traffic of a call
            (the traffic checks' yardstick) where it is less than every input and output once.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise OpError(f"operator name={describe(name)} must be an identifier")
    if name in _OPS and not override:
        raise OpError(f"operator {name!r} is already registered; pass override=True")
    if not dataclasses.is_dataclass(attrs):
        raise OpError(f"{name}: attrs must be a dataclass, got {describe(attrs)}")
    names = tuple(input_names or (f"x{i}" for i in range(num_inputs)))
    if kernel_info is not None and not isinstance(kernel_info, KernelInfo):
        raise OpError(f"{name}: kernel_info={describe(kernel_info)} must be a gpucg.KernelInfo")
    module = sys._getframe(1).f_globals.get("__name__", "")
    op = OpDef(name, attrs, num_inputs, type_rel, OpPattern(pattern), reference, names,
               GenericFunc(f"{name}_strategy"), kernel_info or KernelInfo(), doc, constraints,
               optional_inputs, example, static_axes, module, cases, None,
               tuple(sorted((inplace or {}).items())), compulsory)
    _OPS[name] = op
    return op


def added_attr(default, before):
    """A field for an attribute added after tuning records were written: a record that does
    not name it was measured with ``before`` (its behaviour before the attribute existed),
    and :func:`record_attrs` fills that in, so old records keep matching."""
    return field(default=default, metadata={"before": before})


def record_attrs(op_name: str, attrs: dict) -> dict:
    """A stored record's attributes with every attribute added since it was written filled
    in (see :func:`added_attr`); an unknown operator's unchanged."""
    op = _OPS.get(op_name)
    if op is None or not dataclasses.is_dataclass(op.attrs):
        return attrs
    added = {f.name: f.metadata["before"] for f in dataclasses.fields(op.attrs)
             if "before" in f.metadata and f.name not in attrs}
    return {**attrs, **added} if added else attrs


def get_op(name: str) -> OpDef:
    """The registered operator, or OpError listing the known ones."""
    op = _OPS.get(name)
    if op is None:
        raise OpError(f"unknown operator {name!r}; known: {', '.join(sorted(_OPS))}")
    return op


def list_ops() -> list[str]:
    """The names of every registered operator, sorted."""
    return sorted(_OPS)


def register_gradient(op_name: str, func: Callable | None = None, override: bool = False):
    """Register the gradient of an operator, written with registered operators (as Relay's
    gradient registration); usable as a decorator.

    ``func(ctx) -> tuple`` gets a :class:`gpucg.autodiff.GradContext` (the inputs, the output
    gradient, the attributes, the target, the forward output on demand) and returns one
    gradient per input (None where an input has none).
    """
    def _do(f: Callable) -> Callable:
        op = get_op(op_name)
        if op.gradient is not None and not override:
            raise OpError(f"{op_name} already has a gradient; pass override=True")
        op.gradient = f
        return f
    return _do(func) if func is not None else _do


def register_strategy(op_name: str, keys, func: Callable | None = None, override: bool = False):
    """Register a strategy function ``(attrs, input_types, out_types, target) -> Strategy``
    for target keys; usable as a decorator."""
    return get_op(op_name).strategy.register(keys, func, override=override)


def register_strategies(table: dict, override: bool = False) -> None:
    """Register a family's strategies on every target at once.

    ``table`` maps operator name -> {target key: strategy function}, as each built-in
    strategies module's ``STRATEGIES``; an unknown operator or a key registered twice is an
    OpError or StrategyError naming it.
    """
    for op_name, by_key in table.items():
        op = get_op(op_name)
        for key, func in by_key.items():
            op.strategy.register([key], func, override=override)
