"""Hang guards by progress (gpucg.procwatch): a child that computes, or whose child computes,
is not stuck however long it takes; one that sleeps and writes nothing is."""

import os
import signal
import subprocess
import sys
import time

import pytest

from gpucg.procwatch import Progress, cpu_seconds, resident

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"


def test_a_sleeping_child_is_stuck_and_a_computing_grandchild_is_not(tmp_path):
    # the shell only waits; its child does the work, as Oclgrind's would
    busy = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{BUSY}'; true"],
                            start_new_session=True)
    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)  # past the sleeper's start-up
        watch_busy, watch_asleep = Progress(busy.pid, 2.0), Progress(asleep.pid, 2.0)
        start = cpu_seconds(busy.pid)
        end = time.monotonic() + 8
        while time.monotonic() < end and not watch_asleep.stalled():
            assert not watch_busy.stalled()
            time.sleep(0.2)
        assert watch_asleep.stalled() and "no output and no CPU time" in watch_asleep.describe()
        assert cpu_seconds(busy.pid) > start
        now, peak = resident(asleep.pid)
        assert 0 < now <= peak
    finally:
        os.killpg(busy.pid, signal.SIGKILL)  # the shell and the child it waits for
        asleep.kill()
        busy.wait()
        asleep.wait()
    assert cpu_seconds(asleep.pid) is None  # gone


def test_output_is_progress(tmp_path):
    out = tmp_path / "log"
    writer = subprocess.Popen([sys.executable, "-c", "import time, sys\nfor i in range(40):\n"
                               f"    open({str(out)!r}, 'a').write('x'); time.sleep(0.1)"])
    try:
        watch = Progress(writer.pid, 1.0, [out])
        end = time.monotonic() + 3
        while time.monotonic() < end:
            assert not watch.stalled()
            time.sleep(0.2)
    finally:
        writer.kill()
        writer.wait()


def test_run_lets_a_slow_child_finish_and_stops_a_stuck_one():
    """procwatch.run kills on no progress, not on elapsed time: a child that prints for longer
    than the idle allowance finishes; one that sleeps silently is stopped, with the reason."""
    from gpucg import procwatch

    slow = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.5)"
    done = procwatch.run([sys.executable, "-c", slow], idle=2, poll=0.1)
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(6)]
    with pytest.raises(subprocess.TimeoutExpired) as err:
        procwatch.run([sys.executable, "-c", "import time; time.sleep(60)"], idle=2, poll=0.1)
    assert "no output and no CPU time" in err.value.stderr
    with pytest.raises(subprocess.CalledProcessError):
        procwatch.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)
