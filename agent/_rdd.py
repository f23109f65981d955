"""Captured RDDs (driver side): PySpark-shaped transformations that keep record-level lineage.

A `CapturedRDD` wraps a node of the typed capture plan (`_plan.PlanNode`). Narrow operations
are pipelined into the segment of their source, shuffle or union; an action compiles the
node's segment (and, recursively, the shuffles it reads) into ordinary PySpark RDDs through
the run's `SparkCompiler`, and registers its output with the run's `Planner`.
"""

from __future__ import annotations

import copy
import functools
import operator
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.rdd import RDD, portable_hash
from pyspark.resultiterable import ResultIterable

from ._deferred import defer_plan
from ._plan import (
    AggregateShuffle,
    Captures,
    JoinHow,
    JoinShuffle,
    PlanNode,
    SortShuffle,
    UnionStart,
)
from ._spec import CapturePoint, NarrowOp, OutputSink
from ._worker import TakeOutput

if TYPE_CHECKING:
    from ._compile import SparkCompiler
    from ._context import LineageContext
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
    "groupBy",
    "coalesce",
    "repartition",
    "zipWithIndex",
    "cache",
    "persist",
    "unpersist",
    "sample",
    "collect",
    "take",
    "count",
    "first",
    "reduce",
    "fold",
    "aggregate",
    "sum",
    "max",
    "min",
    "stats",
    "mean",
    "countByValue",
    "countByKey",
    "toLocalIterator",
    "foreach",
    "foreachPartition",
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

    def __init__(self, lc: LineageContext, node: PlanNode, compiler: SparkCompiler) -> None:
        self.lc = lc
        self.node = node  # this RDD's place in the typed capture plan
        self._compiler = compiler
        self.last_output: CapturePoint | None = None
        self._persisted: PlanNode | None = None  # the node before persist()

    @property
    def is_cached(self) -> bool:
        return self._persisted is not None

    @property
    def name(self) -> str:
        return self.node.name

    def getNumPartitions(self) -> int:
        return self.node.num_partitions

    def _derive(self, node: PlanNode) -> CapturedRDD:
        return CapturedRDD(self.lc, node, self._compiler)

    # -- narrow transformations ----------------------------------------------------------------

    def _narrow(self, name: str, func: Callable, **kw: Any) -> CapturedRDD:
        planner = self.lc.planner
        node_name = planner.node_name(name)
        group_cp = None
        if name == "mapPartitions" and kw.get("lineage") == "partition":
            group_cp = planner.capture_point(
                node_name,
                "mapPartitions",
                "JOIN",
                self.node.capture_points(),
                self.node.segment_dependency(),
                self.node.num_partitions,
            )
        op = NarrowOp(name, func, group_cp=group_cp, **kw)
        return self._derive(PlanNode.narrow(self.node, node_name, op))

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
        return self.node.num_partitions

    def combineByKey(
        self,
        createCombiner: Callable,
        mergeValue: Callable,
        mergeCombiners: Callable,
        numPartitions: int | None = None,
        partitionFunc: Callable = portable_hash,
        _name: str = "combineByKey",
        _capture: Captures = "value",
    ) -> CapturedRDD:
        planner = self.lc.planner
        n = self._default_partitions(numPartitions)
        name = planner.node_name(_name)
        deferred = defer_plan(self.node, self.lc.on_error) if self.lc.narrow == "deferred" else None
        combine_cp = planner.capture_point(
            f"{name}.combine",
            "combiner",
            "JOIN",
            self.node.capture_points(),
            self.node.segment_dependency(),
            self.node.num_partitions,
            **(deferred[1] if deferred else {}),
        )
        red_cp = planner.capture_point(
            name, "reducer", "JOIN", [combine_cp.number], "shuffle", n, captures=_capture
        )
        start = AggregateShuffle(
            red_cp,
            combine_cp,
            createCombiner,
            mergeValue,
            mergeCombiners,
            partitionFunc,
            _capture,
            deferred[0] if deferred else None,
        )
        return self._derive(PlanNode("shuffle", name, n, (self.node,), start=start))

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

    def _join(
        self, other: CapturedRDD, how: JoinHow, kind: str, numPartitions: int | None
    ) -> CapturedRDD:
        if not isinstance(other, CapturedRDD) or other.lc is not self.lc:
            raise UnsupportedOperation(
                f"{kind}: the other RDD must come from the same LineageContext"
            )
        planner = self.lc.planner
        sc = self.lc.sc
        total = self.node.num_partitions + other.node.num_partitions
        n = (
            numPartitions
            if numPartitions is not None
            else (
                sc.defaultParallelism if sc._conf.contains("spark.default.parallelism") else total
            )
        )
        name = planner.node_name(kind if how == "inner" or kind == "cogroup" else f"{how}OuterJoin")
        mine = self.node.capture_points()
        parents_cps = mine + [c for c in other.node.capture_points() if c not in mine]
        red_cp = planner.capture_point(name, kind, "JOIN", parents_cps, "shuffle", n)
        start = JoinShuffle(red_cp, "cogroup" if kind == "cogroup" else "join", how, portable_hash)
        return self._derive(PlanNode("shuffle", name, n, (self.node, other.node), start=start))

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
        n = self.node.num_partitions + other.node.num_partitions
        name = self.lc.planner.node_name("union")
        return self._derive(PlanNode("union", name, n, (self.node, other.node), start=UnionStart()))

    def coalesce(self, numPartitions: int, shuffle: bool = False) -> CapturedRDD:
        """PySpark's: the records dealt into `numPartitions` partitions (merged, or shuffled
        in batches when `shuffle`), each keeping its id (and so its lineage)."""
        if numPartitions <= 0:
            raise ValueError(f"Number of partitions must be positive, got {numPartitions}")
        name = self.lc.planner.node_name("repartition" if shuffle else "coalesce")
        start = UnionStart(coalesce=(numPartitions, shuffle))
        return self._derive(PlanNode("union", name, numPartitions, (self.node,), start=start))

    def repartition(self, numPartitions: int) -> CapturedRDD:
        return self.coalesce(numPartitions, shuffle=True)

    def zipWithIndex(self) -> CapturedRDD:
        """PySpark's: (record, its index in the RDD's order); a job that captures nothing
        counts each partition first. Each pair derives from its record."""
        starts = [0]
        if self.node.num_partitions > 1:
            for c in self._compiler.partition_counts(self.node)[:-1]:
                starts.append(starts[-1] + c)
        return self.mapPartitionsWithIndex(partial(_indexed, starts), lineage="record")

    def persist(self, storageLevel: Any = None) -> CapturedRDD:
        """PySpark's (this RDD, kept at `storageLevel`, MEMORY_ONLY by default): Spark keeps
        its records with their ids, so later actions read them, not their sources, and
        their lineage is the first action's."""
        from pyspark import StorageLevel

        level = storageLevel if storageLevel is not None else StorageLevel.MEMORY_ONLY
        if self._persisted is not None:
            start = self.node.segment_start()
            if isinstance(start, UnionStart) and start.storage == level:
                return self
            raise ValueError("cannot change the storage level of an RDD already persisted")
        name = self.lc.planner.node_name("persist")
        n = self.node.num_partitions
        self._persisted = self.node
        self.node = PlanNode("union", name, n, (self.node,), start=UnionStart(storage=level))
        return self

    def cache(self) -> CapturedRDD:
        return self.persist()

    def unpersist(self, blocking: bool = False) -> CapturedRDD:
        if self._persisted is not None:
            self._compiler.unpersist(self.node, blocking)
            self.node, self._persisted = self._persisted, None
        return self

    def sortByKey(
        self,
        ascending: bool = True,
        numPartitions: int | None = None,
        keyfunc: Callable = lambda x: x,
    ) -> CapturedRDD:
        planner = self.lc.planner
        n = self._default_partitions(numPartitions)
        name = planner.node_name("sortByKey")
        red_cp = planner.capture_point(
            name, "sort", "FORK", self.node.capture_points(), "shuffle", n
        )
        start = SortShuffle(red_cp, ascending, keyfunc)
        return self._derive(PlanNode("shuffle", name, n, (self.node,), start=start))

    def sortBy(
        self, keyfunc: Callable, ascending: bool = True, numPartitions: int | None = None
    ) -> CapturedRDD:
        return self.keyBy(keyfunc).sortByKey(ascending, numPartitions).values()

    def groupBy(
        self, f: Callable, numPartitions: int | None = None, partitionFunc: Callable = portable_hash
    ) -> CapturedRDD:
        """PySpark's: `keyBy(f).groupByKey(...)`."""
        return self.keyBy(f).groupByKey(numPartitions, partitionFunc)

    def sample(
        self, withReplacement: bool, fraction: float, seed: int | None = None
    ) -> CapturedRDD:
        """PySpark's sampler over each partition (the same rows for the same seed); each
        sampled record derives from itself (the sampler streams)."""
        from pyspark.rddsampler import RDDSampler

        if not fraction >= 0.0:
            raise ValueError(f"Fraction must be nonnegative, got {fraction}")
        sampler = RDDSampler(withReplacement, fraction, seed)
        return self.mapPartitionsWithIndex(sampler.func, lineage="record")

    # -- actions -----------------------------------------------------------------------------

    def _run_output(
        self, action: str, limit: int | None = None, **kw: Any
    ) -> tuple[CapturePoint, RDD[Any]]:
        where = {"path": kw["save_path"]} if "save_path" in kw else {}
        cp = self.lc.planner.output_point(self.node, action, **where)
        sink = OutputSink(cp, action, limit=limit, **kw)
        return cp, self._compiler.build(self.node, sink)

    def collect(self) -> list:
        cp, rdd = self._run_output("collect")
        with self.lc.planner.action(cp, self.node):
            out = rdd.collect()
        self.last_output = cp
        return out

    def count(self) -> int:
        cp, rdd = self._run_output("count", capture_values=False)
        with self.lc.planner.action(cp, self.node):
            out = int(sum(rdd.collect()))
        self.last_output = cp
        return out

    def take(self, num: int) -> list:
        """The first `num` records. Partitions are scanned in order as PySpark's take does,
        but each partition scanned is read whole, so lineage upstream is complete."""
        if num <= 0:
            return []
        cp = self.lc.planner.output_point(self.node, "take")
        items: list = []
        total = self.node.num_partitions
        parts_scanned = 0
        with self.lc.planner.action(cp, self.node):
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
                rdd = self._compiler.build(self.node, OutputSink(cp, "take", limit=left))
                parts = list(range(parts_scanned, min(parts_scanned + num_parts, total)))
                got = self.lc.sc.runJob(rdd, _as_list_of_partition, parts)
                self._keep_taken(cp, num, items, got)
                parts_scanned += num_parts
        self.last_output = cp
        return items

    def _keep_taken(self, cp: CapturePoint, num: int, items: list, got: list) -> None:
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

    # Reductions to one value, as PySpark computes them: one partial value per partition
    # (a partition-lineage mapPartitions, so each partial derives from its partition's
    # records), collected as the action's output, then combined in the driver. `lineage()`
    # gives the partials.

    def reduce(self, f: Callable[[Any, Any], Any]) -> Any:
        partials = self._partials(partial(_reduced, f))
        if not partials:
            raise ValueError("Can not reduce() empty RDD")
        return functools.reduce(f, partials)

    def fold(self, zeroValue: Any, op: Callable[[Any, Any], Any]) -> Any:
        partials = self._partials(partial(_folded, zeroValue, op))
        return functools.reduce(op, partials, zeroValue)

    def aggregate(
        self, zeroValue: Any, seqOp: Callable[[Any, Any], Any], combOp: Callable[[Any, Any], Any]
    ) -> Any:
        partials = self._partials(partial(_folded, zeroValue, seqOp))
        return functools.reduce(combOp, partials, zeroValue)

    def sum(self) -> Any:
        return self.fold(0, operator.add)

    def max(self, key: Callable | None = None) -> Any:
        return self.reduce(max if key is None else partial(_max_by, key))

    def min(self, key: Callable | None = None) -> Any:
        return self.reduce(min if key is None else partial(_min_by, key))

    def stats(self) -> Any:
        from pyspark.statcounter import StatCounter

        return self.aggregate(StatCounter(), StatCounter.merge, StatCounter.mergeStats)

    def mean(self) -> float:
        return self.stats().mean()

    def countByValue(self) -> dict[Any, int]:
        """Each distinct value's count, from a `reduceByKey` whose output records (value,
        count) are the action's: `lineage()` traces a value's count to its records."""
        counts: defaultdict[Any, int] = defaultdict(int)
        counted = self.map(_with_one).reduceByKey(operator.add)
        counts.update(counted.collect())
        self.last_output = counted.last_output
        return counts

    def countByKey(self) -> dict[Any, int]:
        keys = self.keys()
        counts = keys.countByValue()
        self.last_output = keys.last_output
        return counts

    def _partials(self, per_partition: Callable[[Iterable[Any]], Any]) -> list:
        partials = self.mapPartitions(per_partition)
        out = partials.collect()
        self.last_output = partials.last_output
        return out

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Iterator[Any]:
        """The records, a partition at a time (one job per partition, run as the iterator
        reaches it), as PySpark's. Each partition's records are journaled as the action's
        output when its job completes; the action ends when the iterator does (or is closed).
        `prefetchPartitions` is accepted and not used: one partition runs at a time."""
        cp, rdd = self._run_output("collect")
        self.last_output = cp  # lineage(): the partitions read so far
        return self._partitions(cp, rdd)

    def _partitions(self, cp: CapturePoint, rdd: RDD[Any]) -> Iterator[Any]:
        with self.lc.planner.action(cp, self.node):
            for p in range(self.node.num_partitions):
                yield from self.lc.sc.runJob(rdd, _as_list_of_partition, [p])

    def foreach(self, f: Callable[[Any], Any]) -> None:
        """`f` on every record, on the executors, as PySpark's. Each record `f` returned on
        is an output record (SEND, "foreach"); one it raised on is a culprit (FAIL), and under
        on_error="skip" the job goes on without it."""
        self._run_each("foreach", self.map(partial(_called, f)))

    def foreachPartition(self, f: Callable[[Iterable[Any]], Any]) -> None:
        """`f` on each partition's iterator, as PySpark's. One output record per partition,
        made from every record that reached `f` (partition lineage, as `mapPartitions`)."""
        self._run_each("foreachPartition", self.mapPartitions(partial(_called_on_partition, f)))

    def _run_each(self, action: str, called: CapturedRDD) -> None:
        cp = self.lc.planner.output_point(called.node, action)
        job = self._compiler.build(called.node, OutputSink(cp, "count", capture_values=False))
        with self.lc.planner.action(cp, called.node):
            job.collect()
        self.last_output = cp

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
        with self.lc.planner.action(cp, self.node):
            rdd._jrdd.map(jvm.BytesToString()).saveAsTextFile(path)
        self.last_output = cp

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
        return self.lc.planner.lineage_of(self.last_output)

    def __getattr__(self, name: str):
        if not name.startswith("_") and hasattr(RDD, name):
            raise UnsupportedOperation(
                f"the lineage capture agent does not cover RDD.{name}(); supported: "
                + ", ".join(SUPPORTED)
            )
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"CapturedRDD({self.name}, partitions={self.node.num_partitions})"


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


def _reduced(f: Callable[[Any, Any], Any], iterator: Iterable[Any]) -> list:
    it = iter(iterator)
    for first in it:
        return [functools.reduce(f, it, first)]
    return []


def _folded(zero: Any, op: Callable[[Any, Any], Any], iterator: Iterable[Any]) -> list:
    return [functools.reduce(op, iterator, copy.deepcopy(zero))]


def _max_by(key: Callable, a: Any, b: Any) -> Any:
    return max(a, b, key=key)


def _min_by(key: Callable, a: Any, b: Any) -> Any:
    return min(a, b, key=key)


def _indexed(starts: list[int], split: int, iterator: Iterable[Any]) -> Iterator[tuple]:
    for i, x in enumerate(iterator, starts[split]):
        yield (x, i)


def _with_one(x: Any) -> tuple[Any, int]:
    return (x, 1)


def _called(f: Callable[[Any], Any], x: Any) -> None:
    f(x)


def _called_on_partition(f: Callable[[Iterable[Any]], Any], iterator: Iterable[Any]) -> Any:
    f(iterator)
    return iter((None,))


def _as_list_of_partition(iterator: Iterable) -> list:
    return list(iterator)
