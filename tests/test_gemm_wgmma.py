"""The Hopper GEMM (gemm_wgmma): its OpenCL twin forced on PoCL against NumPy on rounded inputs
(float16, bfloat16, TF32) at sizes no tile divides (K tails, ragged M and N), every epilogue,
transposed operands and broadcast batches, one and two consumer warpgroups, a work-group
walking several tiles, both output paths (TMA stores, stores from registers); under Oclgrind;
selection and explain by capability; the sm_90a kernels through NVRTC, ptxas and cuobjdump;
their launches on the stand-in."""

import json
import math

import numpy as np
import pytest

import gpucg
from gpucg.strategies import gemm_wgmma
from gpucg.verify import nvrtc

from conftest import backend_or_skip, under_oclgrind
from test_gemm_mma import _close, _host, _rand, _ref

SLOW = pytest.mark.exhaustive
#: the twin's config with two consumer warpgroups, three stages, one work-group for every tile
TWO = {"bm": 128, "bn": 32, "stages": 3, "raster": 1, "ctas": 1}


def _compile(op, types, dtype, config=None, **attrs):
    backend_or_skip("opencl")
    tf = {"allow_tf32": True} if dtype == "float32" else {}
    f = gpucg.compile(op, *types, target="opencl", impl="gemm_wgmma", config=config, **tf,
                      **attrs)
    assert f.selection.choices[0].impl.name == "gemm_wgmma.opencl"
    return f


def _dense_want(x, w, bias, res, dtype, attrs):
    a, b = _ref(x, w, dtype)
    z = attrs.get("alpha", 1.0) * (a @ b.T) + bias.astype(np.float64)
    r = attrs.get("beta", 1.0) * res.astype(np.float64)
    if attrs.get("residual_position") == "before":
        return np.maximum(z + r, 0), a, b
    erf = np.vectorize(math.erf)
    return 0.5 * z * (1 + erf(z / np.sqrt(2))) + r, a, b


def test_dense_symbolic_sizes_one_kernel_every_epilogue():
    """One compile for symbolic (m, n, k): the stores from registers (n is not known to be
    whole 16-byte rows); bias, residual, alpha, beta, gelu; K tails (8, 72, 136 of 64)."""
    m, n, k = gpucg.var("m"), gpucg.var("n"), gpucg.var("k")
    attrs = dict(activation="gelu", alpha=0.5, beta=2.0)
    f = _compile("dense", [gpucg.tensor((m, k), "float16"), gpucg.tensor((n, k), "float16"),
                           gpucg.tensor((n,), "float16"), gpucg.tensor((m, n), "float16")],
                 "float16", **attrs)
    assert "tmC" not in f.sources["gemm_wgmma.opencl/gemm"]
    rng = np.random.default_rng(1)
    for mm, nn, kk in [(17, 33, 72), (70, 40, 136), (130, 9, 8)]:
        x, w = _rand(rng, (mm, kk), "float16"), _rand(rng, (nn, kk), "float16")
        bias, res = _rand(rng, (nn,), "float16"), _rand(rng, (mm, nn), "float16")
        want, a, b = _dense_want(x, w, bias, res, "float16", attrs)
        _close(f(x, w, bias, res), want, "float16", np.abs(a) @ np.abs(b).T)


@pytest.mark.parametrize("dtype,config", [pytest.param("bfloat16", TWO, marks=SLOW),
                                          pytest.param("float32", None, marks=SLOW),
                                          pytest.param("float16", TWO, marks=SLOW),
                                          pytest.param("float32", TWO, marks=SLOW)])
def test_dense_tma_store_consumers_and_persistence(dtype, config):
    """A fixed n of whole 16-byte output rows: the epilogue staged and stored by TMA (boxes
    partly outside M and N); two consumer warpgroups walking every tile in one work-group
    (the ring's phases running on across tiles); TF32 rounded in shared memory."""
    attrs = dict(activation="relu", residual_position="before", out_dtype="float32")
    rng = np.random.default_rng(2)
    mm, nn, kk = 70, 40, 136
    x, w = _rand(rng, (mm, kk), dtype), _rand(rng, (nn, kk), dtype)
    bias, res = _rand(rng, (nn,), dtype), _rand(rng, (mm, nn), "float32")
    f = _compile("dense", [gpucg.tensor(t.shape, t.dtype.name) for t in (x, w, bias, res)],
                 dtype, config, **attrs)
    assert "tmC" in f.sources["gemm_wgmma.opencl/gemm"]
    want, a, b = _dense_want(x, w, bias, res, dtype, attrs)
    _close(f(x, w, bias, res), want, "float32", np.abs(a) @ np.abs(b).T)


@SLOW
def test_matmul_b_along_n_and_broadcast_batches():
    """matmul's B lies along N (MN-major, slabs of 64 columns); batches broadcast both ways."""
    rng = np.random.default_rng(3)
    x, y = _rand(rng, (3, 1, 19, 16), "float16"), _rand(rng, (2, 16, 24), "float16")
    f = _compile("matmul", [gpucg.tensor(x.shape, "float16"), gpucg.tensor(y.shape, "float16")],
                 "float16", dict(gemm_wgmma.space("f16", True, False, 2, 1 << 20, True).default,
                                 ctas=2))
    a, b = _ref(x, y, "float16")
    _close(f(x, y), np.matmul(a, b), "float16", np.matmul(np.abs(a), np.abs(b)))


@pytest.mark.parametrize("dtype", [pytest.param("float16", marks=SLOW),
                                   pytest.param("bfloat16", marks=SLOW)])
def test_batch_matmul_a_along_m(dtype):
    """A stored K x M (MN-major A), B stored N x K, one B for three batches."""
    rng = np.random.default_rng(4)
    m, n, k = 24, 72, 40
    x, y = _rand(rng, (3, k, m), dtype), _rand(rng, (1, n, k), dtype)
    f = _compile("batch_matmul", [gpucg.tensor(x.shape, dtype), gpucg.tensor(y.shape, dtype)],
                 dtype, transpose_a=True, transpose_b=True)
    a, b = _ref(x, y, dtype)
    a, b = np.swapaxes(a, 1, 2), np.swapaxes(b, 1, 2)
    _close(f(x, y), np.matmul(a, b), dtype, np.matmul(np.abs(a), np.abs(b)))


@SLOW
def test_twin_runs_the_cuda_default_config():
    """The sm_90a default tile (128 x 256, two consumers, the deepest ring that fits) forced on
    the twin."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(6)
    x, w = _rand(rng, (130, 64), "float16"), _rand(rng, (264, 64), "float16")
    config = gemm_wgmma.space("f16", True, True, 2, 227 * 1024, False).default
    f = _compile("dense", [gpucg.tensor(t.shape, "float16") for t in (x, w)], "float16",
                 dict(config))
    a, b = _ref(x, w, "float16")
    _close(f(x, w), a @ b.T, "float16", np.abs(a) @ np.abs(b).T)


OCLGRIND = """
import json, numpy as np, gpucg
rng = np.random.default_rng(0)
a = rng.standard_normal((20, 72)).astype(np.float16)
b = rng.standard_normal((40, 72)).astype(np.float16)
bias = rng.standard_normal((40,)).astype(np.float16)
f = gpucg.compile("dense", *(gpucg.tensor(t.shape, "float16") for t in (a, b, bias)),
                  target="opencl", impl="gemm_wgmma", config={"ctas": 1})
y = f(a, b, bias)
y = y.get() if hasattr(y, "get") else np.asarray(y)
print(json.dumps(float(np.abs(y - (a.astype(np.float64) @ b.T.astype(np.float64) + bias)).max())))
"""


def test_twin_under_oclgrind_has_no_reports(oclgrind_or_skip, tmp_path):
    """The mbarrier, TMA and wgmma emulations and the pipeline's order: no race, no access
    out of bounds, no uninitialized read; two tiles walked by one work-group."""
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) < 0.05
    assert not reports, "\n\n".join(r.text for r in reports)


# -- selection ---------------------------------------------------------------------------------

def _explain(op, *types, target="cuda -arch=sm_90a", **attrs):
    sel = gpucg.explain(op, *types, target=target, **attrs)
    return sel, {c.name: c for c in sel.candidates}


def test_selection_follows_the_capability():
    m = gpucg.var("m")
    t16 = [gpucg.tensor((m, 4096), "float16"), gpucg.tensor((4096, 4096), "float16")]
    sel, c = _explain("dense", *t16)
    assert sel.choices[0].impl.name == "gemm_wgmma.cuda"
    assert "m > 16" in str(sel.choices[0].condition.expr)
    for arch in ("sm_90", "sm_80"):
        sel, c = _explain("dense", *t16, target=f"cuda -arch={arch}")
        assert sel.choices[0].impl.name == "gemm_mma.cuda"
        assert c["gemm_wgmma.cuda"].verdict == "excluded"
        assert f"{arch} has no wgmma" in c["gemm_wgmma.cuda"].reason
    t32 = [gpucg.tensor((512, 512), "float32")] * 2
    sel, c = _explain("matmul", *t32, allow_tf32=True)  # B along N: TF32 wgmma cannot
    assert "K-major only" in c["gemm_wgmma.cuda"].reason
    assert sel.choices[0].impl.name == "gemm_mma.cuda"
    sel, c = _explain("dense", *t32, allow_tf32=True)
    assert sel.choices[0].impl.name == "gemm_wgmma.cuda"
    sel, c = _explain("dense", *t32)
    assert "allow_tf32" in c["gemm_wgmma.cuda"].reason
    sel, c = _explain("dense", gpucg.tensor((512, 100), "float16"),
                      gpucg.tensor((512, 100), "float16"))  # rows of 200 bytes: no TMA
    assert c["gemm_wgmma.cuda"].reason == "condition is false for these shapes"
    sel, c = _explain("dense", *t16, target="opencl")
    assert c["gemm_wgmma.opencl"].reason.startswith("lower plevel")


def test_explain_on_the_command_line_names_gemm_wgmma(capsys):
    from gpucg import cli

    assert cli.main(["explain", "dense", "--input", "4096,4096:float16", "--input",
                     "4096,4096:float16", "--target", "cuda -arch=sm_90a"]) == 0
    out = capsys.readouterr().out
    first = [ln for ln in out.splitlines() if ln.startswith("  ")][0]
    assert "gemm_wgmma.cuda" in first and "selected" in first, out
    assert "wgmma" in out.split("limits:")[1].splitlines()[0]


# -- the CUDA kernels without a GPU ------------------------------------------------------------

def _sources(every):
    t = gpucg.tensor
    for dtype, attrs in [("float16", {}), ("bfloat16", {"activation": "relu"}),
                         ("float32", {"allow_tf32": True})][:None if every else 1]:
        yield gpucg.compile("dense", t((4096, 4096), dtype), t((4096, 4096), dtype),
                            target="cuda -arch=sm_90a", **attrs)
    if every:
        yield gpucg.compile("matmul", t((4, 512, 512), "float16"), t((512, 256), "float16"),
                            target="cuda -arch=sm_90a")


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=SLOW)])
def test_sm_90a_kernels_in_sass(sass_or_skip, every):
    """The kernels selected for dense 4096^3 (f16, bf16, TF32) and a batched matmul: HGMMA,
    UTMALDG, UTMASTG, SYNCS, setmaxnreg honoured (no C7508), no local memory, more than
    128 KiB of dynamic shared memory."""
    for f in _sources(every):
        assert f.selection.choices[0].impl.name == "gemm_wgmma.cuda"
        spec = f.specs(0)["gemm"]
        assert spec.dynamic_local > 128 * 1024 or f.op.name == "matmul"  # a smaller tile fills the SMs
        for key, ops in sm_90a_ops(f, "gemm", ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS")).items():
            assert {"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG"} <= ops, key
            assert not ops & {"LDL", "STL", "HMMA"}, key


def sm_90a_ops(f, kernel: str, counted) -> dict:
    """{source key: the SASS opcodes of ``kernel``} of compiled op ``f``'s 32-bit-index sources
    compiled for sm_90a, each asserted to honour setmaxnreg (no C7508) with no stack frame and
    no spills; prints the counts of the opcodes ``counted`` and the dynamic shared memory."""
    from gpucg.verify import sass

    spec, out = f.specs(0)[kernel], {}
    for key, src in f.sources.items():
        if key.endswith("@i64"):
            continue
        cubin, log = nvrtc.compile_to_cubin(src, "sm_90a")
        assert "C7508" not in log and "0 bytes stack frame" in log, log
        assert "0 bytes spill stores" in log, log
        listed = [o.split(".")[0] for o in sass.parse_sass(sass.disassemble(cubin))[spec.entry]]
        print(key, {o: listed.count(o) for o in counted}, spec.dynamic_local,
              "B dynamic shared memory")
        out[key] = set(listed)
    return out


def test_launches_on_the_stand_in(nvrtc_or_skip):
    """Tensor maps by value (64-byte aligned parameters), the dynamic shared memory attribute
    raised, 384 threads (whole warpgroups), a persistent grid of at most one work-group an SM."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_90a")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = gpucg.compile("dense", gpucg.tensor((4096, 4096), "float16"),
                          gpucg.tensor((4096, 4096), "float16"), target="cuda -arch=sm_90a")
        f(cupy.empty((4096, 4096), "float16"), cupy.empty((4096, 4096), "float16"))
    (ln,) = cupy.launches
    assert ln.block == (384,) and ln.grid == (132,) and ln.shared_mem > 128 * 1024
    assert ("gpucg_dense_gemm_wgmma_gemm", "max_dynamic_shared_size_bytes", ln.shared_mem) \
        in cupy.attributes
    maps = [a for a in ln.args if type(a).__name__ == "TensorMapArg"]
    assert [m.tensor_map.box for m in maps] == [(64, 128), (64, 256), (64, 64, 1)]
    with use_backend("cuda", CudaBackend(cupy=StandInCupy("sm_80"))):  # an sm_80 device
        f = gpucg.compile("dense", gpucg.tensor((4096, 4096), "float16"),
                          gpucg.tensor((4096, 4096), "float16"), target="cuda -arch=sm_90a")
        with pytest.raises(gpucg.CompileError, match="needs sm_90a"):
            f(cupy.empty((4096, 4096), "float16"), cupy.empty((4096, 4096), "float16"))
