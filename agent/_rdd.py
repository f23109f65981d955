"""Captured RDDs (driver side): PySpark-shaped transformations that keep record-level lineage.

A `CapturedRDD` is a node of a logical plan. Narrow operations are pipelined into the segment
of their source, shuffle or union; an action compiles the node's segment (and, recursively,
the shuffles it reads) into ordinary PySpark RDDs whose per-partition function is
`agent._worker.Segment`. Shuffled RDDs are built once per node and reused, so a second action
reuses Spark's shuffle files exactly as vanilla PySpark does.
"""

from __future__ import annotations

import bisect
import os
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pyspark.rdd import RDD, portable_hash
from pyspark.resultiterable import ResultIterable

from ._interpreter import capture_python
from ._spec import (
    CapturePoint,
    CombineSink,
    ForwardSink,
    NarrowOp,
    OutputSink,
    ParallelInput,
    ReplayInput,
    SegmentSpec,
    ShuffleInput,
    ShuffleSink,
    TextInput,
    UnionInput,
)
from ._worker import Segment, TakeOutput

if TYPE_CHECKING:
    from ._context import LineageContext
    from ._replay import ReplayPlan
    from ._trace import LineageRDD

SUPPORTED = (
    "map",
    "flatMap",
    "filter",
    "mapValues",
    "flatMapValues",
    "keyBy",
    "keys",
    "values",
    "mapPartitions",
    "mapPartitionsWithIndex",
    "reduceByKey",
    "groupByKey",
    "combineByKey",
    "aggregateByKey",
    "foldByKey",
    "join",
    "leftOuterJoin",
    "rightOuterJoin",
    "fullOuterJoin",
    "cogroup",
    "union",
    "distinct",
    "sortByKey",
    "sortBy",
    "collect",
    "take",
    "count",
    "first",
    "saveAsTextFile",
    "getNumPartitions",
    "lineage",
)


class UnsupportedOperation(NotImplementedError):
    """The capture agent does not cover this RDD operation: it fails loud instead of losing
    lineage."""


class CapturedRDD:
    """A lineage-capturing RDD. Transformations return CapturedRDDs; actions return what
    PySpark returns. After an action, `lineage()` gives the traced output records."""

    def __init__(
        self,
        lc: LineageContext,
        kind: str,
        parents: list[CapturedRDD],
        name: str,
        num_partitions: int,
        *,
        op: NarrowOp | None = None,
        start: Any = None,
    ) -> None:
        self.lc = lc
        self.kind = kind  # "source" | "narrow" | "shuffle" | "union"
        self.parents = parents
        self.name = name
        self._num_partitions = num_partitions
        self.op = op
        self.start = start  # what a segment-starting node reads (source/shuffle description)
        self._input_cache: tuple | None = None
        self.last_output: CapturePoint | None = None

    # -- plan --------------------------------------------------------------------------------

    def getNumPartitions(self) -> int:
        return self._num_partitions

    def _chain(self) -> tuple[CapturedRDD, list[NarrowOp]]:
        """The node that starts this node's segment, and the narrow ops from it to here."""
        ops: list[NarrowOp] = []
        node = self
        while node.kind == "narrow":
            ops.append(node.op)
            node = node.parents[0]
        ops.reverse()
        return node, ops

    def effective_cps(self) -> list[int]:
        """Capture points of the records flowing out of this node (their parents' level)."""
        start, ops = self._chain()
        groups = [op.group_cp.number for op in ops if op.group_cp is not None]
        if groups:
            return [groups[-1]]
        if start.kind == "union":
            out: list[int] = []
            for p in start.parents:
                out.extend(c for c in p.effective_cps() if c not in out)
            return out
        return [
            start.start["red_cp"].number if start.kind == "shuffle" else start.start["cp"].number
        ]

    def _segment_dependency(self) -> str:
        start, _ = self._chain()
        return "union" if start.kind == "union" else "narrow"

    def _input(
        self, replay: ReplayPlan | None = None, by_partition: bool = True
    ) -> tuple[Any, RDD]:
        """(input spec, PySpark RDD) that this segment-starting node reads; built once (a
        replay builds its own: its sources and filters differ)."""
        if replay is None and self._input_cache is not None:
            return self._input_cache
        lc, s = self.lc, self.start
        if self.kind == "source" and replay is not None and s["cp"].number in replay.sources:
            # Only the partitions holding traced records run, each tagged with its number.
            parts = [(p, recs) for p, recs in enumerate(replay.sources[s["cp"].number]) if recs]
            return ReplayInput(s["cp"]), lc.sc.parallelize(parts, max(1, len(parts)))
        if self.kind == "source" and s["type"] == "text":
            rdd = lc.sc.parallelize(range(len(s["splits"])), len(s["splits"]))
            result = (TextInput(s["cp"], s["splits"]), rdd)
        elif self.kind == "source":
            result = (ParallelInput(s["cp"]), s["rdd"])
        elif self.kind == "union":
            parts = [p._build(ForwardSink(), replay=replay) for p in self.parents]
            result = (UnionInput(), lc.sc.union(parts))
        else:
            result = self._shuffle_input(replay, by_partition)
        if replay is None:
            self._input_cache = result
        return result

    def _shuffle_input(
        self, replay: ReplayPlan | None, by_partition: bool = True
    ) -> tuple[ShuffleInput, RDD]:
        s = self.start
        # A selective replay recognizes shuffled records by key or parents, not by position,
        # so its small shuffle runs as one task (unless the caller says positions matter).
        n = self._num_partitions if replay is None or by_partition else 1
        red = s["red_cp"]
        if s["type"] == "aggregate":
            parent = self.parents[0]
            sink = CombineSink(s["map_cp"], s["create"], s["merge_value"])
            mapped = parent._build(sink, replay=replay)
            shuffled = mapped.partitionBy(n, s["partition_func"])
            spec = ShuffleInput(red, "aggregate", s["merge_combiners"], capture=s["capture"])
        elif s["type"] in ("join", "cogroup"):
            left, right = self.parents
            tagged = left._build(ShuffleSink(tag=1), replay=replay).union(
                right._build(ShuffleSink(tag=2), replay=replay)
            )
            shuffled = tagged.partitionBy(n, s["partition_func"])
            spec = ShuffleInput(red, s["type"], join_how=s.get("how", "inner"))
        else:  # sort
            parent = self.parents[0]
            bounds = self.lc.range_bounds(parent, n, s["keyfunc"], replay)
            ascending, keyfunc = s["ascending"], s["keyfunc"]

            def range_partition(k, bounds=bounds, n=n, ascending=ascending, keyfunc=keyfunc):
                p = bisect.bisect_left(bounds, keyfunc(k))
                return p if ascending else n - 1 - p

            shuffled = parent._build(ShuffleSink(), replay=replay).partitionBy(n, range_partition)
            spec = ShuffleInput(red, "sort", sort_ascending=ascending, sort_keyfunc=keyfunc)
        return spec, shuffled

    def _build(self, sink: Any, capture: bool = True, replay: ReplayPlan | None = None) -> RDD:
        """The PySpark RDD running this node's segment into `sink` (a replay: capture off).
        Whoever runs it must build its Java function inside `capture_python` too (pipelined
        PySpark RDDs build it only when an action or a shuffle needs it)."""
        with capture_python(self.lc.sc):  # shuffles and samples built here run capture code
            return self._segment_rdd(sink, capture, replay)

    def _segment_rdd(self, sink: Any, capture: bool, replay: ReplayPlan | None) -> RDD:
        start, ops = self._chain()
        # Records named by partition position need the original partitioning: group records,
        # and every record an exclusive replay drops (its ids are the original positions).
        by_partition = any(op.group_cp is not None for op in ops) or (
            replay is not None and bool(replay.spec.drop)
        )
        in_spec, rdd_in = start._input(replay, by_partition)
        lc = self.lc
        spec = SegmentSpec(
            run_id=lc.run_id,
            journal=lc.writer_spec if capture and lc.capture and replay is None else None,
            input=in_spec,
            ops=tuple(ops),
            sink=sink,
            on_error=lc.on_error,
            replay=replay.spec if replay is not None else None,
        )
        return rdd_in.mapPartitionsWithIndex(Segment(spec))

    # -- narrow transformations ----------------------------------------------------------------

    def _narrow(self, name: str, func: Callable, **kw) -> CapturedRDD:
        node_name = self.lc.node_name(name)
        group_cp = None
        if name == "mapPartitions" and kw.get("lineage") == "partition":
            group_cp = self.lc.new_cp(
                node_name,
                "mapPartitions",
                "JOIN",
                self.effective_cps(),
                self._segment_dependency(),
                self._num_partitions,
            )
        op = NarrowOp(name, func, group_cp=group_cp, **kw)
        return CapturedRDD(self.lc, "narrow", [self], node_name, self._num_partitions, op=op)

    def map(self, f: Callable, preservesPartitioning: bool = False) -> CapturedRDD:
        return self._narrow("map", f)

    def flatMap(self, f: Callable, preservesPartitioning: bool = False) -> CapturedRDD:
        return self._narrow("flatMap", f)

    def filter(self, f: Callable) -> CapturedRDD:
        return self._narrow("filter", f)

    def mapValues(self, f: Callable) -> CapturedRDD:
        return self._narrow("mapValues", f)

    def flatMapValues(self, f: Callable) -> CapturedRDD:
        return self._narrow("flatMapValues", f)

    def keyBy(self, f: Callable) -> CapturedRDD:
        return self._narrow("keyBy", f)

    def keys(self) -> CapturedRDD:
        return self._narrow("keys", _no_func)

    def values(self) -> CapturedRDD:
        return self._narrow("values", _no_func)

    def mapPartitions(
        self, f: Callable, preservesPartitioning: bool = False, lineage: str = "partition"
    ) -> CapturedRDD:
        """`lineage="partition"` (default, always sound): every output of the partition derives
        from every input that reached `f`. `lineage="record"`: `f` streams (consumes one input,
        emits its outputs, then pulls the next), so each output derives from the input last
        pulled -- exact for generator-style functions, wrong for ones that buffer."""
        return self._narrow("mapPartitions", f, lineage=_check_lineage(lineage))

    def mapPartitionsWithIndex(
        self, f: Callable, preservesPartitioning: bool = False, lineage: str = "partition"
    ) -> CapturedRDD:
        return self._narrow("mapPartitions", f, with_index=True, lineage=_check_lineage(lineage))

    # -- shuffles ----------------------------------------------------------------------------

    def _default_partitions(self, numPartitions: int | None) -> int:
        if numPartitions is not None:
            if numPartitions <= 0:
                raise ValueError(f"numPartitions must be positive, got {numPartitions}")
            return numPartitions
        sc = self.lc.sc
        if sc._conf.contains("spark.default.parallelism"):
            return sc.defaultParallelism
        return self._num_partitions

    def combineByKey(
        self,
        createCombiner: Callable,
        mergeValue: Callable,
        mergeCombiners: Callable,
        numPartitions: int | None = None,
        partitionFunc: Callable = portable_hash,
        _name: str = "combineByKey",
        _capture: str = "value",
    ) -> CapturedRDD:
        lc = self.lc
        n = self._default_partitions(numPartitions)
        name = lc.node_name(_name)
        map_cp = lc.new_cp(
            f"{name}.combine",
            "combiner",
            "JOIN",
            self.effective_cps(),
            self._segment_dependency(),
            self._num_partitions,
        )
        red_cp = lc.new_cp(
            name, "reducer", "JOIN", [map_cp.number], "shuffle", n, captures=_capture
        )
        start = {
            "type": "aggregate",
            "map_cp": map_cp,
            "red_cp": red_cp,
            "create": createCombiner,
            "merge_value": mergeValue,
            "merge_combiners": mergeCombiners,
            "partition_func": partitionFunc,
            "capture": _capture,
        }
        return CapturedRDD(lc, "shuffle", [self], name, n, start=start)

    def reduceByKey(
        self,
        func: Callable,
        numPartitions: int | None = None,
        partitionFunc: Callable = portable_hash,
    ) -> CapturedRDD:
        return self.combineByKey(
            _identity, func, func, numPartitions, partitionFunc, _name="reduceByKey"
        )

    def foldByKey(
        self,
        zeroValue: Any,
        func: Callable,
        numPartitions: int | None = None,
        partitionFunc: Callable = portable_hash,
    ) -> CapturedRDD:
        import copy

        def create(v, zero=zeroValue, func=func):
            return func(copy.deepcopy(zero), v)

        return self.combineByKey(
            create, func, func, numPartitions, partitionFunc, _name="foldByKey"
        )

    def aggregateByKey(
        self,
        zeroValue: Any,
        seqFunc: Callable,
        combFunc: Callable,
        numPartitions: int | None = None,
        partitionFunc: Callable = portable_hash,
    ) -> CapturedRDD:
        import copy

        def create(v, zero=zeroValue, seq=seqFunc):
            return seq(copy.deepcopy(zero), v)

        return self.combineByKey(
            create, seqFunc, combFunc, numPartitions, partitionFunc, _name="aggregateByKey"
        )

    def groupByKey(
        self, numPartitions: int | None = None, partitionFunc: Callable = portable_hash
    ) -> CapturedRDD:
        # Grouped values can be large: keep only each group's key (enough to replay it).
        grouped = self.combineByKey(
            _as_list,
            _append,
            _extend,
            numPartitions,
            partitionFunc,
            _name="groupByKey",
            _capture="key",
        )
        return grouped.mapValues(ResultIterable)

    def distinct(self, numPartitions: int | None = None) -> CapturedRDD:
        return (
            self.map(_with_none)
            .combineByKey(_identity, _first, _first, numPartitions, _name="distinct")
            .map(_key)
        )

    def _join(self, other: CapturedRDD, how: str, kind: str, numPartitions: int | None):
        if not isinstance(other, CapturedRDD) or other.lc is not self.lc:
            raise UnsupportedOperation(
                f"{kind}: the other RDD must come from the same LineageContext"
            )
        lc = self.lc
        total = self._num_partitions + other._num_partitions
        n = (
            numPartitions
            if numPartitions is not None
            else (
                lc.sc.defaultParallelism
                if lc.sc._conf.contains("spark.default.parallelism")
                else total
            )
        )
        name = lc.node_name(kind if how == "inner" or kind == "cogroup" else f"{how}OuterJoin")
        parents_cps = self.effective_cps() + [
            c for c in other.effective_cps() if c not in self.effective_cps()
        ]
        red_cp = lc.new_cp(name, kind, "JOIN", parents_cps, "shuffle", n)
        start = {"type": kind, "red_cp": red_cp, "how": how, "partition_func": portable_hash}
        return CapturedRDD(lc, "shuffle", [self, other], name, n, start=start)

    def join(self, other: CapturedRDD, numPartitions: int | None = None) -> CapturedRDD:
        return self._join(other, "inner", "join", numPartitions)

    def leftOuterJoin(self, other: CapturedRDD, numPartitions: int | None = None) -> CapturedRDD:
        return self._join(other, "left", "join", numPartitions)

    def rightOuterJoin(self, other: CapturedRDD, numPartitions: int | None = None) -> CapturedRDD:
        return self._join(other, "right", "join", numPartitions)

    def fullOuterJoin(self, other: CapturedRDD, numPartitions: int | None = None) -> CapturedRDD:
        return self._join(other, "full", "join", numPartitions)

    def cogroup(self, other: CapturedRDD, numPartitions: int | None = None) -> CapturedRDD:
        return self._join(other, "inner", "cogroup", numPartitions)

    def union(self, other: CapturedRDD) -> CapturedRDD:
        if not isinstance(other, CapturedRDD) or other.lc is not self.lc:
            raise UnsupportedOperation(
                "union: the other RDD must come from the same LineageContext"
            )
        n = self._num_partitions + other._num_partitions
        return CapturedRDD(self.lc, "union", [self, other], self.lc.node_name("union"), n)

    def sortByKey(
        self,
        ascending: bool = True,
        numPartitions: int | None = None,
        keyfunc: Callable = lambda x: x,
    ) -> CapturedRDD:
        lc = self.lc
        n = self._default_partitions(numPartitions)
        name = lc.node_name("sortByKey")
        red_cp = lc.new_cp(name, "sort", "FORK", self.effective_cps(), "shuffle", n)
        start = {"type": "sort", "red_cp": red_cp, "ascending": ascending, "keyfunc": keyfunc}
        return CapturedRDD(lc, "shuffle", [self], name, n, start=start)

    def sortBy(
        self, keyfunc: Callable, ascending: bool = True, numPartitions: int | None = None
    ) -> CapturedRDD:
        return self.keyBy(keyfunc).sortByKey(ascending, numPartitions).values()

    # -- actions -----------------------------------------------------------------------------

    def _run_output(self, action: str, limit: int | None = None, partitions=None, **kw):
        cp = self.lc.output_cp(self, action)
        sink = OutputSink(cp, action, limit=limit, **kw)
        rdd = self._build(sink)
        return cp, rdd

    def collect(self) -> list:
        cp, rdd = self._run_output("collect")
        with self.lc.action(self, cp):
            return rdd.collect()

    def count(self) -> int:
        cp, rdd = self._run_output("count", capture_values=False)
        with self.lc.action(self, cp):
            return int(sum(rdd.collect()))

    def take(self, num: int) -> list:
        """The first `num` records. Partitions are scanned in order as PySpark's take does,
        but each partition scanned is read whole, so lineage upstream is complete."""
        if num <= 0:
            return []
        cp = self.lc.output_cp(self, "take")
        items: list = []
        total = self._num_partitions
        parts_scanned = 0
        with self.lc.action(self, cp):
            while len(items) < num and parts_scanned < total:
                num_parts = 1
                if parts_scanned > 0:
                    num_parts = (
                        parts_scanned * 4
                        if not items
                        else int(1.5 * num * parts_scanned / len(items)) - parts_scanned
                    )
                    num_parts = min(max(num_parts, 1), parts_scanned * 4)
                left = num - len(items)
                rdd = self._build(OutputSink(cp, "take", limit=left))
                parts = list(range(parts_scanned, min(parts_scanned + num_parts, total)))
                got = self.lc.sc.runJob(rdd, _as_list_of_partition, parts)
                self._keep_taken(cp, num, items, got)
                parts_scanned += num_parts
        return items

    def _keep_taken(self, cp, num: int, items: list, got: list) -> None:
        """Add a take round's records to `items`, up to `num`. Each partition's records end
        with its TakeOutput (when capturing): the lineage journaled for the partition is
        exactly its records that take returns, not every record it gave."""
        start = 0
        for i, x in enumerate(got):
            if isinstance(x, TakeOutput):
                k = max(0, min(i - start, num - len(items)))
                items.extend(got[start : start + k])
                batch = x.batch(cp, self.lc.run_id, k)
                if batch is not None:
                    self.lc.repo.register_events(batch)
                start = i + 1
        if start < len(got):  # not capturing: no markers
            items.extend(got[start : start + max(0, num - len(items))])

    def first(self) -> Any:
        rs = self.take(1)
        if rs:
            return rs[0]
        raise ValueError("RDD is empty")

    def saveAsTextFile(self, path: str, compressionCodecClass: str | None = None) -> None:
        if compressionCodecClass is not None:
            raise UnsupportedOperation(
                "saveAsTextFile with compression: compressed output has no byte offsets to "
                "locate records by"
            )
        local = path[len("file://") :] if path.startswith("file://") else path
        if "://" in local:
            raise UnsupportedOperation(
                f"saveAsTextFile({path!r}): only local or shared-filesystem paths are captured"
            )
        cp, rdd = self._run_output("save", save_path=os.path.abspath(local), capture_values=False)
        rdd._bypass_serializer = True
        jvm = self.lc.sc._jvm
        with self.lc.action(self, cp):
            rdd._jrdd.map(jvm.BytesToString()).saveAsTextFile(path)

    # -- tracing -----------------------------------------------------------------------------

    def lineage(self) -> LineageRDD:
        """The output records of this RDD's last action, as a traceable `LineageRDD`."""
        if not self.lc.capture:
            raise ValueError("this LineageContext runs with capture=False: nothing was recorded")
        if self.last_output is None:
            raise ValueError(
                f"{self.name} has not been computed yet: run an action (collect, count, take, "
                "first, saveAsTextFile) before asking for its lineage"
            )
        return self.lc.lineage_of(self.last_output)

    def __getattr__(self, name: str):
        if not name.startswith("_") and hasattr(RDD, name):
            raise UnsupportedOperation(
                f"the lineage capture agent does not cover RDD.{name}(); supported: "
                + ", ".join(SUPPORTED)
            )
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"CapturedRDD({self.name}, partitions={self._num_partitions})"


def _check_lineage(lineage: str) -> str:
    if lineage not in ("partition", "record"):
        raise ValueError(f'lineage must be "partition" or "record", got {lineage!r}')
    return lineage


def _no_func(x):  # placeholder: keys/values need no user function
    return x


def _identity(x):
    return x


def _as_list(x):
    return [x]


def _append(xs, x):
    xs.append(x)
    return xs


def _extend(xs, ys):
    xs.extend(ys)
    return xs


def _with_none(x):
    return (x, None)


def _first(x, _):
    return x


def _key(kv):
    return kv[0]


def _as_list_of_partition(iterator: Iterable) -> list:
    return list(iterator)


class KeySampler:
    """Per-partition Bernoulli sample of keys, for sortByKey's range bounds."""

    def __init__(self, fraction: float, seed: int = 1) -> None:
        self.fraction = fraction
        self.seed = seed

    def __call__(self, split: int, iterator):
        rng = random.Random(self.seed * 1_000_003 + split)
        fraction = self.fraction
        for k, _ in iterator:
            if rng.random() < fraction:
                yield k
