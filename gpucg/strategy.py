"""Implementations, strategies, and selection among them."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Callable

import sympy

from .autotune.records import workload_key
from .autotune.space import Config, ConfigSpace
from .condition import SpecializedCondition
from .errors import InputError, StrategyError

log = logging.getLogger("gpucg.select")


@dataclass(frozen=True, eq=False)
class Implementation:
    """One way to compute an operator.

    Attributes:
        name: "<impl>.<target key>", e.g. "scan_rows.cuda".
        plevel: priority; the highest applicable one wins when no tuning record decides.
        condition: a :class:`SpecializedCondition`, or None for "always applies".
        space: the config space of tunable knobs; its default is the default config.
        kernels: ``config -> {key: KernelSpec}`` for kernel implementations, None for host code.
        run: ``ctx -> None``: launches the kernels (or computes on the host) into ctx.outputs.
        options: compiler options.
        guard: set when static requirements fail: them in words (e.g. "3x3 kernel, stride 1"),
            shown by the reports; the strategy then passes a condition of ``sympy.false``.
    """

    name: str
    plevel: int
    run: Callable
    kernels: Callable | None = None
    condition: SpecializedCondition | None = None
    space: ConfigSpace = field(default_factory=ConfigSpace)
    options: tuple = ()
    guard: str = ""

    def describe_condition(self) -> str:
        """The condition as the reports print it, with its verdict when the shapes decide it."""
        if self.condition is None:
            return "always"
        if self.condition.expr is sympy.true:
            return "always (for these shapes)"
        if self.condition.expr is sympy.false:
            return f"never: needs {self.guard}" if self.guard else "never (for these shapes)"
        decided = self.condition.decide()
        text = str(self.condition.expr)
        return text + (" (true here)" if decided is True else " (false here)" if decided is False else "")

    def __post_init__(self):
        if not isinstance(self.plevel, int) or isinstance(self.plevel, bool):
            raise StrategyError(f"{self.name}: plevel={self.plevel!r} must be an int")
        if self.condition is not None and not isinstance(self.condition, SpecializedCondition):
            object.__setattr__(self, "condition", SpecializedCondition(self.condition))


class Strategy:
    """The implementations of an operator for one call signature and target."""

    def __init__(self):
        self.implementations: list[Implementation] = []

    def add_implementation(self, impl: Implementation | None = None, **kwargs) -> Implementation:
        """Add an implementation (an object, or the keyword arguments of one)."""
        impl = impl if impl is not None else Implementation(**kwargs)
        if any(i.name == impl.name for i in self.implementations):
            raise StrategyError(f"implementation {impl.name!r} added twice")
        self.implementations.append(impl)
        return impl

    def validate(self, symbols) -> None:
        """Check conditions mention only input symbols, and that a fallback exists."""
        if not self.implementations:
            raise StrategyError("strategy has no implementation")
        for impl in self.implementations:
            if impl.condition is not None:
                SpecializedCondition(impl.condition.expr, allowed=symbols)
        if all(i.condition is not None and i.condition.decide() is not True
               for i in self.implementations):
            names = ", ".join(i.name for i in self.implementations)
            raise StrategyError(
                f"strategy ({names}) has no unconditioned implementation: every implementation "
                "could be excluded for some shape; add a fallback with no condition")


@dataclass
class Candidate:
    """One implementation as selection saw it."""

    name: str
    plevel: int
    condition: str
    verdict: str
    reason: str


@dataclass
class Choice:
    """An implementation chosen to run (under ``condition`` when dispatching)."""

    impl: Implementation
    config: Config
    condition: SpecializedCondition | None


@dataclass
class Selection:
    """What selection decided for one call signature."""

    op: str
    target: str
    input_types: tuple
    output_types: tuple
    attrs: dict
    choices: list[Choice]
    candidates: list[Candidate]
    dynamic: bool

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.input_types))
        outs = ", ".join(map(str, self.output_types))
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        head = [f"{self.op}({ins}; {attrs}) -> {outs} on {self.target}",
                "dispatch at run time" if self.dynamic else "decided at compile time"]
        w = max(len(c.name) for c in self.candidates)
        rows = [f"  {c.name:<{w}}  plevel {c.plevel:>3}  {c.verdict:<10} if {c.condition}: {c.reason}"
                for c in self.candidates]
        return "\n".join(head + rows)


def select(op: str, strategy: Strategy, input_types, output_types, attrs: dict, target,
           records=None) -> Selection:
    """Choose among a strategy's implementations for these input types.

    Implementations whose condition is provably false are dropped. If every remaining
    condition is decided by the shapes, the best tuning record (when ``records`` is given and
    all shapes are constant) or else the highest plevel wins; equal plevels are broken by
    registration order, with a warning. Otherwise the result lists, in plevel order, the
    implementations a generated dispatcher tries at run time, ending with one that always
    applies.
    """
    symbols = set().union(*(t.symbols for t in input_types)) if input_types else set()
    strategy.validate(symbols)
    impls = strategy.implementations
    decided = {i.name: (True if i.condition is None else i.condition.decide()) for i in impls}
    cands = {i.name: Candidate(i.name, i.plevel, i.describe_condition(), "", "")
             for i in impls}
    alive = []
    for impl in impls:
        if decided[impl.name] is False:
            cands[impl.name].verdict = "excluded"
            cands[impl.name].reason = ("its guard fails for this call" if impl.guard else
                                       "condition is false for these shapes")
        else:
            alive.append(impl)
    ordered = sorted(alive, key=lambda i: -i.plevel)  # stable: registration order on ties
    static = all(t.is_static for t in input_types)
    choices: list[Choice] = []

    chosen_by_record = None
    if records is not None and static and all(decided[i.name] for i in alive):
        key = workload_key(op, attrs, input_types)
        by_name = {i.name: i for i in alive}
        recs = [r for r in records.lookup(key, target) if r.impl in by_name]
        if recs:
            best = min(recs, key=lambda r: r.cost)
            impl = by_name[best.impl]
            try:
                config = impl.space.validate(best.config)
            except InputError as exc:
                raise StrategyError(f"tuning record for {best.impl} has a bad config: {exc}") from None
            chosen_by_record = impl
            choices = [Choice(impl, config, None)]
            cands[impl.name].verdict = "selected"
            cands[impl.name].reason = f"best tuning record (cost {best.cost:.3g} s, config {config.short()})"
            for other in alive:
                if other is not impl:
                    cands[other.name].verdict = "lost"
                    cands[other.name].reason = f"tuning record prefers {impl.name}"

    dynamic = False
    if chosen_by_record is None:
        for pos, impl in enumerate(ordered):
            always = decided[impl.name] is True
            if choices and choices[-1].condition is None:
                cands[impl.name].verdict = "lost"
                winner = choices[-1].impl
                if winner.plevel == impl.plevel and not dynamic:
                    cands[impl.name].reason = (f"tie at plevel {impl.plevel} broken by "
                                               f"registration order in favour of {winner.name}")
                else:
                    cands[impl.name].reason = f"lower plevel than {winner.name}, which applies"
                continue
            cond = None if always else impl.condition
            choices.append(Choice(impl, impl.space.default, cond))
            if always:
                if choices[0] is choices[-1]:
                    cands[impl.name].verdict = "selected"
                    cands[impl.name].reason = ("highest plevel" if pos == 0 else
                                               "highest plevel among those that apply")
                else:
                    cands[impl.name].verdict = f"dispatch {len(choices)}"
                    cands[impl.name].reason = "fallback: applies when no earlier condition holds"
            else:
                dynamic = True
                cands[impl.name].verdict = f"dispatch {len(choices)}"
                cands[impl.name].reason = "condition checked at run time on the actual sizes"
        if not dynamic and len(ordered) > 1 and ordered[0].plevel == ordered[1].plevel:
            warnings.warn(
                f"{op} on {target}: implementations {ordered[0].name} and {ordered[1].name} "
                f"tie at plevel {ordered[0].plevel}; choosing {ordered[0].name} by registration order",
                stacklevel=3)
    if not choices or choices[-1].condition is not None:
        raise StrategyError(f"{op} on {target}: no implementation applies to "
                            f"{', '.join(map(str, input_types))}")
    sel = Selection(op, str(target), tuple(input_types), tuple(output_types), dict(attrs),
                    choices, [cands[i.name] for i in impls], dynamic)
    if dynamic:
        log.info("%s on %s for %s: dispatching at run time among %s", op, target,
                 ", ".join(map(str, input_types)),
                 ", ".join(f"{c.impl.name} if {c.condition}" if c.condition else c.impl.name
                           for c in choices))
    else:
        c = choices[0]
        log.info("%s on %s for %s: selected %s (plevel %d, config %s): %s", op, target,
                 ", ".join(map(str, input_types)), c.impl.name, c.impl.plevel,
                 c.config.short(), cands[c.impl.name].reason)
    return sel
