"""Resources and occupancy from ptxas, with no GPU: the calculator against hand-worked figures,
ptxas's report, and every default config of every implementation of every operator (its
"bench" Cases) on sm_90 (and sm_80 with -m exhaustive): the launch fits, no undeclared spills or occupancy below
25%, and nothing worse than the checked-in tests/resources/FAMILY.json.
"""

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg import cli
from gpucg.space import ConfigSpace
from gpucg.verify import nvrtc, resources as res
from gpucg.builtin import families
from gpucg.verify.baseline import (ARCHS, compare_resources, collect_resources, family_of, load,
                                   REGISTER_SLACK)
from conftest import exhaustive_selected
from gpucg.verify.occupancy import limits, max_block, occupancy

BASELINE = Path(__file__).parent / "resources"  # one file per operator family


@pytest.mark.parametrize("arch,regs,smem,block,blocks,warps,limiter", [
    ("sm_80", 32, 0, 256, 8, 64, "warps"),            # 64 warps per SM, 8 per block
    ("sm_86", 32, 0, 256, 6, 48, "warps"),            # 48 warps per SM
    ("sm_80", 64, 0, 256, 4, 32, "registers"),        # 2048 registers a warp: 8 warps a quarter
    ("sm_90", 255, 0, 32, 8, 8, "registers"),         # 8160 -> 8192 a warp: 2 warps a quarter
    ("sm_89", 16, 0, 32, 24, 24, "blocks"),           # at most 24 blocks per SM
    ("sm_80", 16, 48 * 1024, 128, 3, 12, "shared memory"),  # (48 + 1 reserved) KiB a block
    ("sm_90", 16, 48 * 1024, 128, 4, 16, "shared memory"),  # 228 KiB per SM
])
def test_occupancy_against_worked_figures(arch, regs, smem, block, blocks, warps, limiter):
    occ = occupancy(arch, regs, smem, block)
    assert (occ.blocks, occ.warps, occ.limiter, occ.fits) == (blocks, warps, limiter, True)
    assert occ.occupancy == pytest.approx(warps / limits(arch).max_warps_per_sm)


def test_launches_that_do_not_fit():
    occ = occupancy("sm_90", 255, 0, 512)  # 8192 x 16 warps > 65536 registers a block
    assert not occ.fits and occ.blocks == 0 and "too many resources requested" in occ.reason
    assert not occupancy("sm_80", 16, 49 * 1024, 64).fits      # over the 48 KiB static limit
    assert not occupancy("sm_80", 16, 0, 2048).fits
    # dynamic shared memory: up to the opt-in maximum with the static (the backend raises the
    # kernel's attribute above 48 KiB first)
    assert occupancy("sm_80", 16, 40 * 1024, 64, 100 * 1024).fits
    assert "exceed the 166912 a block gets with the opt-in" in \
        occupancy("sm_80", 16, 40 * 1024, 64, 124 * 1024).reason
    # maxThreadsPerBlock as the driver reports it for a kernel's register count
    assert (max_block("sm_90", 255), max_block("sm_90", 72), max_block("sm_90", 64)) == \
        (256, 896, 1024)
    with pytest.raises(gpucg.InputError, match="arch='sm_12' has no limits table"):
        limits("sm_12")


LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
ptxas         .     1072 bytes stack frame, 88 bytes spill stores, 48 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1072 bytes cumulative stack size, 32768 bytes smem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_report():
    got = res.parse_ptxas(LOG, "sm_90")
    assert got["k1"] == res.KernelResources("k1", "sm_90", 255, 32768, 1072, 88, 48, 1)
    assert got["k2"].registers == 10 and got["k2"].shared == 0 and got["k2"].spills == 0


def test_ptxas_measures_a_kernel(nvrtc_or_skip):
    src = ('extern "C" __global__ void probe(float* a, int n) {\n'
           '    __shared__ float s[300];\n    float loc[256];\n'
           '    for (int i = 0; i < 256; ++i) loc[i] = a[i * n];\n'
           '    s[threadIdx.x] = loc[a[n] > 0 ? n & 255 : 0];\n    __syncthreads();\n'
           '    a[threadIdx.x] = s[299 - threadIdx.x];\n}\n')
    for arch in ("sm_80", "sm_90"):
        got = res.kernel_resources(src, "probe", arch)
        assert got.shared == 1200 and got.stack == 1024 and got.registers > 0, got


@pytest.fixture(scope="module")
def bench_rows(request):
    """sm_90's rows in the default tier, sm_80's too with -m exhaustive (tests/test_tile_layer.py
    holds sm_80's tensor-core kernels to their figures in the default tier)."""
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    return collect_resources(archs=ARCHS if exhaustive_selected(request.config) else ("sm_90",))


@pytest.mark.widens
def test_every_default_config_fits_without_undeclared_spills(nvrtc_or_skip, bench_rows):
    """Every operator's bench Cases, every implementation, sm_80 and sm_90."""
    assert {k.split("|")[0] for k, _ in bench_rows} >= {"cumsum", "topk", "conv2d"}
    bad = []
    for key, r in bench_rows:
        if not r.fits:
            bad.append(f"{key}: does not fit: {r.reason}")
        if r.spills and not r.expect_spills:
            bad.append(f"{key}: {r.spill_stores} B spill stores, {r.spill_loads} B loads, "
                       "and the kernel declares no reason (Kernel(..., spills=...))")
        if r.occupancy < 0.25 and not r.expect_low_occupancy:
            bad.append(f"{key}: occupancy {r.occupancy:.0%} ({r.limiter}) and the kernel "
                       "declares no reason (Kernel(..., low_occupancy=...))")
    assert not bad, "\n".join(bad)
    declared = sorted({f"{r.impl}/{r.kernel}: {r.expect_spills or r.expect_low_occupancy}"
                       for _, r in bench_rows if r.spills or r.occupancy < 0.25})
    print("\ndeclared spills or low occupancy:\n  " + "\n  ".join(declared))


@pytest.mark.widens
def test_no_regression_against_the_checked_in_file(nvrtc_or_skip, bench_rows):
    baseline = load(BASELINE).get("resources", {})
    assert baseline, f"{BASELINE} has no resource figures: run `make resources-json`"
    known = [(k, r) for k, r in bench_rows if k in baseline]
    new = sorted(k for k, _ in bench_rows if k not in baseline)
    if new:  # another operator's kernels, merged before the file was rewritten
        warnings.warn(f"{len(new)} kernels are not in {BASELINE}/ (first: {new[0]}); "
                      "`make resources-json FAMILY=...` adds them")
    assert known, "no kernel of the file was measured"
    assert not compare_resources(known, baseline), "\n".join(compare_resources(known, baseline))


def test_the_comparison_catches_spills_and_registers(bench_rows):
    key, row = bench_rows[0]
    base = {key: {"registers": row.registers, "spill_stores": row.spill_stores,
                  "spill_loads": row.spill_loads}}
    more = int(row.registers * (1 + REGISTER_SLACK)) + 1

    @dataclass
    class Changed:
        registers: int
        spills: int

    assert compare_resources([(key, row)], base) == []
    assert "registers" in compare_resources([(key, Changed(more, row.spills))], base)[0]
    assert "spilled" in compare_resources([(key, Changed(row.registers, row.spills + 8))], base)[0]


# -- a probe operator: configs that cannot launch, an op with no CUDA kernel ---------------

def _probe_run(ctx, scan):
    n = ctx.inputs[0].shape[-1]
    scan(x=ctx.inputs[0], y=ctx.outputs[0], n=ctx.size(n), grid=ctx.inputs[0].shape[0],
         block=ctx.config["wg"])


PROBE = gpucg.kernel_impl("probe_rows", _probe_run, scan=gpucg.Kernel("scan/scan_rows.j2"))
HOST = gpucg.host_impl("probe_host", lambda ctx: np.cumsum(ctx.inputs[0], axis=-1))


def _gpu(attrs, inputs, outputs, target):
    s = gpucg.Strategy(target)
    s.add(PROBE, 10, space=ConfigSpace({"wg": (256, 1024), "items": (8,)}, {"wg": 256, "items": 8}),
          fixed=dict(in_dtype="float64", out_dtype="float64", acc_dtype="float64", combine="sum",
                     exclusive=False))
    return s


def _host(attrs, inputs, outputs, target):
    s = gpucg.Strategy(target)
    s.add(HOST, 10)
    return s


@pytest.fixture(scope="module", autouse=True)
def _probes():
    """The probe operators, registered when this module's tests run (not at collection, where
    the sweeps over every registered operator, tests/test_oclgrind.py's, would list them as
    families with no cases)."""
    for name, gpu_fn in (("resources_probe", _gpu), ("resources_probe_host", _host)):
        gpucg.register_op(name, num_inputs=1, type_rel=lambda ins, attrs: ins[0],
                          pattern=gpucg.OpPattern.OPAQUE, input_names=("x",),
                          reference=lambda x, attrs: np.cumsum(x, axis=-1), override=True)
        gpucg.register_strategy(name, ["gpu"], gpu_fn, override=True)
        gpucg.register_strategy(name, ["cpu"], _host, override=True)


def test_config_fits_drops_configs_that_cannot_launch(nvrtc_or_skip):
    f = gpucg.compile("resources_probe", gpucg.tensor((4, 5000), "float64"), target="cuda")
    assert res.config_fits(f, {"wg": 256, "items": 8}, "sm_90") == (True, "")
    ok, why = res.config_fits(f, {"wg": 1024, "items": 8}, "sm_80")
    assert not ok and "probe_rows" in why and "shared" in why, why  # (8192 + 1024) doubles


def test_resources_rows_name_every_kernel(nvrtc_or_skip):
    rows = gpucg.resources("cumsum", gpucg.tensor((1 << 24,), "float32"), axis=0,
                           target="cuda -arch=sm_80")
    impls = {r.impl for r in rows}
    assert impls == {"scan_lookback.cuda", "scan_device.cuda", "scan_chunked.cuda"}
    assert {r.kernel for r in rows if r.impl == "scan_device.cuda"} == \
        {"tile_reduce", "scan_partials", "tile_apply"}
    assert all(r.arch == "sm_80" and r.block == 256 and r.fits for r in rows)
    assert [r.selected for r in rows if r.impl == "scan_lookback.cuda"][0]
    typ = gpucg.tensor((4096, 1024), "float32")
    every = gpucg.resources("cumsum", typ, axis=1, impl="scan_rows", all_configs=True)
    space = gpucg.compile("cumsum", typ, axis=1, target="cuda", impl="scan_rows") \
        .selection.choices[0].impl.space
    assert {r.config for r in every} == {c.short() for c in space}


def test_cli_resources_table_and_json(nvrtc_or_skip, capsys):
    args = ["resources", "topk", "--input", "m,2000:float32", "--size", "m=64",
            "--attr", "k=5", "--arch", "sm_86"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "topk_warp.cuda*" in out and "regs" in out and "occ" in out and "sort_merge" in out
    assert cli.main(args + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["kernel"] for r in rows if r["impl"] == "topk_group.cuda"} >= {"emit"}
    assert all(r["arch"] == "sm_86" and r["fits"] for r in rows)


@pytest.mark.parametrize("args,msg", [
    (["cumsum", "--input", "64:float32", "--attr", "axis=0", "--arch", "sm_12"],
     "arch='sm_12' has no limits table"),
    (["cumsum", "--input", "64:float32", "--arch", "sm90"], "must be sm_XY"),
    (["resources_probe_host", "--input", "4,6:float32"], "has no CUDA kernel implementation"),
    (["cumsum", "--input", "n:float32"], "resources need constant shapes"),
])
def test_cli_resources_bad_input(nvrtc_or_skip, capsys, args, msg):
    assert cli.main(["resources", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.startswith("gpucg: error:"), err


def test_cli_resources_without_nvrtc(monkeypatch, capsys):
    monkeypatch.setattr(nvrtc, "available", lambda: (False, "NVRTC library not found"))
    assert cli.main(["resources", "cumsum", "--input", "64:float32", "--attr", "axis=0"]) == 2
    assert "resources need NVRTC: NVRTC library not found" in capsys.readouterr().err


def test_explain_prints_a_line_per_selected_kernel(nvrtc_or_skip, capsys):
    assert cli.main(["explain", "cumsum", "--input", "4096,1024:float32", "--attr", "axis=1",
                     "--target", "cuda -arch=sm_80"]) == 0
    out = capsys.readouterr().out
    assert "sm_80 scan_rows.cuda/scan:" in out and "occupancy" in out
    assert cli.main(["explain", "cumsum", "--input", "n,1024:float32", "--attr", "axis=1",
                     "--target", "cuda"]) == 0
    assert "blocks up to" in capsys.readouterr().out


def test_the_tuners_cuda_check_refuses_a_block_too_big_for_the_registers(nvrtc_or_skip):
    from gpucg.autotune.checks import CHECKS
    from gpucg.runtime.cuda_backend import CudaBackend
    from gpucg.verify.cupy_standin import StandInCupy

    assert res.cuda_resource_check in CHECKS["cuda"]
    backend = CudaBackend(cupy=StandInCupy("sm_90", check=False))
    f = gpucg.compile("topk", gpucg.tensor((1, 1 << 22), "float32"), k=100, target="cuda",
                      impl="topk_group", records=False)
    prog = backend.compile(f.sources["topk_group.cuda/split"], "gpucg_topk_topk_group_split")
    assert res.cuda_resource_check(backend, prog, "split", 1, 32) is None  # 255 registers
    why = res.cuda_resource_check(backend, prog, "split", 1, 512)
    assert "too many resources requested" in why, why


def test_the_figures_are_one_file_per_family():
    """Each family's figures in its own file (a new family adds a file), holding only its
    own operators' keys; the test reads them merged."""
    files = sorted(BASELINE.glob("*.json"))
    assert files and {f.stem for f in files} <= set(families())
    merged = load(BASELINE)
    total = 0
    for f in files:
        data = json.loads(f.read_text())
        for part in ("resources", "traffic"):
            for key in data[part]:
                assert family_of(key.split("|", 1)[0]) == f.stem, (f.name, key)
            total += len(data[part])
    assert total == len(merged["resources"]) + len(merged["traffic"])
