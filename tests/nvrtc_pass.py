"""The end-of-session NVRTC pass (a pytest plugin, loaded by conftest.py): every CUDA source
the session renders is compiled for sm_80 and sm_90, or for the one arch its arch-specific
instructions need (sm_90a for wgmma and setmaxnreg: nvrtc.required_arch); a failure fails
the run.

The work is shared through a pool directory, one per run in the temp directory: a process
writes each CUDA source it renders there once (``src/<sha256>``: the entry name, a newline,
the source), and every (source, arch) that NVRTC compiled already, by a test with the default
or the check options (nvrtc.check_options) or by the pass, has a claim file (``claims/<arch>-<sha256>``, made with O_EXCL). At its
end a process takes the unclaimed pairs of the pool 48 at a time (nvrtc.check_sources) until
none is left. Under pytest-xdist (``-n 2``, what `make test` runs) the worker that finishes
its tests first so compiles what both have rendered while the other still runs tests, and the
last one compiles only what is left; neither compiles what the other or a test did. The
controller prints one line, with each process's time in the pass, and fails the run on any
failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from gpucg import codegen, settings
from gpucg.verify import nvrtc

ARCHS = ("sm_80", "sm_90")
#: every arch the pass compiles for: the portable ones, then the arch-specific ones
ALL_ARCHS = ARCHS + ("sm_90a",)
BATCH = 48
_POOL: list = []  # [the pool directory of this run], set at pytest_configure
_SEEN: set = set()  # sources this process has written to the pool
_REPORTS: list = []  # on the xdist controller: what each worker's pass reported
_orig_render = codegen.render


def archs_for(src: str) -> tuple:
    """The archs the pass compiles ``src`` for."""
    need = nvrtc.required_arch(src)
    return (need,) if need else ARCHS


def digest_of(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()


def _pool() -> Path | None:
    return _POOL[0] if _POOL else None


def claim(pool: Path, arch: str, digest: str) -> bool:
    """True when this process takes (source, arch): nobody compiled or claimed it before."""
    try:
        os.close(os.open(pool / "claims" / f"{arch}-{digest}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _recording_render(spec, dialect, wide=False, header=""):
    src = _orig_render(spec, dialect, wide, header)
    pool = _pool()
    if dialect.name == "cuda" and pool is not None and src not in _SEEN:
        _SEEN.add(src)
        path = pool / "src" / digest_of(src)
        if not path.exists():  # written whole, then renamed into place
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(f"{spec.entry}\n{src}")
            os.replace(tmp, path)
    return src


def _mark(source: str, arch: str) -> None:
    pool = _pool()
    if pool is not None:
        claim(pool, arch, digest_of(source))


def _recording(compile_fn):
    """``compile_fn`` (nvrtc.compile_to_ptx or compile_to_cubin), claiming what it compiled."""
    def wrapper(source, arch="sm_90", options=nvrtc.DEFAULT_OPTIONS, *args, **kwargs):
        out = compile_fn(source, arch, options, *args, **kwargs)
        # a CUBIN for sm_XY goes through the same front end as PTX for compute_XY, then ptxas
        if tuple(options) in (nvrtc.DEFAULT_OPTIONS, nvrtc.check_options()):
            _mark(source, arch)
        return out
    return wrapper


def _recording_check(check_fn):
    """nvrtc.check_sources (test_nvrtc's batches), its sources claimed before it starts: a
    long batch must not be compiled a second time by a pass meanwhile (a failure is the
    test's to report)."""
    def wrapper(sources, arch="sm_90", *args, **kwargs):
        for src in sources:
            _mark(src, arch)
        return check_fn(sources, arch, *args, **kwargs)
    return wrapper


codegen.render = _recording_render
_check_sources = nvrtc.check_sources
nvrtc.compile_to_ptx = _recording(nvrtc.compile_to_ptx)
nvrtc.compile_to_cubin = _recording(nvrtc.compile_to_cubin)
nvrtc.check_sources = _recording_check(nvrtc.check_sources)


def run_pass(pool: Path) -> tuple[list[str], float]:
    """Compile the pool's unclaimed (source, arch) pairs, a batch at a time, until none is
    left: (the failures, seconds)."""
    start = time.perf_counter()
    failures = []
    for arch in ALL_ARCHS:
        taken: set = set()  # digests claimed already, by anyone
        while True:
            batch = []
            for digest in sorted(os.listdir(pool / "src")):
                if digest.startswith(".") or digest in taken:
                    continue
                taken.add(digest)
                entry, src = (pool / "src" / digest).read_text().split("\n", 1)
                if arch in archs_for(src) and claim(pool, arch, digest):
                    batch.append((entry, src))
                    if len(batch) == BATCH:
                        break
            if not batch:
                break
            for i, exc in _check_sources([src for _, src in batch], arch):
                first = exc.log.splitlines()[0] if exc.log else str(exc)
                failures.append(f"{batch[i][0]} ({arch}): {first}")
    return failures, time.perf_counter() - start


def pytest_addoption(parser):
    parser.addoption("--no-nvrtc-pass", action="store_true",
                     help="skip the end-of-session NVRTC compile of every rendered CUDA source "
                          "(the GPU tier on a CUDA machine, where CuPy compiled what ran)")


def pytest_configure(config):
    uid = getattr(config, "workerinput", {}).get("testrunuid") or uuid.uuid4().hex
    pool = Path(tempfile.gettempdir()) / f"gpucg-nvrtc-{uid}"
    (pool / "src").mkdir(parents=True, exist_ok=True)
    (pool / "claims").mkdir(exist_ok=True)
    _POOL[:] = [pool]


def pytest_testnodedown(node, error):
    report = getattr(node, "workeroutput", {}).get("gpucg_nvrtc")
    if report:
        _REPORTS.append(report)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    pool = _pool()
    ok, why = nvrtc.available()
    if config.getoption("--no-nvrtc-pass") or pool is None:
        return
    if hasattr(config, "workerinput"):  # an xdist worker: its pass, reported to the controller
        failures, seconds = run_pass(pool) if ok else ([], 0.0)
        config.workeroutput["gpucg_nvrtc"] = {"failures": failures, "pool": str(pool),
                                              "seconds": seconds}
        return
    if _REPORTS:
        pools = {Path(r["pool"]) for r in _REPORTS}
        failures = [f for r in _REPORTS for f in r["failures"]]
        seconds = [r["seconds"] for r in _REPORTS]
    else:
        pools = {pool}
        failures, took = run_pass(pool) if ok else ([], 0.0)
        seconds = [took]
    sources = len({n for p in pools if (p / "src").is_dir() for n in os.listdir(p / "src")
                   if not n.startswith(".")})
    for p in pools | {pool}:
        shutil.rmtree(p, ignore_errors=True)
    if not sources:
        return
    if not ok:
        print(f"\nNVRTC unavailable ({why}): {sources} CUDA sources not compile-checked")
        if "nvrtc" in settings.required_backends():
            session.exitstatus = 1
        return
    took = " and ".join(f"{t:.0f} s" for t in seconds)
    print(f"\nNVRTC: compiled {sources} distinct CUDA sources generated by this session "
          f"for sm_80 and sm_90 (sm_90a where they need it): {len(failures)} failed (the pass "
          f"took {took})")
    for f in failures[:20]:
        print("  " + f)
    if failures:
        session.exitstatus = 1
