"""PoCL's worker threads pinned a CPU each (gpucg/runtime/opencl_threads.py): asked for only
where it is safe, never over the user's own POCL_AFFINITY, and seen in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpucg.runtime.opencl_threads import pin_pocl_workers, pocl_workers

from conftest import opencl_arrays


@pytest.fixture
def two_free_cpus(monkeypatch):
    """A 2-CPU machine where the process may run on both."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


def test_asks_where_safe(two_free_cpus):
    env = {}
    assert pin_pocl_workers(env) and env == {"POCL_AFFINITY": "1"}
    env = {"POCL_MAX_PTHREAD_COUNT": "2"}
    assert pin_pocl_workers(env) and env["POCL_AFFINITY"] == "1"


@pytest.mark.parametrize("env", [{"POCL_AFFINITY": "0"}, {"POCL_AFFINITY": "1"},
                                 {"POCL_AFFINITY": ""}])
def test_the_users_value_stands(two_free_cpus, env):
    before = dict(env)
    assert not pin_pocl_workers(env) and env == before


@pytest.mark.parametrize("allowed", [{1}, {0}, {1, 2}, set()])
def test_not_on_a_process_held_to_some_cpus(monkeypatch, two_free_cpus, allowed):
    """taskset or a container's cpuset: PoCL would pin worker i to CPU i though the process
    may not run there (newer PoCLs abort on that)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed, raising=False)
    env = {}
    assert not pin_pocl_workers(env) and env == {}


@pytest.mark.parametrize("workers", ["3", "64", "many"])
def test_not_with_more_workers_than_cpus(two_free_cpus, workers):
    env = {"POCL_MAX_PTHREAD_COUNT": workers}
    assert not pin_pocl_workers(env) and "POCL_AFFINITY" not in env


def test_not_on_one_cpu(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    env = {}
    assert not pin_pocl_workers(env) and env == {}


_THREADS = """
import json, os
from gpucg.runtime import get_backend
ok, _, why = get_backend("opencl").status()
masks = []
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/status") as f:
        masks.append(f.read().split("Cpus_allowed_list:")[1].split()[0])
print(json.dumps({"ok": ok, "why": why, "masks": masks,
                  "affinity": os.environ.get("POCL_AFFINITY")}))
"""


def _threads(**env):
    clean = {k: v for k, v in os.environ.items() if k != "POCL_AFFINITY"}
    out = subprocess.run([sys.executable, "-c", _THREADS], env=dict(clean, **env),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PoCL pins on Linux only")
def test_a_fresh_process_runs_pinned_workers():
    """A process whose first OpenCL query is gpucg's: PoCL's workers each run on one CPU (a
    CPU device only; a GPU platform starts no workers); POCL_AFFINITY=0 leaves them free."""
    backend, _ = opencl_arrays()
    cpus = os.cpu_count() or 1
    if backend.device_type != "cpu" or cpus < 2 or not set(range(cpus)) <= os.sched_getaffinity(0):
        pytest.skip("needs a CPU OpenCL device and a process free on every CPU")
    everywhere = os.environ.get("POCL_MAX_PTHREAD_COUNT", "0") or "0"
    if int(everywhere) > cpus:
        pytest.skip("POCL_MAX_PTHREAD_COUNT asks for more workers than CPUs")
    pinned = _threads()
    assert pinned["ok"], pinned["why"]
    assert pinned["affinity"] == "1"
    singles = [m for m in pinned["masks"] if m.isdigit()]
    assert len(singles) >= 2 and {"0", "1"} <= set(singles), pinned["masks"]
    free = _threads(POCL_AFFINITY="0")
    assert free["ok"] and free["affinity"] == "0"
    assert not [m for m in free["masks"] if m.isdigit()], free["masks"]


@pytest.mark.parametrize("value, says", [("1", "pinned (POCL_AFFINITY=1)"),
                                         ("0", "free (POCL_AFFINITY=0)"),
                                         (None, "free (POCL_AFFINITY=unset)")])
def test_benchmarks_say_how_the_workers_ran(monkeypatch, value, says):
    """Timings on PoCL depend on it: every benchmark's first line names it."""
    from gpucg.benchmarks.common import banner

    if value is None:
        monkeypatch.delenv("POCL_AFFINITY", raising=False)
    else:
        monkeypatch.setenv("POCL_AFFINITY", value)
    assert pocl_workers() == says
    backend, _ = opencl_arrays()
    if "PoCL" in backend.status()[1]:
        assert banner("reduce").endswith(f"; PoCL workers {says}")
