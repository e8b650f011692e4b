"""The checked-in figures every implementation is held to (tests/resources/FAMILY.json).

* resources: for each operator's "bench" Cases, each implementation that applies on CUDA, its
  default config, on sm_80 and sm_90 (sm_90a for those that need it): every kernel's registers, shared memory, stack, spills,
  block, occupancy and whether the launch fits (ptxas through NVRTC).
* traffic: for each operator's "small" Cases, the global memory bytes the implementation a GPU
  selects loads and stores on Oclgrind, beside the compulsory bytes.

The figures are kept one file per operator family (``tests/resources/scan.json`` holds
cumsum's and cumprod's), so adding a family adds a file and a change to one family rewrites
only its own. ``python -m gpucg.verify.baseline [DIR] [--family NAME ...] [--no-traffic]``
(``make resources-json [FAMILY=NAME]``) rewrites the files of the families named (all by
default); tests/test_resources.py and tests/test_oclgrind.py compare against them, so a change
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
#: arch-specific targets whose own implementations (wgmma, setmaxnreg: sm_90a) are measured
#: there only
SPECIFIC_ARCHS = ("sm_90a",)
#: a change may raise a kernel's registers by this fraction before the check fails
REGISTER_SLACK = 0.10
#: and an operator call's global memory traffic by this fraction
TRAFFIC_SLACK = 0.01


def bench_calls(ops=None, archs=ARCHS):
    """(op, case number, case, implementation short name, archs) of every implementation that
    applies on CUDA to each "bench" Case of each operator: on ``archs``, or where it applies
    only on an arch-specific target (SPECIFIC_ARCHS), on that one."""
    from ..compiled import explain
    from ..op import get_op, list_ops

    for name in ops or list_ops():
        for i, case in enumerate(get_op(name).representative("bench")):
            seen = set()
            for target, where in (("cuda", archs),
                                  *((f"cuda -arch={a}", (a,)) for a in SPECIFIC_ARCHS)):
                sel = explain(name, *case.inputs, target=target, records=False, **case.attrs)
                for cand in sel.candidates:
                    impl = cand.name.rsplit(".", 1)[0]
                    if cand.verdict != "excluded" and impl not in seen:
                        seen.add(impl)
                        yield name, i, case, impl, where


def row_key(op: str, case: int, row) -> str:
    return (f"{op}|bench {case}|{row.impl}|{row.kernel}|{row.index}|block {row.block}|"
            f"{row.arch}")


def collect_resources(ops=None, archs=ARCHS, workers: int = 2) -> list[tuple[str, object]]:
    """(key, ResourceRow) of every kernel of every default config, on every arch.

    The launches are recorded first; the distinct kernels are then compiled by ptxas in
    ``workers`` threads (NVRTC releases the GIL).
    """
    recorded = []
    for name, i, case, impl, where in bench_calls(ops, archs):
        for arch in where:
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


def family_of(op: str) -> str | None:
    """The family (gpucg/ops/FAMILY.py) of a built-in operator; None for others."""
    from ..op import get_op

    module = get_op(op).module
    return module.rsplit(".", 1)[1] if module.startswith("gpucg.ops.") else None


def load(path) -> dict:
    """The figures: of one file, or of every family file in a directory, merged
    (``{"resources": {...}, "traffic": {...}}``)."""
    path = Path(path)
    if path.is_dir():
        merged: dict = {"resources": {}, "traffic": {}}
        for f in sorted(path.glob("*.json")):
            data = json.loads(f.read_text())
            for part in merged:
                merged[part].update(data.get(part, {}))
        return merged
    return json.loads(path.read_text()) if path.exists() else {}


ABOUT = ("gpucg's default configs for the operators of gpucg/ops/{family}.py: ptxas resources per "
         "kernel on the bench cases, Oclgrind global memory traffic of the GPU-selected "
         "implementation on the small cases; rewrite with `python -m gpucg.verify.baseline "
         "tests/resources --family {family}`")


def main(argv=None) -> int:
    from ..builtin import families
    from ..op import list_ops

    p = argparse.ArgumentParser(prog="python -m gpucg.verify.baseline",
                                description="rewrite the checked-in resource and traffic "
                                            "figures, one file per operator family")
    p.add_argument("path", nargs="?", default="tests/resources",
                   help="the directory of the family files")
    p.add_argument("--family", action="append", choices=families(),
                   help="rewrite this family's file only (repeatable; default: every family)")
    p.add_argument("--no-traffic", action="store_true", help="keep the files' traffic figures")
    args = p.parse_args(argv)
    ok, why = nvrtc.available()
    if not ok:
        print(f"NVRTC is needed: {why}", file=sys.stderr)
        return 1
    chosen = args.family or families()
    ops = [op for op in list_ops() if family_of(op) in chosen]
    resources = resource_figures(collect_resources(ops))
    traffic = None
    if not args.no_traffic:
        from . import oclgrind

        ok, why = oclgrind.available()
        if not ok:
            print(f"Oclgrind is needed for the traffic figures ({why}); --no-traffic keeps "
                  "the old ones", file=sys.stderr)
            return 1
        traffic = traffic_figures(oclgrind.traffic(ops))
    root = Path(args.path)
    root.mkdir(parents=True, exist_ok=True)
    for family in chosen:
        path = root / f"{family}.json"
        data = load(path) if path.exists() else {}
        mine = lambda figures: {k: v for k, v in figures.items()  # noqa: E731
                                if family_of(k.split("|", 1)[0]) == family}
        data["about"] = ABOUT.format(family=family)
        data["resources"] = mine(resources)
        if traffic is not None:
            data["traffic"] = mine(traffic)
        data.setdefault("traffic", {})
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}: {len(data['resources'])} kernel figures, "
              f"{len(data['traffic'])} traffic figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
