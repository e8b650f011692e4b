"""A workload: one operator call to tune (its signature, attributes, target), and its buckets."""

from __future__ import annotations

import dataclasses
import itertools

from ..errors import InputError
from ..op import get_op
from ..shape import TensorType
from ..target import resolve
from ..version import __version__
from ..records.keys import concrete, device_identity, signature, symbols_in_order, template_hash
from ..records.store import Record, attrs_key


def _impl_name(name: str, target) -> str:
    return name if "." in name else f"{name}.{target.kind}"


class Workload:
    """An operator call to tune: the op, its input types (symbolic or not), attrs, target.

    Args:
        op: the operator's name.
        input_types: one ``gpucg.tensor`` per input.
        target: a target string or Target (None: the default).
        sizes: symbol name -> the sizes to tune it at (the buckets); needed for every symbol.
        attrs: the operator's attributes.
    """

    def __init__(self, op: str, input_types, target=None, sizes=None, **attrs):
        self.op = get_op(op)
        self.attrs_obj = self.op.make_attrs(**attrs)
        self.attrs = dataclasses.asdict(self.attrs_obj)
        self.input_types = tuple(input_types)
        for i, t in enumerate(self.input_types):
            if not isinstance(t, TensorType):
                raise InputError(f"input {i} of {op}={t!r} must be a gpucg.tensor(...) or an array")
        self.op.infer(self.input_types, self.attrs_obj)  # bad shapes fail here, not in a worker
        self.target = resolve(target)
        self.inputs, self.names = signature(self.input_types)
        self.symbols = symbols_in_order(self.input_types)
        self.buckets = self._buckets(sizes or {})

    def _buckets(self, sizes: dict) -> list[dict]:
        """Every combination of the given sizes, as symbol -> value (one empty bucket when
        the shapes are constant)."""
        by_name = {s.name: s for s in self.symbols}
        given = {}
        for name, values in sizes.items():
            name = getattr(name, "name", name)
            if name not in by_name:
                raise InputError(f"sizes names {name!r}, which is no symbol of the input shapes; "
                                 f"symbols: {', '.join(by_name) or 'none'}")
            vals = [values] if isinstance(values, int) else list(values)
            if not vals or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in vals):
                raise InputError(f"sizes[{name!r}]={values!r} must be positive ints")
            given[by_name[name]] = sorted(set(vals))
        missing = [s.name for s in self.symbols if s not in given]
        if missing:
            raise InputError(f"the input shapes have symbol(s) {', '.join(missing)}: give the "
                             f"sizes to tune at, e.g. sizes={{{missing[0]!r}: [64, 4096]}} "
                             f"(--size {missing[0]}=64,4096)")
        syms = list(given)
        return [dict(zip(syms, combo)) for combo in itertools.product(*(given[s] for s in syms))]

    def bucket_key(self, bucket: dict) -> tuple:
        """A bucket as a record stores it: ((canonical symbol, value), ...)."""
        return tuple(sorted((self.names[s], int(v)) for s, v in bucket.items()))

    def describe(self, bucket: dict) -> str:
        return ", ".join(f"{s.name}={v}" for s, v in bucket.items()) or "constant shapes"

    def concrete(self, bucket: dict) -> tuple:
        return concrete(self.input_types, bucket)

    def strategy(self, bucket: dict):
        """(implementations that apply at this bucket, in strategy order; the one selection
        picks without records)."""
        from ..strategy import select

        types = self.concrete(bucket)
        outs = self.op.infer(types, self.attrs_obj)
        strategy = self.op.strategy(self.attrs_obj, types, outs, target=self.target)
        sel = select(self.op.name, strategy, types, outs, self.attrs, self.target, None)
        alive = [i for i in strategy.implementations
                 if i.condition is None or i.condition.decide() is not False]
        return alive, sel.choices[0]

    def record(self, impl, config, cost=None, bucket=None, **fields) -> Record:
        """A record of this workload for an implementation (an Implementation, or its name,
        looked up at the bucket) on the device here."""
        bucket = bucket or (self.buckets[0] if self.buckets else {})
        if isinstance(impl, str):
            alive, _ = self.strategy(bucket)
            name = _impl_name(impl, self.target)
            found = [i for i in alive if i.name in (name, impl)]
            if not found:
                raise InputError(f"{self.op.name}: no implementation {impl!r} applies here; "
                                 f"allowed: {', '.join(i.name for i in alive)}")
            impl = found[0]
        ident = device_identity(self.target.backend) or ("", "")
        return Record(op=self.op.name, attrs=attrs_key(self.attrs), inputs=self.inputs,
                      impl=impl.name, config=dict(config), bucket=self.bucket_key(bucket),
                      target=self.target.kind, device=ident[0], driver=ident[1],
                      gpucg=__version__, hash=template_hash(impl), cost=cost, **fields)


def make_record(op: str, input_types, impl: str, config: dict, cost: float, target=None,
                sizes=None, **attrs) -> Record:
    """A record of a measurement made elsewhere (tests, docs, imports), keyed for the device
    here: ``make_record("cumsum", [t], "scan_rows", {"wg": 128, "items": 4}, 1e-5, axis=1)``.
    With symbolic shapes, ``sizes`` gives the one bucket it was measured at."""
    w = Workload(op, input_types, target, sizes, **attrs)
    if len(w.buckets) != 1:
        raise InputError("make_record: sizes must give one value per symbol")
    return w.record(impl, config, cost, w.buckets[0])
