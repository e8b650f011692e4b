"""Hang guards that tell a stuck child process from a slow one.

A fixed wall-clock budget fails a run that is only slow (a loaded machine, a big simulated
kernel) and passes a stuck one for as long as the budget lasts. A :class:`Progress` watches
what a stuck process does not do: write output, or use CPU time. A child is stuck once it has
done neither for ``idle`` seconds. CPU time and resident memory come from ``/proc`` (Linux);
where there is none, output alone counts as progress.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the fields after "pid (comm)"


def _children(pid: int) -> list[int]:
    """The live children of a process (its threads' ``children`` files, or a scan of /proc
    where the kernel has none)."""
    tasks = Path(f"/proc/{pid}/task")
    files = list(tasks.glob("*/children")) if tasks.is_dir() else []
    if files:
        out = []
        for f in files:
            try:
                out += [int(c) for c in f.read_text().split()]
            except OSError:
                pass
        return out
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time of a process, its reaped children and its live descendants;
    None where /proc has no such process."""
    fields = _stat(pid)
    if fields is None:
        return None
    # fields 14-17 of /proc/PID/stat (utime, stime, cutime, cstime), here 11..14
    total = sum(int(v) for v in fields[11:15])
    todo = _children(pid)
    while todo:
        child = todo.pop()
        f = _stat(child)
        if f is not None:
            total += int(f[11]) + int(f[12])
            todo += _children(child)
    return total / _TICK


def resident(pid: int) -> tuple[int, int]:
    """(resident bytes now, peak resident bytes) of a process, (0, 0) where unknown."""
    now = peak = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return now, peak


class Progress:
    """Watches one child process: :meth:`stalled` is True once it has written nothing to
    ``files`` (their sizes) and used no CPU time for ``idle`` seconds."""

    def __init__(self, pid: int, idle: float, files=()):
        self.pid = pid
        self.idle = float(idle)
        self.files = [Path(f) for f in files]
        self._mark = self._state()
        self._since = time.monotonic()

    def _state(self) -> tuple:
        sizes = tuple(f.stat().st_size if f.exists() else -1 for f in self.files)
        cpu = cpu_seconds(self.pid)
        return sizes, None if cpu is None else round(cpu, 2)

    def stalled(self) -> bool:
        state = self._state()
        now = time.monotonic()
        if state != self._mark:
            self._mark, self._since = state, now
        return now - self._since > self.idle

    def describe(self) -> str:
        return (f"no output and no CPU time for {time.monotonic() - self._since:.0f} s "
                f"(the guard allows {self.idle:g} s)")


def run(args, idle: float = 600, poll: float = 1.0, check: bool = False, **kwargs):
    """``subprocess.run(args, capture_output=True, text=True, **kwargs)`` guarded by progress, not
    by a wall-clock budget: the child is killed (``subprocess.TimeoutExpired``) only once it has
    written nothing and used no CPU time for ``idle`` seconds; a slow one runs to the end."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpucg-procwatch-") as tmp:
        paths = [Path(tmp) / "stdout", Path(tmp) / "stderr"]
        with open(paths[0], "w") as out, open(paths[1], "w") as err:
            child = subprocess.Popen(args, stdout=out, stderr=err, text=True, **kwargs)
            watch = Progress(child.pid, idle, paths)
            while child.poll() is None:
                if watch.stalled():
                    child.kill()
                    child.wait()
                    raise subprocess.TimeoutExpired(args, idle, output=paths[0].read_text(),
                                                    stderr=f"{watch.describe()}\n"
                                                    + paths[1].read_text())
                time.sleep(poll)
        done = subprocess.CompletedProcess(args, child.returncode, paths[0].read_text(),
                                           paths[1].read_text())
    if check:
        done.check_returncode()
    return done
