"""flash_mma, the tensor-core attention forward, against torch's scaled_dot_product_attention in
float64: its OpenCL twin forced (the CUDA kernel with mma, ldmatrix, cp.async and the quad
shuffles emulated) in float16, bfloat16 and float32 with TF32; grouped and multi-query heads,
bottom-right causal with Sq < Skv and Sq > Skv, Sq = 1, sizes that are no multiple of a tile,
Skv = 0, boolean and additive masks broadcast, soft-capping, both layouts, every head dim it
takes, fully masked rows, the log-sum-exp, the element-by-element copy of unaligned operands.
Each PoCL compile of an emulated kernel takes tens of seconds: one compiled operator (symbolic
sizes) serves all the shapes of a group, and the groups past the first few are exhaustive.
Also: where selection puts it (explain), and why D=256 is left to the SIMT kernel."""

import functools

import numpy as np
import pytest

import gpucg
from gpucg import var
from gpucg.strategies import attention_mma, gemm_mma
from test_attention import check, make, torch_ref

TF32_TOL = 5e-3


def _mask_type(shape, dtype):
    names = ("b", "hq", "sq", "skv")[4 - len(shape):]
    return gpucg.tensor(tuple(1 if s == 1 else var(n) for s, n in zip(shape, names)), dtype)


@functools.lru_cache(maxsize=None)
def compiled(dtype, d, mask=None, config=None, **attrs):
    """One twin a (dtype, D, mask rank and broadcast, attributes): every size symbolic."""
    bshd = attrs.get("layout") == "BSHD"
    q = (var("b"), var("sq"), var("hq"), d) if bshd else (var("b"), var("hq"), var("sq"), d)
    kv = (var("b"), var("skv"), var("hkv"), d) if bshd else (var("b"), var("hkv"), var("skv"), d)
    types = [gpucg.tensor(q, dtype), gpucg.tensor(kv, dtype), gpucg.tensor(kv, dtype)]
    if mask is not None:
        types.append(_mask_type(*mask))
    return gpucg.compile("attention", *types, target="opencl", impl="flash_mma",
                         config=dict(config) if config else None, **attrs)


def _inputs(rng, dtype, b, hq, hkv, sq, skv, d, layout, mask):
    qs, ks = ((b, sq, hq, d), (b, skv, hkv, d)) if layout == "BSHD" else \
        ((b, hq, sq, d), (b, hkv, skv, d))
    q, k, v = make(qs, dtype, rng), make(ks, dtype, rng), make(ks, dtype, rng)
    m = None
    if mask is not None:
        shape = tuple({"b": b, "hq": hq, "sq": sq, "skv": skv}[n] if s != 1 else 1
                      for s, n in zip(mask[0], ("b", "hq", "sq", "skv")[4 - len(mask[0]):]))
        if mask[1] == "bool":
            m = rng.random(shape) < 0.7
            if m.size:
                m.reshape(-1, shape[-1])[0] = False  # a fully masked row
        else:
            m = make(shape, mask[1], rng, 2.0)
            if m.size:
                m[..., 0] = -np.inf  # a key no row sees
    return q, k, v, m


def check_group(dtype, d, shapes, mask=None, config=None, **attrs):
    """Every (B, Hq, Hkv, Sq, Skv) of ``shapes`` through one compiled twin, against torch."""
    op = compiled(dtype, d, mask, tuple(sorted(config.items())) if config else None, **attrs)
    rng = np.random.default_rng(d)
    tol = {"float32": TF32_TOL}.get(dtype, None)
    for shape in shapes:
        q, k, v, m = _inputs(rng, dtype, *shape[:5], d, attrs.get("layout", "BHSD"), mask)
        ref = {a: attrs[a] for a in ("causal", "scale", "softcap", "layout") if a in attrs}
        want, want_lse = torch_ref(q, k, v, mask=m, **ref)
        got = op(*((q, k, v) if m is None else (q, k, v, m)))
        assert op.last_impl.startswith("flash_mma"), op.last_impl
        tag = f"{dtype} D={d} {shape} {attrs}"
        if attrs.get("return_lse"):
            got, lse = got
            check(lse, want_lse, "float32", tag + " lse")
        assert got.dtype == q.dtype and got.shape == q.shape, tag
        if tol:
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol,
                                       err_msg=tag)
        else:
            check(got, want, dtype, tag)
        if attrs.get("causal") and shape[3] > shape[4]:  # the top rows see no key: zeros
            top = to_rows(got, attrs.get("layout", "BHSD"))[:, :, :shape[3] - shape[4]]
            assert not np.any(top.astype(np.float64)), tag


def to_rows(x, layout):
    return x if layout == "BHSD" else x.transpose(0, 2, 1, 3)


#: (B, Hq, Hkv, Sq, Skv): GQA with Sq < Skv over several query and key tiles, MQA with one
#: query, Sq > Skv, no keys at all
SHAPES = [(2, 4, 2, 19, 45), (1, 4, 1, 1, 33), (1, 2, 1, 40, 70), (1, 2, 2, 9, 5),
          (1, 2, 1, 3, 0)]


#: two warps a work-group of two query atoms each (the twin's default is one warp of one: the
#: emulation's cost grows with them), q fragments read from the q tile each k-step, three
#: stages and small key tiles (more tiles in flight, unmasked ones among them)
DEEP = {"warps": 2, "qm": 2, "bkv": 16, "stages": 3, "qres": False}


def test_float16_gqa_causal_lse():
    check_group("float16", 64, SHAPES, config=DEEP, causal=True, return_lse=True)


def test_unaligned_operands_copy_element_by_element(monkeypatch):
    """vec = 0 (an operand not 16-byte aligned, o not aligned to a pair): the scalar copies
    fill the same tiles, the outputs are stored one at a time."""
    monkeypatch.setattr(attention_mma, "alignment_of", lambda a: 1)
    monkeypatch.setattr(gemm_mma, "alignment_of", lambda a: 1)
    check_group("float16", 64, SHAPES[:2], config=DEEP, causal=True, return_lse=True)


def test_bfloat16_bshd_boolean_mask_softcap():
    check_group("bfloat16", 32, [(2, 2, 1, 7, 11), (1, 4, 2, 33, 40)],
                mask=((2, 1, 7, 11), "bool"), layout="BSHD", softcap=3.0)


def test_tf32_causal_additive_mask():
    check_group("float32", 32, [(1, 2, 1, 6, 13), (2, 2, 2, 20, 20)],
                mask=((1, 1, 6, 13), "float32"), causal=True, allow_tf32=True)


EXHAUSTIVE = [
    ("bfloat16", 80, {"layout": "BSHD", "softcap": 3.0}, ((2, 1, 7, 11), "bool")),
    ("float16", 128, {"scale": 0.3, "return_lse": True}, ((9,), "float16")),
    ("float16", 96, {"layout": "BSHD", "causal": True, "softcap": 20.0}, None),
    ("bfloat16", 32, {"causal": True, "return_lse": True}, ((1, 4, 1, 1), "bool")),
    ("bfloat16", 128, {"layout": "BSHD"}, ((2, 1, 1, 1), "bfloat16")),
    ("float32", 64, {"allow_tf32": True, "layout": "BSHD", "softcap": 5.0}, None),
    ("float32", 128, {"allow_tf32": True, "causal": True}, ((1, 1), "bool")),
    ("float16", 80, {"causal": True}, None),
    ("float16", 32, {"causal": True}, None),
]


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype, d, attrs, mask", EXHAUSTIVE,
                         ids=[f"{c[0]}-D{c[1]}-{sorted(c[2])}" for c in EXHAUSTIVE])
def test_every_head_dim_and_mix(dtype, d, attrs, mask):
    shapes = [(2, 4, 1, 1, 70), (1, 4, 2, 23, 50), (1, 2, 2, 37, 20), (1, 4, 1, 2, 0)]
    check_group(dtype, d, shapes, mask=mask, **attrs)


def _explain(dtype, d, target="cuda", **attrs):
    t = [gpucg.tensor((var("b"), 32, var("sq"), d), dtype)] + \
        [gpucg.tensor((var("b"), 8, var("skv"), d), dtype)] * 2
    return {c.name: c for c in gpucg.explain("attention", *t, target=target, records=False,
                                               **attrs).candidates}


def test_selection():
    """CUDA: flash_mma above the SIMT kernel for 16-bit types and TF32, below split-KV
    decoding (on its condition); exact float32 and D=256 excluded with the reason; OpenCL:
    the twin is listed below the SIMT kernel (forced only)."""
    for dtype, attrs in (("float16", {}), ("bfloat16", {}), ("float32", {"allow_tf32": True})):
        c = _explain(dtype, 128, **attrs)
        assert c["flash_mma.cuda"].verdict != "excluded"
        assert c["attention_split.cuda"].plevel > c["flash_mma.cuda"].plevel > \
            c["attention_simt.cuda"].plevel
    assert "stays exact float32" in _explain("float32", 64)["flash_mma.cuda"].reason
    # D=256 reads its q fragments from shared memory each k-step (the accumulators fill the
    # registers)
    assert _explain("float16", 256)["flash_mma.cuda"].verdict != "excluded"
    c = _explain("float16", 64, "opencl")
    assert c["flash_mma.opencl"].plevel < c["attention_simt.opencl"].plevel


def test_space_is_pruned_by_the_resource_check():
    """Every config of the space fits the target's shared memory and the register estimate;
    the GPU defaults at D=128 hold 128 query rows and 3 or more stages of dynamic shared
    memory over 48 KiB on sm_80 and sm_90."""
    from gpucg.arch import ARCHS

    for limit in (ARCHS["sm_80"].smem_per_block_optin, ARCHS["sm_90"].smem_per_block_optin):
        for d, kind in ((64, "f16"), (128, "f16"), (128, "tf32"), (96, "bf16"), (256, "f16")):
            for small in (False, True):
                space = attention_mma.space_for(d, kind, small, limit)
                configs = list(space)
                assert space.default in configs and configs
                for c in configs:
                    g = attention_mma.geometry(kind, d, **c)
                    assert g.plan.bytes <= limit and g.regs() <= attention_mma.REGS_MAX
        g = attention_mma.geometry("f16", 128, **attention_mma.space_for(128, "f16", False,
                                                                          limit).default)
        assert g.bq == 128 and g.stages >= 3 and g.plan.bytes > 48 * 1024
    # rows of 80 halves are 10 chunks, padded to 16 for the swizzle
    assert attention_mma.geometry("f16", 80, 1, 1, 16, 2, True).tiles[1].row_bytes == 256
