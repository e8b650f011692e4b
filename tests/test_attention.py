"""attention against torch's scaled_dot_product_attention in float64, on every backend here:
every implementation forced (numpy's blocked online softmax; on OpenCL the SIMT kernel and
split-KV decoding), float16/bfloat16/float32, grouped and multi-query heads, bottom-right
causal with Sq < Skv and Sq > Skv, Sq = 1, odd lengths, Skv = 0, boolean and additive masks
broadcast, soft-capping, both layouts, every fast-path head dim, fully masked rows, the
log-sum-exp, the prefill/decode dispatch and bad input."""

import functools
import re

import numpy as np
import pytest

import gpucg
from gpucg import var
from gpucg.half import ml_dtypes
from gpucg.strategies import attention as strat



class _Torch:
    """torch, imported at first use: its import is two seconds of every test collection."""

    def __getattr__(self, name):
        return getattr(pytest.importorskip("torch"), name)


torch = _Torch()

IMPLS = {"numpy": ("numpy_attention",), "opencl": ("attention_simt", "attention_split"),
         "cuda": ("attention_simt", "attention_split", "flash_mma")}
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def make(shape, dtype, rng, scale=1.0):
    x = rng.standard_normal(shape) * scale
    return x.astype(ml_dtypes().bfloat16 if dtype == "bfloat16" else dtype)


def to_bhsd(x, layout):
    return x if layout == "BHSD" else x.transpose(0, 2, 1, 3)


def torch_ref(q, k, v, *, causal=False, mask=None, scale=None, softcap=None, layout="BHSD"):
    """float64 torch: SDPA where it has the arguments (soft-capping spelled out), rows that see
    no key set to zero (SDPA gives NaN there), and the log-sum-exp."""
    q, k, v = (torch.from_numpy(to_bhsd(x, layout).astype(np.float64)) for x in (q, k, v))
    sq, skv, g = q.shape[2], k.shape[2], q.shape[1] // max(k.shape[1], 1)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    keep = torch.ones(q.shape[:3] + (skv,), dtype=torch.bool)
    add = torch.zeros(q.shape[:3] + (skv,), dtype=torch.float64)
    if mask is not None:
        m = torch.from_numpy(np.asarray(mask).astype(np.float64 if mask.dtype != bool else bool))
        if m.dtype == torch.bool:
            keep = keep & m
        else:
            add = add + m
    if causal:
        keep = keep & (torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + (skv - sq))
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    s = torch.where(keep, s + add, -torch.inf)
    lse = torch.logsumexp(s, -1) if skv else torch.full(q.shape[:3], -torch.inf)
    if softcap is None and skv:
        bias = torch.where(keep, add, -torch.inf)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    else:
        o = torch.softmax(s, -1) @ v if skv else torch.zeros(q.shape, dtype=torch.float64)
    o = torch.where(torch.isfinite(lse)[..., None], o, 0.0)
    return to_bhsd(o.numpy(), layout), lse.numpy()


def _sym(shape, names):
    return tuple(s if s in (0, 1) else var(n) for s, n in zip(shape, names))


@functools.lru_cache(maxsize=None)
def _compiled(target, impl, dtype, shapes, mask_key, **attrs):
    """One compiled attention a (target, impl, dtype, D, attributes): sizes symbolic."""
    layout = attrs.get("layout", "BHSD")
    qn = ("b", "hq", "sq") if layout == "BHSD" else ("b", "sq", "hq")
    kn = ("b", "hkv", "skv") if layout == "BHSD" else ("b", "skv", "hkv")
    types = [gpucg.tensor(_sym(shape[:3], names) + (shape[3],), dtype)
             for shape, names in zip(shapes, (qn, kn, kn))]
    if mask_key is not None:
        mshape, mdtype = mask_key
        names = ("b", "hq", "sq", "skv")[4 - len(mshape):]
        types.append(gpucg.tensor(tuple(1 if s == 1 else var(n) for s, n in
                                        zip(mshape, names)), mdtype))
    return gpucg.compile("attention", *types, target=target, impl=impl, **attrs)


def _dtype(x) -> str:
    return "bfloat16" if "bfloat16" in str(x.dtype) else x.dtype.name


def run(target, impl, q, k, v, mask=None, **attrs):
    mask_key = None if mask is None else (mask.shape, _dtype(mask))
    op = _compiled(target, impl, _dtype(q), (q.shape, k.shape, v.shape), mask_key, **attrs)
    return op(*((q, k, v) if mask is None else (q, k, v, mask)))


def applies(target, impl, q, k, v, mask=None, **attrs) -> bool:
    """Whether the implementation takes this call (flash_mma: 16-bit data, its head sizes)."""
    mask_key = None if mask is None else (mask.shape, _dtype(mask))
    try:
        _compiled(target, impl, _dtype(q), (q.shape, k.shape, v.shape), mask_key, **attrs)
    except gpucg.InputError as exc:
        if "does not apply" in str(exc):
            return False
        raise
    return True


def check(got, want, dtype, tag):
    tol = TOL[dtype]
    got = np.asarray(got).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=tag)


#: (label, B, Hq, Hkv, Sq, Skv, D, dtype, attributes, mask (shape, dtype) or None)
CASES = [
    ("float32 odd lengths", 2, 3, 3, 37, 53, 64, "float32", {}, None),
    ("GQA causal Sq < Skv", 1, 4, 2, 19, 45, 64, "float32", {"causal": True}, None),
    ("causal Sq > Skv: top rows see nothing", 1, 2, 1, 9, 5, 32, "float32",
     {"causal": True, "return_lse": True}, None),
    ("MQA decode Sq = 1", 2, 4, 1, 1, 33, 64, "float16", {}, None),
    ("float16 D=128 causal", 1, 2, 2, 17, 17, 128, "float16", {"causal": True}, None),
    ("bfloat16 D=80 BSHD", 2, 2, 1, 7, 11, 80, "bfloat16", {"layout": "BSHD"}, None),
    ("boolean mask broadcast over heads", 2, 2, 2, 6, 13, 32, "float32", {},
     ((2, 1, 6, 13), "bool")),
    ("additive mask over keys only, scale", 1, 2, 2, 5, 9, 32, "float32",
     {"scale": 0.3, "return_lse": True}, ((9,), "float32")),
    ("softcap with a float16 additive mask", 1, 2, 1, 8, 8, 96, "float16",
     {"softcap": 3.0, "causal": True}, ((1, 1, 8, 8), "float16")),
    ("Skv = 0", 1, 2, 2, 3, 0, 32, "float32", {"return_lse": True}, None),
    ("D = 256", 1, 1, 1, 3, 20, 256, "float32", {}, None),
]


def make_inputs(case, rng):
    _, b, hq, hkv, sq, skv, d, dtype, attrs, mask = case
    layout = attrs.get("layout", "BHSD")
    qs, ks = (b, hq, sq, d), (b, hkv, skv, d)
    if layout == "BSHD":
        qs, ks = (b, sq, hq, d), (b, skv, hkv, d)
    q, k, v = make(qs, dtype, rng), make(ks, dtype, rng), make(ks, dtype, rng)
    m = None
    if mask is not None:
        shape, mdt = mask
        m = (rng.random(shape) < 0.7) if mdt == "bool" else make(shape, mdt, rng, 2.0)
        if mdt == "bool":
            m.reshape(-1, shape[-1])[0] = False  # a fully masked row
        else:
            m[..., 0] = -np.inf  # a key no row sees
    return q, k, v, m


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_torch(target, case):
    rng = np.random.default_rng(7)
    q, k, v, m = make_inputs(case, rng)
    attrs = case[8]
    want, want_lse = torch_ref(q, k, v, mask=m, **{a: attrs[a] for a in attrs
                                                     if a != "return_lse"})
    for impl in IMPLS[target]:
        if impl == "attention_split" or not applies(target, impl, q, k, v, m, **attrs):
            continue
        got = run(target, impl, q, k, v, m, **attrs)
        if attrs.get("return_lse"):
            got, lse = got
            check(lse, want_lse, "float32", f"{case[0]} {impl} lse")
        assert got.dtype == q.dtype and got.shape == q.shape
        check(got, want, case[7], f"{case[0]} {impl}")


DECODE = [
    ("decode GQA 4/2", 1, 4, 2, 1, 1100, 64, "float32", {"return_lse": True}, None),
    ("decode causal Sq = 5, float16", 2, 2, 1, 5, 1030, 32, "float16", {"causal": True},
     None),
    ("decode bool mask, BSHD, bfloat16", 1, 2, 2, 2, 1040, 32, "bfloat16",
     {"layout": "BSHD"}, ((1, 1, 2, 1040), "bool")),
    ("decode softcap, additive mask", 1, 2, 1, 3, 1024, 32, "float32", {"softcap": 5.0},
     ((1, 2, 3, 1024), "float32")),
]


@pytest.mark.parametrize("case", DECODE, ids=[c[0] for c in DECODE])
def test_decode(target, case):
    """Short queries on long keys: split-KV decoding on OpenCL (and the fallback)."""
    rng = np.random.default_rng(3)
    q, k, v, m = make_inputs(case, rng)
    attrs = case[8]
    want, want_lse = torch_ref(q, k, v, mask=m, **{a: attrs[a] for a in attrs
                                                     if a != "return_lse"})
    for impl in IMPLS[target]:
        if not applies(target, impl, q, k, v, m, **attrs):
            continue
        got = run(target, impl, q, k, v, m, **attrs)
        if attrs.get("return_lse"):
            got, lse = got
            check(lse, want_lse, "float32", f"{case[0]} {impl} lse")
        check(got, want, case[7], f"{case[0]} {impl}")


def test_splits_fill_the_device():
    assert strat.splits_for(1 * 32, 32768, 32, 132) == (9, 3648)
    splits, chunk = strat.splits_for(4, 1100, 64, 132)
    assert chunk % 64 == 0 and (splits - 1) * chunk < 1100 <= splits * chunk
    assert strat.splits_for(10000, 2048, 32, 132) == (1, 2048)


def test_one_compiled_op_serves_prefill_and_decode(target):
    """Symbolic Sq: the dispatcher picks split-KV for decoding and the SIMT kernel else."""
    if target == "numpy":
        pytest.skip("one host implementation")
    b, sq, skv = var("b"), var("sq"), var("skv")
    op = gpucg.compile("attention", gpucg.tensor((b, 4, sq, 32), "float32"),
                       gpucg.tensor((b, 2, skv, 32), "float32"),
                       gpucg.tensor((b, 2, skv, 32), "float32"), target=target)
    rng = np.random.default_rng(5)
    for s_q, s_kv, impl in ((1, 1024, "attention_split"), (20, 1024, "attention_simt"),
                            (3, 40, "attention_simt")):
        q, k, v = make((1, 4, s_q, 32), "float32", rng), *(make((1, 2, s_kv, 32), "float32",
                                                               rng) for _ in range(2))
        check(op(q, k, v), torch_ref(q, k, v)[0], "float32", impl)
        assert op.last_impl.startswith(impl)


def test_host_blocks_long_sequences(monkeypatch):
    """The host implementation in many small blocks of queries and keys equals the whole."""
    monkeypatch.setattr(strat, "HOST_BLOCK", 64)
    rng = np.random.default_rng(2)
    q, k, v = make((1, 2, 70, 16), "float32", rng), make((1, 1, 90, 16), "float32", rng), \
        make((1, 1, 90, 16), "float32", rng)
    m = rng.random((70, 90)) < 0.8
    for causal in (False, True):
        attrs = gpucg.get_op("attention").make_attrs(causal=causal)
        got = strat.numpy_attention(q, k, v, m, attrs)
        check(got, torch_ref(q, k, v, mask=m, causal=causal)[0], "float32", f"{causal}")


def test_host_batch_chunks(monkeypatch):
    """The host implementation a few batch rows at a time (a batch of short sequences) equals
    the whole: a mask with a batch axis sliced with it, one without shared, the log-sum-exp."""
    monkeypatch.setattr(strat, "BATCH_BLOCK", 2 * 3 * 5 * 7)
    rng = np.random.default_rng(3)
    q, k, v = make((5, 7, 3, 8), "float32", rng), *(make((5, 7, 3, 8), "float32", rng)
                                                    for _ in range(2))
    for mask in (make((5, 1, 1, 7), "float32", rng), rng.random((3, 7, 7)) < 0.8):
        attrs = gpucg.get_op("attention").make_attrs(layout="BSHD", return_lse=True)
        got, lse = strat.numpy_attention(q, k, v, mask, attrs)
        want, want_lse = torch_ref(q, k, v, mask=mask, layout="BSHD")
        check(got, want, "float32", "chunks")
        np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


def test_eager_and_torch_tensors():
    rng = np.random.default_rng(4)
    q = torch.from_numpy(make((1, 2, 6, 32), "float32", rng))
    k, v = (torch.from_numpy(make((1, 2, 7, 32), "float32", rng)) for _ in range(2))
    got = gpucg.ops.attention(q, k, v, causal=True, target="numpy")
    assert isinstance(got, torch.Tensor)
    check(got.numpy(), torch_ref(q.numpy(), k.numpy(), v.numpy(), causal=True)[0], "float32",
          "eager")


BAD = [
    (dict(q=(1, 3, 4, 32), k=(1, 2, 4, 32)), {}, "multiple of k's and v's heads"),
    (dict(q=(1, 2, 4, 32), k=(1, 2, 4, 16)), {}, "head dim 16"),
    (dict(q=(1, 2, 4, 32), k=(2, 2, 4, 32)), {}, "k has batch 2"),
    (dict(q=(2, 4, 32), k=(2, 4, 32)), {}, "rank 3"),
    (dict(), {"layout": "SBHD"}, "layout='SBHD'"),
    (dict(), {"softcap": -1.0}, "softcap=-1.0"),
    (dict(), {"scale": float("nan")}, "scale=nan"),
    (dict(), {"causal": 1}, "causal=1"),
    (dict(mask=((1, 2, 4, 5), "float32")), {}, "mask dimension 3"),
    (dict(mask=((4, 4), "int32")), {}, "mask dtype 'int32'"),
    (dict(vdtype="float16"), {}, "v dtype float16 must equal q's"),
    (dict(qdtype="float64", vdtype="float64", kdtype="float64"), {}, "q dtype 'float64'"),
]


@pytest.mark.parametrize("shapes, attrs, message", BAD, ids=[b[2] for b in BAD])
def test_bad_input(shapes, attrs, message):
    rng = np.random.default_rng(0)
    q = make(shapes.get("q", (1, 2, 4, 32)), shapes.get("qdtype", "float32"), rng)
    k = make(shapes.get("k", (1, 2, 4, 32)), shapes.get("kdtype", "float32"), rng)
    v = make(shapes.get("k", (1, 2, 4, 32)), shapes.get("vdtype", "float32"), rng)
    mask = None
    if "mask" in shapes:
        mask = np.zeros(shapes["mask"][0], shapes["mask"][1])
    with pytest.raises(gpucg.InputError, match=message.replace("(", r"\(").replace(".", r"\.")):
        gpucg.ops.attention(q, k, v, mask=mask, target="numpy", **attrs)


def test_head_dim_over_the_kernels_limit():
    with pytest.raises(gpucg.GpucgError, match="head dim D=300 is over 256"):
        gpucg.compile("attention", *(gpucg.tensor((1, 2, var("s"), 300), "float32"),) * 3,
                      target="cuda")


def test_cli_explain_shows_prefill_and_decode(capsys):
    from gpucg.cli import main

    assert main(["explain", "attention", "--input", "b,32,sq,128:float16", "--input",
                 "b,8,skv,128:float16", "--input", "b,8,skv,128:float16",
                 "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "attention_decode.cuda" in out and "attention_simt.cuda" in out
    assert "if sq <= 16" in out and "fallback" in out
    # prefill on tensor cores (flash_mma, the fallback of the run-time dispatch), decode by
    # the decode kernel (attention_split takes masked decodes)
    assert re.search(r"attention_decode\.cuda +plevel +25 +dispatch 1", out), out
    assert re.search(r"flash_mma\.cuda +plevel +15 +dispatch 3 .*fallback", out), out


def torch_grads(q, k, v, do, *, causal=False, mask=None, softcap=None, layout="BHSD"):
    """dq, dk, dv by torch's autograd through SDPA's math in float64."""
    q, k, v = (torch.tensor(to_bhsd(x, layout).astype(np.float64), requires_grad=True)
               for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    sq, skv = q.shape[2], k.shape[2]
    s = q @ kk.transpose(-1, -2) / np.sqrt(q.shape[3])
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    keep = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        keep = keep & torch.from_numpy(mask)
    if causal:
        keep = keep & (torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + (skv - sq))
    o = torch.nan_to_num(torch.softmax(torch.where(keep, s, -torch.inf), -1)) @ vv
    o.backward(torch.from_numpy(to_bhsd(do, layout).astype(np.float64)))
    return tuple(to_bhsd(t.grad.numpy(), layout) for t in (q, k, v))


GRADS = [
    ("GQA causal, several key tiles", (1, 4, 2, 9, 300, 16), dict(causal=True), False),
    ("softcap, boolean mask, fully masked row", (2, 2, 1, 5, 20, 8), dict(softcap=3.0), True),
    ("BSHD", (1, 2, 2, 6, 7, 8), dict(layout="BSHD"), False),
]


@pytest.mark.parametrize("case", GRADS, ids=[c[0] for c in GRADS])
def test_gradient_against_torch_autograd(target, case):
    _, (b, hq, hkv, sq, skv, d), attrs, with_mask = case
    rng = np.random.default_rng(11)
    bshd = attrs.get("layout") == "BSHD"
    qs, ks = ((b, sq, hq, d), (b, skv, hkv, d)) if bshd else ((b, hq, sq, d), (b, hkv, skv, d))
    q, do = make(qs, "float32", rng), make(qs, "float32", rng)
    k, v = make(ks, "float32", rng), make(ks, "float32", rng)
    mask = None
    if with_mask:
        mask = rng.random((sq, skv)) < 0.7
        mask[0] = False
    args = (q, k, v) + ((mask,) if with_mask else ())
    got = gpucg.grad("attention", *args, out_grad=do, target=target, **attrs)
    assert len(got) == len(args) and (not with_mask or got[3] is None)
    want = torch_grads(q, k, v, do, mask=mask, **attrs)
    for name, g_, w in zip("qkv", got, want):
        np.testing.assert_allclose(np.asarray(g_, np.float64), w, rtol=1e-4, atol=1e-5,
                                   err_msg=f"d{name}")


def test_bench_quick(capsys):
    from gpucg.benchmarks.attention import flops, main

    assert flops(1, 1, 2, 2, 1, True) == 4.0 * 3 and flops(1, 1, 1, 5, 2, True) == 40.0
    assert main(["--quick", "--repeat", "1", "--json", "--targets", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "torch SDPA (cpu)" in out and "gpucg numpy [numpy_attention" in out
    assert "prefill S=128" in out and "decode Skv=2048" in out and "TFLOP/s" in out
    from gpucg.benchmarks.lowp import gpu_present
    assert gpu_present() or "not measured on a GPU" in out
    # sm_90a's plan beside sm_90's where it picks Hopper's kernel (prefill, not decode)
    hopper = [ln for ln in out.splitlines() if "[flash_wgmma.cuda]" in ln]
    assert gpu_present() or (len(hopper) == 2 and all("not measured on a GPU" in ln and
                                                      "sm_90a: " in ln for ln in hopper))
