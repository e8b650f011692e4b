"""Test tiers: unit (no backend), backend (numpy, opencl), gpu (marked, skipped without CUDA).

Every CUDA source rendered anywhere in the session is also compiled with NVRTC for sm_80 and
sm_90 at the end of the session (nvrtc_pass.py, shared by the xdist workers); a failure fails
the run.
"""

from __future__ import annotations

import os
from pathlib import Path

# PoCL's kernel cache is not safe for two processes building the same program at once (one
# read the other's half-written source: "expected ')'"), so each xdist worker keeps its own,
# set before PoCL starts (it reads POCL_CACHE_DIR once)
if os.environ.get("PYTEST_XDIST_WORKER"):
    _pocl = Path(os.environ.get("POCL_CACHE_DIR") or Path.home() / ".cache" / "pocl")
    os.environ["POCL_CACHE_DIR"] = str(_pocl / f"xdist-{os.environ['PYTEST_XDIST_WORKER']}")

import pytest

import gpucg
from gpucg import settings
from gpucg.runtime import backend_status
from gpucg.verify import nvrtc

# the end-of-session NVRTC pass over every rendered CUDA source
pytest_plugins = ["nvrtc_pass"]


def _require(name: str) -> bool:
    return name in settings.required_backends()


def exhaustive_selected(config) -> bool:
    """Whether -m selects the exhaustive tier (the default -m is "not exhaustive"): fixtures
    that cannot be marked (a module's shared data) widen their work by it."""
    import re

    return re.search(r"(?<!not )\bexhaustive\b", config.getoption("-m") or "") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before -m selects: a test marked ``widens`` (it does more under -m exhaustive) joins the
    exhaustive tier too; a module's ``exhaustive_case(params)`` (a test's parameters, fixture
    parameters included) puts the cases it names in the exhaustive tier only. Without this an
    unmarked test could never run its wide form: -m exhaustive selects marked tests alone."""
    wide = exhaustive_selected(config)
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        pick = getattr(getattr(item, "module", None), "exhaustive_case", None)
        if (wide and item.get_closest_marker("widens")) or (pick and pick(params)):
            item.add_marker(pytest.mark.exhaustive)


def backend_or_skip(name: str):
    ok, _, reason = backend_status(name)
    if not ok:
        if _require(name):
            pytest.fail(f"{name} is required (GPUCG_REQUIRE) but not usable: {reason}")
        pytest.skip(f"{name} not usable here: {reason}")


def opencl_arrays():
    """(the OpenCL backend, pyopencl.array) for tests that build device arrays themselves."""
    backend_or_skip("opencl")
    import pyopencl.array as cla

    from gpucg.runtime import get_backend

    return get_backend("opencl"), cla


def under_oclgrind(code: str, workdir):
    """Run Python ``code`` in a child process on Oclgrind with its checks on (guarded by progress,
    not a timeout); returns the finished process, asserted successful, and the reports of its
    log."""
    import sys

    from gpucg import procwatch
    from gpucg.verify import oclgrind

    done = procwatch.run([sys.executable, "-c", code], env=oclgrind.environment(workdir))
    assert done.returncode == 0, done.stderr[-3000:]
    log = Path(workdir) / "oclgrind.log"
    reports = oclgrind.parse_log(log.read_text()) if log.exists() else []
    return done, reports


def counted(fn):
    """``fn()``'s result and gpucg's counters over that one warm call (a first call compiles)."""
    from gpucg import counters

    fn()
    counters.snapshot(reset=True)
    out = fn()
    return out, counters.snapshot(reset=True)


@pytest.fixture(autouse=True)
def _shared_constants_intact():
    """Fails the test after which CPython's shared one-character str and bytes objects no longer
    hold their character: a C call wrote into Python memory (NVRTC's log buffer once did, and
    every later Jinja " " rendered as NUL)."""
    yield
    bad = [i for i in range(256) if ord(chr(i)) != i or chr(i).encode("latin-1")[0] != i]
    assert not bad, f"shared one-character objects overwritten: {bad}"


@pytest.fixture(params=["numpy", "opencl", pytest.param("cuda", marks=pytest.mark.gpu)])
def target(request):
    """Every backend usable on this machine: numpy and OpenCL (PoCL) in CI, and cuda where
    CuPy sees a GPU (marked gpu, so `pytest -m gpu` runs the backend tier on it too). On cuda,
    a test with bfloat16 or FP8 data skips (any parameter naming bfloat16 or float8, and all of
    test_bfloat16.py, test_fp8.py and test_dense_fp8.py): CuPy has neither dtype, so the cuda
    target compiles those kernels (NVRTC checks them) but cannot hold their data (README.md)."""
    backend_or_skip(request.param)
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if request.param == "cuda" and (
            request.node.module.__name__.endswith(("test_bfloat16", "test_fp8", "test_dense_fp8"))
            or any(w in repr(v) for k, v in params.items() if k != "target"
                   for w in ("bfloat16", "float8"))):
        pytest.skip("CuPy has no bfloat16 or FP8 arrays: they run on numpy and opencl")
    return request.param


def capped(shape, limit: int) -> tuple:
    """``shape`` with its largest dimensions set to 1 until it holds at most ``limit``
    elements (hypothesis draws sizes freely; a 5000 x 5000 draw would time the suite out)."""
    shape = list(shape)
    while shape and _prod(shape) > limit:
        shape[shape.index(max(shape))] = 1
    return tuple(shape)


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def as_dtype(a, dtype: str):
    """``a`` as a NumPy array of ``dtype``, bfloat16 through ml_dtypes (a test of bfloat16
    importorskips ml_dtypes first)."""
    import numpy as np

    if dtype == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    return np.asarray(a).astype(dtype)


def applicable(op: str, *types, target, **attrs) -> list[str]:
    """The implementations (short names) that can run this call, whatever selection prefers."""
    sel = gpucg.explain(op, *types, target=target, **attrs)
    return [c.name.rsplit(".", 1)[0] for c in sel.candidates if c.verdict != "excluded"]


@pytest.fixture
def nvrtc_or_skip():
    ok, why = nvrtc.available()
    if not ok:
        if _require("nvrtc"):
            pytest.fail(f"NVRTC is required (GPUCG_REQUIRE) but unavailable: {why}")
        pytest.skip(why)


@pytest.fixture
def sass_or_skip(nvrtc_or_skip):
    """cuobjdump's version (skips where it is absent, fails where GPUCG_REQUIRE has sass)."""
    from gpucg.errors import BackendUnavailableError
    from gpucg.verify import sass

    try:
        return sass.version()
    except BackendUnavailableError as exc:
        if _require("sass"):
            pytest.fail(f"cuobjdump is required (GPUCG_REQUIRE) but unavailable: {exc}")
        pytest.skip(str(exc))


@pytest.fixture
def oclgrind_or_skip():
    """Oclgrind's runtime (skips with the reason where it is absent, fails where required)."""
    from gpucg.verify import oclgrind

    ok, why = oclgrind.available()
    if not ok:
        if _require("oclgrind"):
            pytest.fail(f"Oclgrind is required (GPUCG_REQUIRE) but unavailable: {why}")
        pytest.skip(why)
    return why
