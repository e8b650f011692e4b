"""Every CUDA kernel gpucg can generate for these operators compiles with NVRTC (sm_90 here;
sm_80 in the session's NVRTC pass, and here with -m exhaustive)."""

import itertools

import pytest

import gpucg
from gpucg.verify import nvrtc

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
        for impl in ("topk_warp", "topk_group"):
            f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=10, is_ascend=asc,
                              dtype="int64", target="cuda -arch=sm_90", impl=impl)
            yield from ((key, src) for key, src in f.sources.items() if key.startswith(impl))
    for dtype in ["float16", "float32", "int64"]:
        f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=128, target="cuda -arch=sm_90")
        yield from ((key, src) for key, src in f.sources.items() if key.startswith("topk_group"))


#: conv2d's tensor-core implementations (float16 here; float32 with allow_tf32)
MMA_IMPLS = ("direct_mma", "winograd_mma")
FUSED = ("winograd_fused_4x4", "winograd_fused_2x2")


def conv2d_sources():
    """Every conv2d kernel (winograd both tiles and its weight transform, direct, depthwise,
    the pre-transformed path) for float32, float16 and float16 in / float32 out, in each
    layout pairing, with and without bias and relu, 32- and 64-bit indexing."""
    h, w = gpucg.var("h"), gpucg.var("w")
    kinds = [("float32", None, False), ("float16", None, True), ("float16", "float32", True)]
    layouts = [("NCHW", "OIHW"), ("NHWC", "HWIO"), ("NCHW", "HWIO")]
    for (dtype, out, fused), (dl, kl) in itertools.product(kinds, layouts):
        data = gpucg.tensor((n, 16, h, w) if dl == "NCHW" else (n, h, w, 16), dtype)
        extra = [gpucg.tensor((32,), dtype)] if fused else []
        attrs = dict(padding=1, data_layout=dl, kernel_layout=kl, out_dtype=out,
                     activation="relu" if fused else None, target="cuda -arch=sm_90")
        wshape = (32, 16, 3, 3) if kl == "OIHW" else (3, 3, 16, 32)
        for impl in ("winograd_4x4", "winograd_2x2", "direct") + FUSED + MMA_IMPLS * (dtype != "float32"):
            yield from gpucg.compile("conv2d", data, gpucg.tensor(wshape, dtype), *extra, impl=impl,
                                     **attrs).sources.items()
        # the fused kernels holding the input region of every channel (om > 1: the dynamic
        # buffer), which constant channel counts allow
        fixed = gpucg.tensor((2, 20, 20, 16) if dl == "NHWC" else (2, 16, 20, 20), dtype)
        for impl in FUSED:
            yield from gpucg.compile("conv2d", fixed, gpucg.tensor(wshape, dtype), *extra, impl=impl,
                                     config=dict(bm=8, bth=2, btw=4, bk=4, tm=1, tn=1, om=2),
                                     **attrs).sources.items()
        if dtype == "float32":  # the tensor-core kernels with TF32
            for impl in MMA_IMPLS:
                yield from gpucg.compile("conv2d", data, gpucg.tensor(wshape, dtype), impl=impl,
                                         allow_tf32=True, **attrs).sources.items()
        dshape = (32, 1, 5, 5) if kl == "OIHW" else (5, 5, 1, 32)
        yield from gpucg.compile("conv2d", data, gpucg.tensor(dshape, dtype), *extra, groups=16,
                                 strides=2, **dict(attrs, padding="SAME")).sources.items()
    f = gpucg.compile("conv2d_winograd_without_weight_transform", gpucg.tensor((n, 16, 20, 20)),
                      gpucg.tensor((6, 6, 32, 16)), target="cuda")
    yield from f.sources.items()


# sm_80 with -m exhaustive: the session's NVRTC pass (nvrtc_pass.py) compiles every source
# rendered here for sm_80 as well, and fails the run on any failure
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.exhaustive), "sm_90"])
def test_all_generated_cuda_compiles(nvrtc_or_skip, arch):
    sources = list(scan_sources()) + list(elementwise_sources()) + list(topk_sources()) + \
        list(conv2d_sources())
    assert any(key.startswith("topk_radix.cuda/") for key, _ in sources)
    for impl in ("winograd_4x4", "winograd_2x2", "direct", "depthwise") + FUSED + MMA_IMPLS:
        assert any(key.startswith(f"{impl}.cuda/") for key, _ in sources), impl
    failures = nvrtc.check_sources([src for _, src in sources], arch)
    assert not failures, [(sources[i][0], exc.log) for i, exc in failures[:3]]
    assert len(sources) > 20


def test_batched_checks_name_each_failing_source(nvrtc_or_skip):
    # two configs of one kernel share an entry name; a batch compiles them as one unit, and a
    # broken source among them is still named alone, with its own log
    f = gpucg.compile("relu", gpucg.tensor((n, m), "float32"), target="cuda")
    good = list(f.sources.values())
    g = gpucg.compile("relu", gpucg.tensor((n, m), "float64"), target="cuda")
    good += list(g.sources.values())
    broken = good[0].replace("{", "{ undeclared_gpucg_name = 1;", 2)
    assert nvrtc.check_sources(good + good, "sm_80") == []
    failures = nvrtc.check_sources(good + [broken] + good, "sm_80")
    assert [i for i, _ in failures] == [len(good)]
    assert "undeclared_gpucg_name" in failures[0][1].log


def test_nvrtc_reports_errors_with_the_log(nvrtc_or_skip):
    with pytest.raises(gpucg.CompileError) as info:
        nvrtc.compile_to_ptx('extern "C" __global__ void k() { undeclared = 1; }', "sm_90")
    assert "undeclared" in info.value.log and "sm_90" in str(info.value)


_SINGLETONS = """
import sys
from gpucg.verify import nvrtc
nvrtc.compile_to_ptx('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }', "sm_90")
nvrtc.compile_to_cubin('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 2.0f; }', "sm_80")
import jinja2
text = jinja2.Environment().from_string('{{ "__local" ~ " " }}').render()
bad = [i for i in range(256) if chr(i).encode("latin-1")[0] != i]
sys.exit(f"one-byte bytes objects overwritten: {bad}; Jinja rendered {text!r}" if bad else 0)
"""


def test_nvrtc_leaves_python_constants_alone(nvrtc_or_skip, tmp_path):
    # a fresh interpreter that compiles gpucg from source (an empty pycache prefix, -B): a
    # module's b" " is then CPython's shared one-byte object, which NVRTC's log buffer once
    # aliased (every later Jinja " " rendered as NUL)
    import os
    import sys

    from gpucg import procwatch

    res = procwatch.run([sys.executable, "-B", "-c", _SINGLETONS], cwd=tmp_path,
                        env={**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"),
                             "GPUCG_CACHE_DIR": str(tmp_path / "cache")})  # NVRTC runs
    assert res.returncode == 0, res.stderr[-2000:]


def test_cubins_compile_once(nvrtc_or_skip, tmp_path, monkeypatch):
    """compile_to_cubin keeps (CUBIN, log) on disk, one entry per source, arch and options: a
    second call reads the entry (here replaced, to tell it from a compile)."""
    from gpucg.runtime.cache import DiskCache

    monkeypatch.setenv("GPUCG_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 3.0f; }'
    cubin, log = nvrtc.compile_to_cubin(src, "sm_80")
    assert cubin.startswith(b"\x7fELF") and "Used" in log and "registers" in log
    [entry] = [f for f in (tmp_path / "cubins").rglob("*") if f.is_file()]
    DiskCache(namespace="cubins").put(entry.name, (6).to_bytes(4, "little") + b"cachedCUBIN")
    assert nvrtc.compile_to_cubin(src, "sm_80") == (b"CUBIN", "cached")
    assert nvrtc.compile_to_cubin(src, "sm_90")[0].startswith(b"\x7fELF")
    assert len([f for f in (tmp_path / "cubins").rglob("*") if f.is_file()]) == 2


def test_end_of_session_pass_shares_its_pool(nvrtc_or_skip, tmp_path):
    """The pass (nvrtc_pass.py) compiles each unclaimed (source, arch) of the pool once, names
    a failing source by its entry, and leaves what a test or another process claimed; a source
    with arch-specific instructions is compiled for its arch alone (sm_90a)."""
    import nvrtc_pass
    from gpucg.codegen.wgmma import ARCH_MARK

    (tmp_path / "src").mkdir()
    (tmp_path / "claims").mkdir()
    good = 'extern "C" __global__ void gpucg_good(float* x) { x[threadIdx.x] = 1.0f; }'
    bad = 'extern "C" __global__ void gpucg_bad(float* x) { x[threadIdx.x] = undeclared; }'
    done = 'extern "C" __global__ void gpucg_done(float* x) { x[0] = nope; }'
    hop = (f'{ARCH_MARK}\nextern "C" __global__ void gpucg_hop(float* x) '
           '{ asm volatile("setmaxnreg.inc.sync.aligned.u32 232;"); x[0] = 1.0f; }')
    for entry, src in (("gpucg_good", good), ("gpucg_bad", bad), ("gpucg_done", done),
                       ("gpucg_hop", hop), ("gpucg_hop_bad", hop.replace("1.0f", "nope"))):
        (tmp_path / "src" / nvrtc_pass.digest_of(src)).write_text(f"{entry}\n{src}")
    for arch in nvrtc_pass.ARCHS:  # claimed already (compiled by a test): not compiled again
        assert nvrtc_pass.claim(tmp_path, arch, nvrtc_pass.digest_of(done))
    failures, _ = nvrtc_pass.run_pass(tmp_path)
    assert [f.split(":")[0] for f in failures] == ["gpucg_bad (sm_80)", "gpucg_bad (sm_90)",
                                                   "gpucg_hop_bad (sm_90a)"]
    assert len(list((tmp_path / "claims").iterdir())) == 8
    assert nvrtc_pass.run_pass(tmp_path)[0] == []  # everything is claimed now
