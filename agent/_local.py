"""Running a small selective replay in the driver, without a Spark job.

A selective replay of a few outputs reads a few hundred source records; a Spark job for it
costs ~0.5 s of scheduling. The segments are plain Python (`run_segment` over iterators), so
the driver runs them itself: sources are the traced records, shuffles are dictionaries, and
every capture point filters and translates exactly as in a Spark replay. Used only when every
source of the plan is a traced-record list and no shuffle needs its original partitioning
(`CapturedRDD._build` decides the same for Spark replays); otherwise the replay runs on Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any

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
    from ._rdd import CapturedRDD
    from ._replay import ReplayPlan

LOCAL_REPLAY_RECORDS = 200_000  # traced source records up to which a replay runs in-driver


class NotLocal(Exception):
    """This plan needs Spark (a full source, or partition-named records after a shuffle)."""


def can_run_locally(node: CapturedRDD, plan: ReplayPlan) -> bool:
    total = sum(len(recs) for parts in plan.sources.values() for recs in parts)
    if total > LOCAL_REPLAY_RECORDS:
        return False
    try:
        _check(node, plan)
    except NotLocal:
        return False
    return True


def _check(node: CapturedRDD, plan: ReplayPlan) -> None:
    start, ops = node._chain()
    if start.kind == "source" and start.start["cp"].number not in plan.sources:
        raise NotLocal
    if start.kind in ("shuffle", "union") and any(op.group_cp is not None for op in ops):
        raise NotLocal  # group records are named by partition numbers a local run differs in
    for p in start.parents:
        _check(p, plan)


def run_local(node: CapturedRDD, sink: Any, plan: ReplayPlan) -> list:
    """What `node` would emit into `sink`, every partition, computed in this process."""
    return list(chain.from_iterable(_segment(node, sink, plan)))


def _segment(node: CapturedRDD, sink: Any, plan: ReplayPlan) -> list[list]:
    start, ops = node._chain()
    in_spec, partitions = _input(start, plan)
    spec = SegmentSpec(
        run_id=node.lc.run_id,
        journal=None,
        input=in_spec,
        ops=tuple(ops),
        sink=sink,
        on_error=node.lc.on_error,
        replay=plan.spec,
    )
    return [list(run_segment(spec, split, iter(data))) for split, data in partitions]


def _input(start: CapturedRDD, plan: ReplayPlan) -> tuple[Any, list[tuple[int, Iterable]]]:
    s = start.start
    if start.kind == "source":
        parts = plan.sources[s["cp"].number]
        return ReplayInput(s["cp"]), [(p, [(p, recs)]) for p, recs in enumerate(parts) if recs]
    if start.kind == "union":
        parts = []
        for parent in start.parents:
            parts.extend(_segment(parent, ForwardSink(), plan))
        return UnionInput(), list(enumerate(parts))
    # A shuffle into one partition (replayed records are recognized by key or parents).
    if s["type"] == "aggregate":
        sink = CombineSink(s["map_cp"], s["create"], s["merge_value"])
        shuffled = chain.from_iterable(_segment(start.parents[0], sink, plan))
        spec = ShuffleInput(s["red_cp"], "aggregate", s["merge_combiners"], capture=s["capture"])
    elif s["type"] in ("join", "cogroup"):
        left, right = start.parents
        shuffled = chain(
            chain.from_iterable(_segment(left, ShuffleSink(tag=1), plan)),
            chain.from_iterable(_segment(right, ShuffleSink(tag=2), plan)),
        )
        spec = ShuffleInput(s["red_cp"], s["type"], join_how=s.get("how", "inner"))
    else:
        shuffled = chain.from_iterable(_segment(start.parents[0], ShuffleSink(), plan))
        spec = ShuffleInput(
            s["red_cp"], "sort", sort_ascending=s["ascending"], sort_keyfunc=s["keyfunc"]
        )
    return spec, [(0, list(shuffled))]
