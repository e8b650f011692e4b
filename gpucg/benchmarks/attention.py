"""Fused attention beside torch's scaled_dot_product_attention: times, ratios, TFLOP/s.

Rows: prefill (B, H, S, S, D, causal and not) and decode (Sq = 1 on a long KV cache, grouped
heads 32/8). ``--full`` runs the issue's sizes (B=8, H=16, S=512..4096, D=64 and 128; decode
Skv up to 32k), which take minutes a case on a CPU; the default is a CPU-sized subset. The
FLOPs count 4 * D per visible (query, key) pair (QK^T and PV), so causal rows count about
half. One compiled attention a target serves every row (Sq and Skv symbolic): its dispatcher
picks the prefill or decode kernels (the [impl] column). On a CUDA GPU ours runs flash_mma (tensor
cores; flash_wgmma on sm_90a) for prefill and split-KV for decode, and torch's SDPA its
FlashAttention or cuDNN kernel; without a GPU the float16 and bfloat16 rows say "not measured on
a GPU", with sm_90a's plan too where it picks another kernel.
Goals on an H100: float16 forward at 60% of FlashAttention-2's TFLOP/s at S=4096, D=128;
decode at 80% of the HBM bandwidth the KV cache read needs.
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import banner, median_time, parser, print_case, torch_cuda_time, torch_or_none
from .lowp import HOPPER_TARGET, NOT_MEASURED, gpu_present, planned

#: (label, B, Hq, Hkv, Sq, Skv, D, causal)
FULL = ([(f"prefill S={s} D={d}{' causal' if c else ''}", 8, 16, 16, s, s, d, c)
         for d in (64, 128) for s in (512, 1024, 2048, 4096) for c in (False, True)]
        + [(f"decode Skv={s} GQA 32/8", 8, 32, 8, 1, s, 128, False)
           for s in (1024, 4096, 8192, 32768)])
DEFAULT = ([(f"prefill S={s} D={d}{' causal' if c else ''}", 1, 4, 4, s, s, d, c)
            for d in (64, 128) for s in (512, 1024) for c in (False, True)]
           + [(f"decode Skv={s} GQA 32/8", 1, 32, 8, 1, s, 128, False) for s in (4096, 16384)])
QUICK = [("prefill S=128 D=64 causal", 1, 2, 2, 128, 128, 64, True),
         ("decode Skv=2048 GQA 32/8", 1, 32, 8, 1, 2048, 64, False)]


def flops(b, hq, sq, skv, d, causal) -> float:
    """4 * D FLOPs per visible (query, key) pair."""
    if causal:
        pairs = sum(max(0, min(skv, i + 1 + skv - sq)) for i in range(sq))
    else:
        pairs = sq * skv
    return 4.0 * b * hq * pairs * d


def _torch_rows(q, k, v, causal, repeat):
    torch = torch_or_none()
    if torch is None:
        return []
    F = torch.nn.functional
    g = q.shape[1] // k.shape[1]
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tk, tv = tk.repeat_interleave(g, 1), tv.repeat_interleave(g, 1)
    mask = None
    if causal:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q.shape[2], k.shape[2])
    rows = [("torch SDPA (cpu)", median_time(
        lambda: F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask), repeat=repeat))]
    if torch.cuda.is_available():  # FlashAttention or cuDNN, as torch picks
        gq, gk, gv = (x.cuda().half() for x in (tq, tk, tv))
        # the causal bias holds no tensor: the same object serves every device (torch 2.11's
        # CausalBias.to("cuda") fails: 'CausalBias' object has no attribute 'seq_len_q')
        rows.append(("torch SDPA (cuda, float16)", torch_cuda_time(
            lambda: F.scaled_dot_product_attention(gq, gk, gv, attn_mask=mask), repeat)))
    return rows


def _half_row(compiled, target, arrays, want, causal, repeat):
    """Ours in float16 on a CUDA target (flash_mma, flash_wgmma on sm_90a): the row, its error
    against the float32 reference kept apart from the float32 rows' check."""
    b, sq, skv = gpucg.var("b"), gpucg.var("sq"), gpucg.var("skv")
    q, k, _ = arrays
    key = (target, "float16", q.shape[1], k.shape[1], q.shape[3], causal)
    if key not in compiled:
        compiled[key] = gpucg.compile(
            "attention", gpucg.tensor((b, q.shape[1], sq, q.shape[3]), "float16"),
            *(gpucg.tensor((b, k.shape[1], skv, q.shape[3]), "float16"),) * 2, target=target,
            causal=causal)
    f, be = compiled[key], get_backend(target)
    dev = [be.to_device(x.astype(np.float16)) for x in arrays]
    err = float(np.max(np.abs(be.to_host(f(*dev)).astype(np.float32) - want)))
    t = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=1)))
    return (f"gpucg {target} float16 [{f.last_impl}]", t, f"max abs err {err:.1e}",
            {"max_abs_err_float16": err})


def main(argv=()) -> int:
    p = parser("attention", "two small cases (for smoke tests)")
    p.add_argument("--full", action="store_true", help="the issue's sizes (slow on a CPU)")
    args = p.parse_args(list(argv))
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    cases = QUICK if args.quick else FULL if args.full else DEFAULT
    rng = np.random.default_rng(0)
    b, sq, skv = gpucg.var("b"), gpucg.var("sq"), gpucg.var("skv")
    compiled: dict = {}
    results = []
    print(banner("attention"))
    for label, nb, hq, hkv, s_q, s_kv, d, causal in cases:
        q = rng.standard_normal((nb, hq, s_q, d)).astype(np.float32)
        k, v = (rng.standard_normal((nb, hkv, s_kv, d)).astype(np.float32) for _ in range(2))
        work = flops(nb, hq, s_q, s_kv, d, causal) / 1e12
        peers = _torch_rows(q, k, v, causal, args.repeat)
        want = None
        ours = []
        for target in targets:
            if not backend_status(target)[0]:
                continue
            key = (target, hq, hkv, d, causal)
            if key not in compiled:
                compiled[key] = gpucg.compile(
                    "attention", gpucg.tensor((b, hq, sq, d), "float32"),
                    *(gpucg.tensor((b, hkv, skv, d), "float32"),) * 2, target=target,
                    causal=causal)
            f, be = compiled[key], get_backend(target)
            dev = [be.to_device(x) if target != "numpy" else x for x in (q, k, v)]
            got = be.to_host(f(*dev))
            if want is None:
                want = gpucg.get_op("attention").reference(
                    q, k, v, gpucg.get_op("attention").make_attrs(causal=causal))
            err = float(np.max(np.abs(got - want)))
            t = float(np.median(be.time(lambda: f(*dev), repeat=args.repeat, warmup=1)))
            ours.append((f"gpucg {target} [{f.last_impl}]", t, f"max abs err {err:.1e}",
                         {"max_abs_err": err}))
            if target.startswith("cuda"):  # float16: the tensor-core kernels, beside torch's
                ours.append(_half_row(compiled, target, (q, k, v), want, causal, args.repeat))
        if not peers:
            peers = [ours.pop(0)[:2]] if ours else []
        if peers:
            print_case(label, f"{label}: B={nb} Hq={hq} Hkv={hkv} Sq={s_q} Skv={s_kv} D={d}, "
                       f"float32, {work * 1e3:.3f} GFLOP", peers, ours, work, results,
                       unit="TFLOP/s")
        if not gpu_present():  # ours: flash_mma (prefill) or split-KV (decode) on CUDA
            shapes = [np.empty((nb, hq, s_q, d), np.float32)] + \
                [np.empty((nb, hkv, s_kv, d), np.float32)] * 2
            for dt in ("float16", "bfloat16"):
                rows = [planned(dt, "attention", shapes, {"causal": causal})]
                hopper = planned(dt, "attention", shapes, {"causal": causal}, HOPPER_TARGET)
                if hopper[0] != rows[0][0]:  # Hopper's own kernel (flash_wgmma)
                    rows.append(hopper)
                for what, plan in rows:
                    print(f"  {what:<42} {NOT_MEASURED} (nor FlashAttention, cuDNN): {plan}")
                    results.append({"case": label, "impl": f"GPU rows {dt}",
                                    "skipped": NOT_MEASURED, "plan": plan})
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if r.get("max_abs_err", 0) > 1e-3
           or r.get("max_abs_err_float16", 0) > 2e-2]
    return 1 if bad else 0
