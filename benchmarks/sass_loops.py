"""SASS figures of the kernels issue 35 item 7 names, from any checkout, read with no GPU.

    python benchmarks/sass_loops.py [--tree CHECKOUT] [--before CHECKOUT] [--arch sm_90]

Each row renders one kernel with the checkout given (a subprocess with PYTHONPATH set to it,
so two checkouts can be compared in one run: --before's table, then --tree's) and reads it
with this checkout's gpucg.verify (NVRTC, ptxas, cuobjdump): registers, stack bytes, LDL/STL,
fences (MEMBAR), 128-bit global loads, atomic exchanges (EXCH.64 / 32-bit EXCH), the bytes of
the kernel's global loads and stores as written in its code (each instruction once: what a
digit pass moves an element where its loop is not unrolled), and instructions per element:
  - "loop": the kernel's innermost loops (gpucg.verify.sass.loops) that touch global memory,
    each trip's instructions over the elements a trip moves (the bytes of its global stores
    over the element size, or of its global loads where it stores nothing: ptxas unrolls some
    loops, so a trip may take several 128-bit accesses); of the loops that only read (a
    pass gathering statistics) and of those that write (the pass mapping the row) the
    cheapest each (ptxas may peel a remainder loop off an unrolled one), added ("sum"), or
    the cheapest loop alone ("max": a vector loop beside its scalar tail);
  - "marginal": for a row held in registers (loops unrolled away), the difference of the
    kernel's instructions at items = 16 and items = 8 a work-item (the same row capacity),
    over the 8 elements: what one more element costs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

#: (label, op, shapes, dtype, attrs, impl, config, kernel key, metric, elements a trip)
ROWS = [
    ("softmax f16 4096 norm_group", "softmax", [(4096, 4096)], "float16", {"axis": -1},
     "norm_group", {"wg": 256, "items": 16, "row_loop": 1, "vw": 8}, "main",
     ("marginal", {"wg": 512, "items": 8}), 0),
    ("log_softmax f16 4096 norm_group", "log_softmax", [(4096, 4096)], "float16", {"axis": -1},
     "norm_group", {"wg": 256, "items": 16, "row_loop": 1, "vw": 8}, "main",
     ("marginal", {"wg": 512, "items": 8}), 0),
    ("layer_norm f16 4096 norm_group", "layer_norm", [(4096, 4096), (4096,), (4096,)],
     "float16", {}, "norm_group", {"wg": 256, "items": 16, "row_loop": 8, "vw": 8}, "main",
     ("marginal", {"wg": 512, "items": 8}), 0),
    ("rms_norm f16 4096 norm_group", "rms_norm", [(4096, 4096), (4096,)], "float16", {},
     "norm_group", {"wg": 256, "items": 16, "row_loop": 8, "vw": 8}, "main",
     ("marginal", {"wg": 512, "items": 8}), 0),
    ("softmax f16 32000 norm_blocks", "softmax", [(256, 32000)], "float16", {"axis": -1},
     "norm_blocks", {"wg": 256, "online": True, "unroll": 2, "vw": 8}, "main", ("loop", "sum"), 8),
    ("layer_norm f16 32000 norm_blocks", "layer_norm", [(256, 32000), (32000,), (32000,)],
     "float16", {}, "norm_blocks", {"wg": 256, "online": True, "unroll": 2, "vw": 8}, "main",
     ("loop", "sum"), 8),
    ("softmax f32 32000 norm_blocks", "softmax", [(256, 32000)], "float32", {"axis": -1},
     "norm_blocks", {"wg": 256, "online": True, "unroll": 2, "vw": 4}, "main", ("loop", "sum"),
     4),
    ("topk f32 (1, 2^24) k=100", "topk", [(1, 1 << 24)], "float32", {"k": 100}, None, None,
     "*", ("kernels",), 0),
    ("topk_warp f32 (4096, 1024) k=8", "topk", [(4096, 1024)], "float32", {"k": 8},
     "topk_warp", None, "emit", ("loop", "max"), 0),
    ("sort f32 (64, 2^16) values", "sort", [(64, 1 << 16)], "float32", {"axis": -1},
     "sort_radix", None, "*", ("kernels",), 0),
    ("scan_lookback f32 2^24", "cumsum", [(1 << 24,)], "float32", {"axis": 0},
     "scan_lookback", None, "scan", ("kernels",), 0),
]

_RENDER = r"""
import json, sys, gpucg
rows = json.loads(sys.argv[1])
out = []
for label, op, shapes, dtype, attrs, impl, config, key, metric, per in rows:
    types = [gpucg.tensor(tuple(s), dtype) for s in shapes]
    def render(cfg):
        f = gpucg.compile(op, *types, target=sys.argv[2], impl=impl, config=cfg, index="int32",
                          **attrs)
        return {k: v for k, v in f.sources.items() if key == "*" or k.endswith("/" + key)}, \
            dict(f.selection.choices[0].config)
    try:
        srcs, used = render(config)
        extra = render({**config, **metric[1]})[0] if metric[0] == "marginal" else {}
        out.append({"label": label, "sources": srcs, "config": used, "extra": extra})
    except Exception as exc:  # a kernel that checkout does not have
        out.append({"label": label, "error": f"{type(exc).__name__}: {exc}"[:200]})
print("@@" + json.dumps(out))
"""


def render(tree: str, arch: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=tree)
    got = subprocess.run([sys.executable, "-c", _RENDER, json.dumps(ROWS), f"cuda -arch={arch}"],
                         env=env, cwd="/", capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(got.stderr[-3000:])
    return json.loads(got.stdout.split("@@", 1)[1])


def entry_of(src: str) -> str:
    return re.search(r"void (?:__launch_bounds__\(\d+, \d+\) )?(gpucg_\w+)\(", src).group(1)


def _width(op: str) -> int:
    for mod, nbytes in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1),
                        (".S8", 1)):
        if mod in op:
            return nbytes
    return 4


def _bytes(opcodes) -> tuple[int, bool]:
    """(bytes a loop trip stores to global memory, or loads where it stores nothing; whether
    it stores)."""
    stored = sum(_width(op) for op in opcodes if op.startswith("STG"))
    return stored or sum(_width(op) for op in opcodes if op.startswith("LDG")), bool(stored)


def measure(src: str, arch: str) -> dict:
    from gpucg.verify import resources, sass

    e = entry_of(src)
    r = resources.kernel_resources(src, e, arch)
    ins = sass.kernel_instructions(src, e, arch)
    ops = [op for _, op, _ in ins]
    # (a lone instruction branching to itself ends every kernel: no loop of the work)
    inner = [lp for lp in sass.loops(ins) if lp.innermost and lp.count > 1]
    return {"registers": r.registers, "stack": r.stack,
            "trips": [(lp.count, *_bytes(lp.opcodes)) for lp in inner],
            "ldl_stl": sum(op.startswith(("LDL", "STL")) for op in ops),
            "membar": sum(op.startswith("MEMBAR") for op in ops),
            "ldg128": sum(op.startswith("LDG") and ".128" in op for op in ops),
            "exch": (sum(op.startswith("ATOMG.E.EXCH") and ".64" in op for op in ops),
                     sum(op.startswith("ATOMG.E.EXCH") and ".64" not in op for op in ops)),
            "gbytes": (sum(_width(op) for op in ops if op.startswith("LDG")),
                       sum(_width(op) for op in ops if op.startswith("STG"))),
            "total": len(ops), "loops": [lp.count for lp in inner]}


def table(tree: str, arch: str) -> list[str]:
    lines = [f"{'kernel':<40} {'kernel key':<28} {'instr/elem':>10} {'regs':>5} {'stack':>6} "
             f"{'LDL/STL':>7} {'MEMBAR':>6} {'LDG.128':>7} {'EXCH64/32':>9} {'LDG/STG B':>9}  "
             "loops (innermost, instructions)"]
    for row, spec in zip(render(tree, arch), ROWS):
        if "error" in row:
            lines.append(f"{row['label']:<40} (not rendered: {row['error']})")
            continue
        metric, per = spec[8], spec[9]
        for key, src in sorted(row["sources"].items()):
            if "[" in key:  # the fallback config beside the one shown (unaligned data)
                continue
            m = measure(src, arch)
            if metric[0] == "marginal":
                other = measure(next(v for k, v in row["extra"].items() if "[" not in k), arch)
                elem = f"{(m['total'] - other['total']) / 8:.1f}"
            elif metric[0] == "loop" and any(b for _, b, _ in m["trips"]):
                size = {"float16": 2, "bfloat16": 2, "float64": 8}.get(spec[3], 4)
                costs = {False: [], True: []}
                for count, nbytes, writes in m["trips"]:
                    if nbytes:
                        costs[writes].append(count / (nbytes / size))
                best = [min(c) for c in costs.values() if c]
                elem = f"{sum(best) if metric[1] == 'sum' else min(best):.1f}"
            else:
                elem = "-"
            lines.append(f"{row['label']:<40} {key[:28]:<28} {elem:>10} {m['registers']:>5} "
                         f"{m['stack']:>6} {m['ldl_stl']:>7} {m['membar']:>6} {m['ldg128']:>7} "
                         f"{'%d/%d' % m['exch']:>9} {'%d/%d' % m['gbytes']:>9}  "
                         f"{m['loops']}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--before", help="a second checkout, its table printed first")
    p.add_argument("--arch", default="sm_90")
    args = p.parse_args(argv)
    for tree in ([args.before] if args.before else []) + [args.tree]:
        print(f"# SASS of {os.path.abspath(tree)} for {args.arch} (NVRTC, cuobjdump; no GPU)")
        print("\n".join(table(tree, args.arch)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
