"""The GPU tier of the Hopper kernels (sm_90a: gemm_wgmma, flash_wgmma) on a compute
capability 9.0 device (H100, H200), forced with ``impl=`` on the ``cuda -arch=sm_90a`` target,
against float64 references of the dtype-rounded inputs. Until these have passed on a GPU, a
plain ``cuda`` target on a 9.0 device keeps sm_90's mma.sync kernels (gpucg.target.target_arch).
FP8 stays on the twin and NVRTC: CuPy holds no float8 arrays. Skipped (with the reason) without
CUDA or on another architecture."""

import numpy as np
import pytest

import gpucg
from gpucg.runtime import backend_status, get_backend

ok, _, why = backend_status("cuda")
HOPPER = ok and get_backend("cuda").arch.rstrip("a") == "sm_90"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}"),
              pytest.mark.skipif(ok and not HOPPER, reason="not a compute capability 9.0 device")]
H = "cuda -arch=sm_90a"
rng = np.random.default_rng(3)


def _chosen(op, *types, **attrs) -> str:
    sel = gpucg.explain(op, *types, target=H, records=False, **attrs)
    return sel.choices[0].impl.name


@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (300, 520, 136), (1000, 1000, 1000),
                                   (2048, 2048, 2048)])
def test_gemm_wgmma_float16_against_float64(m, n, k):
    x = rng.standard_normal((m, k)).astype(np.float16)
    w = (rng.standard_normal((n, k)) / k ** 0.5).astype(np.float16)
    types = [gpucg.tensor(a.shape, "float16") for a in (x, w)]
    assert _chosen("dense", *types) == "gemm_wgmma.cuda"
    got = gpucg.compile("dense", *types, target=H, impl="gemm_wgmma")(x, w)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("case", [(2, 4, 2, 67, 300, 64, False), (1, 2, 2, 4096, 4096, 128, True),
                                  (1, 8, 1, 1, 513, 128, False), (2, 2, 2, 130, 129, 64, True)],
                         ids=lambda c: "b{}_hq{}_hkv{}_sq{}_skv{}_d{}_{}".format(
                             *c[:6], "causal" if c[6] else "full"))
def test_flash_wgmma_float16_against_float64(case):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_attention import torch_ref

    b, hq, hkv, sq, skv, d, causal = case
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, hkv, skv, d)).astype(np.float16) for _ in range(2))
    types = [gpucg.tensor(a.shape, "float16") for a in (q, k, v)]
    got, lse = gpucg.compile("attention", *types, target=H, impl="flash_wgmma", causal=causal,
                             return_lse=True)(q, k, v)
    want, want_lse = torch_ref(q, k, v, causal=causal)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=1e-3, atol=1e-3)
