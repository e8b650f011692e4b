"""The GPU tier for conv2d: CUDA against the float64 reference (skipped without CUDA)."""

import pytest

import gpucg
from gpucg.runtime import backend_status

ok, _, why = backend_status("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no CUDA here: {why}")]


def _helpers():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import test_conv2d

    return test_conv2d


@pytest.mark.parametrize("case", range(len(_helpers().CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_cuda_implementation(case, dtype):
    """Every implementation that may run for a case, with bias and relu, host arrays in."""
    from conftest import applicable

    t = _helpers()
    c = t.CASES[case]
    kw = t.case_kw(c, True)
    ins = t.arrays(**dict(kw, dtype=dtype))
    attrs = dict(c[7], activation="relu")
    types = [gpucg.tensor(a.shape, dtype) for a in ins]
    names = applicable("conv2d", *types, target="cuda", **attrs)
    for name in names:
        got, f = t.run("cuda", ins, impl=name, **attrs)
        assert f.last_impl == f"{name}.cuda"
        t.check(got, ins, attrs)


def test_cupy_arrays_stay_on_the_device_and_resnet_shapes():
    import cupy

    t = _helpers()
    # direct ranks above Winograd on CUDA (measured: strategies/conv2d.py)
    for c, o, hw, attrs, want in [(64, 64, 56, dict(padding=1), "direct"),
                                  (512, 512, 7, dict(padding=1), "direct"),
                                  (32, 32, 112, dict(padding=1, groups=32), "depthwise"),
                                  (3, 64, 224, dict(padding=3, strides=2), "direct")]:
        groups = attrs.get("groups", 1)
        k = 7 if attrs.get("strides") == 2 else 3
        ins = t.arrays(2, c, hw, hw, o, k, k, groups, bias=True)
        dev = [cupy.asarray(a) for a in ins]
        f = gpucg.compile("conv2d", *[gpucg.tensor(a.shape) for a in ins], target="cuda",
                          activation="relu", **attrs)
        y = f(*dev)
        assert isinstance(y, cupy.ndarray)
        assert f.last_impl == f"{want}.cuda"
        t.check(cupy.asnumpy(y), ins, dict(attrs, activation="relu"))


def test_symbolic_batch_and_size_dispatch_on_cuda():
    t = _helpers()
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    f = gpucg.compile("conv2d", gpucg.tensor((n, 16, h, w)), gpucg.tensor((24, 16, 3, 3)),
                      target="cuda", padding=1)
    for batch, hh, want in ((1, 20, "direct"), (3, 9, "direct"), (5, 33, "direct")):
        ins = t.arrays(batch, 16, hh, hh + 1, 24, 3, 3)
        t.check(f(*ins), ins, dict(padding=1))
        assert f.last_impl == f"{want}.cuda"


def test_pretransformed_weights_on_cuda():
    t = _helpers()
    ins = t.arrays(4, 32, 30, 30, 48, 3, 3, bias=True)
    for tile in (2, 4):
        u = gpucg.ops.winograd_weight_transform(ins[1], tile_size=tile)
        got = gpucg.ops.conv2d_winograd_without_weight_transform(
            ins[0], u, tile_size=tile, bias=ins[2], padding=1, target="cuda")
        t.check(got, ins, dict(padding=1))
