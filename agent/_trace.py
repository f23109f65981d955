"""`LineageRDD`: a set of traced records at one or more capture points of a run.

Titian's LineageRDD, computed in the driver over the repository (numpy over stored lineage,
no Spark job): `go_back()` / `go_next()` hop one capture point, `go_back_all()` /
`go_next_all()` go to the sources / final outputs, `collect()` and `show()` return the raw
records (source lines re-read by byte offset, captured values elsewhere), and `filter(f)`
selects records by their values.

Hops are lazy: a LineageRDD knows how to compute its records and does so on first need
(`count()` computes ids only, never raw data). Raw data is read a page at a time
(`toLocalIterator`), so `show`, `take`, `filter` and `count` never hold a large traced set's
data at once.

Beyond the driver: a hop given `spark=True`, or a trace whose frontier grows past
`spark_threshold` records, runs as Spark jobs over the event logs (see `_spark_trace`); the
set then stays on Spark (`on_spark`), and `count()`, `filter()`, `at()`, further hops,
`toDF()` and `to_rdd()` run there too, so millions of records are traced, filtered and
written without passing through the driver.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import ProvenanceEvent, gc_paused, unique_ids, unpack_record_ids

from ._spark_trace import SPARK_THRESHOLD, SparkSet
from ._trace_tasks import value_of

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame

    from repository import ProvenanceRepository


PAGE = 10_000  # records whose raw data is read (and held) at once
Records = np.ndarray | SparkSet  # held in the driver (ids ascending) or on Spark


class LineageRDD:
    """Traced records of one run. Cheap to create; records are computed, and data read,
    when asked for."""

    def __init__(
        self,
        repo: ProvenanceRepository,
        run_id: str,
        record_ids: np.ndarray | None = None,
        sc: Any = None,
        origin: tuple[Any, np.ndarray] | None = None,
        *,
        compute: Callable[[], Records] | None = None,
        spark_threshold: int | None = SPARK_THRESHOLD,
    ) -> None:
        if (record_ids is None) == (compute is None):
            raise ValueError("LineageRDD needs record ids or a way to compute them")
        self.repo = repo
        self.run_id = run_id
        self._records: Records | None = None if record_ids is None else _as_set(record_ids)
        self._ids: np.ndarray | None = self._records if record_ids is not None else None
        self._compute = compute
        self._sc = sc
        # Frontiers above this many records go on as Spark jobs (None: never automatically).
        self.spark_threshold = spark_threshold
        # (output capture point, its selected records) this set was traced back from: what a
        # selective replay must reproduce. Lost by forward hops.
        self.origin = origin

    def _resolved(self) -> Records:
        if self._records is None:
            assert self._compute is not None
            out = self._compute()
            self._records = out if isinstance(out, SparkSet) else _as_set(out)
            self._compute = None
        return self._records

    @property
    def on_spark(self) -> bool:
        """Whether the records are held by Spark (computed there, never collected)."""
        return isinstance(self._resolved(), SparkSet)

    @property
    def record_ids(self) -> np.ndarray:
        """The records' ids, ascending (computed on first use; collected from Spark when the
        set is held there)."""
        if self._ids is None:
            r = self._resolved()
            self._ids = r.ids() if isinstance(r, SparkSet) else r
        return self._ids

    @property
    def _index(self):
        return self.repo.lineage

    # -- shape -------------------------------------------------------------------------------

    def count(self) -> int:
        """How many records (ids are computed, on Spark when held there; no raw data)."""
        r = self._resolved()
        return r.count() if isinstance(r, SparkSet) else len(r)

    def __len__(self) -> int:
        return self.count()

    def capture_points(self) -> list[int]:
        """The capture points these records sit at."""
        return sorted(set(unpack_record_ids(self.record_ids)[0].tolist()))

    def _with(self, ids: Records, origin: Any = "same") -> LineageRDD:
        return self._lazy(lambda: ids, origin)

    def _lazy(self, compute: Callable[[], Records], origin: Any = "same") -> LineageRDD:
        return LineageRDD(
            self.repo,
            self.run_id,
            None,
            self._sc,
            self.origin if origin == "same" else origin,
            compute=compute,
            spark_threshold=self.spark_threshold,
        )

    def _spark_set(self, r: Records) -> SparkSet:
        if isinstance(r, SparkSet):
            return r
        if self._sc is None:
            raise ValueError("this LineageRDD has no SparkContext (made outside a LineageContext)")
        return SparkSet.of_ids(self._sc, self.repo.path, self.run_id, r)

    # -- tracing -----------------------------------------------------------------------------

    def go_back(self, spark: bool | None = None) -> LineageRDD:
        """The records these came from, one capture point back (`spark=True`: as a Spark
        job; None: on Spark when the set is held there)."""
        return self._lazy(lambda: self._hop(False, spark))

    def go_next(self, spark: bool | None = None) -> LineageRDD:
        """The records made from these, one capture point forward."""
        return self._lazy(lambda: self._hop(True, spark), None)

    def go_back_all(self, spark: bool | None = None) -> LineageRDD:
        """The source records (input lines, parallelized elements) these derive from.
        `spark=True`: every hop as a Spark job; None: in the driver until the frontier passes
        `spark_threshold` records (when there is a SparkContext), then on Spark."""
        return self._lazy(lambda: self._trace(False, spark))

    def go_next_all(self, spark: bool | None = None) -> LineageRDD:
        """The final output records that derive from these (`spark` as in `go_back_all`)."""
        return self._lazy(lambda: self._trace(True, spark), None)

    def _hop(self, forward: bool, spark: bool | None) -> Records:
        r = self._resolved()
        if spark or (spark is None and isinstance(r, SparkSet)):
            return self._spark_set(r).hop(forward)
        ids = self.record_ids
        ix = self._index
        return ix.children(self.run_id, ids) if forward else ix.parents(self.run_id, ids)

    def _trace(self, forward: bool, spark: bool | None) -> Records:
        r = self._resolved()
        if spark or (spark is None and isinstance(r, SparkSet)):
            return self._spark_set(r).trace(forward)
        threshold = self.spark_threshold
        steps = self._index.trace_steps(self.run_id, self.record_ids, forward)
        if spark is None and self._sc is not None and threshold is not None:
            for step in steps:
                if len(step.frontier) > threshold:  # the rest as Spark jobs
                    sset = self._spark_set(step.frontier)
                    return sset.trace(forward, ends=step.ends)
            return unique_ids([*step.ends, step.frontier])
        (last,) = deque(steps, maxlen=1)
        return unique_ids([*last.ends, last.frontier])

    def ancestors(self) -> LineageRDD:
        """Every record these derive from, at every capture point upstream (see `at`).
        In the driver (a set held by Spark is collected first)."""
        return self._lazy(lambda: self._index.reachable(self.run_id, self.record_ids))

    def descendants(self) -> LineageRDD:
        """Every record derived from these, at every capture point downstream."""
        return self._lazy(
            lambda: self._index.reachable(self.run_id, self.record_ids, forward=True), None
        )

    def at(self, name: str) -> LineageRDD:
        """The records at the capture points named `name`: a component id ("distinct#5"), an
        operation ("distinct", "reduceByKey.combine") or a component type ("reducer")."""
        cps = self._index.run_info(self.run_id).capture_points
        wanted = [
            n
            for n, c in cps.items()
            if name in (c.component_id, c.component_type, re.sub(r"#\d+", "", c.component_id))
        ]
        if not wanted:
            known = ", ".join(sorted({c.component_id for c in cps.values()}))
            raise ValueError(f"no capture point named {name!r} in this run (have: {known})")
        r = self._resolved()
        if isinstance(r, SparkSet):
            return self._with(r.at(set(wanted)))
        mine = unpack_record_ids(r)[0]
        return self._with(r[np.isin(mine, wanted)])

    # -- data --------------------------------------------------------------------------------

    def collect(self) -> list:
        """The raw records: source lines re-read by offset, captured values elsewhere (None
        where a capture point keeps no values). For a large set prefer `toLocalIterator()`
        (a page at a time) or `toDF()` (on Spark, never in the driver)."""
        r = self._resolved()
        if isinstance(r, SparkSet):
            return [v for _rid, v in sorted(r.data().collect(), key=lambda t: t[0])]
        # A big trace holds millions of new rows: the cyclic collector would walk all of them
        # again at each full pass while the list grows (~20% of the trace); none is in a cycle.
        with gc_paused():
            return list(self.toLocalIterator())

    def toLocalIterator(self, page: int | None = None) -> Iterator[Any]:
        """The raw records one at a time, read `page` records (default PAGE) at a time."""
        for _ids, data in self._index.iter_data(self.run_id, self.record_ids, page or PAGE):
            yield from data

    def take(self, n: int) -> list:
        r = self._resolved()
        if isinstance(r, SparkSet):
            return [v for _rid, v in r.data().take(n)]
        return self._index.record_data(self.run_id, r[:n])

    def show(self, n: int = 20) -> None:
        """Print up to n records: record id, capture point and raw data."""
        r = self._resolved()
        if isinstance(r, SparkSet):
            rows = r.data().take(n)
            ids, data = np.array([i for i, _ in rows], dtype=np.int64), [d for _, d in rows]
        else:
            ids = r[:n]
            data = self._index.record_data(self.run_id, ids)
        cps, parts, poss = unpack_record_ids(ids)
        for rid, cp, part, pos, d in zip(ids.tolist(), cps, parts, poss, data):
            print(f"{rid:>20}  cp{cp} p{part}#{pos}  {d!r}")
        total = self.count()
        if total > n:
            print(f"... {total - n} more")

    def events(self) -> list[ProvenanceEvent | None]:
        """The provenance event of each record."""
        return self._index.events(self.run_id, self.record_ids)

    def filter(self, f: Callable[[Any], bool]) -> LineageRDD:
        """The records whose value satisfies f (values as `collect()` returns them), read a
        page at a time (on the executors when the set is held by Spark)."""
        r = self._resolved()
        if isinstance(r, SparkSet):
            return self._with(r.filter(f), origin=None)
        kept = [
            ids[np.fromiter((bool(f(d)) for d in data), dtype=bool, count=len(data))]
            for ids, data in self._index.iter_data(self.run_id, r, PAGE)
        ]
        ids = np.concatenate(kept) if kept else r[:0]
        # Selecting among an action's outputs narrows what a replay must reproduce.
        origin = self.origin
        at_origin = origin is not None and np.array_equal(r, origin[1])
        return self._with(
            ids, origin=(origin[0], ids) if origin is not None and at_origin else "same"
        )

    def toDF(self) -> DataFrame:
        """The records as a Spark DataFrame (record_id, capture_point, partition, position,
        data), their raw data read on the executors: the raw line of a text source, the repr
        of a captured value, null where none is kept. Filter and write it as any DataFrame."""
        return self._spark_set(self._resolved()).to_df()

    def to_rdd(self, numSlices: int | None = None) -> RDD[Any]:
        """A native PySpark RDD of these records' raw data, read on the executors (Titian:
        native transformations on a LineageRDD run over exactly the referenced records).
        `numSlices` is accepted for PySpark's signature; the set's own partitioning is kept."""
        return self._spark_set(self._resolved()).data().map(value_of)

    def __getattr__(self, name: str):
        from pyspark.rdd import RDD

        if not name.startswith("_") and hasattr(RDD, name):
            # map, filter, flatMap, reduceByKey, ...: run on the referenced records' data.
            return getattr(self.to_rdd(), name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        if self._records is None:
            return f"LineageRDD(run={self.run_id!r}, not computed yet)"
        if isinstance(self._records, SparkSet):
            return f"LineageRDD(run={self.run_id!r}, on Spark)"
        return f"LineageRDD(run={self.run_id!r}, records={len(self)}, cps={self.capture_points()})"


def _as_set(ids: Any) -> np.ndarray:
    """Distinct ids, ascending (cheap when they already are)."""
    arr = np.asarray(ids, dtype=np.int64)
    if len(arr) < 2 or bool((arr[1:] > arr[:-1]).all()):
        return arr
    return unique_ids(arr)
