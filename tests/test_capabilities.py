"""The capability table (gpucg/arch.py): one record per architecture that every capability
test and shared-memory budget reads; strategies never ask for a backend's name."""

import re
from pathlib import Path

import pytest

import gpucg
from gpucg.arch import ARCHS, MMA_E4M3, MMA_E5M2, MMA_F16, limits
from gpucg.target import capabilities
from gpucg.errors import GpucgError

ROOT = Path(gpucg.__file__).resolve().parent


def test_no_strategy_compares_a_target_kind_or_backend_name():
    bad = re.compile(r"""[!=]=\s*["'](cuda|opencl|numpy)["']|["'](cuda|opencl|numpy)["']\s*[!=]=|"""
                     r"""target\.(kind|backend)\s*(not\s+)?in\b""")
    hits = [f"{p.name}:{i}: {line.strip()}" for p in sorted((ROOT / "strategies").glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, "capabilities come from target.capabilities:\n" + "\n".join(hits)


def test_shared_memory_budgets_live_in_the_capability_table_only():
    lit = re.compile(r"\b48\s*\*\s*(1024|KIB)\b|\b49152\b")
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted(ROOT.rglob("*.py"))
            if p.name != "arch.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if lit.search(line)]
    hits += [f"{p.relative_to(ROOT)}:{i}" for p in sorted(ROOT.rglob("*.j2"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if lit.search(line)]
    assert not hits, "budgets come from gpucg.arch:\n" + "\n".join(hits)


@pytest.mark.parametrize("spec, native, emulated", [
    ("cuda -arch=sm_80", True, False), ("cuda -arch=sm_90", True, False),
    ("opencl -device=gpu", False, True), ("opencl -device=cpu", False, True),
    ("numpy", False, False), ("cuda -arch=sm_75", False, False)])
def test_tensor_cores_by_target(spec, native, emulated):
    caps = gpucg.Target(spec).capabilities
    assert caps.native(MMA_F16) is native
    assert caps.supports(MMA_F16) is (native or emulated)
    assert caps.warp_size == 32


def test_hopper_features_only_where_the_arch_has_them():
    assert limits("sm_90a").native("wgmma") and limits("sm_90a").native("setmaxnreg")
    assert not limits("sm_90").native("wgmma") and limits("sm_90").native("tma")
    assert not limits("sm_80").native("tma") and limits("sm_80").native("cp.async")
    assert limits("sm_89").native("fp8") and not limits("sm_80").native("fp8")
    assert limits("sm_90a").smem_per_block_optin == limits("sm_90").smem_per_block_optin
    for caps in ARCHS.values():
        assert caps.smem_static_max <= caps.smem_per_block_optin <= caps.smem_per_sm


def test_fp8_mma_sync_from_sm_89_on():
    """The PTX ISA: mma.sync m16n8k32 .e4m3/.e5m2 needs sm_89 or higher (plain sm_90 too)."""
    for arch in ("sm_89", "sm_90", "sm_90a"):
        assert limits(arch).native(MMA_E4M3) and limits(arch).native(MMA_E5M2), arch
    assert not limits("sm_80").native(MMA_E4M3) and not limits("sm_86").native(MMA_E5M2)


def test_unknown_arch_names_the_known_ones():
    with pytest.raises(GpucgError, match="sm_80"):
        capabilities(gpucg.Target("cuda -arch=sm_12"))


def test_explain_prints_the_limits_it_used():
    n = gpucg.var("n")
    text = str(gpucg.explain("dense", gpucg.tensor((n, 256), "float16"),
                             gpucg.tensor((256, 256), "float16"), target="cuda -arch=sm_80"))
    assert "limits: sm_80: warp 32, shared memory 48 KiB static / 163 KiB opt-in" in text
    text = str(gpucg.explain("dense", gpucg.tensor((n, 256), "float16"),
                             gpucg.tensor((256, 256), "float16"), target="cuda -arch=sm_75"))
    assert "gemm_mma.cuda" in text and "sm_75 has no mma.m16n8k16.f16" in text
