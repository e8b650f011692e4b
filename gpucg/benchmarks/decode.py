"""Decode attention beside torch's SDPA: GB/s of KV cache read and tokens/s.

A decoding step reads every cached key and value once, so its figure of merit is the bandwidth
of that read: GB/s = (B * Hkv * Skv * D * 2 tensors * element bytes) / time, and tokens/s = B /
time (one new token a sequence a step). Rows: torch's scaled_dot_product_attention on the dense
(B, H, S, D) cache (enable_gqa, no copy of the KV heads), gpucg's attention (the decode kernel,
forced: attention_decode; the host implementation on numpy) on the same dense cache, and
gpucg's paged_attention on the same tokens in a paged cache (blocks of 16, shuffled). The
CUDA rows (float16, ours and torch's) and FlashInfer's and FlashAttention's decode kernels
(BatchDecodeWithPagedKVCacheWrapper, flash_attn_with_kvcache) need a GPU: without one they
print "not measured on a GPU". Goal on an H100, for the day it is measured: 80% of its HBM
bandwidth (3.35 TB/s) for the dense and the paged cache.
"""

from __future__ import annotations

import json

import numpy as np

import gpucg
from gpucg.runtime import backend_status, get_backend

from .common import banner, median_time, parser, print_case, torch_cuda_time, torch_or_none
from .lowp import NOT_MEASURED, gpu_present

#: (label, B, Hq, Hkv, Skv, D)
FULL = ([(f"GQA 32/8 Skv={s}", 8, 32, 8, s, 128) for s in (1024, 4096, 16384, 32768)]
        + [(f"MQA 32/1 Skv={s}", 8, 32, 1, s, 128) for s in (4096, 32768)])
DEFAULT = [("GQA 32/8 Skv=4096", 2, 32, 8, 4096, 128), ("MQA 32/1 Skv=8192", 2, 32, 1, 8192, 128)]
QUICK = [("GQA 8/2 Skv=1024", 1, 8, 2, 1024, 64)]
BLOCK = 16
#: the GPU peers' rows: (label, their Python package)
GPU_PEERS = (("FlashInfer decode (paged)", "flashinfer"),
             ("FlashAttention flash_attn_with_kvcache", "flash_attn"))


def paged_copy(k, v, rng):
    """The dense (B, Hkv, S, D) cache as a paged one: blocks of BLOCK tokens in shuffled
    order, the block table and the lengths."""
    b, hkv, s, d = k.shape
    per = -(-s // BLOCK)
    ids = rng.permutation(b * per).astype(np.int32)
    caches = []
    for x in (k, v):
        c = np.zeros((b * per, BLOCK, hkv, d), x.dtype)
        pad = np.zeros((b, hkv, per * BLOCK, d), x.dtype)
        pad[:, :, :s] = x
        c[ids] = pad.transpose(0, 2, 1, 3).reshape(b * per, BLOCK, hkv, d)
        caches.append(c)
    return caches[0], caches[1], ids.reshape(b, per), np.full(b, s, np.int32)


def _torch_rows(q, k, v, repeat):
    torch = torch_or_none()
    if torch is None:
        return []
    F = torch.nn.functional
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    rows = [("torch SDPA (cpu, dense cache)", median_time(
        lambda: F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True), repeat=repeat))]
    if torch.cuda.is_available():
        gq, gk, gv = (x.cuda().half() for x in (tq, tk, tv))
        rows.append(("torch SDPA (cuda, float16, dense)", torch_cuda_time(
            lambda: F.scaled_dot_product_attention(gq, gk, gv, enable_gqa=True), repeat)))
    return rows


def _ours(target, q, k, v, paged, want, repeat):
    """(label, seconds, max abs error) of the dense decode and the paged decode on a target."""
    be = get_backend(target)
    t = gpucg.tensor
    dense = gpucg.compile("attention", t(q.shape, "float32"), t(k.shape, "float32"),
                          t(v.shape, "float32"), target=target,
                          impl=None if target == "numpy" else "attention_decode")
    qp = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
    pf = gpucg.compile("paged_attention", *(t(a.shape, a.dtype.name) for a in (qp,) + paged),
                       target=target)
    rows = []
    for label, f, args, shape in (("dense", dense, (q, k, v), None),
                                  ("paged", pf, (qp,) + paged, (0, 2, 1, 3))):
        dev = [be.to_device(a) if target != "numpy" else a for a in args]
        got = np.asarray(be.to_host(f(*dev)))
        got = got if shape is None else got.transpose(shape)
        err = float(np.max(np.abs(got - want)))
        sec = float(np.median(be.time(lambda: f(*dev), repeat=repeat, warmup=1)))
        rows.append((f"gpucg {target} {label} [{f.last_impl.rsplit('.', 1)[0]}]", sec, err))
    return rows


def main(argv=()) -> int:
    p = parser("decode", "one small case (for smoke tests)")
    p.add_argument("--full", action="store_true", help="the issue's sizes (slow on a CPU)")
    args = p.parse_args(list(argv))
    targets = [x.strip() for x in args.targets.split(",") if x.strip()]
    cases = QUICK if args.quick else FULL if args.full else DEFAULT
    rng = np.random.default_rng(0)
    results = []
    print(banner("decode"))
    for label, b, hq, hkv, s, d in cases:
        q = rng.standard_normal((b, hq, 1, d)).astype(np.float32)
        k, v = (rng.standard_normal((b, hkv, s, d)).astype(np.float32) for _ in range(2))
        paged = paged_copy(k, v, rng)
        want = gpucg.get_op("attention").reference(q, k, v,
                                                   gpucg.get_op("attention").make_attrs())
        kv_gb = 2 * k.nbytes / 1e9
        peers = _torch_rows(q, k, v, args.repeat)
        ours = []
        for target in targets:
            if backend_status(target)[0]:
                for row, sec, err in _ours(target, q, k, v, paged, want, args.repeat):
                    ours.append((row, sec, f"{b / sec:,.0f} tokens/s; max abs err {err:.1e}",
                                 {"tokens_per_s": b / sec, "max_abs_err": err}))
        if not peers:
            peers = [ours.pop(0)[:2]] if ours else []
        if peers:
            print_case(label, f"{label}: B={b} Hq={hq} Hkv={hkv} Sq=1 Skv={s} D={d}, float32; "
                       f"GB/s of the KV cache read ({kv_gb * 1e3:.1f} MB)", peers, ours, kv_gb,
                       results)
        gpu = gpu_present()
        rows = ([] if gpu else ["gpucg cuda float16 (dense, paged)"]) + [n for n, _ in GPU_PEERS]
        for what in rows:  # the peers' own kernels are not called by this benchmark
            why = NOT_MEASURED if not gpu else "not timed by this benchmark"
            print(f"  {what:<42} {why}")
            results.append({"case": label, "impl": what, "skipped": why})
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    bad = [r for r in results if r.get("max_abs_err", 0) > 1e-3]
    return 1 if bad else 0
