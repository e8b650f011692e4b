"""Measuring on a Ray cluster: one actor per device, each measuring one candidate at a time.

Ray is the existing engine for this (the ``ray`` extra). ``ray=True`` uses the instance that
``ray.init`` already started in this process, or starts a local one; an address connects to
a cluster (checked first, so an unreachable one is one clear error, not a hang). On a cluster
with GPUs each actor asks for one GPU, so a team tunes on a cluster of GPUs; a timeout kills
the actor and the candidate is recorded as "timeout", a dead actor as "crash".
"""

from __future__ import annotations

import socket

from ..errors import InputError
from .measure import Measurer, Result, Task


class _Actor:
    def __init__(self):
        import os

        os.environ.setdefault("GPUCG_RECORDS", "off")
        self.measurer = Measurer()

    def measure(self, task: Task) -> Result:
        return self.measurer.measure(task)


def _check_address(address: str) -> None:
    if address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"ray address {address!r} must look like HOST:PORT, ray://HOST:PORT "
                         "or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as exc:
        raise InputError(f"the Ray address {address!r} cannot be reached ({exc}); start a "
                         "cluster with `ray start --head` or give its address") from None


class RayPool:
    """Measures tasks on Ray actors (one per device)."""

    def __init__(self, address: str | None, target, timeout_s: float, workers: int = 1):
        try:
            import ray
        except ImportError:
            raise InputError("--ray needs Ray: pip install 'gpucg[ray]'") from None
        self.ray = ray
        self.timeout_s = timeout_s
        self.started = False
        if not ray.is_initialized():
            if address:
                _check_address(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         ignore_reinit_error=True,
                         **({} if address else {"num_cpus": max(1, workers)}))
            except Exception as exc:  # noqa: BLE001 - Ray's own connection errors
                raise InputError(f"could not connect to Ray at {address or 'a local instance'}: "
                                 f"{str(exc).strip().splitlines()[0]}") from None
            self.started = True
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.options = {"num_gpus": 1} if target.backend == "cuda" and gpus else {"num_cpus": 1}
        self.size = max(1, gpus if "num_gpus" in self.options else workers)
        self.cls = ray.remote(_Actor)
        self.actors = [self._new() for _ in range(self.size)]

    def _new(self):
        return self.cls.options(**self.options).remote()

    def measure(self, tasks) -> list[Result]:
        ray = self.ray
        results: list = [None] * len(tasks)
        todo = list(range(len(tasks)))
        while todo:
            running = {}
            for actor_index in range(len(self.actors)):
                if not todo:
                    break
                slot = todo.pop(0)
                ref = self.actors[actor_index].measure.remote(tasks[slot])
                running[ref] = (slot, actor_index)
            ready, late = ray.wait(list(running), num_returns=len(running),
                                   timeout=self.timeout_s)
            for ref in ready:
                slot, _ = running[ref]
                try:
                    results[slot] = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    results[slot] = Result(error="crash", message=f"the Ray actor died: "
                                           f"{str(exc).strip().splitlines()[0][:200]}")
                    self.actors[running[ref][1]] = self._new()
                except ray.exceptions.RayError as exc:
                    results[slot] = Result(error="crash", message=str(exc).splitlines()[0][:200])
            for ref in late:
                slot, actor_index = running[ref]
                ray.kill(self.actors[actor_index])
                self.actors[actor_index] = self._new()
                results[slot] = Result(error="timeout", message=f"the candidate took longer "
                                       f"than {self.timeout_s:g} s")
        return results

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self.started:
            self.ray.shutdown()
