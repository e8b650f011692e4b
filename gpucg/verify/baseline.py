"""The checked-in figures every implementation is held to (tests/resources.json).

* resources: for each operator's "bench" Cases, each implementation that applies on CUDA, its
  default config, on sm_80 and sm_90: every kernel's registers, shared memory, stack, spills,
  block, occupancy and whether the launch fits (ptxas through NVRTC).
* traffic: for each operator's "small" Cases, the global memory bytes the implementation a GPU
  selects loads and stores on Oclgrind, beside the compulsory bytes.

``python -m gpucg.verify.baseline [PATH] [--no-traffic]`` (``make resources-json``) rewrites
the file; tests/test_resources.py and tests/test_oclgrind.py compare against it, so a change
that adds spills, registers or traffic shows up in review.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import nvrtc
from .resources import kernel_resources, launch_rows, record_launches

ARCHS = ("sm_80", "sm_90")
#: a change may raise a kernel's registers by this fraction before the check fails
REGISTER_SLACK = 0.10
#: and an operator call's global memory traffic by this fraction
TRAFFIC_SLACK = 0.01


def bench_calls(ops=None):
    """(op, case number, case, implementation short name) of every implementation that
    applies on CUDA to each "bench" Case of each operator."""
    from ..compiled import explain
    from ..op import get_op, list_ops

    for name in ops or list_ops():
        for i, case in enumerate(get_op(name).representative("bench")):
            sel = explain(name, *case.inputs, target="cuda", records=False, **case.attrs)
            for cand in sel.candidates:
                if cand.verdict != "excluded":
                    yield name, i, case, cand.name.rsplit(".", 1)[0]


def row_key(op: str, case: int, row) -> str:
    return (f"{op}|bench {case}|{row.impl}|{row.kernel}|{row.index}|block {row.block}|"
            f"{row.arch}")


def collect_resources(ops=None, archs=ARCHS, workers: int = 2) -> list[tuple[str, object]]:
    """(key, ResourceRow) of every kernel of every default config, on every arch.

    The launches are recorded first; the distinct kernels are then compiled by ptxas in
    ``workers`` threads (NVRTC releases the GIL).
    """
    recorded = []
    for name, i, case, impl in bench_calls(ops):
        for arch in archs:
            compiled, launches = record_launches(name, case.inputs, f"cuda -arch={arch}", impl,
                                                 None, case.attrs)
            if compiled.selection.choices[0].impl.kernels:
                recorded.append((name, i, arch, compiled, launches))
    jobs = {(ln.source, ln.entry, arch, tuple(ln.options) or nvrtc.DEFAULT_OPTIONS)
            for _, _, arch, _, launches in recorded for ln in launches}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda job: kernel_resources(*job), sorted(jobs)))
    out = []
    for name, i, arch, compiled, launches in recorded:
        out += [(row_key(name, i, r), r) for r in launch_rows(compiled, launches, arch)]
    return out


def resource_figures(rows) -> dict:
    return {key: {"registers": r.registers, "shared": r.shared, "stack": r.stack,
                  "spill_stores": r.spill_stores, "spill_loads": r.spill_loads,
                  "occupancy": round(r.occupancy, 4), "limiter": r.limiter, "fits": r.fits}
            for key, r in rows}


def traffic_key(result) -> str:
    return f"{result.task.op}|small {result.task.case}|{result.impl}"


def traffic_figures(results) -> dict:
    return {traffic_key(r): {"loaded": r.loaded, "stored": r.stored,
                             "compulsory": r.compulsory,
                             "ratio": round((r.loaded + r.stored) / r.compulsory, 3)
                             if r.compulsory else None}
            for r in results if not r.error}


def compare_resources(rows, baseline: dict) -> list[str]:
    """Regressions against the checked-in figures: new spills, registers up by more than
    REGISTER_SLACK, a kernel the file does not know."""
    bad = []
    for key, r in rows:
        old = baseline.get(key)
        if old is None:
            bad.append(f"{key}: not in the checked-in file")
            continue
        if r.spills > old["spill_stores"] + old["spill_loads"]:
            bad.append(f"{key}: {r.spills} B spilled, the file has "
                       f"{old['spill_stores'] + old['spill_loads']}")
        if r.registers > old["registers"] * (1 + REGISTER_SLACK):
            bad.append(f"{key}: {r.registers} registers, the file has {old['registers']} "
                       f"(more than {REGISTER_SLACK:.0%} up)")
    return bad


def compare_traffic(results, baseline: dict) -> list[str]:
    """Calls whose traffic grew by more than TRAFFIC_SLACK over the checked-in figures."""
    bad = []
    for r in results:
        old = baseline.get(traffic_key(r))
        if old is None:
            bad.append(f"{traffic_key(r)}: not in the checked-in file")
        elif r.loaded + r.stored > (old["loaded"] + old["stored"]) * (1 + TRAFFIC_SLACK):
            bad.append(f"{traffic_key(r)}: moves {r.loaded + r.stored:,} B, the file has "
                       f"{old['loaded'] + old['stored']:,}")
    return bad


def load(path) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpucg.verify.baseline",
                                description="rewrite the checked-in resource and traffic figures")
    p.add_argument("path", nargs="?", default="tests/resources.json")
    p.add_argument("--no-traffic", action="store_true", help="keep the file's traffic figures")
    args = p.parse_args(argv)
    ok, why = nvrtc.available()
    if not ok:
        print(f"NVRTC is needed: {why}", file=sys.stderr)
        return 1
    data = load(args.path)
    data["about"] = ("gpucg's default configs: ptxas resources per kernel on the bench cases, "
                     "Oclgrind global memory traffic of the GPU-selected implementation on the "
                     "small cases; rewrite with `make resources-json`")
    data["resources"] = resource_figures(collect_resources())
    if not args.no_traffic:
        from . import oclgrind
        from ..op import list_ops

        ok, why = oclgrind.available()
        if not ok:
            print(f"Oclgrind is needed for the traffic figures ({why}); --no-traffic keeps "
                  "the old ones", file=sys.stderr)
            return 1
        data["traffic"] = traffic_figures(oclgrind.traffic(list_ops()))
    Path(args.path).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.path}: {len(data['resources'])} kernel figures, "
          f"{len(data.get('traffic', {}))} traffic figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
