"""conv2d on the tensor-core core (direct_mma): its OpenCL twin forced on PoCL against a float64
NumPy reference on inputs rounded to float16, bfloat16 or TF32 (float32 sums), NCHW and NHWC,
stride, padding, dilation, groups, every epilogue, sizes not multiples of any tile and K not a
multiple of 16, both copy paths; under Oclgrind; selection and explain on CUDA; the CUDA kernels
through NVRTC and ptxas and the launch stand-in; the swizzled requests conflict-free.

Each compiled twin is one PoCL compile (20-50 s): the cases share them through symbolic batch,
height and width, so one kernel runs every size.
"""

import json
import sys
import textwrap

import numpy as np
import pytest

import gpucg
from gpucg import procwatch
from gpucg.ops.conv2d import Conv2dAttrs, reference_conv
from gpucg.strategies import conv2d_mma, gemm_mma
from gpucg.verify import nvrtc

from conftest import backend_or_skip, under_oclgrind
from test_warp_ops import tf32

SLOW = pytest.mark.exhaustive


def _host(y):
    return y.get() if hasattr(y, "get") else np.asarray(y)


def _rand(rng, shape, dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    return rng.standard_normal(shape).astype(dtype)


def _seen(a, dtype):
    """The operand as the tensor cores see it, in float64."""
    a = np.asarray(a)
    if dtype == "float32":
        a = tf32(a.astype(np.float32))
    return a.astype(np.float64)


#: (label, dtype, data layout, kernel layout, channels C, O, kernel, attrs): each one compiled
#: twin, run on every size of SIZES
CASES = [
    ("nchw f16 stride 2 groups 2 gelu", "float16", "NCHW", "OIHW", 10, 12, (3, 3),
     dict(strides=2, padding=1, groups=2, activation="gelu", alpha=0.5, beta=2.0)),
    ("nhwc bf16 dilation 2 relu before", "bfloat16", "NHWC", "HWIO", 16, 24, (3, 2),
     dict(dilation=(2, 1), padding=(1, 0, 2, 1), activation="relu",
          residual_position="before", out_dtype="float32")),
    ("nhwc tf32 groups 3 oihw", "float32", "NHWC", "OIHW", 6, 9, (2, 3),
     dict(strides=(1, 2), padding="SAME", groups=3, allow_tf32=True, activation="sigmoid")),
    # x read as a matrix (1x1, stride 1, no padding) and the weights as one (HWIO along O)
    ("nhwc f16 1x1 plain", "float16", "NHWC", "HWIO", 16, 24, (1, 1), dict(activation="relu")),
    pytest.param(("nchw bf16 hwio 1x1 tanh", "bfloat16", "NCHW", "HWIO", 24, 40, (1, 1),
                  dict(activation="tanh", beta=0.25)), marks=SLOW),
    pytest.param(("nhwc f16 groups 2 aligned", "float16", "NHWC", "HWIO", 32, 48, (3, 3),
                  dict(padding=1, groups=2, strides=2)), marks=SLOW),
]
SIZES = [(1, 5, 7), (2, 9, 12), (3, 17, 6)]  # (N, H, W): M = N * OH * OW odd, past a tile


def _compile(dtype, dl, kl, c, o, kernel, attrs, impl="direct_mma"):
    """The twin with a bias and a residual, for symbolic batch, height and width."""
    backend_or_skip("opencl")
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    g = attrs.get("groups", 1)
    kh, kw = kernel
    x = (n, c, h, w) if dl == "NCHW" else (n, h, w, c)
    wt = (o, c // g, kh, kw) if kl == "OIHW" else (kh, kw, c // g, o)
    types = [gpucg.tensor(x, dtype), gpucg.tensor(wt, dtype), gpucg.tensor((o,), dtype)]
    layouts = dict(data_layout=dl, kernel_layout=kl, **attrs)
    out = gpucg.compile("conv2d", *types, target="numpy", **layouts).output_types[0]
    f = gpucg.compile("conv2d", *types, out, target="opencl", impl=impl, **layouts)
    assert f.selection.choices[0].impl.name == f"{impl}.opencl"
    return f, out.dtype


def _check(f, out_dtype, dtype, dl, kl, c, o, kernel, attrs, rng, n, h, w, residual, grow=1.0):
    g = attrs.get("groups", 1)
    kh, kw = kernel
    x = _rand(rng, (n, c, h, w) if dl == "NCHW" else (n, h, w, c), dtype)
    wt = _rand(rng, (o, c // g, kh, kw) if kl == "OIHW" else (kh, kw, c // g, o), dtype)
    bias = _rand(rng, (o,), dtype)
    ca = Conv2dAttrs(data_layout=dl, kernel_layout=kl, **{k: v for k, v in attrs.items()
                                                           if k != "allow_tf32"})
    want = reference_conv(_seen(x, dtype), _seen(wt, dtype), bias.astype(np.float64), ca,
                          "float64")
    args = [x, wt, bias]
    if residual:
        res = _rand(rng, want.shape, out_dtype)
        args.append(res)
        want = reference_conv(_seen(x, dtype), _seen(wt, dtype), bias.astype(np.float64), ca,
                              "float64", residual=res.astype(np.float64))
    got = _host(f(*args)).astype(np.float64)
    plain = Conv2dAttrs(data_layout=dl, kernel_layout=kl, strides=ca.strides,
                        padding=ca.padding, dilation=ca.dilation, groups=g)
    scale = reference_conv(np.abs(_seen(x, dtype)), np.abs(_seen(wt, dtype)), None, plain,
                           "float64")
    scale = abs(ca.alpha) * scale + np.abs(bias.astype(np.float64)).max() + \
        (abs(ca.beta) * np.abs(res.astype(np.float64)) if residual else 0)
    base = {"float16": 4e-3, "bfloat16": 8e-3}.get(out_dtype, 2e-5)
    if grow > 1:  # rounded after a transform: TF32 keeps float16's 10 bits
        base = max(base, {"bfloat16": 8e-3}.get(dtype, 4e-3))
    tol = base * grow * (scale + 1)
    assert got.shape == want.shape
    err = np.abs(got - want)
    assert (err <= tol).all(), f"({n}, {h}, {w}): max error {err.max()} (tolerance {tol.max()})"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].replace(" ", "-"))
def test_direct_twin_every_layout_and_epilogue(case, monkeypatch):
    """Every size with the bias and a residual; then the element-by-element path (the base
    pointers reported unaligned: vec = 0) on one size."""
    label, dtype, dl, kl, c, o, kernel, attrs = case
    f, out = _compile(dtype, dl, kl, c, o, kernel, attrs)
    rng = np.random.default_rng(len(label))
    for n, h, w in SIZES:
        _check(f, out, dtype, dl, kl, c, o, kernel, attrs, rng, n, h, w, residual=True)
    monkeypatch.setattr(gemm_mma, "alignment_of", lambda a: 2)
    _check(f, out, dtype, dl, kl, c, o, kernel, attrs, rng, *SIZES[1], residual=True)


def test_direct_twin_split_k():
    """Split-K (NHWC): K's 5 tiles (144 = 9 x 16 products a sum) in 3 splits of 2, 2 and 1,
    the residue tile in split 0, each split's float sums added by the reduce kernel, which
    applies the epilogue; equal to the unsplit kernel's result within a rounding of the
    output."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 9, 11, 16)).astype(np.float16)
    w = rng.standard_normal((3, 3, 16, 24)).astype(np.float16)
    b = rng.standard_normal((24,)).astype(np.float16)
    res = rng.standard_normal((2, 9, 11, 24)).astype(np.float16)
    types = [gpucg.tensor(a.shape, "float16") for a in (x, w, b, res)]
    attrs = dict(padding=1, data_layout="NHWC", kernel_layout="HWIO", activation="relu")
    backend_or_skip("opencl")
    f = gpucg.compile("conv2d", *types, target="opencl", impl="direct_mma",
                      config={"splits": 3}, **attrs)
    got = _host(f(x, w, b, res)).astype(np.float64)
    want = reference_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                          Conv2dAttrs(**attrs), "float64", residual=res.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * (np.abs(want).max() + 1))
    assert [k for k in f.sources if not k.endswith("@i64")] == ["direct_mma.opencl/gemm",
                                                                 "direct_mma.opencl/reduce"]


def test_small_layers_split_k_to_fill_the_device():
    """ResNet's 14x14 and 7x7 layers (batch 8) make fewer output tiles than an H100 has SMs:
    the default splits K until they make a wave; the 56x56 layer needs no split."""
    def config(n, h, c):
        t = [gpucg.tensor((n, h, h, c), "float16"), gpucg.tensor((3, 3, c, c), "float16")]
        return gpucg.compile("conv2d", *t, padding=1, data_layout="NHWC", kernel_layout="HWIO",
                             target="cuda -arch=sm_90", impl="direct_mma").selection.choices[0].config
    assert config(8, 56, 64)["splits"] == 1
    for h, c in ((14, 256), (7, 512)):
        cfg = config(8, h, c)
        tiles = -(-8 * h * h // cfg["bm"]) * -(-c // cfg["bn"])
        assert cfg["splits"] > 1 and tiles * cfg["splits"] >= 132 > tiles, (h, cfg)


#: Winograd on the core: (label, dtype, data layout, C, O, attrs); the transforms round U and V
#: to the 16-bit format (TF32) after the transforms, hence a wider tolerance (GROW)
WINOGRAD = [("nchw f16 relu", "float16", "NCHW", 16, 24, dict(padding=1, activation="relu")),
            ("nhwc tf32", "float32", "NHWC", 8, 12, dict(padding=(1, 0, 0, 1), allow_tf32=True,
                                                        alpha=2.0)),
            pytest.param(("nhwc f16 same", "float16", "NHWC", 16, 16, dict(padding="SAME")),
                         marks=SLOW)]
GROW = 2.0


@pytest.mark.parametrize("case", WINOGRAD, ids=lambda c: c[0].replace(" ", "-"))
def test_winograd_twin(case):
    label, dtype, dl, c, o, attrs = case
    kl = "OIHW" if dl == "NCHW" else "HWIO"
    f, out = _compile(dtype, dl, kl, c, o, (3, 3), attrs, impl="winograd_mma")
    rng = np.random.default_rng(len(label))
    for n, h, w in SIZES:
        _check(f, out, dtype, dl, kl, c, o, (3, 3), attrs, rng, n, h, w, residual=True,
               grow=GROW)


# -- selection ----------------------------------------------------------------------------------

def _resnet(dtype, dl, n=None, hw=None, c=64, o=64, **attrs):
    n, hw = n or gpucg.var("n"), hw or gpucg.var("h")
    x = gpucg.tensor((n, c, hw, hw) if dl == "NCHW" else (n, hw, hw, c), dtype)
    w = gpucg.tensor((o, c, 3, 3) if dl == "NCHW" else (3, 3, c, o), dtype)
    return [x, w], dict(padding=1, data_layout=dl, kernel_layout="OIHW" if dl == "NCHW" else "HWIO",
                        **attrs)


@pytest.mark.parametrize("dl", ["NCHW", "NHWC"])
def test_cuda_selects_direct_mma_and_says_why_not(dl):
    for dtype, attrs in [("float16", {}), ("bfloat16", {}), ("float32", {"allow_tf32": True})]:
        types, at = _resnet(dtype, dl, **attrs)
        sel = gpucg.explain("conv2d", *types, target="cuda", **at)
        assert sel.choices[0].impl.name == "direct_mma.cuda", sel
        assert ">= 256" in str(sel.choices[0].condition.expr)
        c = {c.name: c for c in sel.candidates}
        if dtype == "bfloat16":  # too few mantissa bits for the transformed tiles
            assert c["winograd_mma.cuda"].reason == conv2d_mma.WINOGRAD_NO_BF16
        else:
            assert sel.choices[1].impl.name == "winograd_mma.cuda", sel
    why = {}
    for key, dtype, kw, attrs in [("few pixels", "float16", dict(n=1, hw=8), {}),
                                  ("few channels", "float16", dict(o=8), {}),
                                  ("exact float32", "float32", {}, {})]:
        types, at = _resnet(dtype, dl, **kw, **attrs)
        sel = gpucg.explain("conv2d", *types, target="cuda", **at)
        assert sel.choices[0].impl.name != "direct_mma.cuda"
        why[key] = {c.name: c for c in sel.candidates}["direct_mma.cuda"].reason
    assert why["few pixels"] == "condition is false for these shapes", why
    assert "at least 16 output channels" in why["few channels"], why
    assert "allow_tf32" in why["exact float32"], why
    types, at = _resnet("float16", dl, c=20, o=32)  # NHWC: 20 channels are not 16-byte runs
    sel = gpucg.explain("conv2d", *types, target="cuda", **at)
    assert (sel.choices[0].impl.name == "direct_mma.cuda") == (dl == "NCHW"), sel
    for target in ["opencl", "opencl -device=gpu"]:
        types, at = _resnet("float16", dl)
        c = {c.name: c for c in gpucg.explain("conv2d", *types, target=target, **at).candidates}
        assert c["direct_mma.opencl"].reason.startswith("lower plevel")
        assert c["winograd_mma.opencl"].reason.startswith("lower plevel")


@pytest.mark.parametrize("dl", ["NCHW", "NHWC"])
def test_explain_on_the_command_line(dl):
    x = "n,64,h,w" if dl == "NCHW" else "n,h,w,64"
    w = "64,64,3,3" if dl == "NCHW" else "3,3,64,64"
    args = ["explain", "conv2d", "--input", f"{x}:float16", "--input", f"{w}:float16", "--attr",
            "padding=1", "--attr", f"data_layout={dl}", "--attr",
            f"kernel_layout={'OIHW' if dl == 'NCHW' else 'HWIO'}", "--target", "cuda"]
    out = procwatch.run([sys.executable, "-c", "from gpucg.cli import main; main()", *args])
    lines = [line for line in out.stdout.splitlines() if line.startswith("  ")]
    assert "direct_mma.cuda" in lines[0] and "h*n*w >= 256" in lines[0], out.stdout + out.stderr
    assert "winograd_mma.cuda" in lines[1], out.stdout
    assert "limits: sm_90" in out.stdout


# -- the CUDA kernels without a GPU -------------------------------------------------------------

# sm_80 with -m exhaustive (the session's NVRTC pass compiles every source for it)
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.exhaustive), "sm_90"])
def test_cuda_kernels_compile_without_spills(nvrtc_or_skip, arch):
    from gpucg.verify.resources import kernel_resources

    for dl in ("NCHW", "NHWC"):
        for dtype, attrs in [("float16", {}), ("float32", {"allow_tf32": True})]:
            types, at = _resnet(dtype, dl, **attrs)
            for impl in ("direct_mma", "winograd_mma"):
                f = gpucg.compile("conv2d", *types, target=f"cuda -arch={arch}", impl=impl, **at)
                for key, src in f.sources.items():
                    ptx = nvrtc.compile_to_ptx(src, arch)
                    if "gemm" in key:
                        assert "mma.sync.aligned" in ptx and "ldmatrix.sync.aligned" in ptx
                        assert "cp.async" in ptx
                    entry = ptx.split(".entry ")[1].split("(")[0].strip()
                    r = kernel_resources(src, entry, arch)
                    assert r.spill_stores == r.spill_loads == 0 and r.stack == 0, (key, r)


def test_cuda_launch_passes_what_the_kernel_declares(nvrtc_or_skip):
    """Through the recording CuPy stand-in; an offset base pointer clears vec bit 0."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_80")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        for dl in ("NCHW", "NHWC"):
            types, at = _resnet("float16", dl, n=2, hw=32)  # 128 Winograd tiles
            for impl, index in [("direct_mma", "int32"), ("direct_mma", "int64"),
                                ("winograd_mma", "int32")]:
                f = gpucg.compile("conv2d", *types, target="cuda", impl=impl, index=index, **at)
                arrays = [cupy.empty(t.shape, "float16") for t in types]
                f(*arrays)

                def gemm():  # the product's launch (split-K: before its reduction)
                    return [ln for ln in cupy.launches if ln.entry.endswith("_gemm")][-1]
                want = 3 if (dl == "NHWC" or impl == "winograd_mma") else 1
                assert int(gemm().args[-1]) == want, (dl, impl)
                if impl == "direct_mma":
                    arrays[0].ptr += 2
                    f(*arrays)
                    assert int(gemm().args[-1]) == want & 2


OCLGRIND = textwrap.dedent("""
    import json, numpy as np, gpucg
    rng = np.random.default_rng(0)
    out = []
    for impl, dl, c, o, cfg in [("direct_mma", "NHWC", 16, 20, {"splits": 2}),
                                ("direct_mma", "NCHW", 6, 9, None),
                                ("winograd_mma", "NCHW", 8, 12, None)]:
        shape = (1, c, 6, 5) if dl == "NCHW" else (1, 6, 5, c)
        wshape = (o, c, 3, 3) if dl == "NCHW" else (3, 3, c, o)
        x = rng.standard_normal(shape).astype(np.float16)
        w = rng.standard_normal(wshape).astype(np.float16)
        b = rng.standard_normal((o,)).astype(np.float16)
        attrs = dict(padding=1, data_layout=dl, kernel_layout="OIHW" if dl == "NCHW" else "HWIO")
        f = gpucg.compile("conv2d", *(gpucg.tensor(a.shape, "float16") for a in (x, w, b)),
                          target="opencl", impl=impl, config=cfg, **attrs)
        y = f(x, w, b)
        y = (y.get() if hasattr(y, "get") else np.asarray(y)).astype(np.float64)
        ref = gpucg.compile("conv2d", *(gpucg.tensor(a.shape, "float16") for a in (x, w, b)),
                            target="numpy", **attrs)(x, w, b).astype(np.float64)
        out.append(float(np.abs(y - ref).max() / (np.abs(ref).max() + 1)))
    print(json.dumps(out))
""")


def test_twins_under_oclgrind_have_no_reports(oclgrind_or_skip, tmp_path):
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert max(errors) < 0.05, errors
    assert not reports, "\n\n".join(r.text for r in reports)


def test_swizzled_requests_are_conflict_free():
    """The requests of conv2d's tensor-core kernels' default configs need the fewest
    wavefronts (the bank model on the core's own addresses: its swizzles and atom maps)."""
    from gpucg.verify import banks

    for dl in ("NCHW", "NHWC"):
        for dtype, attrs in [("float16", {}), ("float32", {"allow_tf32": True})]:
            types, at = _resnet(dtype, dl, **attrs)
            for impl in ("direct_mma", "winograd_mma"):
                f = gpucg.compile("conv2d", *types, target="cuda", impl=impl, **at)
                choice = f.selection.choices[0]
                params = choice.impl.template_params("gemm", choice.config)
                for r in banks.report(gemm_mma.smem_requests(params, dict(choice.config))):
                    assert r.conflict_free, (impl, dl, r.line())
