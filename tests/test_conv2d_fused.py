"""The fused Winograd kernel (templates/conv2d/winograd_fused.j2, strategies/conv2d_fused.py)
forced on PoCL against the float64 reference: both tiles, every layout, configs whose blocks
leave tiles, output channels and input channels ragged, the epilogue with a residual, the
pre-transformed operator; its traffic figures and its local layouts in the bank model.
"""

import json
import sys
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
#: the blocks the strategy picks for ResNet layers (default_for): blocks of 7 and 14 tiles,
#: 8 and 4 pairs a work-item (128 and 144 sums); the second of 112 work-items, unpadded
WIDE = {2: dict(bm=32, bth=4, btw=14, bk=4, tm=1, tn=8),
        4: dict(bm=16, bth=7, btw=4, bk=4, tm=1, tn=4)}
LAYOUTS = [("NCHW", "OIHW"), ("NHWC", "HWIO"), ("NCHW", "HWIO"), ("NHWC", "OIHW")]
#: configs that keep the input region of every channel in the dynamic local buffer (om > 1):
#: two passes of 8 output channels (13: the second work-group's second pass empty, 37: ragged),
#: 4 and 2 channels a step (5 and 13 channels: the held channels rounded up, zero)
RESIDENT = {2: dict(bm=8, bth=2, btw=8, bk=4, tm=1, tn=1, om=2),
            4: dict(bm=8, bth=1, btw=4, bk=2, tm=1, tn=1, om=2)}


def _opencl():
    from conftest import backend_or_skip

    backend_or_skip("opencl")


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("pick", [0, 1, 2, 3, 4])
def test_forced_configs_and_layouts(m, pick):
    """Each config in one layout pairing (the default in all four), sizes no tile divides,
    bias, relu; batch 1 and 2 (batch 1 in the first pairing only: one compile each). Pick 4:
    what a GPU takes for the call (a CPU device's default is DEFAULTS)."""
    _opencl()
    config = (CONFIGS[m] + [WIDE[m], "gpu"])[pick]
    for li, (dl, kl) in enumerate(LAYOUTS if config is None else LAYOUTS[pick % 2::2][:1]):
        for n in (1, 2) if li == 0 else (2,):
            ins = arrays(n, 5, 15, 17, 13, 3, 3, bias=True, data_layout=dl, kernel_layout=kl)
            attrs = dict(padding=(1, 2, 0, 1), data_layout=dl, kernel_layout=kl,
                         activation="relu")
            if config == "gpu":
                config = dict(gpucg.explain(
                    "conv2d", *(gpucg.tensor(a.shape) for a in ins), records=False,
                    target="opencl -device=gpu", impl=f"winograd_fused_{m}x{m}",
                    **attrs).choices[0].config)
                assert config != conv2d_fused.DEFAULTS[m]
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
    for config in (None, CONFIGS[m][1], RESIDENT[m]):
        types = [gpucg.tensor(a.shape) for a in (ins[0], u, ins[2])]
        f = gpucg.compile("conv2d_winograd_without_weight_transform", *types, target="opencl",
                          impl=f"winograd_fused_{m}x{m}", config=config, tile_size=m, **attrs)
        check(f(ins[0], u, ins[2]), ins, attrs)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("o", [13, 37])
def test_resident_passes(m, o):
    """om > 1 (RESIDENT) on PoCL in two layout pairings, sizes no tile divides, bias and
    residual: the region loaded once into the dynamic buffer, two passes over it, against
    the numpy target (float64 inside)."""
    _opencl()
    for dl, kl in LAYOUTS[:2] if o == 13 else LAYOUTS[2:]:
        x, w, b = arrays(2, 13, 15, 17, o, 3, 3, bias=True, data_layout=dl, kernel_layout=kl)
        r = rng.standard_normal((2, o, 14, 18) if dl == "NCHW" else (2, 14, 18, o))
        ins = [x, w, b, r.astype(np.float32)]
        attrs = dict(padding=(1, 2, 0, 1), data_layout=dl, kernel_layout=kl,
                     activation="relu", beta=0.5)
        types = [gpucg.tensor(a.shape) for a in ins]
        f = gpucg.compile("conv2d", *types, target="opencl", impl=f"winograd_fused_{m}x{m}",
                          config=RESIDENT[m], **attrs)
        assert f.explain().choices[0].config["om"] == 2 and f.specs(0)["fused"].dynamic_local
        want = gpucg.compile("conv2d", *types, target="numpy", **attrs)(*ins)
        np.testing.assert_allclose(f(*ins), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


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


def _call(op, case, m):
    """The :class:`conv2d_fused.Call` of a declared case, from its shapes and attributes."""
    x, w = case.inputs[:2]
    nchw = case.attrs.get("data_layout", "NCHW") == "NCHW"
    n, c, h, wd = x.shape if nchw else (x.shape[0], x.shape[3], *x.shape[1:3])
    pre = op != "conv2d"
    o = w.shape[2] if pre else w.shape[0 if case.attrs.get("kernel_layout", "OIHW") == "OIHW"
                                       else 3]
    pad = case.attrs.get("padding", 0)
    pad = 1 if pad == "SAME" else pad  # a 3x3 window, stride 1
    size = [np.dtype(t.dtype).itemsize for t in case.inputs] + [0, 0]
    return conv2d_fused.Call(n, c, h, wd, o, h + 2 * pad - 2, wd + 2 * pad - 2, pad, pad,
                             x_bytes=size[0], w_bytes=size[1], y_bytes=size[0],
                             bias_bytes=size[2], residual_bytes=size[3],
                             w_words=(m + 2) ** 2 if pre else 9)


def test_static_count_equals_oclgrind():
    """conv2d_fused.traffic on the declared small cases equals Oclgrind's count of the same
    calls (tests/resources/, which test_oclgrind holds the kernels to), byte for byte."""
    from gpucg.op import get_op

    rows = {k: v for family in ("conv2d", "conv2d_winograd")
            for k, v in _traffic(family).items() if "|winograd_fused_" in k}
    for key, row in rows.items():
        op, label, impl = key.split("|")
        case = get_op(op).representative("small")[int(label.split()[1])]
        sel = gpucg.explain(op, *case.inputs, target="opencl -device=gpu", records=False,
                            **case.attrs)
        assert sel.choices[0].impl.name == impl, key
        m = int(impl.split("_")[2][0])
        call = _call(op, case, m)
        got = conv2d_fused.traffic(sel.choices[0].config, m, call)
        assert (*got, call.compulsory) == (row["loaded"], row["stored"], row["compulsory"]), key


#: ResNet's 3x3 layers (C = O, H = W, padding 1) -> {batch: (F(2x2), F(4x4))}: bytes moved by
#: the default over the compulsory bytes, by the static count, on CUDA sm_80 and sm_90 (163 and
#: 227 KiB of shared memory a block: the input region of every channel held, om > 1, at 64 x 56
#: and for F(2x2) at 128 x 28) and within the 48 KiB of an OpenCL GPU (the blocks before
#: dynamic local memory); 2x at 128 x 28 is out of reach of this kernel (conv2d_fused's
#: docstring), and at batch 8 the filters' re-reads dominate from 128 channels on
_CUDA = {(64, 56): {8: (1.79, 1.74), 1: (1.66, 1.61)},
         (128, 28): {8: (3.68, 3.77), 1: (2.32, 2.38)},
         (256, 14): {8: (5.99, 4.83), 1: (1.51, 1.22)},
         (512, 7): {8: (7.5, None), 1: (1.08, None)}}
RESNET = {"cuda -arch=sm_90": _CUDA, "cuda -arch=sm_80": _CUDA,
          "opencl -device=gpu": {(64, 56): {8: (3.01, 2.34), 1: (2.79, 2.16)},
                                 (128, 28): {8: (5.26, 3.77), 1: (3.31, 2.38)},
                                 (256, 14): {8: (5.99, 4.83), 1: (1.51, 1.22)},
                                 (512, 7): {8: (7.5, None), 1: (1.08, None)}}}


#: defaults whose steps conflict (default_for's fallback): on sm_80 the region of every channel
#: leaves no room for the row padding that would spread the patch reads (2-way)
UNPADDED = {("cuda -arch=sm_80", m, c): {"patch read"} for m, c in ((2, 64), (4, 64), (2, 128))}


def _limit(target):
    from gpucg.target import Target

    return Target(target).capabilities.smem_per_block_optin


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("target", list(RESNET))
def test_default_traffic_on_resnet_layers(m, target):
    """The default the strategy picks for each layer moves what RESNET says, and no config of
    the space moves fewer bytes (passes over a held region where they save HELD_GAIN of the
    bytes, else one); at most 2x at 64 x 56 on CUDA at batch 8 and 1, and from 256 channels at
    14 x 14 on at batch 1."""
    limit = _limit(target)
    for (c, hw), by_batch in RESNET[target].items():
        for n, ratios in by_batch.items():
            if ratios[m // 4] is None:
                continue  # F(4x4) needs 14 x 14 outputs
            types = [gpucg.tensor((n, c, hw, hw)), gpucg.tensor((c, c, 3, 3))]
            sel = gpucg.explain("conv2d", *types, target=target, records=False, padding=1,
                                impl=f"winograd_fused_{m}x{m}")
            config = sel.choices[0].config
            call = conv2d_fused.Call(n, c, hw, hw, c, hw, hw, 1, 1)
            moved = sum(conv2d_fused.traffic(config, m, call))
            assert moved / call.compulsory <= ratios[m // 4], (c, hw, n, config)
            assert config == conv2d_fused.default_for(m, True, call, limit)
            moves = [(sum(conv2d_fused.traffic(k, m, call)), k["om"] > 1)
                     for k in conv2d_fused.blockings(m, call, limit)]
            one = min(b for b, held in moves if not held)
            held = min((b for b, held in moves if held), default=one)
            gain = held <= (1 - conv2d_fused.HELD_GAIN) * one
            assert moved == (held if gain else one) and (config["om"] > 1) == gain, (c, hw, n)
            if (c >= 256 and n == 1) or (c == 64 and target.startswith("cuda")):
                assert moved <= 2 * call.compulsory, (c, hw, n)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("target", list(RESNET))
def test_resnet_defaults_are_conflict_free(m, target):
    """The defaults picked for the ResNet layers: ideal wavefronts in the bank model for every
    request of a step but UNPADDED's (where om > 1 the region's store, made once, may
    conflict: NHWC, 8- to 32-way), the padded layout within the local memory (static within
    48 KiB, with the dynamic buffer within the target's limit)."""
    limit = _limit(target)
    for c, hw in RESNET[target]:
        call = conv2d_fused.Call(1, c, hw, hw, c, hw, hw, 1, 1)
        for nchw in (True, False):
            config = conv2d_fused.default_for(m, nchw, call, limit)
            lay = conv2d_fused.layout(config, m, nchw, c, limit)
            once = ("x region store",) if config["om"] > 1 else ()
            bad = {r.name for r in banks.report(conv2d_fused.requests(config, m, nchw, lay))
                   if not r.conflict_free and r.name not in once}
            assert bad == UNPADDED.get((target, m, c), set()), (c, hw, config, bad)
            assert bool(conv2d_fused.cost(config, m, nchw, lay)[0]) == bool(bad)
            static, dynamic = lay.split(config)
            assert static <= conv2d_fused.LOCAL_BYTES and static + dynamic <= limit
            assert (dynamic > 0) == (config["om"] > 1)


OCLGRIND = """
import json, numpy as np, gpucg
rng = np.random.default_rng(3)
out = []
for m, dl, config in {calls}:
    nchw = dl == "NCHW"
    x = rng.standard_normal((1, 5, 15, 17) if nchw else (1, 15, 17, 5)).astype(np.float32)
    w = rng.standard_normal((13, 5, 3, 3) if nchw else (3, 3, 5, 13)).astype(np.float32)
    b = rng.standard_normal(13).astype(np.float32)
    r = rng.standard_normal((1, 13, 14, 18) if nchw else (1, 14, 18, 13)).astype(np.float32)
    attrs = dict(padding=(1, 2, 0, 1), data_layout=dl, kernel_layout="OIHW" if nchw else "HWIO",
                 activation="relu", beta=0.5)
    types = [gpucg.tensor(a.shape) for a in (x, w, b, r)]
    y = gpucg.compile("conv2d", *types, target="opencl", impl=f"winograd_fused_{{m}}x{{m}}",
                      config=config, **attrs)(x, w, b, r)
    want = gpucg.compile("conv2d", *types, target="numpy", **attrs)(x, w, b, r)
    out.append(float(np.abs(np.asarray(y) - want).max() / np.abs(want).max()))
print(json.dumps(out))
"""


def test_wide_blocks_under_oclgrind(oclgrind_or_skip, tmp_path):
    """The blocks of 7 and 14 tiles (WIDE, forced) and the input region of every channel held
    in the dynamic local buffer over two passes (RESIDENT: 5 channels held as 8 and 6, 13
    output channels, the second pass of the second work-group empty; a buffer of a few KiB,
    within Oclgrind's 48 KiB, which the large defaults' 135-200 KiB are not), with a bias and a
    residual, padding on two sides only: no reports, the results, and Oclgrind's count of each
    kernel equal to conv2d_fused.traffic's (x once per bm * om channels, the bias read by a
    row's work-items, the residual)."""
    from gpucg import procwatch
    from gpucg.verify import oclgrind

    calls = [(m, dl, WIDE[m]) for m, dl in ((2, "NCHW"), (4, "NHWC"))] + \
        [(m, dl, RESIDENT[m]) for m, dl in ((2, "NHWC"), (4, "NCHW"))]
    env = oclgrind.environment(tmp_path, counts=True)
    done = procwatch.run([sys.executable, "-c", OCLGRIND.format(calls=calls)], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    log = tmp_path / "oclgrind.log"
    reports = oclgrind.parse_log(log.read_text()) if log.exists() else []
    assert not reports, "\n\n".join(r.text for r in reports)
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert max(errors) < 1e-5, errors
    counts = oclgrind.parse_counts(done.stdout)
    assert len(counts) == len(calls), counts
    for (m, _, config), k in zip(calls, counts):
        call = conv2d_fused.Call(1, 5, 15, 17, 13, 14, 18, 1, 2, bias_bytes=4, residual_bytes=4)
        assert (k.loaded, k.stored) == conv2d_fused.traffic(config, m, call), (m, k)
