"""Lineage over the stored events: the per-run index and its hops, raw input records, crash
culprits and anomaly mining. Above the storage core: it reads the store and the search index,
and nothing in the core imports it."""

from ._cache import ByteLRU
from ._culprits import Culprit, find_culprits
from ._deferred import DeferredError
from ._forward_store import ForwardIndex, verify_forward
from ._index import RUN_COMPONENT_TYPE, BatchLoc, CapturePointInfo, LineageIndex, RunInfo
from ._mine import ActorInstance, MineReport, mine
from ._raw import read_range, read_ranges
from ._sets import unique_ids

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
    "find_culprits",
    "mine",
    "read_range",
    "read_ranges",
    "unique_ids",
    "verify_forward",
]
