"""The child process of :func:`gpucg.verify.oclgrind.run`: runs operator calls on Oclgrind.

``python -m gpucg.verify.oclgrind_worker DIR`` reads the tasks from ``DIR/../tasks.json``,
claims them one at a time (with the other children) and appends one JSON line per task it ran
to ``DIR/results.jsonl``. Its environment (made by
:func:`gpucg.verify.oclgrind.environment`) makes Oclgrind the OpenCL device. Oclgrind writes
its reports to ``DIR/oclgrind.log`` and its instruction counts to standard output, which is
sent to ``DIR/counts.txt``; each task takes the part written while it ran.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..samples import TF32_TOLERANCE, TOLERANCE, mismatch, sample_inputs
from ..procwatch import resident
from .oclgrind import RECYCLE, Result, Task, parse_counts, parse_log

_LIBC = ctypes.CDLL(None)
def _tail(path: Path, start: int) -> tuple[str, int]:
    try:
        with open(path, "rb") as fh:
            if fh.seek(0, 2) < start:  # a new OpenCL context starts Oclgrind's log afresh
                start = 0
            fh.seek(start)
            data = fh.read()
    except OSError:
        return "", start
    return data.decode(errors="replace"), start + len(data)


def run_task(task: Task, log: Path, counts: Path, offsets: list) -> Result:
    from ..compiled import compile as compile_op
    from ..op import get_op

    op = get_op(task.op)
    case = op.representative(task.kind)[task.case]
    res = Result(task, label=case.label or ", ".join(map(str, case.inputs)))
    t0 = time.perf_counter()
    try:
        compiled = compile_op(task.op, *case.inputs, target="opencl", impl=task.impl,
                              index=task.index, records=False, **case.attrs)
        inputs = sample_inputs(case.inputs, np.random.default_rng(task.case),
                               magnitude=(0.75, 1.25), signed=True, op=op,
                               attrs=compiled.attrs)
        got = compiled(*inputs)
        res.impl = compiled.last_impl or ""
        want = op.reference(*inputs, compiled.attrs)
        tol = TF32_TOLERANCE if getattr(compiled.attrs, "allow_tf32", False) else TOLERANCE
        res.error = mismatch(got, want, tol)
        if res.error:
            host = compile_op(task.op, *case.inputs, target="numpy", **case.attrs)(*inputs)
            if mismatch(host, want):
                # random inputs outside the reference's domain (a Winograd-domain weight that
                # no 3x3 weight transforms to): the numpy target, tested against the
                # reference on valid inputs, is the oracle
                res.error = mismatch(got, host, tol) and f"{mismatch(got, host, tol)} (against the numpy target)"
        outs = want if isinstance(want, tuple) else (want,)
        res.compulsory = (op.compulsory(inputs, outs) if op.compulsory is not None else
                          sum(x.nbytes for x in inputs) + sum(np.asarray(o).nbytes for o in outs))
    except Exception as exc:  # reported per task; the other tasks still run
        res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    res.seconds = time.perf_counter() - t0
    _LIBC.fflush(None)  # Oclgrind's counts sit in C's stdout buffer until flushed
    text, offsets[0] = _tail(log, offsets[0])
    res.reports = parse_log(text)
    text, offsets[1] = _tail(counts, offsets[1])
    res.traffic = parse_counts(text)
    return res


def main(argv) -> int:
    wd = Path(argv[0])
    tasks = [Task(**d) for d in json.loads((wd.parent / "tasks.json").read_text())]
    counts = wd / "counts.txt"
    fd = os.open(counts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)  # Oclgrind prints its instruction counts on standard output
    log = Path(os.environ.get("OCLGRIND_LOG", wd / "oclgrind.log"))
    offsets = [0, 0]
    recycle = int(os.environ.get("GPUCG_OCLGRIND_RECYCLE_BYTES", 1 << 30))
    with open(wd / "results.jsonl", "a") as out:
        for number, task in enumerate(tasks):
            try:  # the first child to create the claim runs the task
                fd = os.open(wd.parent / "claims" / str(number), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, wd.name.encode())  # who ran it, should this child be killed
            os.close(fd)
            res = run_task(task, log, counts, offsets)
            now, peak = resident(os.getpid())
            d = {"number": number, "task": task.__dict__, "impl": res.impl, "label": res.label,
                 "error": res.error, "reports": [r.__dict__ for r in res.reports[:20]],
                 "report_count": len(res.reports),  # the count, not every copy of a message
                 "traffic": [k.__dict__ for k in res.traffic], "compulsory": res.compulsory,
                 "seconds": res.seconds, "worker": wd.name, "peak_rss": peak}
            out.write(json.dumps(d) + "\n")
            out.flush()
            if now > recycle:  # hand the remaining tasks on to a fresh worker
                return RECYCLE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
