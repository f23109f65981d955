"""The embedded provenance repository: rollover, event logs with tables of contents, lookup,
export, recovery and the CLI."""

from ._ageoff import AgeOffReport
from ._config import RepositoryConfig, parse_duration, parse_size
from ._culprits import Culprit
from ._errors import BadInput, ConfigError, NotFound, RepositoryError, RepositoryLocked
from ._export import ExportBatch, ExportCursor
from ._lineage import RUN_COMPONENT_TYPE, CapturePointInfo, LineageIndex, RunInfo
from ._mine import ActorInstance, MineReport
from ._repository import ProvenanceRepository, RolloverStats
from ._rollover import RolloverError
from ._search import parse_time

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
    "RepositoryConfig",
    "RepositoryError",
    "RepositoryLocked",
    "RolloverError",
    "RolloverStats",
    "RunInfo",
    "parse_duration",
    "parse_size",
    "parse_time",
]
