"""Running a small selective replay in the driver, without a Spark job.

A selective replay of a few outputs reads a few hundred source records; a Spark job for it
costs ~0.5 s of scheduling. The segments are plain Python (`run_segment` over iterators), so
the driver runs them itself: sources are the traced records, shuffles are dictionaries, and
every capture point filters and translates exactly as in a Spark replay. Used only when every
source of the plan is a traced-record list and no shuffle needs its original partitioning
(`SparkCompiler.build` decides the same for Spark replays); otherwise the replay runs on Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any

from ._plan import (
    AggregateShuffle,
    JoinShuffle,
    ParallelSource,
    PlanNode,
    SortShuffle,
    TextSource,
    UnionStart,
)
from ._spec import (
    CombineSink,
    ForwardSink,
    ReplayInput,
    SegmentSpec,
    ShuffleInput,
    ShuffleSink,
    UnionInput,
)
from ._worker import run_segment

if TYPE_CHECKING:
    from ._replay import ReplayPlan

LOCAL_REPLAY_RECORDS = 200_000  # traced source records up to which a replay runs in-driver


class NotLocal(Exception):
    """This plan needs Spark (a full source, or partition-named records after a shuffle)."""


def can_run_locally(node: PlanNode, plan: ReplayPlan) -> bool:
    total = sum(len(recs) for parts in plan.sources.values() for recs in parts)
    if total > LOCAL_REPLAY_RECORDS:
        return False
    try:
        _check(node, plan)
    except NotLocal:
        return False
    return True


def _check(node: PlanNode, plan: ReplayPlan) -> None:
    start, ops = node.chain()
    s = start.segment_start()
    if isinstance(s, TextSource | ParallelSource) and s.cp.number not in plan.sources:
        raise NotLocal
    if start.kind in ("shuffle", "union") and any(op.group_cp is not None for op in ops):
        raise NotLocal  # group records are named by partition numbers a local run differs in
    for p in start.parents:
        _check(p, plan)


def run_local(node: PlanNode, sink: Any, plan: ReplayPlan, run_id: str, on_error: str) -> list:
    """What `node` would emit into `sink`, every partition, computed in this process."""
    return list(chain.from_iterable(_Local(plan, run_id, on_error).segment(node, sink)))


class _Local:
    def __init__(self, plan: ReplayPlan, run_id: str, on_error: str) -> None:
        self.plan = plan
        self.run_id = run_id
        self.on_error = on_error

    def segment(self, node: PlanNode, sink: Any) -> list[list[Any]]:
        start, ops = node.chain()
        in_spec, partitions = self.input(start)
        spec = SegmentSpec(
            run_id=self.run_id,
            journal=None,
            input=in_spec,
            ops=ops,
            sink=sink,
            on_error=self.on_error,
            replay=self.plan.spec,
        )
        return [list(run_segment(spec, split, iter(data))) for split, data in partitions]

    def input(self, start: PlanNode) -> tuple[Any, list[tuple[int, Iterable[Any]]]]:
        s = start.segment_start()
        if isinstance(s, TextSource | ParallelSource):
            parts = self.plan.sources[s.cp.number]
            return ReplayInput(s.cp), [(p, [(p, recs)]) for p, recs in enumerate(parts) if recs]
        if isinstance(s, UnionStart):
            segments: list[list[Any]] = []
            for parent in start.parents:
                segments.extend(self.segment(parent, ForwardSink()))
            return UnionInput(), list(enumerate(segments))
        # A shuffle into one partition (replayed records are recognized by key or parents).
        spec: ShuffleInput
        if isinstance(s, AggregateShuffle):
            sink = CombineSink(s.combine_cp, s.create_combiner, s.merge_value)
            shuffled = chain.from_iterable(self.segment(start.parents[0], sink))
            spec = ShuffleInput(s.cp, "aggregate", s.merge_combiners, capture=s.captures)
        elif isinstance(s, JoinShuffle):
            left, right = start.parents
            shuffled = chain(
                chain.from_iterable(self.segment(left, ShuffleSink(tag=1))),
                chain.from_iterable(self.segment(right, ShuffleSink(tag=2))),
            )
            spec = ShuffleInput(s.cp, s.kind, join_how=s.how)
        else:
            assert isinstance(s, SortShuffle)
            shuffled = chain.from_iterable(self.segment(start.parents[0], ShuffleSink()))
            spec = ShuffleInput(s.cp, "sort", sort_ascending=s.ascending, sort_keyfunc=s.keyfunc)
        return spec, [(0, list(shuffled))]
