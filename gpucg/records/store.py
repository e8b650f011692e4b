"""Tuning records: JSON Lines, one record per measured (or dropped) candidate.

A record carries its full key: the workload (operator, attributes, input signature with
canonical symbol names, and the size bucket it was measured at), the implementation and its
config, the device (target kind, device name, driver/compiler version), the gpucg version and
the hash of the implementation's templates. Selection applies only records whose device and
template hash match the ones here (see :mod:`gpucg.records.apply`).

A log is appended one whole line per record as the tuner goes, so a killed run loses at most
the candidate in flight; lines that do not parse are skipped with a warning; ``prune`` rewrites
the file atomically (temp file, then rename).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..errors import InputError, RecordsError
from ..op import record_attrs
from ..shape import TensorType

log = logging.getLogger("gpucg.autotune")

RECORD_VERSION = 2
#: what a failed candidate's ``error`` says; "dropped" was never measured (a device limit)
ERROR_KINDS = ("compile", "launch", "wrong", "timeout", "crash", "dropped")
#: knob names records written before the knobs were renamed use -> today's names; applied when
#: a record is read, so older records keep replaying and keep matching their configs
KNOB_RENAMES = {"BM": "bm", "BN": "bn", "BK": "bk", "TM": "tm", "TN": "tn", "WM": "wm",
                "WN": "wn", "VW": "vw", "DB": "double_buffer", "CF": "conflict_free",
                "KS": "k_slices", "NC": "cols", "STAGES": "stages", "WG": "wg", "ipt": "items",
                "per_item": "chunk_items"}


def attrs_key(attrs: dict) -> str:
    """Attributes as the canonical JSON string records compare by."""
    return json.dumps(attrs, sort_keys=True, default=str, separators=(",", ":"))


@dataclass(frozen=True)
class Record:
    """One measured candidate. ``cost`` is the median seconds per call (None when it failed).

    Attributes:
        op, attrs, inputs: the workload: operator, attributes (canonical JSON), input
            signature strings such as ``"float32[$0,1024]"`` (``$k``: the k-th symbol).
        bucket: ``((symbol, value), ...)``: the sizes the symbols had when measured.
        impl, config: the implementation ("scan_rows.opencl") and its knobs.
        target, device, driver: the target kind, device name and driver/compiler version.
        gpucg, hash: the gpucg version and the hash of the implementation's templates.
        cost, spread, repeats: median seconds, interquartile range, timed runs.
        error, message: the error kind (see ERROR_KINDS) and its first line, if it failed.
        source: where it was read from ("records.jsonl:12"); not written.
    """

    op: str
    attrs: str
    inputs: tuple
    impl: str
    config: dict = field(default_factory=dict)
    bucket: tuple = ()
    target: str = ""
    device: str = ""
    driver: str = ""
    gpucg: str = ""
    hash: str = ""
    cost: float | None = None
    spread: float = 0.0
    repeats: int = 0
    error: str | None = None
    message: str = ""
    time: float = 0.0
    source: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.cost is not None and math.isfinite(self.cost)

    @property
    def workload(self) -> tuple:
        return (self.op, self.attrs, self.inputs)

    @property
    def device_key(self) -> tuple:
        return (self.target, self.device, self.driver)

    def _signatures(self):
        """(dtype, dims) of each input, its symbols replaced by the record's bucket sizes."""
        sizes = dict(self.bucket)
        for sig in self.inputs:
            dtype, _, rest = sig.partition("[")
            yield dtype, ([sizes.get(p, p) for p in rest.rstrip("]").split(",")]
                          if rest != "]" else [])

    def shapes(self) -> list[str]:
        """The input signatures at the record's bucket sizes: ``float32[8,64,56,56]``."""
        return [f"{dtype}[{','.join(map(str, dims))}]" for dtype, dims in self._signatures()]

    def input_types(self) -> list:
        """The input types at the record's bucket sizes (every dimension an int)."""
        return [TensorType(tuple(int(d) for d in dims), dtype)
                for dtype, dims in self._signatures()]

    @property
    def candidate(self) -> tuple:
        """(bucket, implementation, config) as a hashable key: what resuming compares."""
        return (self.bucket, self.impl, tuple(sorted(self.config.items())))

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("source")
        d["attrs"] = json.loads(self.attrs)
        d["inputs"] = list(self.inputs)
        d["bucket"] = {k: v for k, v in self.bucket}
        d["version"] = RECORD_VERSION
        return json.dumps(d, sort_keys=True, default=str)

    @staticmethod
    def from_json(line: str, source: str = "") -> "Record":
        d = json.loads(line)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        if d.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {d.get('version')!r}, expected {RECORD_VERSION}")
        error = d.get("error")
        if error is not None and error not in ERROR_KINDS:
            raise ValueError(f"error kind {error!r}")
        cost = d.get("cost")
        config = d.get("config", {})
        if not isinstance(config, dict) or not isinstance(d["impl"], str):
            raise ValueError("config must be an object and impl a string")
        attrs = record_attrs(str(d["op"]), dict(d["attrs"]))
        return Record(op=str(d["op"]), attrs=attrs_key(attrs),
                      inputs=tuple(str(s) for s in d["inputs"]), impl=d["impl"],
                      config={KNOB_RENAMES.get(k, k): v for k, v in config.items()},
                      bucket=tuple((str(k), int(v)) for k, v in dict(d.get("bucket", {})).items()),
                      target=str(d["target"]), device=str(d["device"]),
                      driver=str(d["driver"]), gpucg=str(d.get("gpucg", "")),
                      hash=str(d["hash"]), cost=None if cost is None else float(cost),
                      spread=float(d.get("spread", 0.0)), repeats=int(d.get("repeats", 0)),
                      error=error, message=str(d.get("message", "")),
                      time=float(d.get("time", 0.0)), source=source)


class RecordList:
    """Records held in memory, indexed by operator for selection."""

    def __init__(self, records=()):
        self.records: list[Record] = []
        self._by_op: dict[str, list[Record]] = {}
        for r in records:
            self._add(r)

    def _add(self, record: Record) -> None:
        self.records.append(record)
        self._by_op.setdefault(record.op, []).append(record)

    def add(self, record: Record) -> None:
        self._add(record)

    def for_op(self, op: str) -> list[Record]:
        """The records of one operator (every device and version)."""
        self.refresh()
        return self._by_op.get(op, [])

    def refresh(self) -> None:
        """Pick up records written since the last read (a file-backed list does)."""

    @property
    def name(self) -> str:
        return "records in memory"

    def __len__(self) -> int:
        return len(self.records)


class RecordLog(RecordList):
    """Records in a JSON Lines file, read once and then only as it grows.

    ``refresh()`` reads lines appended since the last read (one ``stat`` when nothing changed)
    and re-reads the whole file when it was replaced or shrank (``gpucg records --prune``).
    """

    def __init__(self, path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._state = None  # (inode, size read up to)
        self._lineno = 0
        #: lines that did not parse (skipped with a warning)
        self.skipped = 0
        super().__init__()
        self.refresh()

    @property
    def name(self) -> str:
        return str(self.path)

    def _check_path(self) -> None:
        if self.path.is_dir():
            raise RecordsError(f"records file {str(self.path)!r} is a directory; give a file path")

    def refresh(self) -> None:
        try:
            st = os.stat(self.path)  # the one system call when nothing changed
        except FileNotFoundError:
            if self._state is not None:
                self._reset()
            return
        except OSError as exc:
            raise RecordsError(f"records file {str(self.path)!r} cannot be read: "
                               f"{exc.strerror or exc}") from None
        if stat.S_ISDIR(st.st_mode):
            self._check_path()
        with self._lock:
            if self._state is not None and self._state[0] == st.st_ino \
                    and self._state[1] == st.st_size:
                return
            if self._state is None or self._state[0] != st.st_ino or st.st_size < self._state[1]:
                self._reset()
            self._read_from(self._state[1] if self._state else 0, st.st_ino)

    def _reset(self) -> None:
        self.records, self._by_op, self._state, self._lineno = [], {}, None, 0
        self.skipped = 0

    def _read_from(self, offset: int, inode: int) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError as exc:
            raise RecordsError(f"records file {str(self.path)!r} cannot be read: "
                               f"{exc.strerror or exc}") from None
        end = data.rfind(b"\n") + 1  # a last line without its newline is still being written
        for raw in data[:end].split(b"\n")[:-1]:
            self._lineno += 1
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            where = f"{self.path.name}:{self._lineno}"
            try:
                self._add(Record.from_json(line, where))
            except (ValueError, KeyError, TypeError) as exc:
                self.skipped += 1
                log.warning("%s: skipped an unreadable record (%s)", where, exc)
        self._state = (inode, offset + end)

    def append(self, record: Record) -> Record:
        """Append one record as one whole line (one write call), then keep it in memory."""
        self._check_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab+") as fh:
                line = record.to_json().encode() + b"\n"
                if fh.tell():  # a line cut short by a kill: end it, so it alone is lost
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        line = b"\n" + line
                fh.write(line)
        except OSError as exc:
            raise RecordsError(f"records file {str(self.path)!r} cannot be written: "
                               f"{exc.strerror or exc}") from None
        self.refresh()
        return record

    def rewrite(self, records) -> None:
        """Replace the file's content with ``records`` atomically (temp file, then rename)."""
        self._check_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".records-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.writelines(r.to_json() + "\n" for r in records)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        with self._lock:
            self._reset()
        self.refresh()


def stamp(record: Record) -> Record:
    """The record with the current time, if it has none."""
    return record if record.time else replace(record, time=time.time())


# -- the default location ---------------------------------------------------------------------

_LOGS: dict[str, RecordLog] = {}
_LOGS_LOCK = threading.Lock()
_WARNED: set = set()


def open_log(path) -> RecordLog:
    """The one RecordLog of a path in this process (shared by compile, explain and tune)."""
    raw = str(path)
    found = _LOGS.get(raw)  # the common case: no path resolution per compile
    if found is not None:
        found.refresh()
        return found
    key = str(Path(path).expanduser().resolve())
    with _LOGS_LOCK:
        found = _LOGS.get(key)
        if found is None:
            found = _LOGS[key] = RecordLog(key)
        _LOGS[raw] = found
        return found


def default_path() -> Path | None:
    """GPUCG_RECORDS, or records.jsonl in the gpucg cache directory; None when "off"."""
    from .. import settings

    return settings.records_path()


def resolve(records):
    """What ``compile(records=...)`` means: None -> the default log (None if off or
    unreadable, with a warning), False/"off" -> None, a path -> its log, a list -> itself."""
    if records is None:
        path = default_path()
        if path is None:
            return None
        try:
            return open_log(path)
        except RecordsError as exc:
            if str(path) not in _WARNED:
                _WARNED.add(str(path))
                log.warning("tuning records not used: %s", exc)
            return None
    if records is False or (isinstance(records, str) and records.lower() == "off"):
        return None
    if isinstance(records, (str, os.PathLike)):
        return open_log(records)
    if isinstance(records, RecordList):
        return records
    raise InputError(f"records={records!r} must be None (the default location), False, a path "
                     "or a gpucg.autotune.RecordList")
