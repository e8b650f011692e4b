"""The GPU tier for attention: the SIMT, split-KV and (float16) flash_mma kernels on CUDA against torch's SDPA in
float64 (skipped without CUDA; bfloat16 stays on the numpy and opencl targets, CuPy has none)."""

import numpy as np
import pytest

from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]


def _helpers():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import test_attention

    return test_attention


def _cases(name):
    return [c for c in getattr(_helpers(), name) if c[7] != "bfloat16"]


@pytest.mark.parametrize("case", _cases("CASES") + _cases("DECODE"), ids=lambda c: c[0])
def test_cuda_kernels_against_torch(case):
    t = _helpers()
    q, k, v, m = t.make_inputs(case, np.random.default_rng(7))
    attrs = case[8]
    want, want_lse = t.torch_ref(q, k, v, mask=m, **{a: attrs[a] for a in attrs
                                                       if a != "return_lse"})
    decode = case[4] <= 16 and case[5] >= 1024
    tensor_cores = ("flash_mma",) if case[7] == "float16" else ()  # forced even for decode
    for impl in ("attention_simt",) + (("attention_split",) if decode else ()) + tensor_cores:
        got = t.run("cuda", impl, q, k, v, m, **attrs)
        if attrs.get("return_lse"):
            got, lse = got
            t.check(lse, want_lse, "float32", f"{case[0]} {impl} lse")
        t.check(got, want, case[7], f"{case[0]} {impl}")
