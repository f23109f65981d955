"""The Spark compiler: a plan node's segment (and, recursively, the shuffles and unions it
reads) as ordinary PySpark RDDs whose per-partition function is `agent._worker.Segment`.

Shuffled inputs are built once per node and reused, so a second action reuses Spark's shuffle
files exactly as vanilla PySpark does (a replay builds its own: its sources and filters
differ).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from journals import WriterSpec

from ._interpreter import capture_python
from ._plan import (
    AggregateShuffle,
    FrameSource,
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
    FrameInput,
    OutputSink,
    ParallelInput,
    ReplayInput,
    SegmentSpec,
    ShuffleInput,
    ShuffleSink,
    TextInput,
    UnionInput,
)
from ._worker import Segment

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

    from ._replay import ReplayPlan

# (executor-side input spec, the PySpark RDD a segment reads it from)
SegmentInput = tuple[Any, "RDD[Any]"]


class SparkCompiler:
    """Builds the PySpark RDDs of one run's plans (capture on unless told otherwise)."""

    def __init__(
        self,
        sc: SparkContext,
        run_id: str,
        journal: WriterSpec,
        *,
        capture: bool = True,
        on_error: str = "fail",
    ) -> None:
        self.sc = sc
        self.run_id = run_id
        self.journal = journal
        self.capture = capture
        self.on_error = on_error
        self._inputs: WeakKeyDictionary[PlanNode, SegmentInput] = WeakKeyDictionary()

    def build(
        self,
        node: PlanNode,
        sink: Any,
        capture: bool = True,
        replay: ReplayPlan | None = None,
    ) -> RDD[Any]:
        """The PySpark RDD running `node`'s segment into `sink` (a replay: capture off).
        Whoever runs it must build its Java function inside `capture_python` too (pipelined
        PySpark RDDs build it only when an action or a shuffle needs it)."""
        with capture_python(self.sc):  # shuffles and samples built here run capture code
            return self._segment_rdd(node, sink, capture, replay)

    def _segment_rdd(
        self, node: PlanNode, sink: Any, capture: bool, replay: ReplayPlan | None
    ) -> RDD[Any]:
        start, ops = node.chain()
        # Records named by partition position need the original partitioning: group records,
        # and every record an exclusive replay drops (its ids are the original positions).
        by_partition = any(op.group_cp is not None for op in ops) or (
            replay is not None and bool(replay.spec.drop)
        )
        in_spec, rdd_in = self.segment_input(start, replay, by_partition)
        spec = SegmentSpec(
            run_id=self.run_id,
            journal=self.journal if capture and self.capture and replay is None else None,
            input=in_spec,
            ops=ops,
            sink=sink,
            on_error=self.on_error,
            replay=replay.spec if replay is not None else None,
        )
        return rdd_in.mapPartitionsWithIndex(Segment(spec))

    def segment_input(
        self, start: PlanNode, replay: ReplayPlan | None = None, by_partition: bool = True
    ) -> SegmentInput:
        """(input spec, PySpark RDD) that the segment-starting node `start` reads; built once
        per node (a replay builds its own)."""
        if replay is None:
            cached = self._inputs.get(start)
            if cached is not None:
                return cached
        s = start.segment_start()
        result: SegmentInput
        if isinstance(s, FrameSource):
            if replay is not None:  # refused before any replay is planned (`_replay`)
                raise RuntimeError("a replay cannot read a DataFrame's rows")
            result = (FrameInput(s.cp, s.fields), s.rdd)
        elif isinstance(s, TextSource | ParallelSource):
            if replay is not None and s.cp.number in replay.sources:
                # Only the partitions holding traced records run, each tagged with its number.
                parts = [(p, recs) for p, recs in enumerate(replay.sources[s.cp.number]) if recs]
                return ReplayInput(s.cp), self.sc.parallelize(parts, max(1, len(parts)))
            if isinstance(s, TextSource):
                rdd = self.sc.parallelize(range(len(s.splits)), len(s.splits))
                result = (TextInput(s.cp, list(s.splits)), rdd)
            else:
                result = (ParallelInput(s.cp), s.rdd)
        elif isinstance(s, UnionStart):
            branches = [self.build(p, ForwardSink(), replay=replay) for p in start.parents]
            rdd = branches[0] if len(branches) == 1 else self.sc.union(branches)
            if s.coalesce is not None:  # (value, id) pairs dealt as the values alone would be
                rdd = rdd.coalesce(*s.coalesce)
            if s.storage is not None and replay is None:  # a replay reads its own records
                rdd = rdd.persist(s.storage)
            result = (UnionInput(), rdd)
        else:
            result = self._shuffle_input(start, s, replay, by_partition)
        if replay is None:
            self._inputs[start] = result
        return result

    def unpersist(self, node: PlanNode, blocking: bool = False) -> None:
        """Drop what Spark keeps of the persisted node `node` (if it was computed)."""
        built = self._inputs.pop(node, None)
        if built is not None:
            built[1].unpersist(blocking)

    def _shuffle_input(
        self,
        node: PlanNode,
        s: AggregateShuffle | JoinShuffle | SortShuffle,
        replay: ReplayPlan | None,
        by_partition: bool = True,
    ) -> SegmentInput:
        # A selective replay recognizes shuffled records by key or parents, not by position,
        # so its small shuffle runs as one task (unless the caller says positions matter).
        n = node.num_partitions if replay is None or by_partition else 1
        spec: ShuffleInput
        if isinstance(s, AggregateShuffle):
            sink = CombineSink(s.combine_cp, s.create_combiner, s.merge_value, s.defer)
            mapped = self.build(node.parents[0], sink, replay=replay)
            shuffled = mapped.partitionBy(n, s.partition_func)
            spec = ShuffleInput(s.cp, "aggregate", s.merge_combiners, capture=s.captures)
        elif isinstance(s, JoinShuffle):
            left, right = node.parents
            tagged = self.build(left, ShuffleSink(tag=1), replay=replay).union(
                self.build(right, ShuffleSink(tag=2), replay=replay)
            )
            shuffled = tagged.partitionBy(n, s.partition_func)
            spec = ShuffleInput(s.cp, s.kind, join_how=s.how)
        else:
            parent = node.parents[0]
            bounds = self.range_bounds(parent, n, s.keyfunc, replay)
            ascending, keyfunc = s.ascending, s.keyfunc

            def range_partition(
                k: Any,
                bounds: list[Any] = bounds,
                n: int = n,
                ascending: bool = ascending,
                keyfunc: Callable[[Any], Any] = keyfunc,
            ) -> int:
                p = bisect.bisect_left(bounds, keyfunc(k))
                return p if ascending else n - 1 - p

            shuffled = self.build(parent, ShuffleSink(), replay=replay).partitionBy(
                n, range_partition
            )
            spec = ShuffleInput(s.cp, "sort", sort_ascending=ascending, sort_keyfunc=keyfunc)
        return spec, shuffled

    def partition_counts(self, node: PlanNode, replay: ReplayPlan | None = None) -> list[int]:
        """How many records each partition of `node` has (a job that captures nothing)."""
        counter = self.build(
            node, OutputSink(None, "count", capture_values=False), capture=False, replay=replay
        )
        with capture_python(self.sc):  # the job builds its Python function
            return [int(c) for c in counter.collect()]

    def range_bounds(
        self,
        parent: PlanNode,
        n: int,
        keyfunc: Callable[[Any], Any],
        replay: ReplayPlan | None = None,
    ) -> list[Any]:
        """sortByKey's range boundaries from a sample of keys (jobs that capture nothing)."""
        if n <= 1:
            return []
        size = sum(self.partition_counts(parent, replay))
        if size == 0:
            return []
        fraction = min(n * 20.0 / size, 1.0)
        records = self.build(
            parent, OutputSink(None, "collect", capture_values=False), capture=False, replay=replay
        )
        samples = sorted(
            records.mapPartitionsWithIndex(KeySampler(fraction)).collect(), key=keyfunc
        )
        if not samples:
            return []
        return [keyfunc(samples[int(len(samples) * (i + 1) / n)]) for i in range(n - 1)]


class KeySampler:
    """Per-partition Bernoulli sample of keys, for sortByKey's range bounds."""

    def __init__(self, fraction: float, seed: int = 1) -> None:
        self.fraction = fraction
        self.seed = seed

    def __call__(self, split: int, iterator: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
        rng = random.Random(self.seed * 1_000_003 + split)
        fraction = self.fraction
        for k, _ in iterator:
            if rng.random() < fraction:
                yield k
