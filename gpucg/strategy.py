"""Strategies and selection: which implementations a call is offered, and which one runs.

A strategy function offers declared implementations (gpucg.implementation) for one call with
:meth:`Strategy.add` (a plevel, a condition over the shapes, a config space, fixed template
parameters) or excludes
them with a reason (:meth:`Strategy.exclude`); :func:`select` chooses among what is offered.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass
from typing import Mapping

import sympy

from .records import apply as _tuned
from .space import Config, ConfigSpace
from .condition import SpecializedCondition
from .errors import GpucgError, InputError, StrategyError
from .implementation import Excluded, ImplDecl, Implementation, _deprecated_params
from .target import Target

log = logging.getLogger("gpucg.select")


class Strategy:
    """The implementations of an operator for one call signature and target."""

    def __init__(self, target=None):
        self.target = target
        self.implementations: list[Implementation] = []
        self.excluded: list[Excluded] = []
        #: every name offered or excluded, in the order the strategy named them
        self.order: list[str] = []

    def _name(self, decl: ImplDecl) -> str:
        if self.target is None:
            raise StrategyError("Strategy(target) is needed to add a declared implementation")
        name = f"{decl.name}.{self.target.kind}"
        if any(i.name == name for i in self.implementations + self.excluded):
            raise StrategyError(f"implementation {name!r} added twice")
        return name

    def add(self, decl: ImplDecl, plevel: int, *, condition=None, space: ConfigSpace | None = None,
            fixed: Mapping | None = None, info=None, options: tuple = (),
            needs=None, params: Mapping | None = None) -> Implementation:
        """Offer a declared implementation for this call (``needs``: see Implementation;
        ``params``: the deprecated name of ``fixed``)."""
        if params is not None:
            fixed = _deprecated_params("Strategy.add", fixed, params)
        impl = Implementation(self._name(decl), plevel, decl.run, decl.kernels, condition,
                              space if space is not None else ConfigSpace(), fixed or {}, info,
                              options, needs, decl.strided, decl.views, decl.numerics)
        self.implementations.append(impl)
        self.order.append(impl.name)
        return impl

    def exclude(self, decl: ImplDecl, plevel: int, reason: str) -> Excluded:
        """Record that a declared implementation cannot run this call, and why."""
        out = Excluded(self._name(decl), plevel, reason)
        self.excluded.append(out)
        self.order.append(out.name)
        return out

    def add_implementation(self, impl: Implementation | None = None, **kwargs) -> Implementation:
        """Add a ready-made implementation (an object, or the keyword arguments of one)."""
        impl = impl if impl is not None else Implementation(**kwargs)
        if any(i.name == impl.name for i in self.implementations + self.excluded):
            raise StrategyError(f"implementation {impl.name!r} added twice")
        self.implementations.append(impl)
        self.order.append(impl.name)
        return impl

    def validate(self, symbols) -> None:
        """Check conditions mention only input symbols, and that a fallback exists."""
        if not self.implementations:
            why = "; ".join(f"{e.name}: {e.reason}" for e in self.excluded)
            raise StrategyError("strategy has no implementation" + (f" ({why})" if why else ""))
        for impl in self.implementations:
            if impl.condition is not None:
                SpecializedCondition(impl.condition.expr, allowed=symbols)
        if all(i.condition is not None and i.condition.decide() is not True
               for i in self.implementations):
            names = ", ".join(i.name for i in self.implementations)
            raise StrategyError(
                f"strategy ({names}) has no unconditioned implementation: every implementation "
                "could be excluded for some shape; add a fallback with no condition")

    def offered(self) -> list:
        """Every implementation and exclusion, in the order the strategy named them."""
        by_name = {i.name: i for i in self.implementations + self.excluded}
        return [by_name[n] for n in self.order if n in by_name] + \
            [i for i in self.implementations if i.name not in self.order]

    def find(self, name: str):
        """The implementation (or exclusion) named ``name``, with or without ".<target kind>"."""
        for impl in self.implementations + self.excluded:
            if name in (impl.name, impl.name.rsplit(".", 1)[0]):
                return impl
        return None


def only(decl: ImplDecl, plevel: int = 10, info=None):
    """A strategy function that offers one implementation, always (a host target's); ``info``
    is handed to its launch function as ``ctx.info``."""
    def strategy(attrs, inputs, outputs, target):
        s = Strategy(target)
        s.add(decl, plevel, info=info)
        return s
    return strategy


# -- forcing an implementation, and size rules ---------------------------------------------------

def force(strategy: Strategy, name: str, op_name: str, target, config=None):
    """A strategy of the one implementation ``name``, and the size checks it brings.

    Its condition, unless the shapes decide it true, becomes a check of the dispatcher; one the
    shapes decide false, or an exclusion, is an InputError here. ``config`` (a mapping of the
    implementation's knobs) replaces its default config; tuning records then do not apply.
    """
    from .op import Constraint

    chosen = strategy.find(name)
    if chosen is None:
        names = [i.name for i in strategy.implementations + strategy.excluded]
        raise InputError(f"{op_name}: impl={name!r} is not an implementation on {target}; "
                         f"allowed: {', '.join(names)}")
    if isinstance(chosen, Excluded):
        raise InputError(f"{op_name}: impl={name!r} does not apply to this call: {chosen.reason}")
    check = []
    if chosen.condition is not None:
        verdict = chosen.condition.decide()
        if verdict is False:
            raise InputError(f"{op_name}: impl={name!r} does not apply to these shapes: "
                             f"{chosen.describe_condition()}")
        if verdict is None:
            check = [Constraint(chosen.condition.expr,
                                f"{op_name}: the forced implementation {chosen.name} needs "
                                f"{sympy.sstr(chosen.condition.expr)}, false for these sizes")]
    changes: dict = {"condition": None}
    if config is not None:
        try:
            pinned = chosen.space.validate(config)
        except InputError as exc:
            raise InputError(f"{op_name}: config={dict(config)!r} for {chosen.name}: {exc}") from None
        space = chosen.space
        changes["space"] = ConfigSpace(space.knobs, dict(pinned), space.constraint, space.added)
    forced = Strategy(strategy.target)
    forced.add_implementation(dataclasses.replace(chosen, **changes))
    return forced, check


def size_checks(op, input_types, attrs) -> list:
    """The op's constraints that the shapes leave open; raises for one they decide false."""
    from .shape import evaluate

    if op.constraints is None:
        return []
    open_ = []
    for c in op.constraints(tuple(input_types), attrs):
        decided = SpecializedCondition(c.ok).decide()
        if decided is False:
            values = [evaluate(v, {}) if not sympy.sympify(v).free_symbols else v for v in c.values]
            raise InputError(c.message.format(*values))
        if decided is None:
            open_.append(c)
    return open_


# -- selection --------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """One implementation as selection saw it."""

    name: str
    plevel: int
    condition: str
    verdict: str
    reason: str
    #: where its results differ from the reference by construction (Implementation.numerics)
    numerics: str = ""


@dataclass
class Choice:
    """An implementation chosen to run (under ``condition`` when dispatching)."""

    impl: Implementation
    config: Config
    condition: SpecializedCondition | None
    #: where the choice comes from when a tuning record made it (shown by explain and dump)
    note: str = ""


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
    #: tuning records: where they were read, and which were ignored and why
    records: str = ""
    ignored: list = dataclasses.field(default_factory=list)
    #: the target's limits and instructions selection read (gpucg.arch.Capabilities.describe)
    limits: str = ""

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.input_types))
        outs = ", ".join(map(str, self.output_types))
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        head = [f"{self.op}({ins}; {attrs}) -> {outs} on {self.target}",
                "dispatch at run time" if self.dynamic else "decided at compile time"]
        if self.limits:
            head.append(f"limits: {self.limits}")
        w = max(len(c.name) for c in self.candidates)
        rows = [f"  {c.name:<{w}}  plevel {c.plevel:>3}  {c.verdict:<10} if {c.condition}: {c.reason}"
                for c in self.candidates]
        rows += [f"  numerics of {c.name}: {c.numerics}" for c in self.candidates
                 if c.numerics and c.verdict.startswith(("selected", "dispatch", "tuned"))]
        tuned = [(i, c) for i, c in enumerate(self.choices) if c.note]
        if tuned:
            rows.append(f"tuned branches (records: {self.records}):")
            for i, c in tuned:
                when = f"if {c.condition}" if c.condition is not None else "always"
                rows.append(f"  {i + 1}. {when}: {c.impl.name} config {c.config.short()} <- {c.note}")
        if self.ignored:
            rows.append(f"ignored tuning records ({self.records}):")
            rows += [f"  {line}" for line in self.ignored]
        return "\n".join(head + rows)


def _apply_records(plan, choices, cands, dynamic, alive):
    """Tuned branches first, then the plevel choices as the fallback (unless a tuned branch
    always applies). Returns (choices, dynamic)."""
    branches = [Choice(b.impl, b.config, b.condition, b.note) for b in plan.branches]
    if plan.complete and len(branches) == 1:
        best = branches[0]
        cands[best.impl.name].verdict = "selected"
        cands[best.impl.name].reason = f"best tuning record ({best.note})"
        for other in alive:
            if other is not best.impl:
                cands[other.name].verdict = "lost"
                cands[other.name].reason = f"tuning record prefers {best.impl.name}"
        return branches, False
    used = {b.impl.name for b in branches}
    for name in used:
        cands[name].verdict = "tuned"
        cands[name].reason = "runs in the tuned branches below" + (
            "" if plan.complete else "; " + cands[name].reason)
    if plan.complete:
        for other in alive:
            if other.name not in used:
                cands[other.name].verdict = "lost"
                cands[other.name].reason = "the tuned branches cover every size"
        return branches, True
    return branches + choices, True


def _guarded(choices: list, cands: dict) -> list:
    """Each choice whose config needs something of the arguments (Implementation.needs: an
    aligned address for its vector loads) that the shapes do not decide: that config under
    the need, then the config that needs nothing (the dispatcher checks it at run time)."""
    out = []
    for c in choices:
        got = c.impl.needs(c.config) if c.impl.needs is not None else None
        if not got:
            out.append(c)
            continue
        need, knobs = got
        verdict = SpecializedCondition(need).decide()
        if verdict is True:
            out.append(c)
            continue
        plain = c.impl.space.validate({**dict(c.config), **knobs})
        cand = cands.get(c.impl.name)
        if verdict is None:
            cond = need if c.condition is None else sympy.And(c.condition.expr, need)
            out.append(dataclasses.replace(c, condition=SpecializedCondition(cond)))
            if cand is not None:
                cand.reason += (f"; config {c.config.short()} if {sympy.sstr(need)} (checked at "
                                f"run time), else {plain.short()}")
        elif cand is not None:
            cand.reason += f"; config {plain.short()}: {sympy.sstr(need)} is false"
        out.append(dataclasses.replace(c, config=plain))
    return out


def _limits(target) -> str:
    """The capability line explain prints: the limits and instructions strategies read."""
    try:
        caps = Target(target).capabilities
    except GpucgError:
        return ""
    return caps.describe() if caps.smem_per_block_optin else ""


def select(op: str, strategy: Strategy, input_types, output_types, attrs: dict, target,
           records=None) -> Selection:
    """Choose among a strategy's implementations for these input types.

    Implementations whose condition is provably false are dropped. Tuning records that apply
    (``records``: a gpucg.autotune.RecordList; see gpucg.records.apply) come first: for
    constant shapes the best record decides; for symbolic ones each tuned size bucket becomes a
    branch of the dispatcher. Otherwise, if every remaining condition is decided by the shapes,
    the highest plevel wins; equal plevels are broken by registration order, with a warning.
    Otherwise the result lists, in plevel order, the implementations a generated dispatcher
    tries at run time, ending with one that always applies.
    """
    symbols = set().union(*(t.symbols for t in input_types)) if input_types else set()
    strategy.validate(symbols)
    impls = strategy.implementations
    decided = {i.name: (True if i.condition is None else i.condition.decide()) for i in impls}
    cands = {i.name: Candidate(i.name, i.plevel, i.describe_condition(), "", "", i.numerics)
             for i in impls}
    alive = []
    for impl in impls:
        if decided[impl.name] is False:
            cands[impl.name].verdict = "excluded"
            cands[impl.name].reason = "condition is false for these shapes"
        else:
            alive.append(impl)
    for ex in strategy.excluded:
        cands[ex.name] = Candidate(ex.name, ex.plevel, "never", "excluded", ex.reason)
    ordered = sorted(alive, key=lambda i: -i.plevel)  # stable: registration order on ties
    plan = _tuned.plan(op, alive, attrs, input_types, target, records) \
        if records is not None else None
    choices: list[Choice] = []
    dynamic = False
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
        choices.append(Choice(impl, impl.space.default, None if always else impl.condition))
        if always and len(choices) == 1:
            cands[impl.name].verdict = "selected"
            cands[impl.name].reason = ("highest plevel" if pos == 0 else
                                       "highest plevel among those that apply")
        elif always:
            cands[impl.name].verdict = f"dispatch {len(choices)}"
            cands[impl.name].reason = "fallback: applies when no earlier condition holds"
        else:
            dynamic = True
            cands[impl.name].verdict = f"dispatch {len(choices)}"
            cands[impl.name].reason = "condition checked at run time on the actual sizes"
    if not dynamic and len(ordered) > 1 and ordered[0].plevel == ordered[1].plevel \
            and not (plan is not None and plan.complete):
        warnings.warn(
            f"{op} on {target}: implementations {ordered[0].name} and {ordered[1].name} "
            f"tie at plevel {ordered[0].plevel}; choosing {ordered[0].name} by registration order",
            stacklevel=3)
    if not choices or choices[-1].condition is not None:
        raise StrategyError(f"{op} on {target}: no implementation applies to "
                            f"{', '.join(map(str, input_types))}")
    if plan is not None and plan.branches:
        choices, dynamic = _apply_records(plan, choices, cands, dynamic, alive)
    choices = _guarded(choices, cands)
    dynamic = dynamic or any(c.condition is not None for c in choices)
    sel = Selection(op, str(target), tuple(input_types), tuple(output_types), dict(attrs),
                    choices, [cands[n] for n in strategy.order], dynamic,
                    plan.source if plan is not None else "",
                    plan.ignored if plan is not None else [],
                    _limits(target))
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
