"""Tuning records: JSON Lines, one record per (workload, implementation, config)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("gpucg.autotune")

RECORD_VERSION = 1


def workload_key(op: str, attrs: dict, input_types) -> str:
    """A stable string naming an operator call with constant shapes."""
    types = ";".join(f"{t.dtype}{list(t.shape)}" for t in input_types)
    return f"{op}|{json.dumps(attrs, sort_keys=True, default=str)}|{types}"


@dataclass(frozen=True)
class Record:
    """One measurement: which implementation and config ran a workload, and its cost (s)."""

    workload: str
    target: str
    impl: str
    config: dict = field(default_factory=dict)
    cost: float = float("inf")
    version: int = RECORD_VERSION

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "workload": self.workload,
                           "target": self.target, "impl": self.impl,
                           "config": self.config, "cost": self.cost}, sort_keys=True)


class RecordList:
    """Records held in memory; the selection hook asks ``lookup(workload, target)``."""

    def __init__(self, records=()):
        self.records = list(records)

    def add(self, record: Record) -> None:
        self.records.append(record)

    def lookup(self, workload: str, target) -> list[Record]:
        kind = str(target).split()[0]
        return [r for r in self.records
                if r.workload == workload and r.target.split()[0] == kind]


class RecordLog(RecordList):
    """Records in a JSON Lines file; unreadable lines are skipped with a warning."""

    def __init__(self, path):
        self.path = Path(path)
        super().__init__(self._read())

    def _read(self) -> list[Record]:
        if not self.path.exists():
            return []
        out = []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    if d.get("version") != RECORD_VERSION:
                        raise ValueError(f"version {d.get('version')!r}")
                    out.append(Record(d["workload"], d["target"], d["impl"],
                                      dict(d.get("config", {})), float(d["cost"])))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("%s:%d: skipped unreadable record (%s)", self.path, lineno, exc)
        return out

    def append(self, record: Record) -> None:
        """Append one record; a whole line is written with one write call."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(record.to_json() + "\n")
        self.records.append(record)

    def rewrite(self) -> None:
        """Rewrite the log atomically (temp file, then rename)."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".records-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.writelines(r.to_json() + "\n" for r in self.records)
        os.replace(tmp, self.path)
