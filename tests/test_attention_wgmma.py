"""flash_wgmma, the Hopper attention forward: its OpenCL twin forced on PoCL (wgmma, TMA,
mbarriers and the quad shuffles emulated, the roles in one legal order of the pipeline's
protocol) against torch's float64 attention of the dtype-rounded inputs, at sizes no tile
divides (Sq and Skv ragged, Skv below one key tile, Sq = 1, Sq > Skv under causal), GQA,
batches, both layouts, D = 64 and 128, float16 and bfloat16, the log-sum-exp; selection and
explain by capability and by what it does not build; the sm_90a kernel through NVRTC, ptxas and
cuobjdump; its launch on the stand-in. One compiled twin (symbolic sizes)
serves every shape of a group: a PoCL compile of the emulated kernel takes about 20 s."""

import functools

import numpy as np
import pytest

import gpucg
from gpucg import var
from gpucg.strategies import attention_wgmma

from conftest import backend_or_skip
from test_attention import check, make, torch_ref
from test_gemm_wgmma import sm_90a_ops

SLOW = pytest.mark.exhaustive


@functools.lru_cache(maxsize=None)
def compiled(dtype, d, config=None, **attrs):
    """One twin a (dtype, D, config, attributes), every size symbolic."""
    backend_or_skip("opencl")
    bshd = attrs.get("layout") == "BSHD"
    q = (var("b"), var("sq"), var("hq"), d) if bshd else (var("b"), var("hq"), var("sq"), d)
    kv = (var("b"), var("skv"), var("hkv"), d) if bshd else (var("b"), var("hkv"), var("skv"), d)
    types = [gpucg.tensor(q, dtype), gpucg.tensor(kv, dtype), gpucg.tensor(kv, dtype)]
    f = gpucg.compile("attention", *types, target="opencl", impl="flash_wgmma",
                      config=dict(config) if config else None, **attrs)
    assert f.selection.choices[0].impl.name == "flash_wgmma.opencl"
    return f


def check_group(dtype, d, shapes, config=None, **attrs):
    """Every (B, Hq, Hkv, Sq, Skv) of ``shapes`` through one compiled twin, against torch."""
    op = compiled(dtype, d, tuple(sorted(config.items())) if config else None, **attrs)
    rng = np.random.default_rng(d + len(shapes))
    layout = attrs.get("layout", "BHSD")
    for b, hq, hkv, sq, skv in shapes:
        qs, ks = ((b, sq, hq, d), (b, skv, hkv, d)) if layout == "BSHD" else \
            ((b, hq, sq, d), (b, hkv, skv, d))
        q, k, v = make(qs, dtype, rng), make(ks, dtype, rng), make(ks, dtype, rng)
        ref = {a: attrs[a] for a in ("causal", "layout", "scale") if a in attrs}
        want, want_lse = torch_ref(q, k, v, **ref)
        got = op(q, k, v)
        assert op.last_impl == "flash_wgmma.opencl", op.last_impl
        tag = f"{dtype} D={d} {(b, hq, hkv, sq, skv)} {attrs} {config}"
        if attrs.get("return_lse"):
            got, lse = got
            check(lse, want_lse, "float32", tag + " lse")
        assert got.dtype == q.dtype and got.shape == q.shape, tag
        check(got, want, dtype, tag)


#: (B, Hq, Hkv, Sq, Skv): GQA and a batch over several query and key tiles, all ragged; one
#: query on fewer keys than a tile; Sq > Skv (causal: the top rows see no key); MQA
SHAPES = [(2, 4, 2, 67, 40), (1, 2, 1, 1, 20), (1, 2, 1, 9, 5), (1, 3, 1, 20, 33)]


def test_float16_d64_gqa_causal_lse():
    check_group("float16", 64, SHAPES, causal=True, return_lse=True)


#: the GPU's default geometry on the twin (two consumers, 128 keys a tile), and deeper rings
TWO = {"consumers": 2, "bkv": 128, "stages": 2}
DEEP = {"consumers": 1, "bkv": 64, "stages": 3}
EXHAUSTIVE = [
    ("bfloat16", 128, None, {}),
    ("float16", 128, TWO, {"causal": True, "return_lse": True}),
    ("bfloat16", 64, DEEP, {"layout": "BSHD", "causal": True}),
    ("float16", 128, DEEP, {"layout": "BSHD", "return_lse": True}),
    ("bfloat16", 64, TWO, {"scale": 0.3}),
]


@SLOW
@pytest.mark.parametrize("dtype, d, config, attrs", EXHAUSTIVE,
                         ids=[f"{c[0]}-D{c[1]}-{c[2]}-{sorted(c[3])}" for c in EXHAUSTIVE])
def test_every_head_dim_dtype_layout_and_geometry(dtype, d, config, attrs):
    shapes = [(2, 4, 2, 70, 133), (1, 4, 1, 1, 20), (1, 2, 1, 131, 70), (1, 2, 2, 3, 0)]
    check_group(dtype, d, shapes, config, **attrs)


# Under Oclgrind: tests/test_oclgrind.py's attention sweep forces flash_wgmma on the op's small
# case "flash_wgmma, one key tile" (32- and 64-bit indexing, results against NumPy, zero reports).


# -- selection ---------------------------------------------------------------------------------

def _explain(dtype="float16", d=128, target="cuda -arch=sm_90a", mask=False, **attrs):
    t = [gpucg.tensor((1, 16, 4096, d), dtype)] * 3
    if mask:
        t.append(gpucg.tensor((4096, 4096), "bool"))
    sel = gpucg.explain("attention", *t, target=target, records=False, **attrs)
    return sel, {c.name: c for c in sel.candidates}


def test_selection_follows_the_capability_and_what_is_built():
    sel, c = _explain()
    assert sel.choices[0].impl.name == "flash_wgmma.cuda"
    assert c["flash_wgmma.cuda"].plevel > c["flash_mma.cuda"].plevel
    assert c["attention_split.cuda"].plevel > c["flash_wgmma.cuda"].plevel  # decoding keeps it
    for arch in ("sm_90", "sm_80"):
        sel, c = _explain(target=f"cuda -arch={arch}")
        assert sel.choices[0].impl.name == "flash_mma.cuda"
        assert f"{arch} has no wgmma" in c["flash_wgmma.cuda"].reason
    for why, kw in (("float16 and bfloat16", {"dtype": "float32", "allow_tf32": True}),
                    ("D=96 is not one of (64, 128)", {"d": 96}),
                    ("a mask input", {"mask": True}), ("soft-capping", {"softcap": 5.0}),
                    ("sliding window", {"window": 64, "causal": True})):
        sel, c = _explain(**kw)
        assert why in c["flash_wgmma.cuda"].reason, (kw, c["flash_wgmma.cuda"].reason)
        assert sel.choices[0].impl.name != "flash_wgmma.cuda"
    sel, c = _explain(target="opencl")
    assert c["flash_wgmma.opencl"].reason.startswith("lower plevel")


def test_explain_on_the_command_line_names_flash_wgmma(capsys):
    from gpucg import cli

    shape = "1,16,4096,128:float16"
    assert cli.main(["explain", "attention", "--input", shape, "--input", shape, "--input",
                     shape, "--target", "cuda -arch=sm_90a"]) == 0
    out = capsys.readouterr().out
    chosen = [ln for ln in out.splitlines() if " selected " in ln]
    assert len(chosen) == 1 and "flash_wgmma.cuda" in chosen[0], out
    assert "flash_mma.cuda" in out and "lower plevel than flash_wgmma.cuda" in out
    print(out)


def test_space_and_shared_memory():
    """The GPU default at D = 128 (two consumers, 128 keys, 2 stages) holds over 128 KiB of
    dynamic shared memory within sm_90a's opt-in limit; every config of the space fits."""
    from gpucg.arch import ARCHS

    limit = ARCHS["sm_90"].smem_per_block_optin
    for d in attention_wgmma.HEAD_DIMS:
        for kind in ("f16", "bf16"):
            space = attention_wgmma.space(kind, d, False, limit)
            for c in space:
                geo = attention_wgmma.config_geometry(dict(c, kind=kind, D=d))
                assert geo.smem_bytes <= limit
    c = attention_wgmma.space("f16", 128, False, limit).default
    g = attention_wgmma.config_geometry(dict(c, kind="f16", D=128))
    assert c["pingpong"] == 1
    assert (g.bq, g.bkv, g.threads) == (128, 128, 384) and g.smem_bytes > 128 * 1024
    assert g.Q.boxes == g.K.boxes == g.V.boxes == 2 and g.K.box == g.V.box == (64, 128)


# -- the CUDA kernel without a GPU -------------------------------------------------------------

def _cuda(causal=False):
    t = gpucg.tensor((1, 16, 4096, 128), "float16")
    return gpucg.compile("attention", t, t, t, target="cuda -arch=sm_90a", causal=causal)


@pytest.mark.parametrize("causal", [False, pytest.param(True, marks=SLOW)])
def test_sm_90a_kernel_in_sass(sass_or_skip, causal):
    """The kernel selected for D = 128, S = 4096, float16: HGMMA, UTMALDG, SYNCS, setmaxnreg
    honoured (no C7508), no local memory, over 128 KiB of dynamic shared memory."""
    f = _cuda(causal)
    assert f.selection.choices[0].impl.name == "flash_wgmma.cuda"
    assert f.specs(0)["main"].dynamic_local > 128 * 1024
    for key, ops in sm_90a_ops(f, "main", ("HGMMA", "UTMALDG", "SYNCS", "SHFL")).items():
        assert {"HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "SHFL"} <= ops, key
        assert not ops & {"LDL", "STL", "HMMA"}, key


def test_launch_on_the_stand_in(nvrtc_or_skip):
    """Three tensor maps by value (boxes of 64 of D x 128 rows), the dynamic shared memory
    attribute raised, 384 threads (whole warpgroups), a work-group a (batch, head, 128 rows);
    BSHD's maps (heads inside rows), GQA, the log-sum-exp and 64-bit indexing too."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_90a")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = _cuda()
        f(*(cupy.empty((1, 16, 4096, 128), "float16") for _ in range(3)))
        q, kv = gpucg.tensor((2, 300, 8, 64), "bfloat16"), gpucg.tensor((2, 500, 2, 64),
                                                                        "bfloat16")
        g = gpucg.compile("attention", q, kv, kv, target="cuda -arch=sm_90a", layout="BSHD",
                          causal=True, return_lse=True, index="int64")
        assert g.selection.choices[0].impl.name == "flash_wgmma.cuda"
        g(*(cupy.empty(t.shape, "bfloat16") for t in (q, kv, kv)))
    ln, wide = cupy.launches
    assert ln.block == (384,) and ln.grid == (16 * 32,) and ln.shared_mem > 128 * 1024
    assert ("gpucg_attention_flash_wgmma_main", "max_dynamic_shared_size_bytes",
            ln.shared_mem) in cupy.attributes
    maps = [a for a in ln.args if type(a).__name__ == "TensorMapArg"]
    assert [m.tensor_map.box for m in maps] == [(64, 128, 1, 1)] * 3
    assert [m.tensor_map.dims for m in maps] == [(128, 4096, 16, 1)] * 3
    assert wide.block == (384,) and wide.grid == (2 * 8 * 3,)
    maps = [a.tensor_map for a in wide.args if type(a).__name__ == "TensorMapArg"]
    assert [m.box for m in maps] == [(64, 1, 128, 1)] * 3
    assert [m.dims for m in maps] == [(64, 8, 300, 2), (64, 2, 500, 2), (64, 2, 500, 2)]


# -- the ping-pong schedule ------------------------------------------------------------------

def _pingpong(kt: int, stages: int, init: bool = True, final: bool = True) -> set:
    """The end states of every interleaving of the template's two consumers (their named
    barriers 8 + c, as flash_wgmma.j2 orders them: consumer 1's first arrival, a sync before
    tile 0's S, an arrival after each S, a sync before each P V, a last arrival) and the
    producer's ring (tile i fills once both consumers released tile i - stages). Each state:
    (program counters, each barrier's pending arrivals). A program that cannot finish
    leaves its counter short."""
    progs = []
    for c in (0, 1):
        ops = [("arrive", 0)] if init and c == 1 else []
        for i in range(kt):
            ops += [("full", i)] + ([("sync", c)] if i == 0 else [])
            ops += [("arrive", 1 - c), ("sync", c), ("release", i)]
        progs.append(tuple(ops + ([("arrive", 1 - c)] if final else [])))
    ends, seen = set(), set()
    todo = [((0, 0), 0, (0, 0), (0, 0), (-1, -1))]  # pcs, filled, arrivals, generations, waiting
    while todo:
        state = todo.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs, filled, arr, gen, wait = state
        nxt = []
        released = [sum(1 for op in progs[c][:pcs[c]] if op[0] == "release") for c in (0, 1)]
        if filled < kt and (filled < stages or min(released) > filled - stages):
            nxt.append((pcs, filled + 1, arr, gen, wait))
        for c in (0, 1):
            if wait[c] >= 0:  # blocked in a sync until its barrier's generation moves on
                if gen[c] > wait[c]:
                    nxt.append((pcs, filled, arr, gen, tuple(-1 if x == c else wait[x] for x in (0, 1))))
                continue
            if pcs[c] == len(progs[c]):
                continue
            op, arg = progs[c][pcs[c]]
            pc = tuple(p + (x == c) for x, p in enumerate(pcs))
            if op == "full" and arg < filled or op == "release":
                nxt.append((pc, filled, arr, gen, wait))
            elif op in ("arrive", "sync"):
                a, g = list(arr), list(gen)
                a[arg] += 1
                if a[arg] == 2:
                    a[arg], g[arg] = 0, g[arg] + 1
                w = tuple(gen[arg] if x == c and op == "sync" else wait[x] for x in (0, 1))
                nxt.append((pc, filled, tuple(a), tuple(g), w))
        if not nxt:
            ends.add((pcs, tuple(len(p) for p in progs), arr))
        todo += nxt
    return ends


def test_pingpong_schedule_never_deadlocks():
    """Every interleaving ends with both consumers done (at most one arrival left pending on
    a barrier), for 0-4 key tiles and rings of 2-3 stages; without consumer 1's first arrival
    or the last ones, some interleaving deadlocks."""
    for kt in range(5):
        for stages in (2, 3):
            for pcs, lens, left in _pingpong(kt, stages):
                assert pcs == lens and max(left) <= 1, (kt, stages, pcs, left)
    assert any(pcs != lens for pcs, lens, _ in _pingpong(2, 2, init=False))
    assert any(pcs != lens for pcs, lens, _ in _pingpong(2, 2, final=False))
