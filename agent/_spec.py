"""Plain descriptions of what one task segment does, shipped from the driver to the workers.

A *segment* is the code one Python worker runs for one partition between two process
boundaries: an input (a text split, a parallelized slice, a shuffle read, or the id-tagged
output of other segments for a union), a chain of narrow operations applied record by record,
and a sink (a map-side combiner or shuffle writer before a shuffle, an action's output, or an
id-tagging forwarder into a union). Lineage is captured at the segment's input and sink only,
Titian's capture points at stage boundaries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from journals import WriterSpec


@dataclass(frozen=True)
class CapturePoint:
    """A place where record ids are assigned: records there are (cp, partition, position)."""

    number: int
    component_id: str  # e.g. "reduceByKey#4"
    component_type: str  # e.g. "combiner", "reducer", "textFile", "collect"
    event_type: str  # RECEIVE, JOIN, FORK, SEND


@dataclass(frozen=True)
class NarrowOp:
    """One record-at-a-time transformation, pipelined inside a segment."""

    name: str  # map, flatMap, filter, mapValues, flatMapValues, keyBy, mapPartitions, ...
    func: Callable
    with_index: bool = False  # mapPartitionsWithIndex
    lineage: str = "record"  # mapPartitions only: "partition" (sound) or "record" (streaming f)
    group_cp: CapturePoint | None = None  # mapPartitions with lineage="partition"


@dataclass(frozen=True)
class TextInput:
    cp: CapturePoint
    splits: list[tuple[str, int, int]]  # (path, start, length) per partition


@dataclass(frozen=True)
class ParallelInput:
    cp: CapturePoint


@dataclass(frozen=True)
class FrameInput:
    """A captured DataFrame's rows, their lineage ids as their last field; handed on as Rows
    of `fields` (None: their first value)."""

    cp: CapturePoint
    fields: list[str] | None


@dataclass(frozen=True)
class UnionInput:
    """Records arrive as (value, record id) from parent segments; ids pass through."""


@dataclass(frozen=True)
class ShuffleInput:
    """The reduce side of a shuffle: merge what arrived, a capture point of its own."""

    cp: CapturePoint
    kind: str  # "aggregate" | "join" | "cogroup" | "sort"
    merge_combiners: Callable | None = None  # aggregate
    join_how: str = "inner"  # inner | left | right | full
    sort_ascending: bool = True
    sort_keyfunc: Callable | None = None
    capture: str | None = None  # aggregate: keep each record's "value" (k, v) or its "key"


@dataclass(frozen=True)
class OutputSink:
    """An action's output: collect / take / count / save (cp None: a job that captures
    nothing, e.g. sortByKey's sampling)."""

    cp: CapturePoint | None
    action: str  # "collect" | "take" | "count" | "save"
    limit: int | None = None  # take: at most this many from this partition
    capture_values: bool = True
    save_path: str | None = None


@dataclass(frozen=True)
class CombineSink:
    """Map side of an aggregation: combine per key and capture the combiner records.
    `defer`: (exact, group) of the deferred narrow policy (see `_deferred`), or None: eager."""

    cp: CapturePoint
    create_combiner: Callable
    merge_value: Callable
    defer: tuple[int, int] | None = None


@dataclass(frozen=True)
class ShuffleSink:
    """Map side of a shuffle without combining: ship each record with its input's id."""

    tag: int | None = None  # join/cogroup side (1 or 2); None: plain (sort)
    key_func: Callable | None = None  # sort: records are (k, v) already


@dataclass(frozen=True)
class ForwardSink:
    """Into a union: ship (value, id of the segment input it came from)."""


@dataclass(frozen=True)
class ReplayInput:
    """A selective replay's source: exactly the traced records, each with its original id,
    in their original partitions (one list per partition in the input RDD)."""

    cp: CapturePoint


@dataclass(frozen=True)
class ReplaySpec:
    """How a replay (capture off) filters records at each capture point.

    - `drop` (exclusive replay): original record ids removed at their capture point; the rest
      of the input is the original's, so positional ids there are the original ones.
    - `keep` (selective replay): per capture point, a table from how a record is recognized
      in the replay (its key, or its parents' original ids) to its original id; records not
      in the table are dropped (Newt's per-actor input filtering, which keeps non-monotonic
      operations exact). Output capture points map (parent id) -> (first child id, kept ids).
    """

    drop: dict[int, frozenset] = field(default_factory=dict)
    keep: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SegmentSpec:
    run_id: str
    journal: WriterSpec | None  # None: capture off (replay, sampling jobs)
    input: Any
    ops: tuple[NarrowOp, ...]
    sink: Any
    on_error: str = "fail"  # "fail" | "skip"
    replay: ReplaySpec | None = None
