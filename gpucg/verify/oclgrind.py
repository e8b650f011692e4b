"""Oclgrind: gpucg's OpenCL kernels on a simulated GPU that checks every memory access.

Oclgrind (Debian package ``oclgrind``) is an OpenCL device simulator. It reports data races,
out-of-bounds accesses, reads of uninitialized memory and divergent barriers, and counts the
bytes each kernel loads and stores. It calls itself a GPU, so gpucg's strategies pick their GPU
implementations there, the kernels a CUDA GPU gets from the same templates.

The OpenCL backend is one per process, so kernels run on Oclgrind in child processes
(:mod:`gpucg.verify.oclgrind_worker`) whose environment points the OpenCL ICD loader at
Oclgrind's runtime (``OCL_ICD_VENDORS``, a directory holding one ``.icd`` file) and selects it
by name (``GPUCG_OPENCL_DEVICE=Oclgrind``). Normal runs never see Oclgrind: the OpenCL backend
skips it unless it is asked for by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..arch import OPENCL_GPU

#: the ICD-loadable runtime (``liboclgrind-rt-icd.so``) is looked for here, then beside the
#: ``oclgrind`` command's prefix
_SEARCH = ("/usr/lib/oclgrind", "/usr/lib/x86_64-linux-gnu/oclgrind", "/usr/lib64/oclgrind",
           "/usr/local/lib/oclgrind", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib", "/usr/lib")
_ICD = "liboclgrind-rt-icd.so"
#: the checks Oclgrind makes (the environment variables its ``oclgrind`` wrapper sets for
#: ``--data-races --check-api``); out-of-bounds accesses and divergent barriers are always
#: checked. Not ``--uninitialized``: in 21.10 it stops a kernel with "Unsupported instruction:
#: freeze" (an LLVM instruction newer than the plugin) on most of gpucg's kernels.
CHECKS = {"OCLGRIND_DATA_RACES": "1", "OCLGRIND_CHECK_API": "1"}


def runtime_library() -> Path | None:
    """The path of Oclgrind's ICD runtime library, or None where Oclgrind is not installed."""
    from .. import settings

    given = settings.oclgrind_runtime()
    if given is not None:
        return given if given.is_file() else None
    dirs = list(_SEARCH)
    exe = shutil.which("oclgrind")
    if exe:
        prefix = Path(exe).resolve().parent.parent
        dirs = [str(prefix / "lib" / "oclgrind"), str(prefix / "lib")] + dirs
    for d in dirs:
        path = Path(d) / _ICD
        if path.is_file():
            return path
    return None


def available() -> tuple[bool, str]:
    """(True, path of the runtime) where Oclgrind is installed, else (False, why not)."""
    lib = runtime_library()
    if lib is None:
        return False, (f"Oclgrind is not installed ({_ICD} not found); on Debian/Ubuntu: "
                       "apt-get install oclgrind (`make test` does it when run as root)")
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        return False, f"pyopencl is not installed ({exc}); pip install 'gpucg[opencl]'"
    return True, str(lib)


def environment(workdir, checks: bool = True, counts: bool = False) -> dict:
    """The environment of a child process whose OpenCL device is Oclgrind.

    Args:
        workdir: a directory for the ICD file and Oclgrind's log (``oclgrind.log``).
        checks: data races, uninitialized values, API misuse (out-of-bounds accesses and
            divergent barriers are always reported).
        counts: Oclgrind's instruction counts (``--inst-counts``), printed after each kernel.
    """
    ok, lib = available()
    if not ok:
        from ..errors import BackendUnavailableError

        raise BackendUnavailableError(lib)
    workdir = Path(workdir)
    icd = workdir / "icd"
    icd.mkdir(parents=True, exist_ok=True)
    (icd / "oclgrind.icd").write_text(lib + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCLGRIND_")}
    env.update(OCL_ICD_VENDORS=str(icd), GPUCG_OPENCL_DEVICE="Oclgrind", GPUCG_DISK_CACHE="0",
               OCLGRIND_LOG=str(workdir / "oclgrind.log"), PYTHONUNBUFFERED="1",
               # one simulator thread per child (the children share the cores), and the
               # shared memory a CUDA block gets (48 KiB static) instead of Oclgrind's 32 KiB
               OCLGRIND_NUM_THREADS="1", OCLGRIND_LOCAL_MEM_SIZE=str(OPENCL_GPU.smem_per_block_optin))
    if checks:
        env.update(CHECKS)
    if counts:
        env["OCLGRIND_INST_COUNTS"] = "1"
    return env


# -- what Oclgrind prints -------------------------------------------------------------------

@dataclass
class Report:
    """One message of Oclgrind's log: its first line ("Read-write data race at ...") and the
    kernel it names."""

    title: str
    kernel: str
    text: str


def parse_log(text: str) -> list[Report]:
    """The messages of an Oclgrind log (blank-line separated; the first line unindented)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines or lines[0][:1].isspace():
            continue
        kernel = next((ln.split(":", 1)[1].strip() for ln in lines
                       if ln.strip().startswith("Kernel:")), "")
        out.append(Report(lines[0].strip(), kernel, "\n".join(lines)))
    return out


@dataclass
class KernelTraffic:
    """Global memory bytes one kernel launch loaded and stored (Oclgrind's --inst-counts)."""

    kernel: str
    loaded: int = 0
    stored: int = 0


_COUNT = re.compile(r"^\s*[\d,]+ - (load|store) global \(([\d,]+) bytes\)")
#: Oclgrind runs vloadN, vstoreN and the vload_half/vstore_half family as builtin calls, which
#: --inst-counts lists as calls ("4 - call _Z11vload_half2mPU3AS1KDh()"), not as loads: their
#: bytes are the element count (vloada_half3 moves 4) times the element size, counted where
#: the pointer is global (PU3AS1). The float16 kernels load and store through these alone.
_VCALL = re.compile(r"^\s*([\d,]+) - call _Z\d+v(load|store)(a?)(_half)?(\d*)(?:_rt[enpz])?"
                    r"\S*?PU3AS1K?(Dh|[cahstijlmfd])\(?")
_ELEM_BYTES = {"Dh": 2, "c": 1, "a": 1, "h": 1, "s": 2, "t": 2, "i": 4, "j": 4, "l": 8, "m": 8,
               "f": 4, "d": 8}


#: 32- and 64-bit atomic builtins on global memory ("72 - call _Z9atomic_orPU3AS1Vjj()"): a
#: read-modify-write loads and stores its word, an exchange only stores (a look-back's flags);
#: an atomic_or or atomic_add of 0 is a load all the same, counted as a read-modify-write
_ATOMIC = re.compile(r"^\s*([\d,]+) - call _Z\d+(?:atomic|atom)_(\w+?)PU3AS1V([ijlm])")


def _vcall_bytes(m) -> int:
    calls, n = int(m.group(1).replace(",", "")), int(m.group(5) or 1)
    if m.group(3) and n == 3:  # vloada_half3 / vstorea_half3 move four halves
        n = 4
    return calls * n * (2 if m.group(4) else _ELEM_BYTES[m.group(6)])


def parse_counts(text: str) -> list[KernelTraffic]:
    """One entry per kernel launch from the ``--inst-counts`` output, in launch order."""
    out: list[KernelTraffic] = []
    for line in text.splitlines():
        m = re.match(r"Instructions executed for kernel '([^']+)'", line)
        if m:
            out.append(KernelTraffic(m.group(1)))
            continue
        a = _ATOMIC.match(line)
        if a and out:
            nbytes = int(a.group(1).replace(",", "")) * _ELEM_BYTES[a.group(3)]
            out[-1].loaded += 0 if a.group(2) == "xchg" else nbytes
            out[-1].stored += nbytes
            continue
        m = _COUNT.match(line)
        v = None if m else _VCALL.match(line)
        if (m or v) and out:
            kind, nbytes = ((m.group(1), int(m.group(2).replace(",", ""))) if m
                            else (v.group(2), _vcall_bytes(v)))
            if kind == "load":
                out[-1].loaded += nbytes
            else:
                out[-1].stored += nbytes
    return out


# -- running calls in children ---------------------------------------------------------------

@dataclass
class Task:
    """One operator call to run on Oclgrind: a Case of an operator, an implementation (None:
    what selection picks on the simulated GPU), an index width."""

    op: str
    kind: str
    case: int
    impl: str | None = None
    index: str = "auto"


@dataclass
class Result:
    """What one task did: the implementation that ran, whether its results equal NumPy's,
    Oclgrind's reports, and the global memory traffic when counted."""

    task: Task
    impl: str = ""
    label: str = ""
    error: str = ""
    reports: list = field(default_factory=list)
    traffic: list = field(default_factory=list)
    compulsory: int = 0
    seconds: float = 0.0
    report_count: int = 0
    worker: str = ""
    peak_rss: int = 0

    @property
    def ok(self) -> bool:
        return not self.error and not self.report_count

    @property
    def loaded(self) -> int:
        return sum(k.loaded for k in self.traffic)

    @property
    def stored(self) -> int:
        return sum(k.stored for k in self.traffic)

    def describe(self) -> str:
        t = self.task
        head = f"{t.op} [{t.kind} {t.case}: {self.label}] {self.impl or t.impl} index={t.index}"
        if self.error:
            return f"{head}: {self.error}"
        if self.report_count:
            kinds = sorted({r.title.split(" at ")[0] for r in self.reports})
            return (f"{head}: {self.report_count} Oclgrind report(s) ({'; '.join(kinds)}); "
                    f"first:\n{self.reports[0].text}")
        return f"{head}: ok"


def _from_json(d: dict) -> Result:
    r = Result(Task(**d["task"]), d.get("impl", ""), d.get("label", ""), d.get("error", ""),
               [Report(**x) for x in d.get("reports", [])],
               [KernelTraffic(**x) for x in d.get("traffic", [])], d.get("compulsory", 0),
               d.get("seconds", 0.0), d.get("report_count", 0), d.get("worker", ""),
               d.get("peak_rss", 0))
    return r


#: a worker that has written nothing and used no CPU time for this long is stuck and killed
IDLE_S = 300.0
#: the most resident memory a worker may hold; above it the worker is killed (its unfinished
#: tasks fail with the figure) and between tasks it hands its work on to a fresh one
MEMORY_BYTES = 2 << 30
#: a worker's exit status when it stopped to hand its remaining tasks to a fresh worker
RECYCLE = 75


def run(tasks, checks: bool = True, counts: bool = False, workers: int = 2,
        idle_s: float = IDLE_S, memory: int = MEMORY_BYTES) -> list[Result]:
    """Run tasks on Oclgrind in ``workers`` child processes; results in the tasks' order.

    Hang guards go by progress, not by the clock: a child is killed only once it has written
    nothing and used no CPU time for ``idle_s`` seconds (a slow simulation on a loaded machine
    keeps going), or once it holds more than ``memory`` bytes resident. A child whose
    resident memory passes half of ``memory`` between tasks exits, and a fresh child takes the
    remaining tasks. A child that dies or is killed gives the task it was running an error
    result. Each Result carries its worker and that worker's peak resident memory.
    """
    from ..procwatch import Progress

    tasks = list(tasks)
    if not tasks:
        return []
    workers = max(1, min(workers, len(tasks)))
    with tempfile.TemporaryDirectory(prefix="gpucg-oclgrind-") as tmp:
        # the children claim tasks one at a time (a file created with O_EXCL per task), so a
        # slow task does not leave the other child idle
        (Path(tmp) / "tasks.json").write_text(json.dumps([t.__dict__ for t in tasks]))
        claims = Path(tmp) / "claims"
        claims.mkdir()
        dirs, live, why = [], [], {}

        def start(slot: int) -> None:
            wd = Path(tmp) / f"w{slot}.{sum(d.name.startswith(f'w{slot}.') for d in dirs)}"
            wd.mkdir()
            dirs.append(wd)
            env = environment(wd, checks=checks, counts=counts)
            env["GPUCG_OCLGRIND_RECYCLE_BYTES"] = str(memory // 2)
            with open(wd / "stderr.txt", "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "gpucg.verify.oclgrind_worker", str(wd)], env=env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            files = [wd / n for n in ("results.jsonl", "counts.txt", "oclgrind.log",
                                      "stderr.txt")]
            live.append((slot, wd, proc, Progress(proc.pid, idle_s, files)))

        try:
            for w in range(workers):
                start(w)
            _watch(live, start, why, claims, len(tasks), memory)
        finally:  # interrupted: no worker outlives the run
            for _, _, proc, _ in live:
                proc.kill()
                proc.wait()
        done: dict[int, Result] = {}
        failed: dict[int, str] = {}
        for wd in dirs:
            path = wd / "results.jsonl"
            finished = set()
            for line in path.read_text().splitlines() if path.exists() else []:
                d = json.loads(line)
                finished.add(d["number"])
                done[d.pop("number")] = _from_json(d)
            for c in os.listdir(claims):  # the task a killed worker was running
                if (claims / c).read_text() == wd.name and int(c) not in finished:
                    failed[int(c)] = why.get(wd, "the worker stopped")
    return [done.get(i) or Result(t, error=failed.get(i, "not run")) for i, t in enumerate(tasks)]


def _watch(live: list, start, why: dict, claims: Path, count: int, memory: int) -> None:
    """Poll the workers until none is left: kill the stuck and the oversized, and start a
    fresh worker for the tasks nobody has claimed when one hands on or is killed."""
    from ..procwatch import resident

    while live:
        time.sleep(1.0)
        for item in list(live):
            slot, wd, proc, progress = item
            code = proc.poll()
            if code is None:
                now, _ = resident(proc.pid)
                if now > memory:
                    why[wd] = (f"the worker held {now / 2**30:.2f} GiB resident, above "
                               f"the bound of {memory / 2**30:.2f} GiB")
                elif progress.stalled():
                    why[wd] = f"the worker was stuck: {progress.describe()}"
                else:
                    continue
                proc.kill()
                code = proc.wait()
            live.remove(item)
            if code not in (0, RECYCLE) and wd not in why:
                why[wd] = (f"worker exited with {code}: "
                           f"{(wd / 'stderr.txt').read_text(errors='replace')[-2000:]}")
            if (code == RECYCLE or wd in why) and len(os.listdir(claims)) < count:
                start(slot)  # the remaining tasks go to a fresh worker


def tasks_for(ops=None, kind="small", full=False, every_case=True) -> list[Task]:
    """Every implementation of every operator (or of ``ops``) on the operator's Cases of
    ``kind``, forced with ``impl=``: what a GPU may run.

    Each runs every case with 32-bit indexing and its first with 64-bit (``full``: every case
    both), keeping the simulator's time in bounds; a Case's ``not_simulated`` implementations
    are left out of it. ``every_case=False`` (the suite's default tier): only the first case
    and the cases a GPU selects the implementation for, not those written for another."""
    from ..compiled import explain
    from ..op import get_op, list_ops
    out = []
    for name in ops or list_ops():
        seen = set()
        for i, case in enumerate(get_op(name).representative(kind)):
            sel = explain(name, *case.inputs, target="opencl -device=gpu", records=False,
                          **case.attrs)
            chosen = sel.choices[0].impl.name if sel.choices else None
            for cand in sel.candidates:
                impl = cand.name.rsplit(".", 1)[0]
                if (cand.verdict == "excluded" or impl in case.not_simulated
                        or not (every_case or impl not in seen or impl == chosen)):
                    continue
                out.append(Task(name, kind, i, impl, "int32"))
                if full or impl not in seen:
                    out.append(Task(name, kind, i, impl, "int64"))
                seen.add(impl)
    return out


def traffic(ops, kind: str = "small", workers: int = 2) -> list[Result]:
    """The global memory traffic of the implementation a GPU selects, per Case of ``kind`` of
    each operator, counted by Oclgrind (no checks, so faster than :func:`run` with them)."""
    from ..op import get_op
    tasks = [Task(op, kind, i) for op in ops for i, _ in enumerate(get_op(op).representative(kind))]
    return run(tasks, checks=False, counts=True, workers=workers)


def traffic_line(r: Result) -> str:
    """"topk [label] topk_radix.opencl: 255,078 B loaded + 9,060 stored = 13.34x compulsory"."""
    head = f"{r.task.op} [{r.label}] {r.impl or '?'}"
    if r.error:
        return f"{head}: {r.error}"
    from ..op import get_op
    what = ("the parts of its inputs a call reads" if get_op(r.task.op).compulsory else
            "inputs read once, outputs written once")
    return (f"{head}: {r.loaded:,} B loaded + {r.stored:,} B stored = "
            f"{f'{(r.loaded + r.stored) / r.compulsory:.2f}x' if r.compulsory else '-'} the "
            f"compulsory {r.compulsory:,} B ({what})")
