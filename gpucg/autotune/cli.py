"""The ``gpucg tune`` and ``gpucg records`` verbs."""

from __future__ import annotations

import json
import re
from collections import defaultdict

from ..errors import InputError

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_budget(text: str) -> float:
    """``10m`` -> 600.0; ``90s``, ``1.5h``, ``45`` (seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--budget {text!r} must be a time such as 90s, 10m or 1h")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def parse_sizes(items) -> dict:
    """``["n=1,64,4096"]`` -> {"n": [1, 64, 4096]}."""
    out: dict = {}
    for text in items:
        name, sep, values = text.partition("=")
        parts = values.split(",")
        if not sep or not name.isidentifier() or not all(p.strip().isdigit() for p in parts):
            raise InputError(f"--size {text!r} must look like NAME=INT[,INT...], e.g. n=64,4096")
        out.setdefault(name, []).extend(int(p) for p in parts)
    return out


def cmd_tune(args) -> int:
    from .tuner import tune

    types = [args.parse_input(t) for t in args.input]
    attrs = dict(args.parse_attr(a) for a in args.attr)
    budget = parse_budget(args.budget) if args.budget else None
    sizes = parse_sizes(args.size)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot needs matplotlib: pip install 'gpucg[tune]'") from None
    result = tune(args.op, *types, target=args.target, trials=args.trials, search=args.search,
                  budget_s=budget, sizes=sizes or None, records=args.records, seed=args.seed,
                  workers=args.workers, progress=not args.json and not args.quiet,
                  ray=args.ray, replay=args.replay, timeout_s=args.timeout, **attrs)
    print(result.to_json() if args.json else result)
    if args.plot:
        result.plot(args.plot)
        if not args.json:
            print(f"plot: {args.plot}")
    return 0 if all(b.best is not None for b in result.buckets) else 1


def _group(records) -> dict:
    groups: dict = defaultdict(list)
    for r in records:
        groups[(r.workload, r.device_key)].append(r)
    return groups


def _bucket_text(r) -> str:
    if not r.bucket:
        return "constant shapes"
    return "at " + ", ".join(r.shapes())


_ORDERS: dict = {}


def _order(r):
    """The tie-break order selection uses (strategy order, then config order), where the
    record's operator can be resolved here; else the file order."""
    from ..records.apply import ConfigOrder

    key = (r.workload, r.bucket, r.target)
    if key not in _ORDERS:
        alive = _alive(r)
        _ORDERS[key] = (alive, ConfigOrder())
    alive, order = _ORDERS[key]
    names = [i.name for i in alive or ()]
    if r.impl not in names:
        return (len(names), 0, r.source)
    return (names.index(r.impl), order(alive[names.index(r.impl)], r.config), r.source)


def _best(records):
    from ..records.apply import pick_best

    ok = [r for r in records if r.ok]
    return pick_best(ok, lambda r: r.cost, lambda r: r.spread, _order)


def cmd_records(args) -> int:
    from ..records.store import default_path, open_log

    path = args.file or default_path()
    if path is None:
        raise InputError("GPUCG_RECORDS is off and no records file was given")
    log = open_log(path)
    if args.prune:
        keep, why = prune(log.records)
        unreadable = log.skipped
        log.rewrite(keep)
        print(f"{log.path}: kept {len(keep)} records; dropped {why['superseded']} superseded, "
              f"{why['stale']} with changed templates, {unreadable} unreadable line(s)")
        return 0
    rows = []
    for (workload, device), recs in sorted(_group(log.records).items(), key=lambda kv: kv[0]):
        op, attrs, inputs = workload
        buckets = defaultdict(list)
        for r in recs:
            buckets[r.bucket].append(r)
        if args.json:
            for bucket, rs in sorted(buckets.items()):
                best = _best(rs)
                rows.append({"op": op, "attrs": json.loads(attrs), "inputs": list(inputs),
                             "bucket": dict(bucket), "target": device[0], "device": device[1],
                             "records": len(rs), "failed": sum(not r.ok for r in rs),
                             "best": None if best is None else {
                                 "impl": best.impl, "config": best.config, "cost": best.cost,
                                 "source": best.source}})
            continue
        print(f"{op}({', '.join(inputs)}; {attrs}) on {device[0]} {device[1]!r} ({device[2]})")
        for bucket, rs in sorted(buckets.items()):
            best = _best(rs)
            what = (f"{best.impl} {','.join(f'{k}={v}' for k, v in sorted(best.config.items()))}"
                    f" {best.cost * 1e3:.4g} ms ({best.source})" if best else "none succeeded")
            failed = sum(not r.ok for r in rs)
            print(f"  {_bucket_text(rs[0])}: best {what}" + (
                "" if args.best else f"; {len(rs)} records, {failed} failed or dropped"))
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    elif not log.records:
        print(f"{log.path}: no records")
    return 0


def prune(records) -> tuple[list, dict]:
    """Records to keep: the latest of each candidate, only for current templates."""
    from ..records.keys import template_hash

    latest: dict = {}
    for r in records:
        latest[(r.workload, r.device_key, r.candidate, r.hash)] = r
    keep, stale, hashes = [], 0, {}
    for r in latest.values():
        key = (r.workload, r.bucket, r.target, r.impl)
        if key not in hashes:
            hashes[key] = _current_hash(r, template_hash)
        if hashes[key] is not None and hashes[key] != r.hash:
            stale += 1
            continue
        keep.append(r)
    keep.sort(key=lambda r: r.time)
    return keep, {"superseded": len(records) - len(latest), "stale": stale}


def _current_hash(r, template_hash):
    """The current template hash of a record's implementation, or None if it cannot be
    found here (an operator not registered in this process, an implementation gone)."""
    found = [i for i in _alive(r) or () if i.name == r.impl]
    return template_hash(found[0]) if found else None


def _alive(r):
    """The implementations of a record's call as the strategy offers them here (None when
    the call cannot be rebuilt here)."""
    from .workload import Workload

    try:
        w = Workload(r.op, r.input_types(), r.target, **json.loads(r.attrs))
        return w.strategy({})[0]
    except Exception:  # noqa: BLE001 - what cannot be rebuilt is kept as it is
        return None


def add_verbs(sub, op_args, parse_input, parse_attr) -> None:
    """Add ``tune`` and ``records`` to the gpucg command's subparsers (``op_args`` adds the
    operator arguments; the parse functions read ``--input`` and ``--attr``)."""
    sp = sub.add_parser("tune", help="tune an operator's implementations and configs here")
    op_args(sp)
    sp.add_argument("--trials", type=int, default=64, help="candidates per size bucket")
    sp.add_argument("--search", default="random", help="grid, random, anneal or model")
    sp.add_argument("--budget", help="stop after this long: 90s, 10m, 1h")
    sp.add_argument("--size", action="append", default=[],
                    help="NAME=INT[,INT...]: the sizes (buckets) to tune a symbol at")
    sp.add_argument("--records", help="records file (default: GPUCG_RECORDS or the cache's)")
    sp.add_argument("--workers", type=int, default=1, help="local measuring processes")
    sp.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                    help="measure on a Ray cluster (a local instance without ADDRESS)")
    sp.add_argument("--replay", metavar="FILE", help="costs from a records file (simulation)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")
    sp.add_argument("--plot", metavar="PNG", help="save best-so-far against trials")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.set_defaults(fn=cmd_tune, parse_input=parse_input, parse_attr=parse_attr)
    sp = sub.add_parser("records", help="tuning records: per workload and device, the best")
    sp.add_argument("file", nargs="?", help="records file (default: GPUCG_RECORDS or the cache's)")
    sp.add_argument("--best", action="store_true", help="only the best per bucket")
    sp.add_argument("--prune", action="store_true",
                    help="drop superseded, stale and unreadable lines (atomic rewrite)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_records)
