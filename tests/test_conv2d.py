"""conv2d against an independent reference on every backend here (numpy, OpenCL on PoCL).

The reference (gpucg.ops.conv2d.reference_conv) accumulates one channel contraction per kernel
tap in float64; the NumPy target uses im2col + matmul in float32, and the kernels implicit GEMM,
Winograd or a depthwise loop, so each checks the others. Errors are bounded relative to the
convolution of |x| and |w| (the size of the sums involved).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpucg
from gpucg.ops.conv2d import Conv2dAttrs, reference_conv
from gpucg.ops.conv2d_winograd import winograd_weight_transform

rng = np.random.default_rng(1234)


def wshape(o, i, kh, kw, layout):
    return (o, i, kh, kw) if layout == "OIHW" else (kh, kw, i, o)


def xshape(n, c, h, w, layout):
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def arrays(n, c, h, w, o, kh, kw, groups=1, dtype="float32", bias=False, data_layout="NCHW",
           kernel_layout="OIHW"):
    x = rng.standard_normal(xshape(n, c, h, w, data_layout)).astype(dtype)
    wt = rng.standard_normal(wshape(o, c // groups, kh, kw, kernel_layout)).astype(dtype)
    out = [x, wt]
    if bias:
        out.append(rng.standard_normal(o).astype(dtype))
    return out


def check(got, ins, attrs_kw, out_dtype=None):
    """``got`` equals the float64 reference within a bound scaled by conv(|x|, |w|)."""
    attrs = Conv2dAttrs(**attrs_kw)
    x, w = ins[:2]
    b = ins[2] if len(ins) == 3 else None
    out_dtype = out_dtype or attrs.out_dtype or x.dtype.name
    want = reference_conv(x, w, b, attrs, "float64")
    scale = reference_conv(np.abs(x), np.abs(w), None if b is None else np.abs(b),
                           Conv2dAttrs(**{**attrs_kw, "activation": None}), "float64")
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == np.dtype(out_dtype), \
        (got.shape, got.dtype, want.shape, out_dtype)
    rel = 2e-3 if "float16" in (x.dtype.name, out_dtype) else 2e-5
    err = np.abs(got.astype(np.float64) - want)
    bound = rel * (scale + np.abs(want)) + 1e-6
    assert (err <= bound).all(), f"max error {err.max():.3g} (bound {bound[err > bound].min():.3g})"


def run(target, ins, impl=None, **kw):
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in ins]
    f = gpucg.compile("conv2d", *types, target=target, impl=impl, **kw)
    return f(*ins), f


# (n, c, h, w, o, kh, kw, attrs): every padding form, stride, dilation, group count, layout
CASES = [
    (2, 13, 71, 71, 59, 3, 3, dict(padding=1, activation="relu")),          # the odd case
    (2, 13, 71, 71, 59, 3, 3, dict(padding="SAME", data_layout="NHWC", kernel_layout="HWIO")),
    (1, 8, 9, 10, 16, 3, 3, dict(padding=(1, 2))),
    (2, 5, 12, 9, 7, 3, 3, dict(padding=(0, 1, 2, 1), activation="relu")),
    (1, 4, 8, 8, 6, 3, 3, dict(padding="VALID")),
    (1, 3, 23, 23, 8, 7, 7, dict(padding=3, strides=2)),                     # a stem
    (2, 6, 15, 16, 12, 3, 3, dict(padding=1, strides=(2, 1), dilation=(1, 2))),
    (1, 6, 17, 13, 12, 3, 3, dict(padding="SAME", strides=2, dilation=2)),
    (2, 16, 9, 9, 8, 1, 1, dict()),                                            # 1x1
    (1, 16, 9, 9, 8, 1, 1, dict(strides=2, data_layout="NHWC", kernel_layout="OIHW")),
    (2, 6, 15, 15, 12, 3, 3, dict(padding=1, groups=3, kernel_layout="HWIO")),
    (2, 6, 15, 15, 6, 3, 3, dict(padding=1, groups=6)),                       # depthwise
    (2, 6, 15, 15, 12, 3, 3, dict(padding=1, groups=6, strides=2)),           # multiplier 2
    (1, 5, 11, 14, 15, 5, 5, dict(padding=2, groups=5, dilation=2, data_layout="NHWC",
                                  kernel_layout="HWIO")),
    (3, 4, 5, 5, 4, 3, 3, dict(padding="SAME", groups=4, data_layout="NHWC")),
    (1, 2, 1, 1, 3, 1, 1, dict()),                                             # 1x1 everything
    (1, 3, 2, 3, 2, 3, 3, dict(padding=1)),                                    # tiny image
    (1, 3, 5, 4, 2, 2, 3, dict(padding=(0, 1), strides=(1, 3))),              # even kernel
]


def case_kw(case, bias):
    """The arguments of :func:`arrays` for a case of CASES."""
    n, c, h, w, o, kh, kw, attrs = case
    return dict(n=n, c=c, h=h, w=w, o=o, kh=kh, kw=kw, groups=attrs.get("groups", 1), bias=bias,
                data_layout=attrs.get("data_layout", "NCHW"),
                kernel_layout=attrs.get("kernel_layout", "OIHW"))


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_reference(target, case, bias):
    ins = arrays(**case_kw(case, bias))
    got, _ = run(target, ins, **case[7])
    check(got, ins, case[7])


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_every_implementation_on_opencl(case):
    """Each kernel that may run for a case (winograd both sizes, depthwise, direct) is right."""
    from conftest import applicable, backend_or_skip

    backend_or_skip("opencl")
    ins = arrays(**case_kw(case, True))
    attrs = dict(case[7], activation="relu")
    types = [gpucg.tensor(a.shape, a.dtype.name) for a in ins]
    names = applicable("conv2d", *types, target="opencl", **attrs)
    assert "direct" in names
    for name in names:
        got, f = run("opencl", ins, impl=name, **attrs)
        assert f.last_impl.startswith(name + ".")
        check(got, ins, attrs)


#: the direct kernel's tile knobs forced: vw elements a load, double-buffered local tiles (double_buffer),
#: the conflict-free layouts (conflict_free); the first is the GPU default
DIRECT_TILES = [dict(bm=128, bn=128, bk=8, tm=8, tn=8, vw=4, double_buffer=True, conflict_free=True),
                dict(bm=32, bn=64, bk=16, tm=4, tn=4, vw=4, double_buffer=False, conflict_free=False),
                dict(bm=64, bn=64, bk=16, tm=4, tn=4, vw=2, double_buffer=True, conflict_free=False)]
#: cases where each of its vector loads runs: W along K (NCHW/OIHW, K = 36 or 8), W along
#: the output channels (HWIO), x along the channels (NHWC), x along the pixels (pointwise
#: NCHW; 7 x 5 pixels: not a multiple of vw, so the scalar path of the same kernel), ragged tiles
VECTOR_CASES = [
    (2, 4, 17, 13, 12, 3, 3, dict(padding=1, activation="relu")),
    (2, 8, 9, 7, 12, 3, 3, dict(padding=1, strides=(2, 1), data_layout="NHWC",
                                kernel_layout="HWIO")),
    (2, 8, 6, 6, 20, 1, 1, dict()),
    (1, 8, 7, 5, 12, 1, 1, dict()),
    (1, 8, 9, 7, 16, 3, 3, dict(padding=1, groups=2, dilation=(2, 1), kernel_layout="HWIO")),
]


@pytest.mark.parametrize("config", DIRECT_TILES,
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_direct_tile_knobs(config):
    """The direct kernel with vector loads, double buffering and either layout, forced, on
    PoCL: each case takes the forced config (the inputs are aligned) and equals the reference."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    for case in VECTOR_CASES:
        ins = arrays(**case_kw(case, True))
        got, f = run("opencl", ins, impl="direct", config=config, **case[7])
        assert f.selection.choices[0].config == config and f.plan(*ins).index == 0
        check(got, ins, case[7])


def exhaustive_case(params) -> bool:
    """The cases of default-tier tests that run with -m exhaustive only (conftest), on OpenCL:
    test_matches_reference with a bias (test_every_implementation_on_opencl runs every case
    with a bias and relu on every implementation, the selected one included); float16 in,
    float32 out in NHWC (every implementation stores float32 from float16 in NCHW, and
    accumulates float16 in NHWC, in the default tier)."""
    if params.get("target") != "opencl":
        return False
    return params.get("bias") is True or (params.get("out_dtype") == "float32"
                                          and params.get("layouts") == ("NHWC", "HWIO"))


@pytest.mark.parametrize("layouts", [("NCHW", "OIHW"), ("NHWC", "HWIO")])
@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_float16_accumulates_in_float32(target, layouts, out_dtype):
    """float16 storage, float32 sums: 288-term sums stay within float16 rounding of the result.

    OpenCL runs it without cl_khr_fp16 (PoCL has none): half is only loaded and stored.
    """
    from conftest import applicable

    dl, kl = layouts
    for case in ((2, 32, 13, 11, 24, 3, 3, dict(padding=1)),
                 (1, 8, 9, 9, 8, 3, 3, dict(padding=1, groups=8, strides=2)),
                 (1, 3, 15, 15, 8, 5, 5, dict(padding=2, strides=2))):
        n, c, h, w, o, kh, kw, attrs = case
        attrs = dict(attrs, data_layout=dl, kernel_layout=kl, out_dtype=out_dtype,
                     activation="relu")
        ins = arrays(n, c, h, w, o, kh, kw, attrs.get("groups", 1), "float16", True, dl, kl)
        types = [gpucg.tensor(a.shape, "float16") for a in ins]
        for name in ([None] if target == "numpy" else
                     applicable("conv2d", *types, target=target, **attrs)):
            got, f = run(target, ins, impl=name, **attrs)
            check(got, ins, attrs, out_dtype or "float16")


SELECTION = [  # (data shape, weight shape, attrs, implementation chosen on GPU targets)
    ((8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "winograd_4x4"),
    ((8, 512, 7, 7), (512, 512, 3, 3), dict(padding=1), "winograd_2x2"),
    ((8, 64, 14, 14), (64, 64, 3, 3), dict(padding="SAME"), "winograd_4x4"),
    ((8, 64, 13, 14), (64, 64, 3, 3), dict(padding="SAME"), "winograd_2x2"),
    ((8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1, strides=2), "direct"),
    ((8, 64, 56, 56), (64, 64, 3, 3), dict(padding=2, dilation=2), "direct"),
    ((8, 64, 56, 56), (64, 32, 3, 3), dict(padding=1, groups=2), "direct"),
    ((8, 3, 224, 224), (64, 3, 7, 7), dict(padding=3, strides=2), "direct"),
    ((8, 256, 56, 56), (64, 256, 1, 1), dict(), "direct"),
    ((8, 32, 112, 112), (32, 1, 3, 3), dict(padding=1, groups=32), "depthwise"),
    ((8, 32, 112, 112), (64, 1, 3, 3), dict(padding=1, groups=32), "depthwise"),
    ((8, 56, 56, 144), (3, 3, 1, 144), dict(padding=1, groups=144, data_layout="NHWC",
                                            kernel_layout="HWIO"), "depthwise"),
    ((8, 1, 28, 28), (4, 1, 3, 3), dict(padding=1, groups=1), "winograd_4x4"),
]


def winograd_name(want: str, target_name) -> str:
    """The implementation a target takes for Winograd tile ``want`` ("winograd_2x2",
    "winograd_4x4"): the fused kernel, but the unfused one on a CPU device (faster there) and
    direct on CUDA (faster on an H100, strategies/conv2d.py); other names unchanged."""
    if not want.startswith("winograd_"):
        return want
    if gpucg.Target(target_name).backend == "cuda":
        return "direct"
    if gpucg.Target(target_name).on_cpu:
        return want
    return want.replace("winograd_", "winograd_fused_")


@pytest.mark.parametrize("target_name", ["cuda", "opencl", "opencl -device=cpu"])
@pytest.mark.parametrize("data,weight,attrs,want", SELECTION)
def test_selection_by_case(target_name, data, weight, attrs, want):
    sel = gpucg.explain("conv2d", gpucg.tensor(data), gpucg.tensor(weight), target=target_name,
                        **attrs)
    # decided at compile time but for the alignment of the addresses (direct's vector loads)
    assert {c.impl.name.rsplit(".", 1)[0] for c in sel.choices} == {winograd_name(want,
                                                                                target_name)}


def test_numpy_target_selects_im2col():
    sel = gpucg.explain("conv2d", gpucg.tensor((1, 4, 8, 8)), gpucg.tensor((4, 4, 3, 3)),
                        target="numpy")
    assert sel.choices[0].impl.name == "conv2d_im2col.numpy"


@settings(max_examples=40, deadline=None)
@given(k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 3), dilation=st.integers(1, 2),
       groups=st.sampled_from([1, 2, 4]), h=st.integers(3, 40))
def test_winograd_exactly_when_guard_holds(k, stride, dilation, groups, h):
    types = (gpucg.tensor((2, 4, h, h)), gpucg.tensor((8, 4 // groups, k, k)))
    attrs = dict(padding="SAME", strides=stride, dilation=dilation, groups=groups)
    sel = gpucg.explain("conv2d", *types, target="opencl -device=gpu", **attrs)
    name = sel.choices[0].impl.name
    guard = k == 3 and stride == 1 and dilation == 1 and groups == 1
    assert name.startswith("winograd") == guard, (name, sel)
    if guard:
        assert name == ("winograd_fused_4x4.opencl" if h >= 14 else "winograd_fused_2x2.opencl")
    # on CUDA direct ranks first (measured on an H100); Winograd stays a candidate
    sel = gpucg.explain("conv2d", *types, target="cuda", **attrs)
    assert not sel.choices[0].impl.name.startswith("winograd"), sel
    wino = [c for c in sel.candidates if c.name.startswith("winograd_2x2")][0]
    assert (wino.verdict == "excluded") == (not guard)
    if not guard:
        assert wino.condition == "never"
        assert wino.reason == "needs a 3x3 kernel, stride 1, dilation 1, groups 1"


def test_symbolic_batch_compiles_once_and_dispatches(target):
    n = gpucg.var("n")
    attrs = dict(padding=1, activation="relu")
    f = gpucg.compile("conv2d", gpucg.tensor((n, 8, 12, 12)), gpucg.tensor((16, 8, 3, 3)),
                      gpucg.tensor((16,)), target=target, **attrs)
    assert not f.selection.dynamic  # the batch decides nothing: one kernel for every n
    compiles = gpucg.stats()["compiles"]
    for batch in (1, 3, 5):
        ins = arrays(batch, 8, 12, 12, 16, 3, 3, bias=True)
        check(f(*ins), ins, attrs)
    if target != "numpy":
        assert f.last_impl == f"{winograd_name('winograd_2x2', target)}.{target}"
        assert gpucg.stats()["compiles"] - compiles <= 4  # the first call's kernels only
    assert f.dispatcher_source.count("_plan(") == 1


def test_symbolic_height_width_dispatch_at_run_time(target):
    n, h, w = gpucg.var("n"), gpucg.var("h"), gpucg.var("w")
    # a GPU target where Winograd ranks first (on CUDA direct does: one kernel for every size)
    f = gpucg.compile("conv2d", gpucg.tensor((n, 4, h, w)), gpucg.tensor((6, 4, 3, 3)),
                      target="opencl" if target == "opencl" else "opencl -device=gpu", padding=1)
    assert f.selection.dynamic
    assert "if h >= 14 and w >= 14:" in f.dispatcher_source
    if target != "opencl":
        return
    for (hh, ww), want in (((20, 16), "winograd_4x4"), ((13, 30), "winograd_2x2"),
                           ((1, 1), "winograd_2x2")):
        ins = arrays(2, 4, hh, ww, 6, 3, 3)
        check(f(*ins), ins, dict(padding=1))
        assert f.last_impl == f"{winograd_name(want, 'opencl')}.opencl"
    with pytest.raises(gpucg.SignatureError, match=r"weight.shape\[1\] is 5"):
        f(np.ones((1, 4, 8, 8), np.float32), np.ones((6, 5, 3, 3), np.float32))


def test_symbolic_size_check_in_dispatcher():
    h = gpucg.var("h")
    f = gpucg.compile("conv2d", gpucg.tensor((1, 2, h, 9)), gpucg.tensor((2, 2, 5, 3)),
                      target="numpy", padding=(1, 0))
    assert "_bad_input" in f.dispatcher_source
    with pytest.raises(gpucg.InputError, match="larger than the padded input height 4"):
        f(np.ones((1, 2, 2, 9), np.float32), np.ones((2, 2, 5, 3), np.float32))
    ins = arrays(1, 2, 3, 9, 2, 5, 3)
    check(f(*ins), ins, dict(padding=(1, 0)))


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pretransformed_winograd_weights(target, tile, layout):
    ins = arrays(2, 5, 11, 9, 7, 3, 3, bias=True, data_layout=layout)
    u = winograd_weight_transform(ins[1], tile_size=tile)
    assert u.shape == (tile + 2, tile + 2, 7, 5) and u.dtype == np.float32
    attrs = dict(padding=1, data_layout=layout, activation="relu")
    got = gpucg.ops.conv2d_winograd_without_weight_transform(
        ins[0], u, tile_size=tile, bias=ins[2], target=target, **attrs)
    check(got, ins, attrs)
    direct = gpucg.ops.conv2d(*ins[:2], bias=ins[2], target=target, **attrs)
    np.testing.assert_allclose(got, direct, rtol=1e-4, atol=1e-4)
    # HWIO weights transform to the same thing
    np.testing.assert_allclose(winograd_weight_transform(ins[1].transpose(2, 3, 1, 0), tile, "HWIO"),
                               u, rtol=1e-6)


def test_eager_and_batch_zero(target):
    x, w, b = arrays(2, 3, 7, 7, 4, 3, 3, bias=True)
    y = gpucg.ops.conv2d(x, w, padding="SAME", bias=b, activation="relu", target=target)
    check(y, [x, w, b], dict(padding="SAME", activation="relu"))
    assert (y >= 0).all()
    empty = gpucg.ops.conv2d(np.zeros((0, 3, 7, 7), np.float32), w, padding=1, target=target)
    assert empty.shape == (0, 4, 7, 7)


def _calls(small: bool):
    """Random conv2d calls: sizes, every attribute, layouts, bias and relu."""
    lo = 2 if small else 3
    return st.fixed_dictionaries(dict(
        n=st.integers(1, lo), cg=st.integers(1, lo), og=st.integers(1, lo + 2),
        groups=st.integers(1, lo), h=st.integers(1, 9 if small else 12),
        w=st.integers(1, 9 if small else 12), kh=st.integers(1, lo + 1), kw=st.integers(1, lo + 1),
        sh=st.integers(1, lo), sw=st.integers(1, lo), dh=st.integers(1, 2), dw=st.integers(1, 2),
        pads=st.one_of(st.sampled_from(["SAME", "VALID"]), st.tuples(*[st.integers(0, lo)] * 4)),
        nhwc=st.booleans(), hwio=st.booleans(), bias=st.booleans(), relu=st.booleans()))


@settings(max_examples=30, deadline=None)
@given(call=_calls(small=False))
def test_hypothesis_numpy(call):
    _hypothesis_case("numpy", None, **call)


@settings(max_examples=8, deadline=None)
@given(call=_calls(small=True))
def test_hypothesis_opencl_direct(call):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    _hypothesis_case("opencl", "direct", **call)


def _hypothesis_case(target, impl, n, cg, og, groups, h, w, kh, kw, sh, sw, dh, dw, pads, nhwc,
                     hwio, bias, relu):
    if pads != "SAME":
        span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        pt, pl, pb, pr = (0, 0, 0, 0) if pads == "VALID" else pads
        if h + pt + pb < span_h or w + pl + pr < span_w:
            return  # covered by the error tests
    dl, kl = ("NHWC" if nhwc else "NCHW"), ("HWIO" if hwio else "OIHW")
    attrs = dict(strides=(sh, sw), dilation=(dh, dw), padding=pads, groups=groups,
                 data_layout=dl, kernel_layout=kl, activation="relu" if relu else None)
    ins = arrays(n, cg * groups, h, w, og * groups, kh, kw, groups, bias=bias, data_layout=dl,
                 kernel_layout=kl)
    got, _ = run(target, ins, impl=impl, **attrs)
    check(got, ins, attrs)


BAD = [  # (data, weight, bias, attrs, error, message)
    ((1, 4, 8, 8), (6, 3, 3, 3), None, {}, gpucg.InputError, "data has 4 channels but weight"),
    ((1, 6, 8, 8), (6, 3, 3, 3), None, dict(groups=4), gpucg.InputError,
     "groups=4 must divide the input channels"),
    ((1, 6, 8, 8), (4, 6, 3, 3), None, dict(groups=0), gpucg.AttrError, "groups=0 must be >= 1"),
    ((1, 3, 4, 4), (2, 3, 7, 7), None, dict(padding=1), gpucg.InputError,
     "larger than the padded input height 6"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(strides=0), gpucg.AttrError, "strides=.*must be >= 1"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(strides=(1, -1)), gpucg.AttrError, "w is -1"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(dilation=(0, 1)), gpucg.AttrError, "h is 0"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(padding=(1, 1, 1)), gpucg.AttrError, "has 3 values"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(padding=-1), gpucg.AttrError, "top is -1"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(padding="FULL"), gpucg.AttrError, "'SAME', 'VALID'"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(data_layout="NCWH"), gpucg.AttrError,
     "data_layout='NCWH'.*allowed: 'NCHW', 'NHWC'"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(kernel_layout="IOHW"), gpucg.AttrError,
     "kernel_layout='IOHW'.*allowed: 'OIHW', 'HWIO'"),
    ((1, 3, 8, 8), (2, 3, 3, 3), (3,), {}, gpucg.InputError, r"bias must have shape \(2,\)"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(activation="swish"), gpucg.AttrError,
     "activation='swish'.*allowed: None, 'relu', 'gelu', 'gelu_tanh', 'sigmoid', 'tanh'"),
    ((1, 3, 8, 8), (2, 3, 3, 3), None, dict(out_dtype="int32"), gpucg.DTypeError,
     "out_dtype='int32' is not supported; allowed: float16, float32"),
    ((3, 8, 8), (2, 3, 3, 3), None, {}, gpucg.InputError, "data must have rank 4"),
]


@pytest.mark.parametrize("data,weight,bias,attrs,err,msg", BAD)
def test_bad_input(data, weight, bias, attrs, err, msg):
    types = [gpucg.tensor(data), gpucg.tensor(weight)] + ([gpucg.tensor(bias)] if bias else [])
    with pytest.raises(err, match=msg):
        gpucg.compile("conv2d", *types, target="numpy", **attrs)


def test_bad_dtypes_and_arrays(target):
    x = np.ones((1, 3, 8, 8), np.float32)
    w = np.ones((2, 3, 3, 3), np.float32)
    with pytest.raises(gpucg.DTypeError, match="data dtype 'float64' is not supported; allowed: "
                                               "float16, float32"):
        gpucg.ops.conv2d(x.astype(np.float64), w.astype(np.float64), target=target)
    with pytest.raises(gpucg.DTypeError, match="weight dtype float16 differs from the data dtype"):
        gpucg.ops.conv2d(x, w.astype(np.float16), target=target)
    with pytest.raises(gpucg.DTypeError, match="bias dtype float16 must equal"):
        gpucg.ops.conv2d(x, w, bias=np.ones(2, np.float16), target=target)
    with pytest.raises(gpucg.InputError, match="channel dimension of data"):
        gpucg.compile("conv2d", gpucg.tensor((1, gpucg.var("c"), 8, 8)), gpucg.tensor((2, 3, 3, 3)))
    with pytest.raises(gpucg.InputError, match="impl=.winograd_2x2. does not apply.*needs a 3x3"):
        gpucg.compile("conv2d", gpucg.tensor((1, 3, 8, 8)), gpucg.tensor((2, 3, 5, 5)),
                      target="cuda", impl="winograd_2x2")
    with pytest.raises(gpucg.InputError, match=r"impl='winograd_4x4' does not apply.*\(for these"):
        gpucg.compile("conv2d", gpucg.tensor((1, 3, 8, 8)), gpucg.tensor((2, 3, 3, 3)),
                      target="cuda", impl="winograd_4x4")
    with pytest.raises(gpucg.InputError, match="not a transformed weight for tile_size=4"):
        gpucg.ops.conv2d_winograd_without_weight_transform(x, np.ones((4, 4, 2, 3), np.float32),
                                                           target=target)
    with pytest.raises(gpucg.InputError, match="must be 3x3"):
        winograd_weight_transform(np.ones((2, 3, 5, 5), np.float32))
    with pytest.raises(gpucg.AttrError, match="takes 2 to 4 input"):
        gpucg.get_op("conv2d").check_count(1)


def test_dtype_the_device_lacks_is_a_clear_error(monkeypatch):
    """A device without fp16 arithmetic still runs conv2d (half is only loaded and stored);
    an op that computes in a dtype the device lacks (here float64) is refused, device named."""
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    backend = get_backend("opencl")
    monkeypatch.setattr(backend, "supports", lambda dtype: dtype not in ("float16", "float64"))
    x = np.ones((1, 2, 5, 5), np.float16)
    y = gpucg.compile("conv2d", gpucg.tensor(x.shape, "float16"),
                      gpucg.tensor((2, 2, 3, 3), "float16"), target="opencl", padding=1)
    assert y(x, np.ones((2, 2, 3, 3), np.float16))[0, 0, 2, 2] == 18
    with pytest.raises(gpucg.DTypeError, match="cumsum: dtype float64 is not supported by the device"):
        gpucg.compile("cumsum", gpucg.tensor((4,), "float64"), target="opencl")


def test_winograd_switches_to_64_bit_indexing_for_large_tiles(monkeypatch):
    """The transformed tiles (alpha^2 x C x tiles) outgrow 32-bit indexing before the tensors
    do; the run then uses the 64-bit variants (shown here with a lowered limit)."""
    from conftest import backend_or_skip

    from gpucg.strategies import conv2d as strategies

    backend_or_skip("opencl")
    monkeypatch.setattr(strategies, "INT_MAX", 1000)
    ins = arrays(2, 4, 16, 15, 6, 3, 3, bias=True)
    got, f = run("opencl", ins, impl="winograd_4x4", padding=1)
    check(got, ins, dict(padding=1))
    # the weight transform ran with 32-bit indexing, the rest with 64-bit
    assert [p for p in f.programs if p[1] == "weight"] == [("winograd_4x4.opencl", "weight", "int32")]
    assert {p[2] for p in f.programs if p[1] != "weight"} == {"int64"}


@pytest.mark.parametrize("shape,m,tile", [
    ((2, 4, 17, 16), 4, (16, 64)),    # a 6 x 40 product per alpha^2 point: the tile fits it
    ((2, 4, 17, 16), 2, (16, 256)),   # 6 x 144: no half of 256 covers 144
    ((8, 6, 56, 56), 4, (16, 256)),   # 6 x 1568: the default
])
def test_unfused_winograd_tile_fits_a_small_product(shape, m, tile):
    """On a GPU with static sizes the unfused Winograd products' default tile halves bm, then
    bn, while the half still covers o x p (p: the batch's m x m tiles)."""
    x, w = gpucg.tensor(shape), gpucg.tensor((6, shape[1], 3, 3))
    sel = gpucg.explain("conv2d", x, w, padding=1, target="opencl -device=gpu", records=False,
                        impl=f"winograd_{m}x{m}")
    c = sel.choices[0].config
    assert (c["bm"], c["bn"]) == tile, dict(c)
