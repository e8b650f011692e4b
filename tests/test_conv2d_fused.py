"""The fused Winograd kernel (templates/conv2d/winograd_fused.j2, strategies/conv2d_fused.py)
forced on PoCL against the float64 reference: both tiles, every layout, configs whose blocks
leave tiles, output channels and input channels ragged, the epilogue with a residual, the
pre-transformed operator; its traffic figures and its local layouts in the bank model.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg.ops.conv2d_winograd import winograd_weight_transform
from gpucg.strategies import conv2d_fused
from gpucg.verify import banks

from test_conv2d import arrays, check, run

rng = np.random.default_rng(19)
RESOURCES = Path(__file__).parent / "resources"

#: configs beside the default: one output channel block of 8 (13 channels: two blocks, the
#: second ragged), 2 channels a step (5 channels: ragged), 1 x 2 tile blocks, one pair a
#: work-item; tall blocks of 4 pairs a work-item
CONFIGS = {2: [None, dict(bm=8, bth=2, btw=8, bk=2, tm=1, tn=1),
               dict(bm=16, bth=8, btw=2, bk=4, tm=2, tn=4)],
           4: [None, dict(bm=8, bth=1, btw=4, bk=2, tm=1, tn=1),
               dict(bm=16, bth=4, btw=4, bk=2, tm=1, tn=2)]}
LAYOUTS = [("NCHW", "OIHW"), ("NHWC", "HWIO"), ("NCHW", "HWIO"), ("NHWC", "OIHW")]


def _opencl():
    from conftest import backend_or_skip

    backend_or_skip("opencl")


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("pick", [0, 1, 2])
def test_forced_configs_and_layouts(m, pick):
    """Each config in one layout pairing (the default in all four), sizes no tile divides,
    bias, relu; batch 1 and 2 (batch 1 in the first pairing only: one compile each)."""
    _opencl()
    config = CONFIGS[m][pick]
    for li, (dl, kl) in enumerate(LAYOUTS if config is None else LAYOUTS[pick % 2::2][:1]):
        for n in (1, 2) if li == 0 else (2,):
            ins = arrays(n, 5, 15, 17, 13, 3, 3, bias=True, data_layout=dl, kernel_layout=kl)
            attrs = dict(padding=(1, 2, 0, 1), data_layout=dl, kernel_layout=kl,
                         activation="relu")
            got, f = run("opencl", ins, impl=f"winograd_fused_{m}x{m}", config=config, **attrs)
            assert f.last_impl == f"winograd_fused_{m}x{m}.opencl"
            check(got, ins, attrs)


@pytest.mark.parametrize("m", [2, 4])
def test_residual_alpha_beta_and_float16(m):
    """The shared epilogue (alpha, bias, gelu, beta * residual) in float32, and float16 data
    with a float32 output."""
    _opencl()
    x, w, b = arrays(2, 6, 16, 14, 9, 3, 3, bias=True)
    attrs = dict(padding=1, activation="gelu", alpha=0.5, beta=-2.0)
    r = rng.standard_normal((2, 9, 16, 14)).astype(np.float32)
    f = gpucg.compile("conv2d", *[gpucg.tensor(a.shape) for a in (x, w, b, r)], target="opencl",
                      impl=f"winograd_fused_{m}x{m}", **attrs)
    want = gpucg.compile("conv2d", *[gpucg.tensor(a.shape) for a in (x, w, b, r)],
                         target="numpy", **attrs)(x, w, b, r)
    np.testing.assert_allclose(f(x, w, b, r), want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    ins = [a.astype(np.float16) for a in (x, w, b)]
    attrs = dict(padding=1, out_dtype="float32", data_layout="NCHW")
    got, _ = run("opencl", ins, impl=f"winograd_fused_{m}x{m}", **attrs)
    check(got, ins, attrs, "float32")


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pretransformed(m, layout):
    _opencl()
    ins = arrays(1, 7, 14, 15, 10, 3, 3, bias=True, data_layout=layout)
    u = winograd_weight_transform(ins[1], tile_size=m)
    attrs = dict(padding=1, data_layout=layout, activation="relu")
    for config in (None, CONFIGS[m][1]):
        types = [gpucg.tensor(a.shape) for a in (ins[0], u, ins[2])]
        f = gpucg.compile("conv2d_winograd_without_weight_transform", *types, target="opencl",
                          impl=f"winograd_fused_{m}x{m}", config=config, tile_size=m, **attrs)
        check(f(ins[0], u, ins[2]), ins, attrs)


def _traffic(family):
    return json.loads((RESOURCES / f"{family}.json").read_text())["traffic"]


def test_traffic_at_most_twice_the_compulsory_bytes():
    """The checked-in Oclgrind figures (test_oclgrind holds the kernels to them) of every
    small case the fused kernel runs: at most 2x the compulsory bytes (the unfused kernels
    moved 6.8-18.5x)."""
    rows = {k: v for family in ("conv2d", "conv2d_winograd")
            for k, v in _traffic(family).items() if "|winograd_fused_" in k}
    assert len(rows) >= 4, rows
    for key, row in rows.items():
        assert row["ratio"] <= 2.0, (key, row)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("nchw", [True, False])
def test_default_layout_is_conflict_free(m, nchw):
    """Every local-memory request of the default config takes its ideal wavefronts in the
    bank model, and the layout fits the local memory."""
    config = conv2d_fused.DEFAULTS[m]
    bad = [r.line() for r in banks.report(conv2d_fused.requests(config, m, nchw))
           if not r.conflict_free]
    assert not bad, bad
    lay = conv2d_fused.layout(config, m, nchw)
    assert 4 * lay.words(config) <= conv2d_fused.LOCAL_BYTES
    assert lay.qs >= m * lay.cq and lay.xs >= lay.r * lay.qs and lay.cq * m >= lay.q


def test_the_model_sees_the_conflicts_the_padding_removes():
    """Without the padding the same requests conflict (U's rows of 32 channels: 8-way)."""
    config, m = conv2d_fused.DEFAULTS[2], 2
    lay = conv2d_fused.layout(config, m, True)
    plain = conv2d_fused.Layout(m, lay.r, lay.q, lay.cq, m * lay.cq, lay.r * m * lay.cq,
                                config["bm"], config["bth"] * config["btw"])
    worst = {r.name: r.wavefronts for r in banks.report(conv2d_fused.requests(config, m, True,
                                                                              plain))}
    assert worst["U store"] == 8 and worst["patch read"] == 2
