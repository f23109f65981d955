"""Lineage over the stored events: the per-run index and its hops, raw input records, crash
culprits and anomaly mining. Above the storage core: it reads the store and the search index,
and nothing in the core imports it.

Names are loaded on first use (see `repository`): a Spark worker tracing a partition of the
lineage (`open_index`) loads the index, the event logs and the forward index, not the search
index that culprits and mining read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from journals import lazy_exports

if TYPE_CHECKING:
    from ._cache import ByteLRU
    from ._culprits import Culprit, event_data, find_culprits
    from ._deferred import DeferredError
    from ._forward_store import ForwardIndex, verify_forward
    from ._index import (
        RUN_COMPONENT_TYPE,
        BatchLoc,
        CapturePointInfo,
        LineageIndex,
        RunInfo,
        TraceStep,
        open_index,
    )
    from ._linemarks import verify_line_marks
    from ._mine import ActorInstance, MineReport, mine
    from ._raw import jsonable, read_range, read_ranges
    from ._records import (
        RecordRef,
        format_record_id,
        parse_record_id,
        parse_record_ref,
        resolve_record,
        resolve_records,
    )
    from ._sets import equal_runs

_EXPORTS = {
    "ActorInstance": "._mine",
    "BatchLoc": "._index",
    "ByteLRU": "._cache",
    "CapturePointInfo": "._index",
    "Culprit": "._culprits",
    "DeferredError": "._deferred",
    "ForwardIndex": "._forward_store",
    "LineageIndex": "._index",
    "MineReport": "._mine",
    "RUN_COMPONENT_TYPE": "._index",
    "RecordRef": "._records",
    "RunInfo": "._index",
    "TraceStep": "._index",
    "equal_runs": "._sets",
    "event_data": "._culprits",
    "find_culprits": "._culprits",
    "format_record_id": "._records",
    "jsonable": "._raw",
    "mine": "._mine",
    "open_index": "._index",
    "parse_record_id": "._records",
    "parse_record_ref": "._records",
    "read_range": "._raw",
    "read_ranges": "._raw",
    "resolve_record": "._records",
    "resolve_records": "._records",
    "verify_forward": "._forward_store",
    "verify_line_marks": "._linemarks",
}

__all__ = [
    "RUN_COMPONENT_TYPE",
    "ActorInstance",
    "BatchLoc",
    "ByteLRU",
    "CapturePointInfo",
    "Culprit",
    "DeferredError",
    "ForwardIndex",
    "LineageIndex",
    "MineReport",
    "RecordRef",
    "RunInfo",
    "TraceStep",
    "equal_runs",
    "event_data",
    "find_culprits",
    "format_record_id",
    "jsonable",
    "mine",
    "open_index",
    "parse_record_id",
    "parse_record_ref",
    "read_range",
    "read_ranges",
    "resolve_record",
    "resolve_records",
    "verify_forward",
    "verify_line_marks",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
