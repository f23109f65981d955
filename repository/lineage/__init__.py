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
    from ._culprits import Culprit, find_culprits
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
    from ._mine import ActorInstance, MineReport, mine
    from ._raw import read_range, read_ranges
    from ._sets import equal_runs, sorted_unique, unique_ids

_EXPORTS = {
    "RUN_COMPONENT_TYPE": "._index",
    "ActorInstance": "._mine",
    "BatchLoc": "._index",
    "ByteLRU": "._cache",
    "CapturePointInfo": "._index",
    "Culprit": "._culprits",
    "DeferredError": "._deferred",
    "ForwardIndex": "._forward_store",
    "LineageIndex": "._index",
    "MineReport": "._mine",
    "RunInfo": "._index",
    "TraceStep": "._index",
    "find_culprits": "._culprits",
    "mine": "._mine",
    "open_index": "._index",
    "read_range": "._raw",
    "read_ranges": "._raw",
    "equal_runs": "._sets",
    "sorted_unique": "._sets",
    "unique_ids": "._sets",
    "verify_forward": "._forward_store",
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
    "RunInfo",
    "TraceStep",
    "equal_runs",
    "find_culprits",
    "mine",
    "open_index",
    "read_range",
    "read_ranges",
    "sorted_unique",
    "unique_ids",
    "verify_forward",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
