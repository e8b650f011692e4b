"""``gpucg.tune``: search each implementation's config space on the device here, and record.

For each size bucket: the implementations that apply are enumerated with their config spaces;
the default (what selection runs without records) is measured first, then the search method
proposes candidates until the trial budget or the time budget is spent. Each result is
appended to the records file as soon as it arrives; a candidate already in the file (same
workload, bucket, device, driver and template hash) is read back instead of measured, so
re-running an interrupted command resumes where it stopped.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from ..errors import InputError
from ..shape import TensorType, dtype_name
from ..records.apply import ConfigOrder, pick_best
from ..records.keys import device_identity, template_hash
from .measure import Result, Task, Timing
from ..records.store import RecordList, default_path, open_log, stamp
from .result import BucketResult, TuneResult, Trial
from .search import Candidates, check_search, make_search
from .workload import Workload


def _types_and_data(inputs) -> tuple[tuple, str | None]:
    """Input types, and an .npz of the arrays when arrays (not types) were given."""
    if all(isinstance(x, TensorType) for x in inputs):
        return tuple(inputs), None
    arrays = []
    for i, x in enumerate(inputs):
        if isinstance(x, TensorType):
            raise InputError("pass either gpucg.tensor types or arrays to tune, not both")
        a = np.ascontiguousarray(np.asarray(x))
        dtype_name(a.dtype, arg=f"input {i}.dtype")
        arrays.append(a)
    fd, path = tempfile.mkstemp(prefix="gpucg-tune-", suffix=".npz")
    os.close(fd)
    np.savez(path, *arrays)
    return tuple(TensorType(a.shape, a.dtype.name) for a in arrays), path


def _modules(workload: Workload) -> tuple:
    """Modules a worker imports to know the operator and its strategy."""
    mods = [workload.op.module]
    try:
        mods.append(workload.op.strategy.lookup(workload.target).__module__)
    except Exception:  # noqa: BLE001 - a missing strategy fails in the worker, clearly
        pass
    return tuple(dict.fromkeys(m for m in mods if m and m != "__main__"))


class ReplayPool:
    """Costs from a records file instead of a device: ``--replay`` (simulation)."""

    def __init__(self, log, workload: Workload):
        self.costs = {}
        for r in log.for_op(workload.op.name):
            if r.workload == (workload.op.name, _akey(workload), workload.inputs):
                self.costs[r.candidate] = Result(r.cost, r.spread, r.repeats, r.error, r.message)
        self.bucket = ()

    def complete(self, impls) -> None:
        """Key the recorded configs as ``impls`` (the implementations of a bucket) name them:
        a knob added since the record was written takes its default (ConfigSpace.complete);
        a record the space cannot read stays unused."""
        spaces = {i.name: i.space for i in impls}
        for (bucket, impl, items), result in list(self.costs.items()):
            if impl not in spaces:
                continue
            try:
                full = tuple(sorted(spaces[impl].complete(dict(items)).items()))
            except InputError:
                continue
            self.costs.setdefault((bucket, impl, full), result)

    def recorded(self, bucket_key, impl: str, config) -> bool:
        return (bucket_key, impl, tuple(sorted(config.items()))) in self.costs

    def measure(self, tasks) -> list[Result]:
        return [self.costs[(self.bucket, t.impl, tuple(sorted(t.config.items())))] for t in tasks]

    def close(self) -> None:
        pass


def _akey(workload: Workload) -> str:
    from ..records.store import attrs_key

    return attrs_key(workload.attrs)


class _Progress:
    """tqdm when installed (trials, best so far, time left), else a line per trial."""

    def __init__(self, total: int, enabled: bool, budget_s: float | None, start: float):
        self.bar = None
        self.enabled = enabled
        self.budget_s, self.start = budget_s, start
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="trial", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, trial: Trial, best: Trial | None, where: str) -> None:
        if not self.enabled:
            return
        info = {"bucket": where or "-", "best": f"{best.cost * 1e3:.4g}ms" if best else "-"}
        if self.budget_s:
            info["left"] = f"{max(0.0, self.budget_s - (time.monotonic() - self.start)):.0f}s"
        if self.bar is not None:
            self.bar.set_postfix(info, refresh=False)
            self.bar.update(1)
        else:
            print(f"trial {trial.number}: {trial.describe()}; best {info['best']}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def tune(op: str, *inputs, target=None, trials: int = 64, search: str = "random",
         budget_s: float | None = None, sizes: dict | None = None, records=None, seed: int = 0,
         workers: int = 1, progress: bool = True, ray=None, replay=None,
         timeout_s: float = 60.0, timing: Timing | None = None, **attrs) -> TuneResult:
    """Tune an operator call on the device of ``target``: every implementation that applies,
    each over its config space; results are appended to the records file as they come.

    Args:
        op: the operator's name.
        inputs: ``gpucg.tensor`` types (random inputs are made) or arrays (tuned on them).
        target: "opencl", "cuda", "numpy"... (None: the default target).
        trials: candidates per size bucket, the default config's included.
        search: "grid", "random", "anneal" or "model" (Optuna TPE; the ``tune`` extra).
        budget_s: stop after this many seconds (the candidate in flight finishes).
        sizes: symbol name -> sizes to tune at (one bucket each), for symbolic shapes.
        records: the records file (None: GPUCG_RECORDS, or the cache directory's; when that is
            "off", results are kept in memory only), a path, or a RecordList.
        seed: the search's seed (and the random inputs').
        workers: local measuring processes (compiles overlap; runs on the device one at a time).
        progress: show a progress bar (tqdm, the ``tune`` extra) on stderr.
        ray: None, True (a Ray instance: the one ``ray.init`` started, or a new local one) or
            an address: measure on a Ray cluster, one worker per device (the ``ray`` extra).
        replay: a records file: take costs from it instead of measuring (no device, no compile).
        timeout_s: seconds a candidate may take before it is killed and recorded as "timeout".
        timing: warm-up, repeats and minimum time of each measurement.
        attrs: the operator's attributes.

    Returns:
        A :class:`gpucg.autotune.TuneResult`.
    """
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise InputError(f"trials={trials!r} must be an int >= 1")
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise InputError(f"budget_s={budget_s!r} must be a number of seconds > 0")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise InputError(f"workers={workers!r} must be an int >= 1")
    types, data = _types_and_data(inputs)
    if data is not None and sizes:
        raise InputError("sizes= needs symbolic input types, not arrays")
    workload = Workload(op, types, target, sizes, **attrs)
    check_search(search)  # an unknown search method fails before any work
    log = _records_log(records, replay)
    start = time.monotonic()
    ident = device_identity(workload.target.backend) if replay is None else None
    if replay is None and ident is None:
        from ..target import require_usable

        require_usable(workload.target)
    result = TuneResult(workload.op.name, str(workload.target),
                        ident[0] if ident else "replayed costs", search, seed, log.name)
    pool = _pool(workload, workers, timeout_s, ray, replay)
    bar = _Progress(trials * len(workload.buckets), progress, budget_s, start)
    try:
        for i, bucket in enumerate(workload.buckets):
            deadline = None
            if budget_s is not None:
                left = budget_s - (time.monotonic() - start)
                deadline = time.monotonic() + left / (len(workload.buckets) - i)
            result.buckets.append(_tune_bucket(workload, bucket, log, pool, search, seed,
                                               trials, deadline, ident, timing or Timing(),
                                               timeout_s, data, bar))
    finally:
        bar.close()
        pool.close()
        if data is not None:
            os.unlink(data)
    result.wall_s = time.monotonic() - start
    if replay is None:
        from .. import eager

        eager.clear()  # this process's eager calls compile again, with the new records
    return result


def _records_log(records, replay):
    if replay is not None:
        return RecordList()  # a simulation records nothing
    if records is None:
        path = default_path()
        return RecordList() if path is None else open_log(path)
    if isinstance(records, RecordList):
        return records
    return open_log(records)


def _pool(workload: Workload, workers: int, timeout_s: float, ray, replay):
    if replay is not None:
        return ReplayPool(open_log(replay), workload)
    if ray is not None and ray is not False:
        from .raypool import RayPool

        return RayPool(None if ray is True else str(ray), workload.target, timeout_s, workers)
    from .workers import LocalPool

    exclusive = workload.target.backend == "numpy" or workload.target.on_cpu
    return LocalPool(workers, timeout_s, exclusive)


def _tune_bucket(workload, bucket, log, pool, search_name, seed, budget, deadline, ident,
                 timing, timeout_s, data, bar) -> BucketResult:
    alive, default = workload.strategy(bucket)
    replaying = isinstance(pool, ReplayPool)
    bkey = workload.bucket_key(bucket)
    if replaying:
        pool.bucket = bkey
        pool.complete(alive)
    specs = []
    for impl in alive:
        configs = list(impl.space)
        if replaying:
            configs = [c for c in configs if pool.recorded(bkey, impl.name, c)]
        if configs:
            specs.append((impl.name, impl.space.knobs, configs))
    cands = Candidates(specs)
    by_name = {i.name: i for i in alive}
    out = BucketResult({s.name: v for s, v in bucket.items()}, candidates=len(cands))
    known = _known(workload, log, bkey, ident, cands, by_name) if not replaying else {}
    search = make_search(search_name, cands, seed)
    types = workload.concrete(bucket)
    where = workload.describe(bucket) if bucket else ""
    order = ConfigOrder()
    first = cands.find(default.impl.name, default.config)
    batch_size = getattr(pool, "size", 1)

    def evaluate(batch: list[int]) -> None:
        tasks = [Task(workload.op.name, _modules(workload), str(workload.target), types,
                      workload.attrs_obj, cands.items[i][0], dict(cands.items[i][1]), seed,
                      timing, data) for i in batch if i not in known]
        results = iter(pool.measure(tasks) if tasks else [])
        for i in batch:
            impl, cfg = cands.items[i]
            rec = known.get(i)
            if rec is None:
                r = next(results)
                rec = workload.record(by_name[impl], cfg, r.cost, bucket, spread=r.spread,
                                      repeats=r.repeats, error=r.error, message=r.message)
                log_append(log, rec)
            t = Trial(len(out.trials) + 1, impl, dict(cfg), rec.cost, rec.spread, rec.error,
                      rec.message, resumed=i in known, default=i == first)
            out.trials.append(t)
            if t.default:
                out.default = t
            search.tell(i, rec.cost if rec.ok else float("inf"))
            ok = [x for x in out.trials if x.ok]
            out.best = pick_best(ok, lambda x: x.cost, lambda x: x.spread,
                                 lambda x: (cands.impls.index(x.impl),
                                            order(by_name[x.impl], x.config)))
            bar.update(t, out.best, where)

    if first is not None:
        evaluate([first])
    while len(out.trials) < budget and (deadline is None or time.monotonic() < deadline):
        batch = search.ask(min(batch_size, budget - len(out.trials)))
        if not batch:
            break
        evaluate(batch)
    return out


def log_append(log, record) -> None:
    record = stamp(record)
    if hasattr(log, "append"):
        log.append(record)
    else:
        log.add(record)


def _known(workload, log, bkey, ident, cands, by_name) -> dict:
    """Candidates this bucket already has records for, on this device (resuming)."""
    out = {}
    hashes = {name: template_hash(impl) for name, impl in by_name.items()}
    for r in log.for_op(workload.op.name):
        if r.workload != (workload.op.name, _akey(workload), workload.inputs) or r.bucket != bkey:
            continue
        if ident is None or (r.target, r.device, r.driver) != (workload.target.kind, *ident):
            continue
        if hashes.get(r.impl) != r.hash:
            continue
        i = cands.find(r.impl, r.config)
        if i is not None:
            out.setdefault(i, r)
    return out
