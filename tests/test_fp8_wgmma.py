"""dense_fp8 on Hopper's FP8 wgmma (fp8_wgmma): its OpenCL twin forced on PoCL against a float64
reference of the scaled product within the FP8 bound (tests/test_dense_fp8.check): blockwise
(DeepGEMM's 128 x 128) and per-row/column scales, e4m3 and e5m2, K tails, ragged M and N, NaN
and infinities, both output paths (TMA stores, stores from registers); under Oclgrind;
selection by capability with the reasons; the sm_90a kernel through NVRTC, ptxas and cuobjdump
(QGMMA); its launch on the stand-in."""

import json

import numpy as np
import pytest

import gpucg
from gpucg.verify import nvrtc

from conftest import backend_or_skip, under_oclgrind
from test_dense_fp8 import E4, E5, check, fp8

SLOW = pytest.mark.exhaustive
H = "cuda -arch=sm_90a"


def _types(*arrays):
    return [gpucg.tensor(a.shape, a.dtype.name) for a in arrays]


def _scales(rng, m, n, k, block):
    if block:
        kb = -(-k // block[1])
        return (rng.uniform(0.5, 1, (m, kb)).astype(np.float32),
                rng.uniform(0.5, 1, (-(-n // block[0]), kb)).astype(np.float32))
    return (rng.uniform(0.01, 0.1, (m,)).astype(np.float32),
            rng.uniform(0.01, 0.1, (n,)).astype(np.float32))


@pytest.mark.parametrize("fmt,block,n,out", [
    (E5, (128, 128), 33, "float32"),   # stores from registers; NaN and inf
    pytest.param(E4, None, 40, "bfloat16", marks=SLOW),  # TMA stores of the epilogue
    pytest.param(E4, (64, 128), 72, "float16", marks=SLOW)])
def test_twin_equals_the_scaled_product(fmt, block, n, out):
    """K = 272: two whole k-tiles of 128 and a tail; M = 70: two tiles of 64 rows, the second
    ragged; each k-tile's products promoted (times its block scales)."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(7)
    m, k = 70, 272
    x, w = fp8((m, k), fmt, rng), fp8((n, k), fmt, rng)
    if fmt == E5:
        x[3, 200], w[5, 0], w[9, 1] = np.nan, np.nan, np.inf
    xs, ws = _scales(rng, m, n, k, block)
    bias = rng.standard_normal(n).astype(np.float32)
    f = gpucg.compile("dense_fp8", *_types(x, w, xs, ws, bias), target="opencl",
                      impl="fp8_wgmma", config={"ctas": 1}, out_dtype=out, block_size=block)
    assert f.selection.choices[0].impl.name == "fp8_wgmma.opencl"
    assert ("tmC" in f.sources["fp8_wgmma.opencl/gemm"]) == (n * np.dtype(
        {"float32": np.float32}.get(out, np.float16)).itemsize % 16 == 0)
    y = f(x, w, xs, ws, bias)
    check(y.get() if hasattr(y, "get") else np.asarray(y), x, w, xs, ws, bias, block, out)


OCLGRIND = """
import json, numpy as np, gpucg, ml_dtypes
rng = np.random.default_rng(0)
e4 = ml_dtypes.float8_e4m3fn
x = (rng.standard_normal((20, 112)) * 4).astype(np.float32).astype(e4)
w = (rng.standard_normal((16, 112)) * 4).astype(np.float32).astype(e4)
xs = rng.uniform(0.5, 1, (20, 1)).astype(np.float32)
ws = rng.uniform(0.5, 1, (1, 1)).astype(np.float32)
f = gpucg.compile("dense_fp8", *(gpucg.tensor(t.shape, t.dtype.name) for t in (x, w, xs, ws)),
                  target="opencl", impl="fp8_wgmma", out_dtype="float32",
                  block_size=(128, 128))
y = f(x, w, xs, ws)
y = y.get() if hasattr(y, "get") else np.asarray(y)
sx = np.repeat(xs, 128, axis=1)[:, :112]
sw = np.repeat(ws, 128, axis=1)[:, :112]
want = (x.astype(np.float64) * sx) @ (w.astype(np.float64) * sw).T
print(json.dumps(float(np.abs(y - want).max() / np.abs(want).max())))
"""


def test_twin_under_oclgrind_has_no_reports(oclgrind_or_skip, tmp_path):
    """Blockwise scales, one ragged k-tile, rows past M and N in the one tile: no race, no access
    out of bounds (the scales of rows past M are not read), no uninitialized read."""
    done, reports = under_oclgrind(OCLGRIND, tmp_path)
    assert json.loads(done.stdout.strip().splitlines()[-1]) < 1e-5
    assert not reports, "\n\n".join(r.text for r in reports)


def _fp8(block=(128, 128), wfmt="float8_e4m3fn", target=H, m=4096):
    t = gpucg.tensor
    kb = 4096 // 128
    xs, ws = ((m, kb), (32, kb)) if block else ((m,), (4096,))
    args = (t((m, 4096), "float8_e4m3fn"), t((4096, 4096), wfmt), t(xs, "float32"),
            t(ws, "float32"))
    return args, dict(target=target, block_size=block)


def test_selection_follows_the_capability():
    args, kw = _fp8()
    sel = gpucg.explain("dense_fp8", *args, **kw)
    assert sel.choices[0].impl.name == "fp8_wgmma.cuda"
    for arch in ("sm_90", "sm_89"):
        sel = gpucg.explain("dense_fp8", *args, **dict(kw, target=f"cuda -arch={arch}"))
        c = {c.name: c for c in sel.candidates}
        assert sel.choices[0].impl.name == "fp8_tiled.cuda"
        assert f"{arch} has no wgmma" in c["fp8_wgmma.cuda"].reason
    args, kw = _fp8(wfmt="float8_e5m2")
    c = {c.name: c for c in gpucg.explain("dense_fp8", *args, **kw).candidates}
    assert "one FP8 format for both" in c["fp8_wgmma.cuda"].reason
    t = gpucg.tensor
    c = {c.name: c for c in gpucg.explain(
        "dense_fp8", t((64, 256), "float8_e4m3fn"), t((64, 256), "float8_e4m3fn"),
        t((64, 4), "float32"), t((4, 4), "float32"), target=H, block_size=(16, 64)).candidates}
    assert "block_size=(16, 64)" in c["fp8_wgmma.cuda"].reason


def test_sm_90a_kernel_in_sass(sass_or_skip):
    """FP8 GEMM 4096^3 with DeepGEMM's blocks: QGMMA, UTMALDG, UTMASTG, SYNCS, setmaxnreg
    honoured, no local memory, more than 128 KiB of dynamic shared memory."""
    from gpucg.verify import sass

    args, kw = _fp8()
    f = gpucg.compile("dense_fp8", *args, **kw)
    assert f.selection.choices[0].impl.name == "fp8_wgmma.cuda"
    spec = f.specs(0)["gemm"]
    assert spec.dynamic_local > 128 * 1024
    src = f.sources["fp8_wgmma.cuda/gemm"]
    cubin, log = nvrtc.compile_to_cubin(src, "sm_90a")
    assert "C7508" not in log and "0 bytes stack frame" in log and "0 bytes spill stores" in log
    listed = [o.split(".")[0] for o in sass.parse_sass(sass.disassemble(cubin))[spec.entry]]
    print({o: listed.count(o) for o in ("QGMMA", "UTMALDG", "UTMASTG", "SYNCS")},
          spec.dynamic_local, "B dynamic shared memory")
    assert {"QGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG"} <= set(listed)
    assert not set(listed) & {"LDL", "STL", "HGMMA", "HMMA"}


def test_launches_on_the_stand_in(nvrtc_or_skip):
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_90a")
    args, kw = _fp8()
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        f = gpucg.compile("dense_fp8", *args, **kw)
        f(*(cupy.empty(a.shape, a.dtype) for a in args))
    (ln,) = cupy.launches
    assert ln.block == (384,) and ln.grid == (132,) and ln.shared_mem > 128 * 1024
    maps = [a for a in ln.args if type(a).__name__ == "TensorMapArg"]
    assert [m.tensor_map.box for m in maps] == [(128, 128), (128, 128), (64, 64, 1)]
