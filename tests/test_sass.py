"""The SASS of generated kernels (cuobjdump of NVRTC's CUBIN, no GPU): the instruction mix
parses, the SIMT GEMM tile reads shared memory 128 bits at a time and keeps no local memory, and
the tensor-core GEMM (gemm_mma) holds HMMA, LDSM and
LDGSTS on sm_80 and sm_90."""

import json
import re

import pytest

import gpucg
from gpucg.errors import BackendUnavailableError
from gpucg.verify import resources as res, sass

#: sm_90 in the default tier, sm_80 with -m exhaustive (tests/test_tile_layer.py holds the
#: Ampere tensor-core loops on sm_80 in the default tier)
ARCHS = (pytest.param("sm_80", marks=pytest.mark.exhaustive), "sm_90")


def mixes(op, *types, impl, arch, **attrs):
    return {r.kernel: r.sass for r in res.resources(op, *types, target=f"cuda -arch={arch}",
                                                    impl=impl, sass=True, **attrs)}


def test_parse_counts_kinds_and_drops_predicates():
    text = """
        Function : k
        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR8][R2.64] ;  /* 0x0 */
        /*0010*/              @!P0 LDS.128 R8, [R0+0x10] ;                   /* 0x0 */
        /*0020*/               @P1 FFMA R1, R2, R3, R1 ;                      /* 0x0 */
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;           /* 0x0 */
        /*0040*/                   STL [R1], R2 ;                             /* 0x0 */
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;              /* 0x0 */
        /*0060*/                   LDS R3, [R0] ;                             /* 0x0 */
        Function : other
        /*0000*/                   EXIT ;                                     /* 0x0 */
    """
    parsed = sass.parse_sass(text)
    assert parsed["other"] == ["EXIT"]
    mix = sass.instruction_mix(parsed["k"])
    assert mix["LDG.128"] == mix["LDS.128"] == mix["FFMA"] == mix["HMMA"] == 1
    assert mix["STL"] == mix["BAR"] == 1 and mix["LDL"] == 0 and mix["LDS.64"] == 0
    assert mix["LDS"] == 2  # every shared load, of any width
    assert mix["TOTAL"] == 7
    sass.assert_sass(mix, has=("HMMA", "FFMA"), none=("LDL",))
    with pytest.raises(AssertionError, match="STL"):
        sass.assert_sass(mix, has=("HMMA",), none=("LDL", "STL"))
    with pytest.raises(AssertionError, match="LDSM"):
        sass.assert_sass(mix, has=("LDSM",))


def test_missing_cuobjdump_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUCG_CUOBJDUMP", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sass, "Path", lambda *_: tmp_path)  # no wheel directory either
    with pytest.raises(BackendUnavailableError, match=r"gpucg\[sass\]"):
        sass.cuobjdump()


@pytest.mark.parametrize("arch", ARCHS)
def test_simt_gemm_reads_shared_memory_128_bits_at_a_time(sass_or_skip, arch):
    """dense gemm_tiled, float32, default config: LDS.128 fragment reads, 128-bit global
    loads, FFMA, barriers, and no local memory."""
    for size in (1024, 4096):  # the device-filling default and the 128 x 128 tile
        t = gpucg.tensor((size, size), "float32")
        mix = mixes("dense", t, t, impl="gemm_tiled", arch=arch)["gemm"]
        sass.assert_sass(mix, has=("LDS.128", "LDG.128", "FFMA", "BAR"),
                         none=("LDL", "STL", "HMMA"), what=f"dense gemm_tiled {size} {arch}")
        assert mix["FFMA"] < mix["TOTAL"]


@pytest.mark.parametrize("arch", ARCHS)
def test_conv2d_direct_tile_reads_shared_memory_128_bits_at_a_time(sass_or_skip, arch):
    """conv2d's direct kernel (implicit GEMM on the SIMT tile), float32, default config, NCHW
    and NHWC: LDS.128 fragment reads, 128-bit global loads of W (and of x in NHWC), FFMA,
    barriers, and no local memory."""
    for x, w, attrs in (((8, 64, 56, 56), (64, 64, 3, 3), {}),
                        ((8, 56, 56, 64), (3, 3, 64, 64),
                         {"data_layout": "NHWC", "kernel_layout": "HWIO"})):
        mix = mixes("conv2d", gpucg.tensor(x), gpucg.tensor(w), impl="direct", arch=arch,
                    padding=1, strides=2, **attrs)["gemm"]
        what = f"conv2d direct {attrs.get('data_layout', 'NCHW')} {arch}"
        sass.assert_sass(mix, has=("LDS.128", "LDG.128", "FFMA", "BAR"),
                         none=("LDL", "STL", "HMMA"), what=what)
        assert mix["FFMA"] < mix["TOTAL"]


def test_resources_cli_prints_the_mix_and_the_banks(sass_or_skip, capsys):
    from gpucg.cli import main

    assert main(["resources", "dense", "--input", "1024,1024:float32", "--input",
                 "1024,1024:float32", "--impl", "gemm_tiled", "--sass", "--banks"]) == 0
    out = capsys.readouterr().out
    head = next(ln for ln in out.splitlines() if ln.startswith("implementation") and "LDS.128" in ln)
    assert all(c in head for c in sass.COLUMNS)
    assert "gemm_tiled.cuda/gemm" in out and "conflict-free" in out and "-way" not in out
    assert main(["resources", "dense", "--input", "1024,1024:float32", "--input",
                 "1024,1024:float32", "--impl", "gemm_tiled", "--sass", "--banks", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["rows"][0]["sass"]["LDS.128"] > 0 and got["rows"][0]["sass"]["LDL"] == 0
    assert all(r["conflict_free"] for b in got["banks"] for r in b["requests"])


@pytest.mark.parametrize("arch", ARCHS)
def test_sass_of_other_kernels_parses(sass_or_skip, arch):
    t = gpucg.tensor((64, 4096), "float32")
    mix = mixes("softmax", t, impl=None, arch=arch)
    assert mix and all(m["TOTAL"] > 0 and not m["LDL"] and not m["HMMA"] for m in mix.values())


def _mma(op, *types, **attrs):
    sel = gpucg.explain(op, *types, target="cuda -arch=sm_90", records=False, **attrs)
    assert sel.choices[0].impl.name == "gemm_mma.cuda", sel
    return "gemm_mma"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,attrs", [  # bfloat16: float16's kernel but for the mma's type
    ("float16", {}), pytest.param("bfloat16", {}, marks=pytest.mark.exhaustive),
    ("float32", {"allow_tf32": True})])
def test_tensor_core_gemm_holds_hmma_ldsm_ldgsts(sass_or_skip, arch, dtype, attrs):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    t = gpucg.tensor((1024, 1024), dtype)
    impl = _mma("dense", t, t, **attrs)
    # from the rendered sources (bfloat16 cannot be held in CuPy, so no launch is recorded)
    f = gpucg.compile("dense", t, t, target=f"cuda -arch={arch}", impl=impl, **attrs)
    assert f.sources
    for key, src in f.sources.items():
        entry = re.search(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)', src)
        mix = sass.kernel_mix(src, entry.group(1), arch)
        sass.assert_sass(mix, has=("HMMA", "LDSM", "LDGSTS"), none=("LDL", "STL"),
                         what=f"dense {impl}/{key} {dtype} {arch}")


#: (op, input shapes, attrs, impl, {kernel: most BAR}): the row reductions meet by warp
#: shuffles and one exchange of the warps' results (two barriers a block reduction; softmax
#: reduces twice, its maximum and then the sum about it, layer_norm three times, the mean
#: first); "a warp a row" needs no block barrier at all
_SHUFFLED = [
    ("sum", [(4096, 4096)], {"axis": -1}, "reduce_group", {"main": 2}),
    ("argmax", [(4096, 4096)], {"axis": -1}, "reduce_group", {"main": 2}),
    ("softmax", [(4096, 4096)], {}, "norm_group", {"main": 4}),
    ("softmax", [(4096, 128)], {}, "norm_warp", {"main": 0}),
    ("log_softmax", [(4096, 4096)], {}, "norm_blocks", {"main": 2}),
    ("layer_norm", [(4096, 4096), (4096,), (4096,)], {}, "norm_group", {"main": 6}),
    ("rms_norm", [(4096, 128), (128,)], {}, "norm_warp", {"main": 0}),
    # gemv: its 128 slices of K a column (the CUDA default), 32 a warp by shuffles, then the
    # four warps' sums through shared memory: one barrier
    ("dense", [(1, 4096), (4096, 4096)], {}, "gemv", {"gemv": 1}),
    ("cumsum", [(1 << 24,)], {"axis": 0}, "scan_device",
     # the tile scan: a barrier after the tile's loads, the block scan's two, the tile's apply
     {"tile_reduce": 2, "scan_partials": 5, "tile_apply": 4}),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,shapes,attrs,impl,bars", _SHUFFLED,
                         ids=[f"{s[0]}-{s[3]}" for s in _SHUFFLED])
def test_reductions_and_scans_shuffle(sass_or_skip, arch, op, shapes, attrs, impl, bars):
    """SHFL in the reduce, norm, scan and gemv kernels, few barriers, no local memory."""
    types = [gpucg.tensor(s, "float32") for s in shapes]
    got = mixes(op, *types, impl=impl, arch=arch, **attrs)
    assert set(got) == set(bars), got.keys()
    for kernel, most in bars.items():
        mix = got[kernel]
        sass.assert_sass(mix, has=("SHFL",), none=("LDL", "STL"), what=f"{op} {impl}/{kernel} {arch}")
        assert mix["BAR"] <= most, f"{op} {impl}/{kernel} {arch}: {mix['BAR']} barriers"


#: conv2d's tensor-core kernels: (dtype, data layout, kernel layout, attrs)
CONV_MMA = [("float16", "NCHW", "OIHW", {}), ("float16", "NHWC", "HWIO", {}),
            pytest.param("bfloat16", "NHWC", "OIHW", {}, marks=pytest.mark.exhaustive),
            ("float32", "NHWC", "HWIO", {"allow_tf32": True})]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,dl,kl,attrs", CONV_MMA, ids=lambda v: str(v))
def test_tensor_core_conv2d_holds_hmma_ldsm_ldgsts(sass_or_skip, arch, dtype, dl, kl, attrs):
    """direct_mma, as selected on CUDA for a ResNet layer (the default config), and
    winograd_mma's product."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    x = gpucg.tensor((8, 64, 56, 56) if dl == "NCHW" else (8, 56, 56, 64), dtype)
    w = gpucg.tensor((64, 64, 3, 3) if kl == "OIHW" else (3, 3, 64, 64), dtype)
    layouts = dict(padding=1, data_layout=dl, kernel_layout=kl, **attrs)
    sel = gpucg.explain("conv2d", x, w, target=f"cuda -arch={arch}", records=False, **layouts)
    assert sel.choices[0].impl.name == "direct_mma.cuda", sel
    # from the rendered sources (bfloat16 cannot be held in CuPy, so no launch is recorded);
    # winograd_mma's product too (its transforms beside it keep no local memory; it takes no
    # bfloat16)
    for impl in ("direct_mma",) + ("winograd_mma",) * (dtype != "bfloat16"):
        f = gpucg.compile("conv2d", x, w, target=f"cuda -arch={arch}", impl=impl, **layouts)
        assert any("/gemm" in k for k in f.sources), f.sources.keys()
        for key, src in f.sources.items():
            entry = re.search(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)', src)
            mix = sass.kernel_mix(src, entry.group(1), arch)
            core = "/gemm" in key
            sass.assert_sass(mix, has=("HMMA", "LDSM", "LDGSTS") if core else (),
                             none=("LDL", "STL"), what=f"conv2d {impl}/{key} {dtype} {dl} {arch}")


@pytest.mark.parametrize("arch", ARCHS)
def test_small_k_topk_keeps_its_lists_in_registers(sass_or_skip, arch):
    """topk_warp (k <= 16): a 0-byte stack frame, no LDL/STL, no barrier, SHFL merges, the data
    read 128 bits a load (LDG.128: rows aligned); on the bench case (4096 x 1024, k=8) and the
    widest lists (float64 keys, 64-bit indices, k=16)."""
    for dtype, k, index in (("float32", 8, "auto"), ("float64", 16, "int64")):
        t = gpucg.tensor((4096, 1024), dtype)
        got = {r.kernel: r for r in res.resources("topk", t, target=f"cuda -arch={arch}",
                                                  impl="topk_warp", sass=True, k=k, index=index)
               if r.selected}
        assert set(got) == {"emit"}, got.keys()
        r = got["emit"]
        assert r.stack == 0 and r.spill_loads == r.spill_stores == 0, (dtype, arch, r)
        sass.assert_sass(r.sass, has=("SHFL", "LDG.128"), none=("LDL", "STL", "BAR"),
                         what=f"topk topk_warp {dtype} k={k} {arch}")


#: the topk call whose every dispatcher branch the default tier compiles (16 < k: the radix
#: select and the sorts, 32-bit indices); the exhaustive tier adds the rest, both widths
_TOPK_MORE = [("int64", 17), ("float16", 100), ("bfloat16", 128), ("float64", 1000),
              ("int32", 16), ("uint8", 33), ("float32", 1)]


@pytest.mark.parametrize("dtype,k", [("float32", 100)] + [
    pytest.param(*c, marks=pytest.mark.exhaustive) for c in _TOPK_MORE])
def test_topk_dispatch_keeps_no_local_memory(sass_or_skip, request, dtype, k):
    """Every kernel of every implementation topk's dispatcher may pick on sm_90 (sizes
    symbolic): a 0-byte stack frame and no LDL/STL."""
    n, m = gpucg.var("n"), gpucg.var("m")
    f = gpucg.compile("topk", gpucg.tensor((n, m), dtype), k=k, target="cuda -arch=sm_90",
                      index="auto" if request.node.get_closest_marker("exhaustive") else "int32")
    for key, src in f.sources.items():
        entry = re.search(r"void (?:__launch_bounds__\(\d+, \d+\) )?(gpucg_\w+)\(", src).group(1)
        r = res.kernel_resources(src, entry, "sm_90")
        assert r.stack == 0 and r.spills == 0, (dtype, k, key, r)
        sass.assert_sass(sass.kernel_mix(src, entry, "sm_90"), none=("LDL", "STL"),
                         what=f"topk {dtype} k={k} {key}")


@pytest.mark.parametrize("arch", ARCHS)
def test_radix_select_reads_128_bits_and_scans_by_shuffles(sass_or_skip, arch):
    """topk_radix (k=1000 of 2^24): its pass kernel reads the data 128 bits at a time
    (LDG.128, taken for aligned contiguous rows), its digit scan is a block scan on SHFL with
    3 barriers at most; no local memory."""
    got = mixes("topk", gpucg.tensor((1, 1 << 24), "float32"), impl="topk_radix", arch=arch,
                k=1000)
    sass.assert_sass(got["hist"], has=("LDG.128",), none=("LDL", "STL"), what=f"radix hist {arch}")
    sass.assert_sass(got["scan"], has=("SHFL",), none=("LDL", "STL"), what=f"radix scan {arch}")
    assert got["scan"]["BAR"] <= 3, got["scan"]["BAR"]


#: attention's tensor-core forward (flash_mma) as selected on CUDA for prefill: (dtype, D, attrs)
FLASH = [("float16", 64, {"causal": True}), ("float16", 128, {}),
         pytest.param("bfloat16", 80, {"layout": "BSHD"}, marks=pytest.mark.exhaustive),
         ("float32", 128, {"allow_tf32": True})]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,d,attrs", FLASH, ids=lambda v: str(v))
def test_flash_attention_holds_hmma_ldsm_ldgsts(sass_or_skip, arch, dtype, d, attrs):
    """flash_mma's default config: mma (HMMA), ldmatrix (LDSM), cp.async (LDGSTS), the quad
    shuffles (SHFL), and no local memory (no spills)."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    shape = (8, 512, 32, d) if attrs.get("layout") == "BSHD" else (8, 32, 512, d)
    kv = (8, 512, 8, d) if attrs.get("layout") == "BSHD" else (8, 8, 512, d)
    types = (gpucg.tensor(shape, dtype),) + (gpucg.tensor(kv, dtype),) * 2
    sel = gpucg.explain("attention", *types, target=f"cuda -arch={arch}", records=False, **attrs)
    assert sel.choices[0].impl.name == "flash_mma.cuda", sel
    f = gpucg.compile("attention", *types, target=f"cuda -arch={arch}", impl="flash_mma",
                      **attrs)
    for key, src in f.sources.items():
        entry = re.search(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)', src)
        mix = sass.kernel_mix(src, entry.group(1), arch)
        sass.assert_sass(mix, has=("HMMA", "LDSM", "LDGSTS", "SHFL"), none=("LDL", "STL"),
                         what=f"attention flash_mma/{key} {dtype} D={d} {arch}")


def test_resources_cli_shows_flash_attention_mix(sass_or_skip, capsys):
    from gpucg import cli

    assert cli.main(["resources", "attention", "--input", "4,32,512,128:float16", "--input",
                     "4,8,512,128:float16", "--input", "4,8,512,128:float16", "--arch",
                     "sm_90", "--impl", "flash_mma", "--sass"]) == 0
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if ln.startswith("flash_mma.cuda") and "main" in ln]
    assert len(row) == 2 and "HMMA" in out and "LDGSTS" in out, out
    header = next(ln for ln in out.splitlines() if "HMMA" in ln).split()
    mix = dict(zip(header[2:], row[1].split()[2:]))
    assert int(mix["HMMA"]) > 0 and int(mix["LDSM"]) > 0 and int(mix["LDGSTS"]) > 0
    assert mix["LDL"] == mix["STL"] == "0"


#: the 128-bit kernels (issue 19 item 3) by their default GPU configs: op, shapes, attrs, impl,
#: whether it stores 128 bits (a reduction stores one value a row) and shuffles
_VECTOR = [("add", [(1 << 20,), (1 << 20,)], {}, "ew_contiguous", True, False),
           ("multiply", [(4096, 1024), (1024,)], {}, "ew_strided", True, False),
           ("sum", [(4096, 4096)], {"axis": 1}, "reduce_group", False, True),
           ("max", [(4096, 256)], {"axis": 1}, "reduce_warp", False, True),
           ("softmax", [(4096, 4096)], {}, "norm_group", True, True),
           ("log_softmax", [(4096, 128)], {}, "norm_warp", True, True),
           ("layer_norm", [(4096, 1024), (1024,), (1024,)], {}, "norm_group", True, True),
           ("rms_norm", [(4096, 128), (128,)], {}, "norm_warp", True, True)]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,shapes,attrs,impl,stores,shuffles", _VECTOR,
                         ids=[f"{v[0]}-{v[3]}" for v in _VECTOR])
def test_memory_bound_kernels_move_128_bits(sass_or_skip, arch, op, shapes, attrs, impl, stores,
                                            shuffles):
    """LDG.E.128 (and STG.E.128 where the kernel stores rows) in the elementwise, reduce and
    norm kernels' vector configs, SHFL in the reduce and norm ones, no local memory."""
    got = mixes(op, *[gpucg.tensor(s, "float32") for s in shapes], impl=impl, arch=arch, **attrs)
    for kernel, mix in got.items():
        has = ("LDG.128",) + (("STG.128",) if stores else ()) + (("SHFL",) if shuffles else ())
        sass.assert_sass(mix, has=has, none=("LDL", "STL"), what=f"{op} {impl}/{kernel} {arch}")


#: the single-pass scan (decoupled look-back) as the dispatcher picks it for a 1-D float32
#: scan (vw=4) and one it must read element by element (uint8 in): its tile's block scan by
#: shuffles, 16-byte accesses where the config reads vectors; barriers: the tile id's
#: broadcast, the block scan's two, the look-back window's two
_LOOKBACK = [("float32", None, {"wg": 256, "items": 8, "vw": 4}, ("LDG.128", "STG.128")),
             ("float64", None, {"wg": 256, "items": 8, "vw": 2}, ("LDG.128", "STG.128")),
             ("uint8", "uint32", {"wg": 256, "items": 8, "vw": 1}, ())]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype,out,config,vectors", _LOOKBACK, ids=[c[0] for c in _LOOKBACK])
def test_lookback_scan_shuffles_and_vectors(sass_or_skip, arch, dtype, out, config, vectors):
    got = {r.kernel: (r.config, r.sass) for r in res.resources(
        "cumsum", gpucg.tensor((1 << 24,), dtype), target=f"cuda -arch={arch}", axis=0,
        dtype=out, impl="scan_lookback", sass=True) if r.selected}
    assert set(got) == {"init", "scan"}, got.keys()
    config_got, mix = got["scan"]
    assert config_got == ",".join(f"{k}={v}" for k, v in sorted(config.items())), config_got
    sass.assert_sass(mix, has=("SHFL",) + vectors, none=("LDL", "STL"), what=f"scan_lookback {dtype} {arch}")
    assert mix["BAR"] <= 5, f"scan_lookback {dtype} {arch}: {mix['BAR']} barriers"


def _instructions(f, key: str, arch: str):
    """(address, opcode, branch target) of kernel ``key`` ("impl.cuda/kernel") of a compiled op."""
    src = f.sources[key]
    entry = re.search(r"void (?:__launch_bounds__\(\d+, \d+\) )?(gpucg_\w+)\(", src).group(1)
    return sass.kernel_instructions(src, entry, arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ("float32", "int32", "float64"))
def test_lookback_flag_and_value_in_one_word(sass_or_skip, arch, dtype):
    """A 32-bit tile status is one 64-bit word with its flag: published by one 64-bit atomic
    exchange, read by one 64-bit load, no fence (MEMBAR) anywhere; 64-bit values keep the
    flag apart, a fence between it and the value."""
    f = gpucg.compile("cumsum", gpucg.tensor((gpucg.var("n"),), dtype), axis=0, dtype=dtype,
                      target=f"cuda -arch={arch}", impl="scan_lookback")
    ops = [op for _, op, _ in _instructions(f, "scan_lookback.cuda/scan", arch)]
    fences = [op for op in ops if op.startswith("MEMBAR")]
    if dtype == "float64":
        assert fences, ops
        return
    assert not fences, fences
    assert ops.count("ATOMG.E.EXCH.64.STRONG.GPU") == 3, ops  # tile 0's, an aggregate, a prefix
    assert [op for op in ops if op.startswith("LDG") and "STRONG" in op] == \
        ["LDG.E.64.STRONG.SYS"], ops


def test_loops_are_found_in_a_listing():
    """loops(): a backward branch closes a loop; one holding another is not innermost."""
    listing = [(0x00, "MOV", None), (0x10, "FADD", None), (0x20, "FFMA", None),
               (0x30, "BRA", 0x10), (0x40, "ISETP.GE.AND", None), (0x50, "BRA", 0x10),
               (0x60, "BRA", 0x90), (0x70, "EXIT", None)]
    found = sass.loops(listing)
    assert [(lp.start, lp.end, lp.count, lp.innermost) for lp in found] == \
        [(0x10, 0x30, 3, True), (0x10, 0x50, 5, False)]
    assert found[0].mix["FFMA"] == 1


#: the onesweep radix sort (sort_radix) of 2^24 keys: 4 digit passes of float32 keys, the one
#: pass of uint8 keys (argsort); every pass ranks its tile by block scans on SHFL with the
#: look-back's counts in registers (a 0-byte stack frame, no local memory); the pass barriers:
#: the ticket's broadcast, the tile histogram's two, the digit scan's, two 4-bit rounds of
#: counting, scanning and scattering. It reads and writes element by element (a work-item's
#: items are consecutive but the pairs of a middle pass start anywhere): no 128-bit accesses.
_RADIX = [("sort", "float32", {"first", "middle", "last"}), ("argsort", "uint8", {"only"})]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,dtype,passes", _RADIX, ids=[r[1] for r in _RADIX])
def test_radix_sort_ranks_by_shuffles_without_a_stack(sass_or_skip, arch, op, dtype, passes):
    got = {r.kernel: r for r in res.resources(op, gpucg.tensor((1, 1 << 24), dtype),
                                              target=f"cuda -arch={arch}", impl="sort_radix",
                                              sass=True)}
    assert set(got) == {"zero", "hist"} | passes, got.keys()
    for kernel, r in got.items():
        what = f"{op} sort_radix/{kernel} {dtype} {arch}"
        assert r.stack == 0 and r.spill_loads == r.spill_stores == 0, (what, r)
        shuffles = ("SHFL",) if kernel in passes else ()
        sass.assert_sass(r.sass, has=shuffles, none=("LDL", "STL", "HMMA"), what=what)
        assert r.sass["BAR"] <= (15 if kernel in passes else 2), (what, r.sass["BAR"])


#: the fused Winograd kernels' default configs on a ResNet layer (F(2x2) forced, F(4x4) as
#: selected): the input region, U and V through shared memory (scalar LDS by design: a
#: work-item's tm x tn pairs are TY and TX apart, conflict-free), the products' accumulators
#: in registers (their A2 * tm * tn FFMA a step unrolled: 1 x 4 and 1 x 1 pairs, the region of
#: every channel held in the dynamic buffer, om > 1), three barriers a channel step and one
#: after the region's load, no local memory
_WINOGRAD = [("winograd_fused_2x2", 16 * 1 * 4), ("winograd_fused_4x4", 36 * 1 * 1)]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("impl,products", _WINOGRAD, ids=[w[0] for w in _WINOGRAD])
def test_fused_winograd_keeps_its_tiles_on_chip(sass_or_skip, arch, impl, products):
    got = {r.kernel: r for r in res.resources(
        "conv2d", gpucg.tensor((8, 64, 56, 56)), gpucg.tensor((64, 64, 3, 3)),
        target=f"cuda -arch={arch}", impl=impl, sass=True, padding=1)}
    assert set(got) == {"fused"}, got.keys()
    r = got["fused"]
    assert r.stack == 0 and r.spill_loads == r.spill_stores == 0, (impl, arch, r)
    sass.assert_sass(r.sass, has=("LDS", "FFMA", "BAR"), none=("LDL", "STL", "HMMA"),
                     what=f"conv2d {impl} {arch}")
    assert r.sass["FFMA"] >= products and r.sass["BAR"] <= 4, (impl, arch, r.sass)
    assert r.shared > 48 * 1024 and r.fits, (impl, arch, r)


#: the column reductions' 128-bit loads (default GPU configs: a work-item's vec columns one
#: 128-bit load a row): (op, shape, dtype, axis, impl, {kernel: whether it reads 128 bits});
#: the passes read the input 128 bits at a time in their first pass (rows or columns), the
#: partial results element by element
_COLS_VECTOR = [("sum", (64, 65536), "float32", 0, "reduce_cols", {"main": True}),
                ("max", (64, 65536), "float16", 0, "reduce_cols", {"main": True}),
                ("sum", (32, 64, 1024), "float32", (0, 2), "reduce_passes",
                 {"rows_in_part": True, "cols_part_final": False}),
                ("mean", (32, 64, 32, 256), "float32", (0, 2), "reduce_passes",
                 {"cols_in_part": True, "cols_part_final": False})]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,shape,dtype,axis,impl,reads", _COLS_VECTOR,
                         ids=[f"{c[0]}-{c[4]}-{c[2]}-{len(c[1])}d" for c in _COLS_VECTOR])
def test_column_reductions_load_128_bits(sass_or_skip, arch, op, shape, dtype, axis, impl, reads):
    got = mixes(op, gpucg.tensor(shape, dtype), impl=impl, arch=arch, axis=axis)
    assert set(got) == set(reads), got.keys()
    for kernel, vector in reads.items():
        mix, what = got[kernel], f"{op} {impl}/{kernel} {dtype} {arch}"
        sass.assert_sass(mix, has=("LDG.128",) if vector else (), none=("LDL", "STL"), what=what)
        assert mix["BAR"] <= (1 if impl == "reduce_cols" else 2), (what, mix["BAR"])

#: norm_split's gathered kernels (issue 19) as the dispatcher picks them for few long rows:
#: (op, gamma and beta, {kernel: most BAR}, whether pairs stores y). pairs: the chunk's
#: statistics by shuffles (a held chunk: its maximum meets, then its sum; layer_norm: the
#: shifted sum, the maximum, the squares' sum), the last-arrival flag's broadcast, the last
#: group's combining of the row's (softmax's then maps its own chunk); apply: the row's
#: statistics broadcast (read again, a second barrier, for row_loop rows)
_SPLIT = [("softmax", 0, {"pairs": 7, "apply": 1}, True),
          ("log_softmax", 0, {"pairs": 7, "apply": 1}, True),
          ("rms_norm", 1, {"pairs": 7, "apply": 2}, False),
          ("layer_norm", 2, {"pairs": 12, "apply": 2}, False)]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,params,bars,own", _SPLIT, ids=[s[0] for s in _SPLIT])
def test_split_rows_gather_with_shuffles_and_128_bits(sass_or_skip, arch, op, params, bars, own):
    types = [gpucg.tensor((8, 65536), "float32")] + [gpucg.tensor((65536,), "float32")] * params
    got = {r.kernel: r.sass for r in res.resources(op, *types, target=f"cuda -arch={arch}",
                                                   impl="norm_split", sass=True) if r.selected}
    for kernel, most in bars.items():
        mix = got[kernel]
        has = ("LDG.128",) + (("SHFL",) if kernel == "pairs" else ()) + \
            (("STG.128",) if kernel == "apply" or own else ())
        sass.assert_sass(mix, has=has, none=("LDL", "STL"), what=f"{op} norm_split/{kernel} {arch}")
        assert mix["BAR"] <= most, f"{op} norm_split/{kernel} {arch}: {mix['BAR']} barriers"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,params", [("log_softmax", 0), ("layer_norm", 2)])
def test_norm_blocks_read_128_bit_runs(sass_or_skip, arch, op, params):
    """norm_blocks (rows read again for each pass) as the dispatcher picks it for 8192-long
    rows: 128-bit loads and stores, shuffles, two barriers a block reduction (layer_norm's
    one-pass statistics: the mean, then the pair)."""
    types = [gpucg.tensor((4096, 8192), "float32")] + [gpucg.tensor((8192,), "float32")] * params
    mix = mixes(op, *types, impl="norm_blocks", arch=arch)["main"]
    sass.assert_sass(mix, has=("LDG.128", "STG.128", "SHFL"), none=("LDL", "STL"),
                     what=f"{op} norm_blocks {arch}")
    assert mix["BAR"] <= 2 * (1 + params // 2), f"{op} norm_blocks {arch}: {mix['BAR']} barriers"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("m", [1, 16])
def test_half_gemv_loads_128_bits(sass_or_skip, arch, m):
    """float16's small-M GEMM reads both operands 8 elements (128 bits) at a time on GPUs (its
    default vw = 8; vw = 1 issued 16-bit loads: 0.88 TFLOP/s on an H100 at m = 16, k = n =
    4096), with no local memory."""
    got = mixes("dense", gpucg.tensor((m, 4096), "float16"), gpucg.tensor((4096, 4096), "float16"),
                impl="gemv", arch=arch)
    for kernel, mix in got.items():
        sass.assert_sass(mix, has=("LDG.128",), none=("LDL", "STL"), what=f"gemv/{kernel} {arch}")


#: the decode kernels (Sq <= 16): dense cache and paged, GQA and MQA, D split across lanes
DECODE = [("attention", "attention_decode", "float16", 128, 32, 8, {}),
          pytest.param("attention", "attention_decode", "float32", 80, 8, 1, {"causal": True},
                       marks=pytest.mark.exhaustive),
          pytest.param("paged_attention", "paged_decode", "float16", 128, 32, 8, {},
                       marks=pytest.mark.exhaustive),
          ("paged_attention", "paged_decode", "float16", 64, 8, 1, {"window": 64})]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op,impl,dtype,d,hq,hkv,attrs", DECODE, ids=lambda v: str(v))
def test_decode_loads_through_cp_async_and_shuffles(sass_or_skip, arch, op, impl, dtype, d, hq,
                                                     hkv, attrs):
    """The decode kernels' default configs: K and V tiles by cp.async (LDGSTS), read back 128
    bits at a time (LDS.128), each dot product's lane parts added by shuffles (SHFL), no local
    memory (no spills, the register arrays unrolled)."""
    t = gpucg.tensor
    if op == "attention":
        types = (t((4, hq, 1, d), dtype), t((4, hkv, 8192, d), dtype), t((4, hkv, 8192, d), dtype))
    else:
        types = (t((4, 1, hq, d), dtype), t((2048, 16, hkv, d), dtype),
                 t((2048, 16, hkv, d), dtype), t((4, 256), "int32"), t((4,), "int32"))
    got = mixes(op, *types, impl=impl, arch=arch, **attrs)
    sass.assert_sass(got["main"], has=("LDGSTS", "LDS.128", "SHFL"), none=("LDL", "STL"),
                     what=f"{op} {impl}/main {dtype} D={d} {arch}")


def test_fp8_conversions_are_one_instruction_from_sm_89(sass_or_skip):
    """FP8 stores and loads on sm_90: the PTX cvt is one F2FP (SATFINITE...E4M3.F32 packing a
    store, F16.E5M2.UNPACK_B widening a load); below sm_89 the integer arithmetic."""
    from gpucg.verify import nvrtc

    n = gpucg.var("n")
    for src, dst, want in (("float32", "float8_e4m3fn", "F2FP.SATFINITE.E4M3.F32"),
                           ("float8_e5m2", "float32", "F2FP.F16.E5M2.UNPACK_B")):
        f = gpucg.compile("cast", gpucg.tensor((n,), src), dtype=dst, target="cuda")
        cubin, _ = nvrtc.compile_to_cubin(f.source(0, "main"), "sm_90")
        ops = [o for kernel in sass.parse_sass(sass.disassemble(cubin)).values() for o in kernel]
        assert any(o.startswith(want) for o in ops), sorted(set(ops))


@pytest.mark.parametrize("arch", ARCHS)
def test_dense_fp8_tile_reads_shared_memory_128_bits_at_a_time(sass_or_skip, arch):
    """dense_fp8's SIMT tile (FP8 dequantized in registers) on its 4096^3 blockwise bench case:
    LDS.128 fragment reads, FFMA, barriers, no local memory, no tensor cores (those come with
    the tile layer)."""
    case = gpucg.get_op("dense_fp8").representative("bench")[0]
    mix = mixes("dense_fp8", *case.inputs, impl="fp8_tiled", arch=arch, **case.attrs)["gemm"]
    sass.assert_sass(mix, has=("LDS.128", "FFMA", "BAR"), none=("LDL", "STL", "HMMA"),
                     what=f"dense_fp8 fp8_tiled {arch}")
