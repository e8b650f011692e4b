"""topk_warp, topk for k <= 16 with each work-item's best-K list in registers and a warp's
lists merged by shuffles, forced on OpenCL (PoCL) against the op's NumPy reference: in the GPU
mapping (warps of 32 lanes, the shuffles emulated through local memory) and the CPU mapping
(one work-item a segment, no shuffle), every dtype topk takes, both index widths and
directions, NaN/inf/-0.0 and ties, k = 1, k = n, rows that are no multiple of a segment, rows
split over several warps (candidates merged by a second launch), other axes. Its SASS (stack
frame 0, no local memory, no barrier) is checked in test_sass.py, its traffic in
test_resources.py's figures (tests/resources/topk.json)."""

import numpy as np
import pytest

import gpucg

from conftest import backend_or_skip
from test_topk import make, reference, same

#: every dtype topk takes (bfloat16 below, with ml_dtypes)
DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64"]


def data(shape, dtype, rng):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return make(shape, "float32", rng, ties=True).astype(ml_dtypes.bfloat16)
    if dtype.startswith("uint") or dtype in ("int8", "int16"):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
        x.reshape(-1)[: x.size // 3] = info.max  # ties, at the largest value
        return x
    return make(shape, dtype, rng, ties=True)


def run(x, k, device, config=None, **attrs):
    f = gpucg.compile("topk", gpucg.tensor(x.shape, x.dtype.name), k=k,
                      target=f"opencl -device={device}", impl="topk_warp", config=config, **attrs)
    same(f(x), reference("topk", x, k=k, **{a: v for a, v in attrs.items() if a != "index"}))


#: the GPU mapping's programs are large (each emulated shuffle holds two barriers): there, one
#: dtype of each key width
GPU_DTYPES = ["int8", "float16", "float32", "uint64"]


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_every_dtype_both_directions_and_index_widths(device):
    """One row shape (500: no multiple of a warp) a dtype; the direction, the index width and
    k alternate over the dtypes."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(19)
    for i, dtype in enumerate(GPU_DTYPES if device == "gpu" else DTYPES + ["bfloat16"]):
        x = data((3, 500), dtype, rng)
        k = (1, 5, 8, 16)[i % 4]
        run(x, k, device, is_ascend=bool(i % 2), dtype=("int32", "int64")[i // 2 % 2],
            index=("int32", "int64")[(i + 1) // 2 % 2])


EDGES = [  # (shape, axis, k): k = 1, k = n, short rows, other axes, one long row split over warps
    ((7, 1), 1, 1), ((1,), 0, 1), ((4, 13), 1, 13), ((5, 16), -1, 16), ((2, 17), 1, 16),
    ((6, 7, 8), 1, 4), ((6, 7, 8), 0, 3), ((3, 300, 2), 1, 11), ((1, 70001), -1, 10),
    ((2, 5000), -1, 1)]


#: the edges the GPU mapping takes in the default tier (each a large program to compile on
#: PoCL): k = 1 on rows of 1, k = n, a row of 17, a long row split over warps; the CPU mapping
#: (the same selection logic, and the same strides for a non-last axis) and -m exhaustive take
#: them all
GPU_EDGES = (0, 2, 4, 8)


@pytest.mark.parametrize("device", ["gpu", "cpu", pytest.param("gpu, every edge",
                                                               marks=pytest.mark.exhaustive)])
def test_edge_shapes(device):
    backend_or_skip("opencl")
    rng = np.random.default_rng(20)
    for i, (shape, axis, k) in enumerate(EDGES):
        x = make(shape, "float32", rng, ties=bool(i % 2))
        if device == "gpu" and i not in GPU_EDGES:
            continue
        for asc in (False, True) if device == "cpu" else (bool(i % 2),):
            run(x, k, device.split(",")[0], axis=axis, is_ascend=asc)


@pytest.mark.parametrize("config", [
    {"wg": 64, "lanes": 8, "chunk_items": 16, "units": 64},    # shuffles of width 8, 8 units a group
    {"wg": 32, "lanes": 1, "chunk_items": 64, "units": 16},    # a work-item a unit in a warp
    {"wg": 256, "lanes": 32, "chunk_items": 1024, "units": 4}])
def test_other_configs(config):
    """Other mappings on the GPU target, with rows split (few units) and merged in rounds."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(21)
    for shape, k in [((3, 5000), 16), ((37, 130), 3)]:
        x = make(shape, "float64", rng, ties=True)
        run(x, k, "gpu", config, is_ascend=k == 3)


def test_values_or_indices_alone():
    backend_or_skip("opencl")
    x = make((9, 333), "float32", np.random.default_rng(22))
    for ret in ("values", "indices"):
        f = gpucg.compile("topk", gpucg.tensor(x.shape, "float32"), k=7, ret_type=ret,
                          target="opencl -device=gpu", impl="topk_warp")
        same(f(x), reference("topk", x, k=7, ret_type=ret))


def test_selection_and_the_limit():
    t = gpucg.tensor((4096, 1024), "float32")
    assert gpucg.explain("topk", t, k=16, target="cuda").choices[0].impl.name == "topk_warp.cuda"
    sel = gpucg.explain("topk", t, k=17, target="cuda")
    assert sel.choices[0].impl.name == "sort_bitonic.cuda"
    assert "needs k <= 16 (k is 17)" in str(sel)
    cpu = gpucg.explain("topk", t, k=17, target="opencl")
    assert cpu.choices[0].impl.name == "topk_group.opencl"  # a CPU core's own list


@pytest.mark.parametrize("target", ("cuda", "opencl -device=gpu"))
def test_gpus_never_dispatch_spilling_lists(target):
    """On a GPU, whatever the sizes (symbolic: every branch of the dispatcher), k <= 16 takes
    topk_warp and k > 16 the radix select or a sort: topk_group, whose run-time indexed lists
    live in local memory there, is never among the choices."""
    n, m = gpucg.var("n"), gpucg.var("m")
    for dtype in ("float32", "int64", "bfloat16"):
        for k in (1, 15, 16, 17, 33, 100, 128, 129, 1000):
            sel = gpucg.explain("topk", gpucg.tensor((n, m), dtype), k=k, target=target)
            names = {c.impl.short_name for c in sel.choices}
            assert "topk_group" not in names, (dtype, k, str(sel))
            assert names == {"topk_warp"} if k <= 16 else \
                names <= {"topk_radix", "sort_bitonic", "sort_radix", "sort_merge"}, str(sel)


def test_radix_survivor_buffers_and_their_overflow():
    """topk_radix reads the survivors a pass kept (n/16 pairs a row) or, where they did not
    fit, the data again: random rows (they fit), a constant row and a row of three values (every
    pass overflows: the index bits decide), float16 keys, both directions."""
    backend_or_skip("opencl")
    rng = np.random.default_rng(23)
    x = rng.standard_normal((4, 9000)).astype(np.float16)
    x[1] = 1.5
    x[2] = rng.integers(-1, 2, 9000)
    x[3, ::7] = np.nan
    for asc in (False, True):
        f = gpucg.compile("topk", gpucg.tensor(x.shape, "float16"), k=300, is_ascend=asc,
                          target="opencl -device=gpu", impl="topk_radix")
        same(f(x), reference("topk", x, k=300, is_ascend=asc))


def test_small_k_traffic_is_the_compulsory_bytes():
    """The checked-in Oclgrind figures of the small cases topk_warp takes (test_oclgrind's
    sweep holds the live traffic to them): at most 1.1x the compulsory bytes; the values come
    from their keys, so the winners are not read twice."""
    from pathlib import Path

    from gpucg.verify.baseline import load

    figures = load(Path(__file__).parent / "resources" / "topk.json")["traffic"]
    small_k = {key: f for key, f in figures.items() if key.endswith("topk_warp.opencl")}
    assert len(small_k) >= 2, sorted(figures)
    for key, f in small_k.items():
        assert f["ratio"] <= 1.1, (key, f)
        assert f["loaded"] + f["stored"] <= 1.1 * f["compulsory"], (key, f)


def test_split_kernels_launch_what_they_declare(nvrtc_or_skip):
    """The CUDA launch stand-in (test_cuda_launch runs the operator's cases, whose rows need
    no split) on a row split over warps: split, split_pairs and emit_pairs, both index widths."""
    from gpucg.runtime import use_backend
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    cupy = StandInCupy("sm_90")
    t = gpucg.tensor((1, 1 << 20), "float32")
    with use_backend("cuda", CudaBackend(cupy=cupy)):
        for index in ("int32", "int64"):
            f = gpucg.compile("topk", t, k=10, target="cuda", impl="topk_warp", index=index)
            f(cupy.empty(t.shape, t.dtype))
    entries = {ln.source.split("kernel ", 1)[1].split(":", 1)[0] for ln in cupy.launches}
    assert entries == {"split", "split_pairs", "emit_pairs"}, entries
