"""The typed capture plan every front-end builds: nodes, and where each segment starts.

A plan is a DAG of frozen `PlanNode`s. A *segment* is what one Python worker runs for one
partition between two process boundaries (see `_spec`): it starts at a source, a shuffle's
reduce side or a union, and goes on through the narrow nodes above it. `PlanNode.chain()`
gives a node's segment start and its narrow operations; `PlanNode.capture_points()` the
capture points its records are named at. The Spark compiler (`_compile`), the in-driver replay
(`_local`) and replay planning (`_replay`) walk plans only through these.

Nodes are compared by identity (two equal-looking nodes are two plans), so compilers can
cache what they built per node.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal

from ._spec import CapturePoint, NarrowOp

NodeKind = Literal["source", "narrow", "shuffle", "union"]
# How a capture point's records depend on their parents' (the run descriptor's "dependency").
Dependency = Literal["source", "narrow", "shuffle", "union"]
JoinHow = Literal["inner", "left", "right", "full"]
Captures = Literal["value", "key"]


@dataclass(frozen=True)
class TextSource:
    """Lines of text files, one partition per split (path, start byte, length)."""

    cp: CapturePoint
    splits: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class ParallelSource:
    """A driver collection, already parallelized into `rdd` (a PySpark RDD)."""

    cp: CapturePoint
    rdd: Any


@dataclass(frozen=True)
class FrameSource:
    """A captured DataFrame's rows (`df.rdd`): `rdd` (a PySpark RDD) yields Rows whose last
    field holds the row's DataFrame lineage (one id, None, or a list); each row becomes a
    record whose parents are its ids, handed on as a Row of `fields` (None: its first value).
    `around()`: a context manager the DataFrame agent puts around every action that reads
    these rows (its UDF failures blamed)."""

    cp: CapturePoint
    rdd: Any
    around: Callable[[], AbstractContextManager[Any]]
    fields: list[str] | None


@dataclass(frozen=True)
class AggregateShuffle:
    """A keyed aggregation: combined map-side at `combine_cp`, merged reduce-side at `cp`."""

    cp: CapturePoint
    combine_cp: CapturePoint
    create_combiner: Callable[[Any], Any]
    merge_value: Callable[[Any, Any], Any]
    merge_combiners: Callable[[Any, Any], Any]
    partition_func: Callable[[Any], int]
    captures: Captures  # what the reduce side keeps of each record
    defer: tuple[int, int] | None = None  # deferred narrow lineage: (exact, group); see _deferred


@dataclass(frozen=True)
class JoinShuffle:
    """A join (`how`) or cogroup of the node's two parents, by key, at `cp`."""

    cp: CapturePoint
    kind: Literal["join", "cogroup"]
    how: JoinHow
    partition_func: Callable[[Any], int]


@dataclass(frozen=True)
class SortShuffle:
    """A range-partitioned sort by key at `cp`."""

    cp: CapturePoint
    ascending: bool
    keyfunc: Callable[[Any], Any]


@dataclass(frozen=True)
class UnionStart:
    """The node's parents' records, concatenated; ids pass through (no capture point).
    With one parent: `storage`, a persisted RDD (`cache()`) whose records, with their ids,
    Spark keeps at this storage level; `coalesce`, (partitions, shuffle): the records, with
    their ids, dealt into other partitions as PySpark's `coalesce` / `repartition` deals
    them."""

    storage: Any = None
    coalesce: tuple[int, bool] | None = None


SourceStart = TextSource | ParallelSource | FrameSource
ShuffleStart = AggregateShuffle | JoinShuffle | SortShuffle
SegmentStart = SourceStart | ShuffleStart | UnionStart


@dataclass(frozen=True, eq=False)
class PlanNode:
    """One operation of a captured pipeline.

    `kind` "narrow" nodes carry their `op` and have one parent; the others start a segment
    and carry their `start` (a `SourceStart` with no parents, a `ShuffleStart` over one or
    two parents, a `UnionStart` over two or more).
    """

    kind: NodeKind
    name: str  # the node name, e.g. "reduceByKey#4"
    num_partitions: int
    parents: tuple[PlanNode, ...] = ()
    op: NarrowOp | None = None
    start: SegmentStart | None = None

    def __post_init__(self) -> None:
        if self.kind == "narrow":
            if self.op is None or len(self.parents) != 1:
                raise ValueError(f"narrow node {self.name} needs an op and one parent")
        elif self.start is None:
            raise ValueError(f"{self.kind} node {self.name} needs its segment start")

    @classmethod
    def narrow(cls, parent: PlanNode, name: str, op: NarrowOp) -> PlanNode:
        """A record-at-a-time operation pipelined into `parent`'s segment."""
        return cls("narrow", name, parent.num_partitions, (parent,), op=op)

    def segment_start(self) -> SegmentStart:
        """What this segment-starting node reads (ValueError on a narrow node)."""
        if self.start is None:
            raise ValueError(f"{self.name} is a narrow node: it starts no segment")
        return self.start

    def chain(self) -> tuple[PlanNode, tuple[NarrowOp, ...]]:
        """The node that starts this node's segment, and the narrow ops from it to here."""
        ops: list[NarrowOp] = []
        node = self
        while node.op is not None:
            ops.append(node.op)
            node = node.parents[0]
        ops.reverse()
        return node, tuple(ops)

    def capture_points(self) -> list[int]:
        """Capture points of the records flowing out of this node (their parents' level, for
        whatever consumes them): the last partition-lineage `mapPartitions` of the segment,
        else its start's capture point (a union: its parents')."""
        start, ops = self.chain()
        groups = [op.group_cp.number for op in ops if op.group_cp is not None]
        if groups:
            return [groups[-1]]
        s = start.segment_start()
        if isinstance(s, UnionStart):
            out: list[int] = []
            for p in start.parents:
                out.extend(c for c in p.capture_points() if c not in out)
            return out
        return [s.cp.number]

    def frame_sources(self) -> list[FrameSource]:
        """The DataFrame rows this node's records come from, through every node upstream."""
        out: list[FrameSource] = []
        todo, seen = [self], set()
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node.start, FrameSource):
                out.append(node.start)
            todo.extend(node.parents)
        return out

    def segment_dependency(self) -> Literal["narrow", "union"]:
        """How records leaving this node's segment depend on its start's records."""
        start, _ = self.chain()
        return "union" if start.kind == "union" else "narrow"

    def __repr__(self) -> str:
        return f"PlanNode({self.kind} {self.name}, partitions={self.num_partitions})"
