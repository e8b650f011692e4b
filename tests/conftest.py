"""Test tiers: unit (no backend), backend (numpy, opencl), gpu (marked, skipped without CUDA).

Every CUDA source rendered anywhere in the session is also compiled with NVRTC for sm_80 and
sm_90 at the end of the session; a failure fails the run. Under pytest-xdist (``-n 2``, what
`make test` runs) each worker compiles the sources its own tests rendered, skipping those another
worker has already claimed, and reports to the controller, which prints one line and fails the
run on any failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

# PoCL's kernel cache is not safe for two processes building the same program at once (one
# read the other's half-written source: "expected ')'"), so each xdist worker keeps its own,
# set before PoCL starts (it reads POCL_CACHE_DIR once)
if os.environ.get("PYTEST_XDIST_WORKER"):
    _pocl = Path(os.environ.get("POCL_CACHE_DIR") or Path.home() / ".cache" / "pocl")
    os.environ["POCL_CACHE_DIR"] = str(_pocl / f"xdist-{os.environ['PYTEST_XDIST_WORKER']}")

import pytest  # noqa: E402

import gpucg
import gpucg.codegen as codegen
from gpucg import settings
from gpucg.runtime import backend_status
from gpucg.verify import nvrtc

_CUDA_SOURCES: dict = {}
_orig_render = codegen.render


def _recording_render(spec, dialect, wide=False, header=""):
    src = _orig_render(spec, dialect, wide, header)
    if dialect.name == "cuda":
        _CUDA_SOURCES.setdefault(src, spec.entry)
    return src


codegen.render = _recording_render

_ARCHS = ("sm_80", "sm_90")
_COMPILED: set = set()  # (source, arch) that NVRTC already compiled in this process


def _recording(compile_fn):
    """``compile_fn`` (nvrtc.compile_to_ptx or compile_to_cubin), noting what it compiled."""
    def wrapper(source, arch="sm_90", options=nvrtc.DEFAULT_OPTIONS, *args, **kwargs):
        out = compile_fn(source, arch, options, *args, **kwargs)
        # a CUBIN for sm_XY goes through the same front end as PTX for compute_XY, then ptxas
        if tuple(options) == nvrtc.DEFAULT_OPTIONS:
            _COMPILED.add((source, arch))
        return out
    return wrapper


nvrtc.compile_to_ptx = _recording(nvrtc.compile_to_ptx)
nvrtc.compile_to_cubin = _recording(nvrtc.compile_to_cubin)


def _require(name: str) -> bool:
    return name in settings.required_backends()


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
    a test with bfloat16 data skips (any parameter naming bfloat16, and all of test_bfloat16.py):
    CuPy has no bfloat16 array, so the cuda target compiles those kernels (NVRTC checks them)
    but cannot hold their data (README.md)."""
    backend_or_skip(request.param)
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if request.param == "cuda" and (
            request.node.module.__name__.endswith("test_bfloat16")
            or any("bfloat16" in repr(v) for k, v in params.items() if k != "target")):
        pytest.skip("CuPy has no bfloat16 arrays: bfloat16 runs on numpy and opencl")
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
def oclgrind_or_skip():
    """Oclgrind's runtime (skips with the reason where it is absent, fails where required)."""
    from gpucg.verify import oclgrind

    ok, why = oclgrind.available()
    if not ok:
        if _require("oclgrind"):
            pytest.fail(f"Oclgrind is required (GPUCG_REQUIRE) but unavailable: {why}")
        pytest.skip(why)
    return why


def _claims_dir(config) -> Path | None:
    """The directory the xdist workers of this run claim sources in (None when not under xdist)."""
    uid = getattr(config, "workerinput", {}).get("testrunuid")
    return Path(tempfile.gettempdir()) / f"gpucg-nvrtc-{uid}" if uid else None


def _claim(claims: Path | None, src: str, arch: str) -> bool:
    """True when this process should compile (src, arch): no other worker has claimed it."""
    if claims is None:
        return True
    claims.mkdir(exist_ok=True)
    name = hashlib.sha256(f"{arch}\0{src}".encode()).hexdigest()
    try:
        os.close(os.open(claims / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _nvrtc_pass(config) -> list:
    """Compile every CUDA source this process rendered for sm_80 and sm_90, unless a test here
    compiled it already or another xdist worker claimed it; the failures. Sources go to NVRTC
    in batches (nvrtc.check_sources), which names each failing source with its own log."""
    claims = _claims_dir(config)
    failures = []
    for arch in _ARCHS:
        todo = [(src, entry) for src, entry in _CUDA_SOURCES.items()
                if (src, arch) not in _COMPILED and _claim(claims, src, arch)]
        for i, exc in nvrtc.check_sources([src for src, _ in todo], arch):
            failures.append(f"{todo[i][1]} ({arch}): {exc.log.splitlines()[0] if exc.log else exc}")
    return failures


_WORKER_REPORTS: list = []  # on the xdist controller: what each worker's pass reported


def pytest_testnodedown(node, error):
    report = getattr(node, "workeroutput", {}).get("gpucg_nvrtc")
    if report:
        _WORKER_REPORTS.append(report)


def pytest_addoption(parser):
    parser.addoption("--no-nvrtc-pass", action="store_true",
                     help="skip the end-of-session NVRTC compile of every rendered CUDA source "
                          "(the GPU tier on a CUDA machine, where CuPy compiled what ran)")


def pytest_sessionfinish(session, exitstatus):
    ok, why = nvrtc.available()
    config = session.config
    if config.getoption("--no-nvrtc-pass"):
        return
    start = time.perf_counter()
    if hasattr(config, "workerinput"):  # an xdist worker: its pass, reported to the controller
        failures = _nvrtc_pass(config) if ok else []
        config.workeroutput["gpucg_nvrtc"] = {
            "sources": [hashlib.sha256(s.encode()).hexdigest() for s in _CUDA_SOURCES],
            "failures": failures, "claims": str(_claims_dir(config)),
            "seconds": time.perf_counter() - start}
        return
    if _WORKER_REPORTS:
        sources = len({h for r in _WORKER_REPORTS for h in r["sources"]})
        failures = [f for r in _WORKER_REPORTS for f in r["failures"]]
        seconds = [r.get("seconds", 0.0) for r in _WORKER_REPORTS]
        for r in _WORKER_REPORTS:
            shutil.rmtree(r["claims"], ignore_errors=True)
    else:
        sources = len(_CUDA_SOURCES)
        failures = _nvrtc_pass(config) if ok and sources else []
        seconds = [time.perf_counter() - start]
    if not sources:
        return
    if not ok:
        print(f"\nNVRTC unavailable ({why}): {sources} CUDA sources not compile-checked")
        if _require("nvrtc"):
            session.exitstatus = 1
        return
    took = " and ".join(f"{t:.0f} s" for t in seconds)
    print(f"\nNVRTC: compiled {sources} distinct CUDA sources generated by this session "
          f"for sm_80 and sm_90: {len(failures)} failed (the pass took {took})")
    for f in failures[:20]:
        print("  " + f)
    if failures:
        session.exitstatus = 1
