"""Config spaces and tuning records (the tuner itself comes later)."""

from .records import Record, RecordLog, RecordList, workload_key
from .space import Config, ConfigSpace

__all__ = ["Config", "ConfigSpace", "Record", "RecordList", "RecordLog", "workload_key"]
