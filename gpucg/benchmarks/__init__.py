"""Side-by-side benchmarks (not tests): ours beside the peers, in one process."""

from __future__ import annotations


def run_benchmark(op: str, argv) -> int:
    if op == "scan":
        from .scan import main

        return main(argv)
    raise SystemExit(f"unknown benchmark {op!r}; known: scan")
