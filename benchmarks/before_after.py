"""Run `gpucg bench FAMILY` from two checkouts of gpucg, interleaved, and compare them.

    python benchmarks/before_after.py --before /path/old --after /path/new \
        [--rounds 3] [--repeat 5] [--targets opencl] [--quick] scan topk reduce softmax conv2d
    python benchmarks/before_after.py --before old --after new --targets numpy --cpu \
        --bench-args="--onnx --models efficientnet_b0,mobilenet_v3" models

Each round runs every family once from each checkout (the order of the two alternates between
rounds, so drift in the machine's load falls on both), each in its own interpreter with
PYTHONPATH set to that checkout and a kernel cache of its own. Two checkouts cannot share one
process (both are the package ``gpucg``), so "one run" here is one command that interleaves
them. For each row gpucg prints (a case and an implementation label on a target), the table
gives the best time over the rounds from each checkout, after/before, and the noise: the
larger spread (max/min) of either checkout's own times over the rounds. A row is flagged
"slower" only when after/before exceeds that noise. ``--bench-args`` passes options to every
family (``models --onnx --models ...``: the model table's rows); ``--cpu`` compares the
process's CPU time a call where a row reports it (``cpu_seconds``: a loaded machine's waits
left out) instead of wall time. Peers (NumPy, torch) are timed by both
checkouts too, which shows how much the machine itself moved between the runs.

``--script PATH`` runs that script (from this checkout, with PYTHONPATH set to each side's)
instead of ``gpucg bench FAMILY``: it takes ``--json --repeat N FAMILY`` and prints the same
JSON rows (benchmarks/pocl_reductions.py). ``--medians`` adds the median over the rounds
(and the fastest call, where rows give ``min_seconds``); ``--peer NAME`` prints, for each case
and side, every row's time over the row labelled NAME (e.g. numpy) of the same run, the
median of those ratios over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict


#: the implementation's name in a row's label: "gpucg opencl [scan_chunked.opencl]"
_IMPL = re.compile(r" ?\[([^\]]*)\]")


def _run(tree: str, family: str, args, cache: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=tree, GPUCG_CACHE_DIR=cache)
    if args.script:
        cmd = [sys.executable, os.path.abspath(args.script), "--json", "--repeat",
               str(args.repeat)] + shlex.split(args.bench_args) + [family]
        return _results(subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True),
                        cmd, tree)
    base = [sys.executable, "-m", "gpucg.cli", "bench", family]
    usage = subprocess.run(base + ["--help"], env=env, cwd=tree, capture_output=True,
                           text=True).stdout
    # the options a family's parser takes differ between versions: pass those it knows
    cmd = base + ["--json", "--repeat", str(args.repeat)] + (["--quick"] * args.quick)
    cmd += ["--no-traffic"] * ("--no-traffic" in usage)
    cmd += ["--targets", args.targets] * ("--targets" in usage)
    cmd += shlex.split(args.bench_args)
    return _results(subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True),
                    cmd, tree)


def _results(out, cmd, tree: str) -> list[dict]:
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {tree} failed ({out.returncode}):\n"
                         f"{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    start = out.stdout.rfind("\n{")
    if start < 0:
        raise SystemExit(f"no JSON in the output of {' '.join(cmd)} in {tree}")
    return json.loads(out.stdout[start + 1:])["results"]


def _key(row: dict) -> tuple:
    """(case, label without the implementation's name): the same row of both checkouts even
    where the implementation chosen for it changed; the name is kept apart."""
    label = str(row.get("impl", row.get("label", "")))
    case = row.get("case") or " ".join(str(row[k]) for k in ("model", "export", "batch")
                                       if k in row)
    return (str(case), " ".join(_IMPL.sub("", label).split()))


def _impl(row: dict) -> str:
    found = _IMPL.search(str(row.get("impl", row.get("label", ""))))
    return found.group(1) if found else ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="checkout of the old gpucg")
    p.add_argument("--after", required=True, help="checkout of the new gpucg")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--targets", default="opencl,numpy")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--bench-args", default="", help="more options for every family")
    p.add_argument("--cpu", action="store_true",
                   help="compare CPU time (cpu_seconds) where a row has it, not wall time")
    p.add_argument("--script", help="a script to run instead of gpucg bench (see above)")
    p.add_argument("--medians", action="store_true", help="also the medians over the rounds")
    p.add_argument("--peer", help="print each row's time over this row's (same case and run)")
    p.add_argument("families", nargs="+")
    args = p.parse_args(argv)
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    times: dict = defaultdict(lambda: defaultdict(list))
    impls: dict = defaultdict(dict)
    fastest: dict = defaultdict(lambda: defaultdict(list))
    ratios: dict = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for family in args.families:
                for side in order:
                    rows = _run(trees[side], family, args, os.path.join(tmp, side))
                    for row in rows:
                        took = row.get("cpu_seconds" if args.cpu else "seconds",
                                       row.get("seconds"))
                        if took is not None:
                            times[(family,) + _key(row)][side].append(took)
                            impls[(family,) + _key(row)][side] = _impl(row)
                            fastest[(family,) + _key(row)][side].append(
                                row.get("min_seconds", took))
                    if args.peer:
                        _peer_ratios(rows, family, args, side, ratios)
                print(f"round {r + 1}/{args.rounds}: {family} done", file=sys.stderr, flush=True)
    print(f"before: {trees['before']}\nafter:  {trees['after']}\n"
          f"{args.rounds} interleaved rounds, --repeat {args.repeat}, targets {args.targets}"
          f"{', ' + args.bench_args if args.bench_args else ''}; "
          f"{'CPU' if args.cpu else 'wall'} time a call\n")
    print(f"{'family':<8} {'case':<34} {'row':<22} {'before ms':>10} {'after ms':>10} "
          f"{'after/before':>12} {'noise':>6}  implementation (before -> after)")
    slower = 0
    for key in sorted(times):
        t = times[key]
        if not t["before"] or not t["after"]:
            print(f"{key[0]:<8} {key[1][:34]:<34} {key[2][:22]:<22} only in "
                  f"{'after' if t['after'] else 'before'}")
            continue
        b, a = min(t["before"]), min(t["after"])
        noise = max(max(v) / min(v) for v in t.values())
        flag = "slower" if a / b > noise and a / b > 1.05 else ""
        slower += bool(flag)
        names = impls[key]
        which = (names["before"] if names["before"] == names["after"]
                 else f"{names['before']} -> {names['after']}")
        print(f"{key[0]:<8} {key[1][:34]:<34} {key[2][:22]:<22} {b * 1e3:10.3f} {a * 1e3:10.3f} "
              f"{a / b:12.2f} {noise:6.2f}  {which} {flag}")
    print(f"\nrows slower beyond the noise (after/before > either side's own spread and > 1.05): "
          f"{slower}")
    if args.medians:
        _print_medians(times, fastest)
    if args.peer:
        _print_ratios(ratios, args.peer)
    return 0


def _median(v) -> float:
    v = sorted(v)
    return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2


def _peer_ratios(rows, family, args, side, ratios) -> None:
    """Each row's time over the peer row of its case, in this run."""
    key = "cpu_seconds" if args.cpu else "seconds"
    peer = {_key(r)[0]: r.get(key, r.get("seconds")) for r in rows
            if _key(r)[1] == args.peer}
    for r in rows:
        case, label = _key(r)
        took = r.get(key, r.get("seconds"))
        if label != args.peer and peer.get(case) and took is not None:
            ratios[(family, case, label)][side].append(took / peer[case])


def _print_medians(times, fastest) -> None:
    print(f"\nmedians over the rounds (each round's own figure), and the fastest call\n"
          f"{'case':<34} {'row':<28} {'before med':>10} {'after med':>10} {'after/before':>12} "
          f"{'before min':>10} {'after min':>10}")
    for key in sorted(times):
        t, f = times[key], fastest[key]
        if not t["before"] or not t["after"]:
            continue
        b, a = _median(t["before"]), _median(t["after"])
        print(f"{key[1][:34]:<34} {key[2][:28]:<28} {b * 1e3:10.3f} {a * 1e3:10.3f} "
              f"{a / b:12.2f} {min(f['before']) * 1e3:10.3f} {min(f['after']) * 1e3:10.3f}")


def _print_ratios(ratios, peer: str) -> None:
    print(f"\ntime over {peer}'s in the same run: median over the rounds [min - max]\n"
          f"{'case':<34} {'row':<28} {'before':>20} {'after':>20}")
    for key in sorted(ratios):
        r = ratios[key]
        cells = [f"{_median(v):.2f} [{min(v):.2f}-{max(v):.2f}]" if v else "-"
                 for v in (r["before"], r["after"])]
        print(f"{key[1][:34]:<34} {key[2][:28]:<28} {cells[0]:>20} {cells[1]:>20}")


if __name__ == "__main__":
    raise SystemExit(main())
