"""The autotuner: config spaces, records, search strategies, measurement, and ``tune``."""

from .records import Record, RecordList, RecordLog, RecordsError, open_log
from .space import Config, ConfigSpace
from .workload import Workload, make_record

__all__ = ["Config", "ConfigSpace", "Record", "RecordList", "RecordLog", "RecordsError",
           "Workload", "make_record", "open_log"]
