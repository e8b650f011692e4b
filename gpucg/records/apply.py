"""Applying tuning records in selection: the branches tuned records add to a dispatcher.

A record applies to a compile when its signature unifies with the compile's input types (the
same dtypes and ranks; a constant in the record becomes an equality the sizes must meet), it
was measured on this device with this driver, and its implementation's templates still hash
the same. Records that match the workload but fail one of the last two are ignored, and the
reason is reported by ``explain``.

Buckets: the records of one signature were measured at sizes (buckets) b1 < b2 < ... of each
symbol. A size uses the nearest tuned bucket at or below it; a size below the smallest bucket
uses the smallest. So for buckets 1, 64, 4096 the branches are ``n < 64``, ``64 <= n < 4096``
and ``n >= 4096``. Within a bucket the implementations are tried in order of their tuned
cost, each under its own condition; the usual plevel order follows as the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy

from ..condition import SpecializedCondition
from ..errors import InputError
from .keys import device_identity, template_hash, unify
from .store import Record, attrs_key


@dataclass
class Branch:
    """One tuned branch: run ``impl`` with ``config`` when ``condition`` holds (None: always)."""

    impl: object
    config: object
    condition: SpecializedCondition | None
    record: Record
    note: str


@dataclass
class Plan:
    """What the records add to a selection: branches, and why other records were ignored."""

    branches: list = field(default_factory=list)
    ignored: list = field(default_factory=list)
    source: str = ""

    @property
    def complete(self) -> bool:
        """True when the last branch always applies (no fallback is needed)."""
        return bool(self.branches) and self.branches[-1].condition is None


#: a tie never spans more than this fraction of the best cost, however noisy its timing
TIE_CAP = 0.05


def pick_best(items, cost, spread, order):
    """The best item: lowest cost, where costs within the measured noise of the lowest (its
    interquartile range, at most TIE_CAP of its cost) are tied and the tie goes to the lowest
    ``order``, so a re-run does not flip the choice on noise."""
    items = list(items)
    if not items:
        return None
    low = min(items, key=lambda it: (cost(it), order(it)))
    noise = min(spread(low), TIE_CAP * cost(low))
    return min((it for it in items if cost(it) - cost(low) <= noise), key=order)


def rank(items, cost, spread, order) -> list:
    """Items best first: repeatedly the :func:`pick_best` of those left."""
    left, out = list(items), []
    while left:
        best = pick_best(left, cost, spread, order)
        out.append(best)
        left.remove(best)
    return out


class ConfigOrder:
    """Position of a config in its implementation's space (the tie-break order)."""

    def __init__(self):
        self._index: dict = {}

    def __call__(self, impl, config) -> int:
        table = self._index.get(impl.name)
        if table is None:
            table = self._index[impl.name] = {tuple(sorted(c.items())): i
                                             for i, c in enumerate(impl.space)}
        return table.get(tuple(sorted(config.items())), len(table))


def _describe(record: Record) -> str:
    spread = f" +- {record.spread * 1e3:.3g}" if record.spread else ""
    return (f"record {record.source or '(in memory)'}: {record.cost * 1e3:.4g} ms{spread} "
            f"measured on {', '.join(record.shapes())}")


def _region(binding: dict, values: dict, bucket: dict) -> list:
    """The size conditions of one bucket: nearest tuned bucket at or below the size."""
    out = []
    for sym, b in bucket.items():
        e = binding.get(sym)
        if e is None:
            continue
        vs = values[sym]
        i = vs.index(b)
        if i > 0:
            out.append(sympy.Ge(e, b) if not isinstance(e, int) else sympy.sympify(e >= b))
        if i + 1 < len(vs):
            nxt = vs[i + 1]
            out.append(sympy.Lt(e, nxt) if not isinstance(e, int) else sympy.sympify(e < nxt))
    return out


_HUGE = 2 ** 62


def _intervals(binding: dict, values: dict, bucket: dict) -> dict:
    """symbol of the compile -> (lowest, highest or None) size in the bucket's region."""
    out = {}
    for sym, b in bucket.items():
        e = binding.get(sym)
        if isinstance(e, sympy.Symbol):
            vs = values[sym]
            i = vs.index(b)
            out[e] = (b if i > 0 else 1, vs[i + 1] - 1 if i + 1 < len(vs) else None)
    return out


def _implied(literal, intervals: dict) -> bool:
    """True when a comparison linear in one symbol holds over that symbol's whole interval
    (its truth set is a half-line, so both ends decide it)."""
    syms = literal.free_symbols
    if len(syms) != 1 or not isinstance(literal, sympy.core.relational.Relational):
        return False
    (sym,) = syms
    if sym not in intervals:
        return False
    try:
        if sympy.Poly(literal.lhs - literal.rhs, sym).degree() > 1:
            return False
    except sympy.PolynomialError:
        return False
    lo, hi = intervals[sym]
    return all(bool(literal.subs(sym, v)) is True for v in (lo, _HUGE if hi is None else hi))


def _residual(impl, intervals: dict):
    """The clauses of the implementation's condition the bucket's region does not imply
    (None when it implies them all)."""
    if impl.condition is None:
        return None
    left = [c for c in impl.condition.clauses
            if not any(_implied(lit, intervals) for lit in c)]
    return sympy.And(*(sympy.Or(*c) for c in left)) if left else None


def plan(op: str, alive, attrs: dict, input_types, target, records) -> Plan:
    """The tuned branches for a compile, from the records that apply (see the module doc)."""
    out = Plan(source=records.name)
    recs = records.for_op(op)
    if not recs:
        return out
    akey = attrs_key(attrs)
    groups: dict = {}
    for r in recs:
        if r.attrs == akey and r.target == target.kind and r.ok:
            groups.setdefault(r.inputs, []).append(r)
    if not groups:
        return out
    ident = device_identity(target.backend)
    by_name = {i.name: i for i in alive}
    order = ConfigOrder()
    ignored: dict = {}
    matched = []
    for inputs, group in groups.items():
        u = unify(inputs, input_types)
        if u is None:
            continue
        good = []
        for r in group:
            why = _stale(r, ident, by_name, target)
            if why:
                ignored.setdefault(why, []).append(r)
            else:
                good.append(r)
        if good:
            matched.append((inputs, u, good))
    out.ignored = [f"{len(rs)} record(s) ignored ({rs[0].source or 'in memory'}"
                   f"{', ...' if len(rs) > 1 else ''}): {why}" for why, rs in ignored.items()]
    # the most specific signatures (most constant sizes) first
    matched.sort(key=lambda m: (-sum(p.isdigit() for s in m[0] for p in
                                     s.partition("[")[2].rstrip("]").split(",")), m[0]))
    for inputs, (binding, equal), good in matched:
        values: dict = {}
        for r in good:
            for sym, v in r.bucket:
                values.setdefault(sym, set()).add(v)
        values = {k: sorted(v) for k, v in values.items()}
        buckets: dict = {}
        for r in good:
            buckets.setdefault(r.bucket, []).append(r)
        grid = 1
        for vs in values.values():
            grid *= len(vs)
        # the bucket regions partition the sizes when the buckets form a full grid and this
        # signature needs no equality: then the last branch needs no condition
        covered = not equal and grid == len(buckets)
        for bucket in sorted(buckets, key=lambda b: tuple(v for _, v in b)):
            region = equal + _region(binding, values, dict(bucket))
            names = [i.name for i in alive]

            def key(r):
                return (names.index(r.impl), order(by_name[r.impl], r.config))
            # the best of the bucket as the tuner picks it, then each other implementation's
            first = pick_best(buckets[bucket], lambda r: r.cost, lambda r: r.spread, key)
            per_impl: dict = {}
            for r in buckets[bucket]:
                if r.impl != first.impl:
                    per_impl.setdefault(r.impl, []).append(r)
            others = [pick_best(rs, lambda r: r.cost, lambda r: r.spread, key)
                      for rs in per_impl.values()]
            ranked = [first] + rank(others, lambda r: r.cost, lambda r: r.spread, key)
            intervals = _intervals(binding, values, dict(bucket))
            for r in ranked:
                impl = by_name[r.impl]
                rest = _residual(impl, intervals)
                parts = list(region) + ([rest] if rest is not None else [])
                cond = SpecializedCondition(sympy.And(*parts) if parts else sympy.true)
                verdict = cond.decide()
                if verdict is False:
                    continue
                out.branches.append(Branch(impl, impl.space.validate(r.config),
                                           None if verdict else cond, r, _describe(r)))
                if verdict or rest is None:
                    break  # this branch covers the bucket: slower ones would never run
            else:
                covered = False
            if out.complete:
                return out
        if covered and out.branches:  # the last region is what the others leave
            last = out.branches[-1]
            where = f"{last.condition}: " if last.condition is not None else ""
            out.branches[-1] = replace(last, condition=None, note=f"{where}{last.note}")
            return out
    return out


def _stale(r: Record, ident, by_name: dict, target) -> str:
    """Why a record of this workload cannot be applied here ('' when it can)."""
    if ident is None:
        return (f"the {target.backend} device is not usable here, so the device the records "
                "were tuned on cannot be checked")
    if r.device != ident[0]:
        return f"tuned on device {r.device!r}, this device is {ident[0]!r}"
    if r.driver != ident[1]:
        return f"tuned with driver {r.driver!r}, this driver is {ident[1]!r}"
    impl = by_name.get(r.impl)
    if impl is None:
        return f"implementation {r.impl} does not apply to this call"
    h = template_hash(impl)
    if r.hash != h:
        return f"{r.impl}'s templates changed since tuning (hash {r.hash}, now {h})"
    try:
        impl.space.validate(r.config)
    except InputError as exc:
        return f"config no longer in {r.impl}'s space ({exc})"
    return ""
