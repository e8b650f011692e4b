"""The fused operators of an LLM layer beside torch and NumPy: times, ratios, GB/s (every
input read once, every output written once).

Cases (LLaMA-7B's sizes, float32 so that the CPU peers compute natively): silu_and_mul and
gelu_and_mul of a decode batch (16, 2 * 11008) and a prefill (512, 2 * 11008);
rotary_embedding (neox) of 16 and 512 tokens of 32 heads of 128 from a 4096-position cache;
rms_norm with a residual (hidden 4096) of 16 and 512 tokens (its first output compared).
The peers compute the same result unfused (torch: F.silu(gate) * up, vLLM's forward_native
RoPE; NumPy: the formulas); vLLM's and
FlashInfer's fused CUDA kernels are "not measured on a GPU" here. Goals: on the CPU, OpenCL
(PoCL) no slower than NumPy; on a GPU, 80% of copy bandwidth.
"""

from __future__ import annotations

import json

import numpy as np

from .lowp import NOT_MEASURED, gpu_present
from .common import (banner, kernel_note, median_time, parser, print_case, print_traffic,
                     time_on_targets, torch_cuda_time, torch_or_none)
from .reduce import goal_lines


def _silu_np(g):
    return g / (1 + np.exp(-g))


def _gated(op: str, rows: int):
    d = 11008

    def make(rng):
        return (rng.standard_normal((rows, 2 * d)).astype(np.float32),), {}

    def numpy_fn(x):
        g, u = x[:, :d], x[:, d:]
        if op == "silu_and_mul":
            return _silu_np(g) * u
        from math import erf
        return g * 0.5 * (1 + np.vectorize(erf, otypes=[np.float32])(g / np.sqrt(2))) * u

    def torch_fn(x):
        import torch.nn.functional as F
        act = F.silu if op == "silu_and_mul" else F.gelu
        return act(x[:, :d]) * x[:, d:]
    return (f"{op} ({rows}, 2*{d})", op, make, numpy_fn, torch_fn,
            rows * 3 * d * 4)  # bytes: x read, y written


def _rope_formula(x, cos, sin, pos, cat):
    """vLLM's forward_native (neox), for NumPy arrays or torch tensors (``cat``)."""
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    half = c.shape[-1]
    x1, x2 = x[..., :half], x[..., half:]
    return cat([x1 * c - x2 * s, x2 * c + x1 * s])


def _rope(tokens: int, heads: int = 32, d: int = 128):
    def make(rng):
        ang = np.arange(4096)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
        return (rng.standard_normal((tokens, heads, d)).astype(np.float32),
                np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32),
                rng.integers(0, 4096, tokens)), {}

    def torch_fn(x, cos, sin, pos):
        import torch
        return _rope_formula(x, cos, sin, pos, lambda v: torch.cat(v, -1))
    moved = tokens * (2 * heads * d + d) * 4 + tokens * 8  # x, y, the cos/sin rows, positions
    return (f"rotary_embedding neox ({tokens}, {heads}, {d})", "rotary_embedding", make,
            lambda x, cos, sin, pos: _rope_formula(x, cos, sin, pos,
                                                   lambda v: np.concatenate(v, -1)),
            torch_fn, moved)


def _add_rms_norm(tokens: int, d: int = 4096):
    def make(rng):
        return (rng.standard_normal((tokens, d)).astype(np.float32),
                rng.uniform(0.5, 1.5, d).astype(np.float32),
                rng.standard_normal((tokens, d)).astype(np.float32)), {}

    def numpy_fn(x, g, r):
        h = x + r
        return h / np.sqrt(np.mean(h * h, -1, keepdims=True) + 1e-6) * g

    def torch_fn(x, g, r):
        import torch.nn.functional as F
        h = x + r
        return F.rms_norm(h, (d,), g, 1e-6)
    return (f"rms_norm + residual ({tokens}, {d})", "rms_norm", make, numpy_fn, torch_fn,
            tokens * d * 4 * 4 + d * 4)  # x, residual read; y, h written; gamma


#: (name, op, make(rng) -> (arrays, attrs), numpy peer, torch peer, bytes moved)
CASES = [_gated("silu_and_mul", 16), _gated("silu_and_mul", 512), _gated("gelu_and_mul", 16),
         _rope(16), _rope(512), _add_rms_norm(16), _add_rms_norm(512)]


def _peers(arrays, numpy_fn, torch_fn, repeat: int):
    rows = [("numpy (unfused)", median_time(lambda: numpy_fn(*arrays), repeat=repeat))]
    torch = torch_or_none()
    if torch is not None:
        ts = [torch.from_numpy(a) for a in arrays]
        rows.append(("torch (cpu, unfused)", median_time(lambda: torch_fn(*ts), repeat=repeat)))
        if torch.cuda.is_available():
            tg = [t.cuda() for t in ts]
            rows.append(("torch (cuda, unfused)", torch_cuda_time(lambda: torch_fn(*tg), repeat)))
    return rows


def _ours(op, arrays, attrs, want, repeat: int, targets):
    return [(target, f"gpucg {target} [{impl}]", t, float(np.max(np.abs(y - want))), kt)
            for target, impl, t, y, kt in time_on_targets(op, arrays, attrs, targets, repeat)]


def main(argv=()) -> int:
    p = parser("llm_ops", "cases with an eighth of the rows (for smoke tests)")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rng = np.random.default_rng(0)
    results, goals = [], []
    print(banner("llm_ops"))
    for name, op, make, numpy_fn, torch_fn, nbytes in CASES:
        arrays, attrs = make(rng)
        if args.quick:  # an eighth of the rows (tokens); caches and gamma stay
            keep = {"rotary_embedding": (1, 2), "rms_norm": (1,)}.get(op, ())
            arrays = tuple(a if i in keep else a[:max(1, len(a) // 8)]
                           for i, a in enumerate(arrays))
            nbytes = max(1, nbytes // 8)
        want = numpy_fn(*arrays)
        peers = _peers(arrays, numpy_fn, torch_fn, args.repeat)
        mine = _ours(op, arrays, attrs, want, args.repeat, targets)
        ours = [(lbl, t, f"max abs err {err:.1e}" + kernel_note(kt, nbytes / 1e9),
                 {"max_abs_err": err, "kernel_seconds": kt}) for _, lbl, t, err, kt in mine]
        print_case(name, f"{name}: {nbytes / 1e6:.1f} MB moved", peers, ours, nbytes / 1e9,
                   results)
        if not gpu_present():
            print(f"  {'gpucg cuda, vLLM/FlashInfer fused kernels':<42} {NOT_MEASURED}")
            results.append({"case": name, "impl": "cuda rows", "skipped": NOT_MEASURED})
        goals += goal_lines(name, peers, mine, nbytes, args.repeat)
    traffic = print_traffic(sorted({c[1] for c in CASES}), not args.no_traffic)
    print()
    for line in goals:
        print(line)
    if args.json:
        print(json.dumps({"results": results, "goals": goals, "traffic": traffic}, indent=1))
    bad = [r for r in results if r.get("max_abs_err", 0) > 1e-3]
    return 1 if bad else 0
