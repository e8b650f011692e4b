"""The autotuner: config spaces, records, search methods, measurement, and ``tune``.

``gpucg.tune`` (gpucg.autotune.tuner) searches; records (gpucg.records.store) are applied by
selection (gpucg.records.apply); see docs/autotuning.md.
"""

from .checks import Dropped, register_check
from ..errors import RecordsError, TuneError
from ..records.store import Record, RecordList, RecordLog, open_log
from .result import BucketResult, Trial, TuneResult
from ..space import Config, ConfigSpace
from .workload import Workload, make_record

__all__ = ["BucketResult", "Config", "ConfigSpace", "Dropped", "Record", "RecordList",
           "RecordLog", "RecordsError", "Trial", "TuneError", "TuneResult", "Workload",
           "make_record", "open_log", "register_check"]
