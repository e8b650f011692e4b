"""Local measuring workers: processes that compile and time candidates, with timeouts.

Each worker is a fresh interpreter (``python -m gpucg.autotune.workers``, not a fork: a device
context is never shared across a fork, and the caller's script is not run again). The parent
holds the device: workers compile in parallel, but only one at a time runs on the device (on
a CPU device, where compiling competes with the kernels being timed, only one works at all).
A worker that exceeds the timeout is killed and the candidate recorded as "timeout"; one that
dies (PoCL can segfault on a bad config) is recorded as "crash" with its exit signal, and a
new worker takes its place.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait

from .measure import Measurer, Result, Task
from ..errors import TuneError
from ..procwatch import Progress

#: a starting worker (importing gpucg, opening the device) that has used no CPU time for this
#: long is stuck; one that keeps computing may take as long as it needs
STARTUP_IDLE_S = 120.0


def _worker_main(conn) -> None:
    measurer = Measurer()
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "prepare":
            conn.send(("prepared", measurer.prepare(msg[1])))
        elif msg[0] == "run":
            conn.send(("result", measurer.run()))
        else:
            return


def _exit_reason(code) -> str:
    if code is not None and code < 0:
        try:
            return f"the worker died of signal {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker died of signal {-code}"
    return f"the worker exited with code {code}"


class _Worker:
    def __init__(self):
        mine, theirs = socket.socketpair()
        env = dict(os.environ, GPUCG_RECORDS="off",  # a worker never selects by records
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpucg.autotune.workers", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(mine.detach())
        self.state = "starting"  # starting, idle, preparing, waiting, running
        self.slot = None
        self.deadline = time.monotonic() + STARTUP_IDLE_S
        self.startup = Progress(self.proc.pid, STARTUP_IDLE_S)

    @property
    def exitcode(self):
        return self.proc.poll()

    def send(self, msg, state: str, timeout: float) -> None:
        self.conn.send(msg)
        self.state = state
        self.deadline = time.monotonic() + timeout

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()


class LocalPool:
    """N local worker processes measuring tasks.

    Args:
        workers: how many processes.
        timeout_s: seconds a candidate may take (compile, check and timing together).
        exclusive: one worker at a time does anything (CPU devices); else compiles overlap.
    """

    def __init__(self, workers: int = 1, timeout_s: float = 60.0, exclusive: bool = True):
        self.size = max(1, int(workers))
        self.timeout_s = float(timeout_s)
        self.exclusive = exclusive
        self.workers: list[_Worker] = []

    def _fail(self, w: _Worker, results, kind: str, message: str) -> None:
        if w.slot is not None:
            results[w.slot] = Result(error=kind, message=message)
        w.kill()
        self.workers.remove(w)

    def measure(self, tasks: list[Task]) -> list[Result]:
        """Results in the order of ``tasks``."""
        results: list = [None] * len(tasks)
        todo = list(range(len(tasks)))
        waiting: list[_Worker] = []
        while any(r is None for r in results):
            while len(self.workers) < min(self.size, len(tasks)):
                self.workers.append(_Worker())
            busy = [w for w in self.workers if w.state in ("preparing", "waiting", "running")]
            device_busy = any(w.state == "running" for w in self.workers)
            for w in self.workers:
                if w.state == "idle" and todo and not (self.exclusive and busy):
                    w.slot = todo.pop(0)
                    w.send(("prepare", tasks[w.slot]), "preparing", self.timeout_s)
                    busy.append(w)
            if waiting and not device_busy:
                w = waiting.pop(0)
                w.send(("run",), "running", self.timeout_s)
            live = [w for w in self.workers if w.state != "idle"]
            now = time.monotonic()
            timeout = max(0.0, min((w.deadline for w in live), default=now + 1) - now)
            ready = wait([w.conn for w in live], timeout=min(timeout, 5.0))
            for w in list(live):
                if w.conn in ready:
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        try:
                            w.proc.wait(5)
                        except subprocess.TimeoutExpired:
                            pass
                        why = _exit_reason(w.exitcode)
                        if w.state == "starting":
                            self._fail(w, results, "crash", why)
                            raise TuneError(f"a measuring worker failed to start: {why}")
                        self._fail(w, results, "crash", why)
                        continue
                    if kind == "ready":
                        w.state = "idle"
                    elif kind == "prepared" and payload is not None:
                        results[w.slot], w.slot, w.state = payload, None, "idle"
                    elif kind == "prepared":
                        w.state = "waiting"
                        waiting.append(w)
                    else:
                        results[w.slot], w.slot, w.state = payload, None, "idle"
                elif time.monotonic() > w.deadline:
                    if w in waiting:
                        continue  # it waits for the device, not on its own work
                    starting = w.state == "starting"
                    if starting and not w.startup.stalled():
                        w.deadline = time.monotonic() + 5  # slow, not stuck: look again
                        continue
                    self._fail(w, results, "timeout",
                               f"the candidate took longer than {self.timeout_s:g} s")
                    if starting:
                        raise TuneError("a measuring worker could not start: "
                                        f"{w.startup.describe()}")
        return results

    def close(self) -> None:
        for w in self.workers:
            try:
                w.conn.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            try:
                w.proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            w.kill()
        self.workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])))
