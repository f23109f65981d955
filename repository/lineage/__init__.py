"""Lineage over the stored events: the per-run index and its hops, raw input records, crash
culprits and anomaly mining. Above the storage core: it reads the store and the search index,
and nothing in the core imports it."""

from ._culprits import Culprit, event_data, find_culprits
from ._index import RUN_COMPONENT_TYPE, BatchLoc, CapturePointInfo, LineageIndex, RunInfo
from ._mine import ActorInstance, MineReport, mine
from ._raw import jsonable, read_range, read_ranges
from ._records import (
    RecordRef,
    format_record_id,
    parse_record_id,
    parse_record_ref,
    resolve_record,
)

__all__ = [
    "RUN_COMPONENT_TYPE",
    "ActorInstance",
    "BatchLoc",
    "CapturePointInfo",
    "Culprit",
    "LineageIndex",
    "MineReport",
    "RecordRef",
    "RunInfo",
    "event_data",
    "find_culprits",
    "format_record_id",
    "jsonable",
    "mine",
    "parse_record_id",
    "parse_record_ref",
    "read_range",
    "read_ranges",
    "resolve_record",
]
