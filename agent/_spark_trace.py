"""Traces bigger than the driver, as Spark jobs (driver side; tasks in `_trace_tasks`).

`SparkSet` is a traced set held by Spark: an RDD of (key, positions) parts routed by key, so
each task owns whole (capture point, partition)s of the frontier. A hop runs `HopTask` on every
task -- each opens the repository's lineage read-only and hops its own records, reading only
the batches and forward index blocks holding them -- then the next frontier is shuffled to its
keys' tasks (only the frontier moves: Titian-D's distributed join, never the lineage). Data
(`toDF`, `data`) is read on the executors too: source lines from the input files by offset,
captured values from the event logs.

Executors must read the repository directory (its `logs/`) and the input files: automatic in
local mode; on a cluster, a shared filesystem (see the README).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from journals import unique_ids

from ._trace_tasks import (
    AtCapturePoints,
    CountTask,
    DataTask,
    FilterTask,
    HopTask,
    MergeParts,
    as_part,
    as_row,
    is_next,
    is_stop,
    join_parts,
    route,
    split_ids,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import DataFrame

# Frontiers larger than this many records continue on Spark when a SparkContext is at hand.
# Chosen by measurement (bench/scale.py --spark): on 2 cores a driver hop is faster at every
# size; the threshold bounds the driver's memory (ids cost 8 bytes each, a hop about 3x that).
SPARK_THRESHOLD = 20_000_000

ROW_SCHEMA = "record_id long, capture_point int, partition int, position long, data string"


class SparkSet:
    """A traced set of one run, held by Spark as (key, positions) parts routed by key."""

    def __init__(self, sc: SparkContext, path: str, run: str, rdd: RDD[Any], n: int) -> None:
        self.sc = sc
        self.path = path
        self.run = run
        self.rdd = rdd
        self.n = n

    @classmethod
    def of_ids(
        cls, sc: SparkContext, path: str, run: str, ids: np.ndarray, partitions: int | None = None
    ) -> SparkSet:
        """The set of `ids` (ascending), shipped from the driver and routed by key."""
        parts = split_ids(np.asarray(ids, dtype=np.int64))
        n = partitions or max(2, sc.defaultParallelism)
        rdd = sc.parallelize(parts, max(1, min(n, len(parts))))
        return cls(sc, path, run, _routed(rdd, n), n)

    def _with(self, rdd: RDD[Any]) -> SparkSet:
        return SparkSet(self.sc, self.path, self.run, rdd, self.n)

    # -- hops ------------------------------------------------------------------------------------

    def hop(self, forward: bool) -> SparkSet:
        """One hop: the records reached (`LineageIndex.parents` / `children`), on Spark."""
        out = self.rdd.mapPartitions(HopTask(self.path, self.run, forward))
        return self._with(_routed(out.filter(is_next).map(as_part), self.n))

    def trace(
        self, forward: bool, depth: int | None = None, ends: list[np.ndarray] | None = None
    ) -> SparkSet:
        """`LineageIndex.trace` on Spark: hop until nothing moves (or `depth` hops); records
        where a trace ends (`LineageIndex.stop_or_move`) are the result. `ends`: records the
        driver already found stopped (a trace handed over mid-way)."""
        stopped = []
        if ends:
            stopped.append(SparkSet.of_ids(self.sc, self.path, self.run, _joined(ends), self.n).rdd)
        level, hops, held = self.rdd, 0, []
        while depth is None or hops < depth:
            out = level.mapPartitions(HopTask(self.path, self.run, forward)).cache()
            held.append(out)
            stopped.append(out.filter(is_stop).map(as_part))
            if out.filter(is_next).isEmpty():
                break
            level = _routed(out.filter(is_next).map(as_part), self.n).cache()
            held.append(level)
            hops += 1
            if hops > 100_000:
                raise RuntimeError("lineage trace does not terminate (cycle in stored lineage?)")
        else:
            stopped.append(level)
        result = _routed(self.sc.union(stopped), self.n).cache()
        result.count()  # materialized: the levels it came from can go
        for r in held:
            r.unpersist()
        return self._with(result)

    # -- the set ---------------------------------------------------------------------------------

    def count(self) -> int:
        return int(sum(self.rdd.mapPartitions(CountTask()).collect()))

    def ids(self) -> np.ndarray:
        """The record ids, ascending, collected to the driver."""
        return join_parts(sorted(self.rdd.collect(), key=lambda kp: kp[0]))

    def at(self, cps: set[int]) -> SparkSet:
        return self._with(self.rdd.filter(AtCapturePoints(cps)))

    def filter(self, f: Any) -> SparkSet:
        return self._with(self.rdd.mapPartitions(FilterTask(self.path, self.run, f), True))

    def data(self) -> RDD[tuple[int, Any]]:
        """(record id, raw data) of every record, read on the executors."""
        return self.rdd.mapPartitions(DataTask(self.path, self.run))

    def to_df(self) -> DataFrame:
        """A DataFrame (record_id, capture_point, partition, position, data): data is the raw
        line of a text source, the repr of a captured value, null where none is kept."""
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
        return spark.createDataFrame(self.data().map(as_row), ROW_SCHEMA)


def _routed(rdd: RDD[Any], n: int) -> RDD[Any]:
    """Parts shuffled to their key's task, one part per key."""
    return rdd.partitionBy(n, route).mapPartitions(MergeParts(), preservesPartitioning=True)


def _joined(chunks: list[np.ndarray]) -> np.ndarray:
    return unique_ids(chunks)
