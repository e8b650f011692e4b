"""Every CUDA kernel gpucg can generate for these operators compiles with NVRTC (sm_80, sm_90)."""

import itertools

import pytest

import gpucg
from gpucg.runtime import nvrtc

n, m, k = gpucg.var("n"), gpucg.var("m"), gpucg.var("k")


def scan_sources():
    for op, dtype, exclusive, (shape, axis), out in itertools.product(
            ["cumsum", "cumprod"], ["bool", "int32", "int64", "float32", "float64"], [False, True],
            [((n, m), 1), ((n, m, k), 1), ((n,), None)], [None, "float64"]):
        if out and dtype == "float64":
            continue
        f = gpucg.compile(op, gpucg.tensor(shape, dtype), axis=axis, dtype=out, exclusive=exclusive,
                          target="cuda -arch=sm_90")
        yield from f.sources.items()


def elementwise_sources():
    for dtype in ["int32", "int64", "float32", "float64"]:
        yield from gpucg.compile("relu", gpucg.tensor((n, m), dtype), target="cuda").sources.items()
        yield from gpucg.compile("add", gpucg.tensor((n, m), dtype), gpucg.tensor((m,), dtype),
                                 target="cuda").sources.items()
        yield from gpucg.compile("sum", gpucg.tensor((n, m, k), dtype), axis=1,
                                 target="cuda").sources.items()


def topk_sources():
    """Every topk/sort template for each key width and kind and both directions; the longest
    private list (K=128, slow to compile) once per key width."""
    dtypes = ["float16", "float32", "float64", "int32", "int64"]
    for dtype, asc in itertools.product(dtypes, [False, True]):
        f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=300, is_ascend=asc,
                          target="cuda -arch=sm_90")  # radix, bitonic, merge
        yield from f.sources.items()
        f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=10, is_ascend=asc, dtype="int64",
                          target="cuda -arch=sm_90")
        yield from ((key, src) for key, src in f.sources.items() if key.startswith("topk_group"))
    for dtype in ["float16", "float32", "int64"]:
        f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=128, target="cuda -arch=sm_90")
        yield from ((key, src) for key, src in f.sources.items() if key.startswith("topk_group"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_all_generated_cuda_compiles(nvrtc_or_skip, arch):
    count = 0
    sources = list(scan_sources()) + list(elementwise_sources()) + list(topk_sources())
    assert any(key.startswith("topk_radix.cuda/") for key, _ in sources)
    for key, src in sources:
        ptx = nvrtc.compile_to_ptx(src, arch)
        assert ".entry" in ptx, key
        count += 1
    assert count > 20


def test_nvrtc_reports_errors_with_the_log(nvrtc_or_skip):
    with pytest.raises(gpucg.CompileError) as info:
        nvrtc.compile_to_ptx('extern "C" __global__ void k() { undeclared = 1; }', "sm_90")
    assert "undeclared" in info.value.log and "sm_90" in str(info.value)
