"""The embedded provenance repository: rollover, event logs with tables of contents, lookup,
export, recovery, search and age-off; lineage over the stored events (`repository.lineage`);
the `provrepo` command line (`repository.cli`).

Names are loaded on first use: Spark's Python workers running a distributed trace import
`repository.lineage` to read event logs, and must not pay for the search index (tantivy) and
the rest of the facade they never use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journals import lazy_exports

if TYPE_CHECKING:
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
        resolve_records,
    )

_EXPORTS = {
    "ActorInstance": ".lineage",
    "AgeOffReport": "._ageoff",
    "BadInput": "._errors",
    "CapturePointInfo": ".lineage",
    "ConfigError": "._errors",
    "Culprit": ".lineage",
    "ExportBatch": "._export",
    "ExportCursor": "._export",
    "LineageIndex": ".lineage",
    "MineReport": ".lineage",
    "NotFound": "._errors",
    "ProvenanceRepository": "._repository",
    "RUN_COMPONENT_TYPE": ".lineage",
    "ReceiverStats": "._receiver",
    "RecordRef": ".lineage",
    "RepositoryConfig": "._config",
    "RepositoryError": "._errors",
    "RepositoryLocked": "._errors",
    "RepositoryStats": "._stats",
    "RolloverError": "._rollover",
    "RolloverStats": "._rollover",
    "RunInfo": ".lineage",
    "TableExport": "._export",
    "VerifyReport": "._verify",
    "format_record_id": ".lineage",
    "jsonable": ".lineage",
    "parse_duration": "._config",
    "parse_record_id": ".lineage",
    "parse_record_ref": ".lineage",
    "parse_size": "._config",
    "resolve_record": ".lineage",
    "resolve_records": ".lineage",
}

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
    "resolve_records",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
