"""The tensor-core GEMM (gemm_mma): its OpenCL twin forced on PoCL against NumPy on rounded
inputs (float16; float32 rounded to TF32 as cvt.rna does), both copy paths, every epilogue, the
dense family's layouts and broadcast batches; under Oclgrind; selection and explain on CUDA;
the CUDA kernels through NVRTC and ptxas; the swizzle's requests conflict-free.
"""

import json
import math
import sys
import textwrap

import numpy as np
import pytest

import gpucg
from gpucg import procwatch
from gpucg.strategies import gemm_mma
from gpucg.verify import nvrtc

from conftest import backend_or_skip, under_oclgrind
from test_warp_ops import tf32

SIZES = [(1, 8, 8), (17, 33, 40), (65, 20, 24), (33, 17, 72)]


def _host(y):
    return y.get() if hasattr(y, "get") else np.asarray(y)


def _rand(rng, shape, dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")  # registers the dtype name with NumPy
    return rng.standard_normal(shape).astype(dtype)


def _ref(a, b, dtype):
    """The product in float64 of the operands as the tensor cores see them."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if dtype == "float32":
        a, b = tf32(a.astype(np.float32)).astype(np.float64), tf32(b.astype(np.float32)).astype(np.float64)
    return a, b


def _close(got, want, dtype, scale):
    """float32 sums of k products: a few ulps of the sum of magnitudes; float16 output: its
    rounding on top."""
    tol = {"float16": 4e-3, "bfloat16": 8e-3}.get(dtype, 1e-5) * (scale + 1)
    err = np.abs(_host(got).astype(np.float64) - want)
    assert (err <= tol).all(), f"max error {err.max()} (tolerance {tol.max()})"


def _run(op, arrays, dtype, **attrs):
    backend_or_skip("opencl")
    types = [gpucg.tensor(x.shape, x.dtype.name) for x in arrays]
    tf = {"allow_tf32": True} if dtype == "float32" else {}
    f = gpucg.compile(op, *types, target="opencl", impl="gemm_mma", **tf, **attrs)
    assert f.selection.choices[0].impl.name == "gemm_mma.opencl"
    return f(*arrays)


EPILOGUES = [dict(activation="gelu", alpha=0.5, beta=2.0),
             dict(activation="relu", residual_position="before", out_dtype="float32")]


SLOW = pytest.mark.exhaustive  # each is one more kernel for PoCL to compile (20-50 s)


@pytest.mark.parametrize("epilogue,dtype", [(0, "float16"), (1, "float32"), (0, "bfloat16"),
                                            pytest.param(1, "float16", marks=SLOW),
                                            pytest.param(0, "float32", marks=SLOW)])
def test_dense_twin_every_size_and_epilogue(dtype, epilogue):
    """bias, residual, alpha, beta, an activation, the residual before or after it; sizes not
    multiples of any tile, K not a multiple of 16 (K = 8, 24, 40, 72)."""
    attrs = EPILOGUES[epilogue]
    rng = np.random.default_rng(epilogue)
    for m, n, k in SIZES:
        out_t = attrs.get("out_dtype", dtype)
        x, w = _rand(rng, (m, k), dtype), _rand(rng, (n, k), dtype)
        bias, res = _rand(rng, (n,), dtype), _rand(rng, (m, n), out_t)
        got = _run("dense", [x, w, bias, res], dtype, **attrs)
        a, b = _ref(x, w, dtype)
        z = attrs.get("alpha", 1.0) * (a @ b.T) + bias.astype(np.float64)
        r = attrs.get("beta", 1.0) * res.astype(np.float64)
        if attrs.get("residual_position") == "before":
            want = np.maximum(z + r, 0)
        else:
            erf = np.vectorize(math.erf)
            want = 0.5 * z * (1 + erf(z / np.sqrt(2))) + r
        _close(got, want, dtype if out_t == dtype else out_t, np.abs(a) @ np.abs(b).T)


@pytest.mark.parametrize("dtype", ["float16", pytest.param("float32", marks=SLOW)])
def test_dense_scalar_path_when_vectors_are_not_allowed(monkeypatch, dtype):
    """A base pointer that is not 16-byte aligned makes the launch pass vec = 0: the same
    kernel copies element by element (zero-filled at the edges)."""
    monkeypatch.setattr(gemm_mma, "vector_ok", lambda *a: False)
    rng = np.random.default_rng(3)
    for m, n, k in [(17, 33, 40), (5, 9, 7)]:
        x, w = _rand(rng, (m, k), dtype), _rand(rng, (n, k), dtype)
        a, b = _ref(x, w, dtype)
        _close(_run("dense", [x, w], dtype), a @ b.T, dtype, np.abs(a) @ np.abs(b).T)


def test_matmul_twin_transposed_b_and_batches():
    """matmul's B lies along n (ldmatrix .trans); broadcast batches."""
    rng = np.random.default_rng(4)
    for sa, sb in [((17, 24), (24, 40)), ((3, 1, 9, 16), (2, 16, 8)), ((40, 8), (8, 16))]:
        x, y = _rand(rng, sa, "float16"), _rand(rng, sb, "float16")
        got = _run("matmul", [x, y], "float16")
        a, b = _ref(x, y, "float16")
        _close(got, np.matmul(a, b), "float16", np.matmul(np.abs(a), np.abs(b)))


@pytest.mark.parametrize("ta,tb,dtype", [(True, False, "float16"),
                                         pytest.param(False, True, "float16", marks=SLOW),
                                         (False, True, "float32")])
def test_batch_matmul_twin_layouts_and_broadcast(ta, tb, dtype):
    rng = np.random.default_rng(5)
    m, n, k = 19, 24, 40
    x = _rand(rng, (3, k, m) if ta else (3, m, k), dtype)
    y = _rand(rng, (1, n, k) if tb else (1, k, n), dtype)
    got = _run("batch_matmul", [x, y], dtype, transpose_a=ta, transpose_b=tb)
    a, b = _ref(x, y, dtype)
    a = np.swapaxes(a, 1, 2) if ta else a
    b = np.swapaxes(b, 1, 2) if tb else b
    _close(got, np.matmul(a, b), dtype, np.matmul(np.abs(a), np.abs(b)))


@pytest.mark.exhaustive
def test_twin_runs_the_cuda_default_config():
    """The CUDA default tile (8 warps of 64 x 64, 4 stages of dynamic shared memory) forced on
    the twin."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(6)
    x, w = _rand(rng, (130, 64), "float16"), _rand(rng, (136, 64), "float16")
    config = gemm_mma.mma_space("f16", 2, True, True, 227 * 1024, False).default
    types = [gpucg.tensor(t.shape, "float16") for t in (x, w)]
    f = gpucg.compile("dense", *types, target="opencl", impl="gemm_mma", config=dict(config))
    a, b = _ref(x, w, "float16")
    _close(f(x, w), a @ b.T, "float16", np.abs(a) @ np.abs(b).T)


# -- selection --------------------------------------------------------------------------------

def _chosen(op, *types, target="cuda", **attrs):
    sel = gpucg.explain(op, *types, target=target, **attrs)
    return sel, {c.name: c for c in sel.candidates}


def test_cuda_selects_gemm_mma_for_16_bit_floats_and_tf32_only():
    m = gpucg.var("m")
    for dtype, attrs in [("float16", {}), ("bfloat16", {}), ("float32", {"allow_tf32": True})]:
        sel, c = _chosen("dense", gpucg.tensor((m, 4096), dtype), gpucg.tensor((4096, 4096), dtype),
                         **attrs)
        assert sel.choices[0].impl.name == "gemm_mma.cuda"
        assert "m > 16" in str(sel.choices[0].condition.expr)
        sel, c = _chosen("dense", gpucg.tensor((4096, 4096), dtype),
                         gpucg.tensor((4096, 4096), dtype), **attrs)
        assert sel.choices[0].impl.name == "gemm_mma.cuda"
    sel, c = _chosen("dense", gpucg.tensor((512, 512), "float32"), gpucg.tensor((512, 512), "float32"))
    assert sel.choices[0].impl.name != "gemm_mma.cuda"
    assert "allow_tf32" in c["gemm_mma.cuda"].reason
    with gpucg.settings.scope(GPUCG_ALLOW_TF32="1"):
        # a row-major B (along N) runs on tensor cores too: its fragments by 32-bit loads
        sel, _ = _chosen("matmul", gpucg.tensor((512, 512), "float32"),
                         gpucg.tensor((512, 512), "float32"))
        assert sel.choices[0].impl.name == "gemm_mma.cuda"
        # an A along M does not: ldmatrix has no 32-bit transpose
        sel, _ = _chosen("batch_matmul", gpucg.tensor((2, 512, 512), "float32"),
                         gpucg.tensor((2, 512, 512), "float32"), transpose_a=True)
        assert "ldmatrix has no 32-bit transpose" in _["gemm_mma.cuda"].reason
        sel, _ = _chosen("dense", gpucg.tensor((512, 512), "float32"),
                         gpucg.tensor((512, 512), "float32"))
        assert sel.choices[0].impl.name == "gemm_mma.cuda"
    # an odd K: rows not whole 16-byte chunks; the SIMT tile runs and explain says why
    sel, c = _chosen("dense", gpucg.tensor((512, 100), "float16"), gpucg.tensor((512, 100), "float16"))
    assert sel.choices[0].impl.name == "gemm_tiled.cuda"
    assert c["gemm_mma.cuda"].reason == "condition is false for these shapes"


def test_opencl_lists_the_twin_but_never_chooses_it():
    for target in ["opencl", "opencl -device=gpu"]:
        sel, c = _chosen("dense", gpucg.tensor((512, 512), "float16"),
                         gpucg.tensor((512, 512), "float16"), target=target)
        assert sel.choices[0].impl.name != "gemm_mma.opencl"
        assert c["gemm_mma.opencl"].reason.startswith("lower plevel")


def test_explain_on_the_command_line():
    args = ["explain", "dense", "--input", "m,4096:float16", "--input", "4096,4096:float16",
            "--target", "cuda"]
    out = procwatch.run([sys.executable, "-c", "from gpucg.cli import main; main()", *args])
    # the first candidate that applies (gemm_wgmma is listed above it, excluded on sm_90)
    first = [line for line in out.stdout.splitlines()
             if line.startswith("  ") and " excluded " not in line][0]
    assert "gemm_mma.cuda" in first, out.stdout + out.stderr
    out = procwatch.run([sys.executable, "-c", "from gpucg.cli import main; main()", *args[:2],
                          "--input", "512,512:float32", "--input", "512,512:float32", "--attr",
                          "allow_tf32=1", "--target", "cuda"])
    assert "allow_tf32=True" in out.stdout and "gemm_mma.cuda" in out.stdout, out.stderr


def test_allow_tf32_attribute_and_setting():
    from gpucg.ops.dense import DenseAttrs, MatmulAttrs
    from gpucg.ops.conv2d import Conv2dAttrs

    assert DenseAttrs().allow_tf32 is False and MatmulAttrs(allow_tf32=1).allow_tf32 is True
    with gpucg.settings.scope(GPUCG_ALLOW_TF32="1"):
        assert Conv2dAttrs().allow_tf32 is True
    with pytest.raises(gpucg.errors.AttrError, match="allow_tf32"):
        DenseAttrs(allow_tf32="yes")


# -- the CUDA kernels without a GPU -------------------------------------------------------------

def _cuda_sources():
    m = gpucg.var("m")
    for dtype, attrs in [("float16", {}), ("bfloat16", {}), ("float32", {"allow_tf32": True})]:
        t = [gpucg.tensor((m, 4096), dtype), gpucg.tensor((4096, 4096), dtype)]
        yield gpucg.compile("dense", *t, target="cuda", impl="gemm_mma", **attrs)
    t = [gpucg.tensor((4, m, 512), "float16"), gpucg.tensor((512, 256), "float16")]
    yield gpucg.compile("matmul", *t, target="cuda", impl="gemm_mma")


@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.exhaustive), "sm_90"])
def test_cuda_kernels_compile_without_spills(nvrtc_or_skip, arch):
    from gpucg.verify.resources import kernel_resources

    for f in _cuda_sources():
        for key, src in f.sources.items():
            ptx = nvrtc.compile_to_ptx(src, arch)
            assert "mma.sync.aligned" in ptx and "ldmatrix.sync.aligned" in ptx
            assert "cp.async.cg.shared.global" in ptx
            entry = ptx.split(".entry ")[1].split("(")[0].strip()
            r = kernel_resources(src, entry, arch)
            assert r.spill_stores == r.spill_loads == 0 and r.stack == 0, (key, r)
            assert r.shared == 0, (key, r)  # the tiles are dynamic shared memory
        assert f.specs(0)["gemm"].dynamic_local > 48 * 1024


@pytest.mark.parametrize("kind", ["f16", "tf32"])
@pytest.mark.parametrize("small", [False, True])
def test_swizzled_requests_are_conflict_free(kind, small):
    """For the default configs (GPU and twin) of every layout each element size takes: the
    cp.async stores, the ldmatrix rows and TF32's 32-bit fragment loads of a B along N need
    the fewest wavefronts (the bank model, gpucg.verify.banks, on the core's own addresses)."""
    from gpucg.verify import banks

    eb = 4 if kind == "tf32" else 2
    for a_k, b_k in [(True, True), (True, False), (False, True), (False, False)]:
        if kind == "tf32" and not a_k:
            continue
        config = gemm_mma.mma_space(kind, eb, a_k, b_k, 227 * 1024, small).default
        reqs = gemm_mma.smem_requests(dict(kind=kind, a_k_major=a_k, b_k_major=b_k), config)
        assert {r.name.split()[0] for r in reqs} >= {"cp.async"}
        for r in banks.report(reqs):
            assert r.conflict_free, (kind, a_k, b_k, r.line())


OCLGRIND = textwrap.dedent("""
    import json, numpy as np, gpucg
    rng = np.random.default_rng(0)
    out = []
    for op, sa, sb in [("dense", (20, 16), (23, 16)), ("matmul", (9, 40), (40, 16))]:
        a = rng.standard_normal(sa).astype(np.float16)
        b = rng.standard_normal(sb).astype(np.float16)
        # dense: a bias of odd width (no read past its end by the paired epilogue)
        bias = [rng.standard_normal(sb[:1]).astype(np.float16)] if op == "dense" else []
        f = gpucg.compile(op, *(gpucg.tensor(t.shape, "float16") for t in [a, b] + bias),
                          target="opencl", impl="gemm_mma")
        y = f(a, b, *bias)
        y = y.get() if hasattr(y, "get") else np.asarray(y)
        ref = a.astype(np.float64) @ (b.T if op == "dense" else b).astype(np.float64)
        ref = ref + (bias[0].astype(np.float64) if bias else 0)
        out.append(float(np.abs(y - ref).max()))
    print(json.dumps(out))
""")


def test_twin_under_oclgrind_has_no_reports(oclgrind_or_skip, tmp_path):
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert max(errors) < 0.05, errors
    assert not reports, "\n\n".join(r.text for r in reports)


def test_cuda_launch_passes_what_the_kernel_declares(nvrtc_or_skip):
    """Through the recording CuPy stand-in (PTX .entry parameters checked); an offset base
    pointer makes the launch pass vec = 0."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_80")
    calls = [("dense", [(300, 256), (520, 256)], "float16", {}),
             ("matmul", [(2, 40, 64), (64, 24)], "float16", {}),
             ("batch_matmul", [(3, 40, 64), (1, 24, 64)], "float32",
              {"transpose_b": True, "allow_tf32": True})]
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        for op, shapes, dtype, attrs in calls:
            for index in ("int32", "int64"):
                f = gpucg.compile(op, *(gpucg.tensor(s, dtype) for s in shapes), target="cuda",
                                  impl="gemm_mma", index=index, **attrs)
                arrays = [cupy.empty(s, dtype) for s in shapes]
                f(*arrays)
                launch = cupy.launches[-1]
                assert launch.entry.endswith("gemm_mma_gemm"), launch.entry
                assert int(launch.args[-1]) == 3  # 16-byte copies, paired stores
                arrays[0].ptr += 2  # a view one element in: not 16-byte aligned
                f(*arrays)
                assert int(cupy.launches[-1].args[-1]) == 2
        # a 4096^3 product: 96 KiB of dynamic shared memory, the opt-in attribute raised first
        f = gpucg.compile("dense", *(gpucg.tensor((4096, 4096), "float16"),) * 2, target="cuda")
        f(*(cupy.empty((4096, 4096), "float16"),) * 2)
        launch = cupy.launches[-1]
        assert launch.shared_mem == f.specs(0)["gemm"].dynamic_local > 64 * 1024
        assert (launch.entry, "max_dynamic_shared_size_bytes", launch.shared_mem) in \
            cupy.attributes
        assert launch.grid[1:] in ((), (1,))  # (tiles, batches) with one batch
