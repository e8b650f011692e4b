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
SHAPES = [(2, 4, 2, 70, 75), (1, 2, 1, 1, 20), (1, 2, 1, 9, 5), (1, 3, 1, 66, 48)]


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
                assert attention_wgmma.geometry(kind, d, **c).smem_bytes <= limit
    g = attention_wgmma.geometry("f16", 128, **attention_wgmma.space("f16", 128, False,
                                                                     limit).default)
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
    attribute raised, 384 threads (whole warpgroups), a work-group a (batch, head, 128 rows)."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_90a")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = _cuda()
        f(*(cupy.empty((1, 16, 4096, 128), "float16") for _ in range(3)))
    (ln,) = cupy.launches
    assert ln.block == (384,) and ln.grid == (16 * 32,) and ln.shared_mem > 128 * 1024
    assert ("gpucg_attention_flash_wgmma_main", "max_dynamic_shared_size_bytes",
            ln.shared_mem) in cupy.attributes
    maps = [a for a in ln.args if type(a).__name__ == "TensorMapArg"]
    assert [m.tensor_map.box for m in maps] == [(64, 128, 1, 1)] * 3
    assert [m.tensor_map.dims for m in maps] == [(128, 4096, 16, 1)] * 3
