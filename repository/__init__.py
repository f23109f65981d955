"""The embedded provenance repository: rollover, event logs with tables of contents, lookup,
export, recovery, search and age-off; lineage over the stored events (`repository.lineage`);
the `provrepo` command line (`repository.cli`)."""

from ._ageoff import AgeOffReport
from ._config import RepositoryConfig, parse_duration, parse_size
from ._errors import BadInput, ConfigError, NotFound, RepositoryError, RepositoryLocked
from ._export import ExportBatch, ExportCursor, TableExport
from ._receiver import ReceiverStats
from ._repository import ProvenanceRepository
from ._rollover import RolloverError, RolloverStats
from ._stats import RepositoryStats
from ._verify import VerifyReport
from .lineage import (
    RUN_COMPONENT_TYPE,
    ActorInstance,
    CapturePointInfo,
    Culprit,
    LineageIndex,
    MineReport,
    RecordRef,
    RunInfo,
    format_record_id,
    jsonable,
    parse_record_id,
    parse_record_ref,
    resolve_record,
)

__all__ = [
    "RUN_COMPONENT_TYPE",
    "ActorInstance",
    "AgeOffReport",
    "BadInput",
    "CapturePointInfo",
    "ConfigError",
    "Culprit",
    "ExportBatch",
    "ExportCursor",
    "LineageIndex",
    "MineReport",
    "NotFound",
    "ProvenanceRepository",
    "ReceiverStats",
    "RecordRef",
    "RepositoryConfig",
    "RepositoryError",
    "RepositoryLocked",
    "RepositoryStats",
    "RolloverError",
    "RolloverStats",
    "RunInfo",
    "TableExport",
    "VerifyReport",
    "format_record_id",
    "jsonable",
    "parse_duration",
    "parse_record_id",
    "parse_record_ref",
    "parse_size",
    "resolve_record",
]
