"""The tuner on the device here: default config against tuned, per case, and model-based
search against the grid.

Cases (the operators' representative "bench" calls): conv2d's ResNet 3x3 layers and its 1x1
layer, topk (4096, 1024) k=8 and (1, 2^22) k=100, and the three scan cases of
``gpucg bench scan``. Each is tuned with a fixed trial budget; the table prints the default
config's time and the tuned time measured in the same run (the tuner's own median, timed with
the backend's events), the speedup, the trials and the tuning wall time. ``--compare`` then
runs, on the conv2d cases, a grid search of 4x the budget and reports how many trials the
model-based search needed to come within 5% of the grid's best.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

import gpucg

from .common import banner, parser

#: (operator, case labels) to tune: the issue's cases, found by label among the op's Cases
CASES = [
    ("conv2d", ("resnet 3x3 64x56x56", "resnet 3x3 128x28x28", "resnet 3x3 256x14x14",
                "resnet 3x3 512x7x7", "1x1 256->64 56x56")),
    ("topk", ("(4096, 1024) k=8", "(1, 2^22) k=100")),
    ("cumsum", ("1-D 2^24", "(4096, 1024) axis=1", "(1024, 4096) axis=0")),
]


def cases(only: str | None = None):
    """(op, Case) pairs, in the table's order; ``only``: a substring of the label."""
    out = []
    for op, labels in CASES:
        found = {c.label: c for c in gpucg.get_op(op).representative("bench")}
        for label in labels:
            if label in found and (not only or only in f"{op} {label}"):
                out.append((op, found[label]))
    return out


def _tune(op, case, target, trials, search, records, seed, timeout):
    t0 = time.monotonic()
    r = gpucg.tune(op, *case.inputs, target=target, trials=trials, search=search,
                   records=records, seed=seed, progress=False, timeout_s=timeout, **case.attrs)
    return r.buckets[0], time.monotonic() - t0


def _row(name, b, wall) -> dict:
    d = b.default.cost if b.default is not None and b.default.ok else math.nan
    t = b.best.cost if b.best is not None else math.nan
    return {"case": name, "default_ms": d * 1e3, "tuned_ms": t * 1e3,
            "speedup": d / t if t == t and d == d else math.nan, "trials": len(b.trials),
            "wall_s": wall, "best": None if b.best is None else b.best.describe(),
            "failed": sum(not x.ok for x in b.trials)}


def main(argv) -> int:
    p = parser("tune", "2 trials a case, to check the command and its output")
    p.add_argument("--trials", type=int, default=32, help="trials per case (default 32)")
    p.add_argument("--search", default="model", help="search method (default model)")
    p.add_argument("--target", default="opencl", help="the target to tune (default opencl)")
    p.add_argument("--cases", default=None, help="only cases whose name contains this")
    p.add_argument("--compare", action="store_true",
                   help="conv2d cases: model search against a grid of 4x the trials")
    p.add_argument("--plot", metavar="PNG", help="save best-so-far / default against trials")
    p.add_argument("--records", metavar="FILE", help="keep the records (default: a temp file)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per candidate")
    args = p.parse_args(argv)
    trials = 2 if args.quick else args.trials
    print(banner("tune"))
    print(f"target {args.target}; {args.search} search, {trials} trials a case "
          f"(the default config included), seed {args.seed}")
    tmp = tempfile.TemporaryDirectory(prefix="gpucg-bench-tune-")
    records = args.records or str(Path(tmp.name) / "records.jsonl")
    rows, curves = [], []
    print(f"\n  {'case':<34} {'default ms':>11} {'tuned ms':>10} {'speedup':>8} {'trials':>7} "
          f"{'wall s':>7}  best")
    for op, case in cases(args.cases):
        name = f"{op} {case.label}"
        b, wall = _tune(op, case, args.target, trials, args.search, records, args.seed,
                        args.timeout)
        row = _row(name, b, wall)
        rows.append(row)
        if b.default is not None and b.default.ok:
            curves.append((name, [c / b.default.cost for c in b.best_so_far()]))
        print(f"  {name:<34} {row['default_ms']:11.3f} {row['tuned_ms']:10.3f} "
              f"{row['speedup']:8.2f} {row['trials']:7d} {wall:7.1f}  {row['best']}", flush=True)
    ok = [r for r in rows if r["speedup"] == r["speedup"]]
    print(f"\n  tuned never slower than the default: "
          f"{all(r['speedup'] >= 1.0 for r in ok)}; cases at least 1.25x faster: "
          f"{sum(r['speedup'] >= 1.25 for r in ok)} of {len(rows)}")
    compare = _compare(args, trials, records) if args.compare else []
    if args.plot:
        _plot(curves, args.plot, args.search)
        print(f"\n  plot: {args.plot}")
    if args.json:
        print(json.dumps({"rows": rows, "compare": compare}, indent=1, default=str))
    tmp.cleanup()
    return 0


def _compare(args, trials, records) -> list:
    """Model-based search against a grid of 4x the trials, on the conv2d cases."""
    out = []
    print(f"\n  model search ({trials} trials) against grid search ({4 * trials} trials):")
    print(f"  {'case':<34} {'grid best ms':>12} {'model best ms':>13} {'model/grid':>10} "
          f"{'trials to 5%':>12}")
    for op, case in cases(args.cases):
        if op != "conv2d":
            continue
        name = f"{op} {case.label}"
        grid, _ = _tune(op, case, args.target, 4 * trials, "grid", records, args.seed,
                        args.timeout)
        model, _ = _tune(op, case, args.target, trials, "model", records, args.seed,
                         args.timeout)
        g = grid.best.cost if grid.best else math.nan
        m = model.best.cost if model.best else math.nan
        reach = model.trials_to(g * 1.05)
        out.append({"case": name, "grid_best_ms": g * 1e3, "model_best_ms": m * 1e3,
                    "model_trials_to_within_5pct": reach, "grid_trials": len(grid.trials)})
        print(f"  {name:<34} {g * 1e3:12.3f} {m * 1e3:13.3f} {m / g:10.2f} "
              f"{reach if reach else 'never':>12}", flush=True)
    return out


def _plot(curves, path, search) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, ys in curves:
        ax.step(range(1, len(ys) + 1), ys, where="post", label=name)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("trials")
    ax.set_ylabel("best cost so far / default config's cost")
    ax.set_title(f"gpucg bench tune: {search} search")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
