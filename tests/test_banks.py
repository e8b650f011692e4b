"""The shared-memory bank model (gpucg.verify.banks) on known requests, and the SIMT GEMM tile's
default configs: every store and fragment load of one warp is one wavefront per phase."""

import pytest

import gpucg
from gpucg.codegen import tile_layout as tl
from gpucg.errors import InputError
from gpucg.verify import banks


def lanes(f):
    return [f(t) for t in range(32)]


@pytest.mark.parametrize("addresses,width,want", [
    (lanes(lambda t: 4 * t), 4, 1),                 # stride-1 floats
    (lanes(lambda t: 0), 4, 1),                     # one word: broadcast
    (lanes(lambda t: 4 * (t // 2)), 4, 1),          # pairs share words
    (lanes(lambda t: 128 * t), 4, 32),              # stride-32 floats: 32-way
    (lanes(lambda t: 8 * t), 4, 2),                 # stride-2 floats: 2-way
    (lanes(lambda t: 4 * (t % 16) + 128 * (t // 16)), 4, 2),
    (lanes(lambda t: 8 * t), 8, 2),                 # float2 contiguous: 2 half-warps of 1
    (lanes(lambda t: 16 * t), 16, 4),               # float4 contiguous: 4 quarter-warps of 1
    (lanes(lambda t: 16 * (t % 8)), 16, 4),         # each quarter-warp reads the same 128 B
    (lanes(lambda t: 32 * t), 16, 8),               # float4 at stride 8 floats: 2-way
    (lanes(lambda t: 256 * t), 8, 32),              # 8-byte words all in banks 0-1
    (lanes(lambda t: None if t % 2 else 4 * t), 4, 1),  # inactive lanes
])
def test_wavefronts_of_known_requests(addresses, width, want):
    assert banks.wavefronts(addresses, width) == want


def test_ideal_is_one_wavefront_per_phase():
    assert banks.ideal(lanes(lambda t: 16 * t), 16) == 4
    assert banks.ideal(lanes(lambda t: 8 * t), 8) == 2
    assert banks.ideal(lanes(lambda t: 4 * t if t < 8 else None), 16) == 1


def test_ldmatrix_phases():
    rows = [16 * r for r in range(32)]  # 32 rows of 16 B back to back: conflict-free
    assert banks.ldmatrix_wavefronts(rows, 4) == 4
    assert banks.ldmatrix_wavefronts(rows[:8], 1) == 1
    strided = [128 * r for r in range(32)]  # rows of a 64-element fp16 tile, unswizzled
    assert banks.ldmatrix_wavefronts(strided, 4) == 32
    swizzled = [128 * r + 16 * ((r % 8) ^ 0) for r in range(32)]  # XOR-swizzled 16-byte chunks
    assert banks.ldmatrix_wavefronts(swizzled, 4) == 4
    rep = banks.report([("ldsm", strided, 16, "ldmatrix")])[0]
    assert (rep.wavefronts, rep.ideal, rep.conflict_free) == (32, 4, False)


@pytest.mark.parametrize("call,message", [
    (lambda: banks.wavefronts([0] * 32, 2), "4, 8 or 16"),
    (lambda: banks.wavefronts([0] * 31, 4), "31 given"),
    (lambda: banks.wavefronts([4] * 32, 8), "multiple of the access width 8"),
    (lambda: banks.ldmatrix_wavefronts([0] * 32, 3), "1, 2 or 4"),
    (lambda: banks.ldmatrix_wavefronts([8] * 8, 1), "multiple of 16"),
])
def test_bad_requests_name_the_argument(call, message):
    with pytest.raises(InputError, match=message):
        call()


def test_report_takes_objects_like_a_gemm_core_returns():
    class Req:
        def __init__(self, name, addresses, width):
            self.name, self.addresses, self.width = name, addresses, width

    got = banks.report([Req("x", lanes(lambda t: 4 * t), 4), Req("x", lanes(lambda t: 128 * t), 4)])
    assert len(got) == 1 and got[0].wavefronts == 32  # the worst of one name


def test_layouts_keep_every_element_in_its_row_once():
    for rows, cols, vw, km in [(8, 128, 4, True), (16, 64, 1, True), (8, 16, 4, True),
                               (16, 64, 4, True), (32, 32, 1, True), (8, 64, 2, False)]:
        lay = tl.choose(rows, cols, vw, km)
        for kk in range(rows):
            assert sorted(lay.column(kk, c) for c in range(cols)) == list(range(cols))


def _default(op, *types, target, **attrs):
    """(implementation, config, template parameters of its GEMM kernel) of the default."""
    choice = gpucg.compile(op, *types, target=target, records=False, **attrs).selection.choices[0]
    params = choice.impl.template_params("gemm", choice.config)
    return choice.impl.name, dict(choice.config), params


#: (label, op, inputs, attrs, A k-major, B k-major) of the default configs the report covers
CASES = [
    ("dense 1024", "dense", [(1024, 1024), (1024, 1024)], {}, True, True),
    ("dense 4096", "dense", [(4096, 4096), (4096, 4096)], {}, True, True),
    ("matmul 1024", "matmul", [(1024, 1024), (1024, 1024)], {}, True, False),
    ("conv2d NCHW 3x3 64x56x56", "conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)],
     {"padding": (1, 1), "strides": (2, 2)}, True, False),
    ("conv2d NHWC 3x3 64x56x56", "conv2d", [(1, 56, 56, 64), (3, 3, 64, 64)],
     {"padding": (1, 1), "strides": (2, 2), "data_layout": "NHWC", "kernel_layout": "HWIO"},
     False, True),
    ("conv2d winograd 3x3 64x56x56", "conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)],
     {"padding": (1, 1), "impl": "winograd_4x4"}, True, False),  # the unfused product
]


@pytest.mark.parametrize("target", ["cuda -arch=sm_90", "opencl"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_simt_tile_defaults_are_conflict_free(case, target):
    label, op, shapes, attrs, a_km, b_km = case
    name, config, params = _default(op, *[gpucg.tensor(s) for s in shapes], target=target,
                                    **attrs)
    assert "direct" in name or "gemm_tiled" in name or "winograd" in name, name
    assert (params["a_k_major"], params["b_k_major"]) == (a_km, b_km)
    config.setdefault("vw", params["vw"])
    config.setdefault("conflict_free", params["conflict_free"])
    if not config["conflict_free"]:  # PoCL's dense default keeps the plain tile (faster there)
        assert target == "opencl" and op in ("dense", "matmul"), (label, target)
        assert banks.simt_report(config, a_km, b_km) == \
            banks.simt_report(config, a_km, b_km, before=True)
        return
    for r in banks.simt_report(config, a_km, b_km):
        assert r.conflict_free, f"{label} {config}: {r.line()}"
    widths = {r.width for r in banks.simt_report(config, a_km, b_km) if "load" in r.name}
    assert max(widths) == 16  # 128-bit fragment reads
    before = banks.simt_report(config, a_km, b_km, before=True)
    assert any(not r.conflict_free for r in before)  # what the layouts fixed


@pytest.mark.parametrize("op,dtype,attrs", [("dense", "float16", {}), ("matmul", "float16", {}),
                                            ("dense", "float32", {"allow_tf32": True})])
def test_tensor_core_core_is_conflict_free(op, dtype, attrs):
    """gemm_mma's cp.async stores and ldmatrix reads, evaluated with its own swizzle for the
    CUDA default config: as many wavefronts as 16-byte phases, none more."""
    t = gpucg.tensor((4096, 4096), dtype)
    f = gpucg.compile(op, t, t, target="cuda", impl="gemm_mma", **attrs)
    reports = banks.kernel_reports(f)
    assert reports and all(impl == "gemm_mma.cuda" for impl, _, _ in reports)
    for _, _, rs in reports:
        assert {r.name for r in rs} >= {"cp.async A", "cp.async B", "ldmatrix A", "ldmatrix B"}
        for r in rs:
            assert r.wavefronts == r.ideal == 4, (op, dtype, r)


@pytest.mark.parametrize("dtype,dl,kl,attrs", [("float16", "NCHW", "OIHW", {}),
                                               ("float16", "NHWC", "HWIO", {}),
                                               ("float32", "NHWC", "OIHW", {"allow_tf32": True})])
@pytest.mark.parametrize("impl", ["direct_mma", "winograd_mma"])
def test_tensor_core_conv2d_is_conflict_free(dtype, dl, kl, attrs, impl):
    """conv2d's direct_mma and winograd_mma run the same core: its default configs' requests,
    one wavefront per 16-byte phase."""
    x = gpucg.tensor((8, 64, 56, 56) if dl == "NCHW" else (8, 56, 56, 64), dtype)
    w = gpucg.tensor((64, 64, 3, 3) if kl == "OIHW" else (3, 3, 64, 64), dtype)
    f = gpucg.compile("conv2d", x, w, target="cuda", impl=impl, padding=1,
                      data_layout=dl, kernel_layout=kl, **attrs)
    reports = banks.kernel_reports(f)
    assert [(i, k) for i, k, _ in reports] == [(f"{impl}.cuda", "gemm")]
    for _, _, rs in reports:
        assert {r.name for r in rs} >= {"cp.async A", "cp.async B", "ldmatrix A", "ldmatrix B"}
        for r in rs:
            assert r.wavefronts == r.ideal == 4, (dtype, dl, r)


@pytest.mark.parametrize("impl", ["winograd_fused_4x4", "winograd_fused_2x2"])
def test_fused_winograd_is_conflict_free(impl):
    """The fused Winograd kernel's own requests (strategies/conv2d_fused.py), through
    kernel_reports as `gpucg resources --banks` shows them: every one at its ideal."""
    t = gpucg.tensor
    f = gpucg.compile("conv2d", t((1, 64, 56, 56)), t((64, 64, 3, 3)), target="cuda",
                      impl=impl, padding=1)
    (name, kernel, rs), = banks.kernel_reports(f)
    assert (name, kernel) == (impl + ".cuda", "fused")
    assert {r.name for r in rs} >= {"x region store", "patch read", "U fragment read"}
    assert all(r.conflict_free for r in rs), [r.line() for r in rs]
