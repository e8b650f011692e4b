"""Side-by-side benchmarks (not tests): ours beside the peers, in one process."""

from __future__ import annotations

import importlib

#: benchmark name -> module under gpucg.benchmarks with a ``main(argv) -> int``
BENCHMARKS = {"conv2d": "conv2d", "dense": "dense", "scan": "scan", "topk": "topk",
              "tune": "tune", "reduce": "reduce", "softmax": "softmax",
              "attention": "attention", "models": "models", "sort": "sort",
              "llm_ops": "llm_ops", "quant": "quant", "decode": "decode"}


def run_benchmark(op: str, argv) -> int:
    if op not in BENCHMARKS:
        raise SystemExit(f"unknown benchmark {op!r}; known: {', '.join(sorted(BENCHMARKS))}")
    return importlib.import_module(f"{__name__}.{BENCHMARKS[op]}").main(argv)
