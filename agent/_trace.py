"""`LineageRDD`: a set of traced records at one or more capture points of a run.

Titian's LineageRDD, computed in the driver over the repository (numpy over stored lineage,
no Spark job): `go_back()` / `go_next()` hop one capture point, `go_back_all()` /
`go_next_all()` go to the sources / final outputs, `collect()` and `show()` return the raw
records (source lines re-read by byte offset, captured values elsewhere), and `filter(f)`
selects records by their values.

Hops are lazy: a LineageRDD knows how to compute its record ids and does so on first need
(`count()` computes ids only, never raw data). Raw data is read a page at a time
(`toLocalIterator`), so `show`, `take`, `filter` and `count` never hold a large traced set's
data at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import ProvenanceEvent, unpack_record_ids
from repository.lineage import unique_ids

if TYPE_CHECKING:
    from repository import ProvenanceRepository


PAGE = 10_000  # records whose raw data is read (and held) at once


class LineageRDD:
    """Traced records of one run. Cheap to create; ids are computed, and data read, when
    asked for."""

    def __init__(
        self,
        repo: ProvenanceRepository,
        run_id: str,
        record_ids: np.ndarray | None = None,
        sc: Any = None,
        origin: tuple[Any, np.ndarray] | None = None,
        *,
        compute: Callable[[], np.ndarray] | None = None,
    ) -> None:
        if (record_ids is None) == (compute is None):
            raise ValueError("LineageRDD needs record ids or a way to compute them")
        self.repo = repo
        self.run_id = run_id
        self._ids = None if record_ids is None else _as_set(record_ids)
        self._compute = compute
        self._sc = sc
        # (output capture point, its selected records) this set was traced back from: what a
        # selective replay must reproduce. Lost by forward hops.
        self.origin = origin

    @property
    def record_ids(self) -> np.ndarray:
        """The records' ids, ascending (computed on first use)."""
        if self._ids is None:
            assert self._compute is not None
            self._ids = _as_set(self._compute())
            self._compute = None
        return self._ids

    @property
    def _index(self):
        return self.repo.lineage

    # -- shape -------------------------------------------------------------------------------

    def count(self) -> int:
        """How many records (their ids are computed; no raw data is read)."""
        return len(self.record_ids)

    def __len__(self) -> int:
        return len(self.record_ids)

    def capture_points(self) -> list[int]:
        """The capture points these records sit at."""
        return sorted(set(unpack_record_ids(self.record_ids)[0].tolist()))

    def _with(self, ids: np.ndarray, origin: Any = "same") -> LineageRDD:
        return LineageRDD(
            self.repo, self.run_id, ids, self._sc, self.origin if origin == "same" else origin
        )

    def _lazy(self, compute: Callable[[], np.ndarray], origin: Any = "same") -> LineageRDD:
        return LineageRDD(
            self.repo,
            self.run_id,
            None,
            self._sc,
            self.origin if origin == "same" else origin,
            compute=compute,
        )

    # -- tracing -----------------------------------------------------------------------------

    def go_back(self) -> LineageRDD:
        """The records these came from, one capture point back."""
        return self._lazy(lambda: self._index.parents(self.run_id, self.record_ids))

    def go_next(self) -> LineageRDD:
        """The records made from these, one capture point forward."""
        return self._lazy(lambda: self._index.children(self.run_id, self.record_ids), None)

    def go_back_all(self) -> LineageRDD:
        """The source records (input lines, parallelized elements) these derive from."""
        return self._lazy(lambda: self._index.trace(self.run_id, self.record_ids)[0])

    def go_next_all(self) -> LineageRDD:
        """The final output records that derive from these."""
        return self._lazy(
            lambda: self._index.trace(self.run_id, self.record_ids, forward=True)[0], None
        )

    def ancestors(self) -> LineageRDD:
        """Every record these derive from, at every capture point upstream (see `at`)."""
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
        mine = unpack_record_ids(self.record_ids)[0]
        return self._with(self.record_ids[np.isin(mine, wanted)])

    # -- data --------------------------------------------------------------------------------

    def collect(self) -> list:
        """The raw records: source lines re-read by offset, captured values elsewhere (None
        where a capture point keeps no values). For a large set prefer `toLocalIterator()`
        (a page at a time) or `toDF()` (on Spark, never in the driver)."""
        return list(self.toLocalIterator())

    def toLocalIterator(self, page: int = PAGE) -> Iterator[Any]:
        """The raw records one at a time, read `page` records at a time."""
        for _ids, data in self._index.iter_data(self.run_id, self.record_ids, page):
            yield from data

    def take(self, n: int) -> list:
        return self._index.record_data(self.run_id, self.record_ids[:n])

    def show(self, n: int = 20) -> None:
        """Print up to n records: record id, capture point and raw data."""
        ids = self.record_ids[:n]
        cps, parts, poss = unpack_record_ids(ids)
        data = self._index.record_data(self.run_id, ids)
        for rid, cp, part, pos, d in zip(ids.tolist(), cps, parts, poss, data):
            print(f"{rid:>20}  cp{cp} p{part}#{pos}  {d!r}")
        if len(self.record_ids) > n:
            print(f"... {len(self.record_ids) - n} more")

    def events(self) -> list[ProvenanceEvent | None]:
        """The provenance event of each record."""
        return self._index.events(self.run_id, self.record_ids)

    def filter(self, f: Callable[[Any], bool]) -> LineageRDD:
        """The records whose value satisfies f (values as `collect()` returns them), read a
        page at a time."""
        kept = [
            ids[np.fromiter((bool(f(d)) for d in data), dtype=bool, count=len(data))]
            for ids, data in self._index.iter_data(self.run_id, self.record_ids, PAGE)
        ]
        ids = np.concatenate(kept) if kept else self.record_ids[:0]
        # Selecting among an action's outputs narrows what a replay must reproduce.
        origin = self.origin
        at_origin = origin is not None and np.array_equal(self.record_ids, origin[1])
        return self._with(
            ids, origin=(origin[0], ids) if origin is not None and at_origin else "same"
        )

    def to_rdd(self, numSlices: int | None = None):
        """A native PySpark RDD of these records' raw data (Titian: native transformations on a
        LineageRDD run over exactly the referenced records)."""
        if self._sc is None:
            raise ValueError("this LineageRDD has no SparkContext (made outside a LineageContext)")
        return self._sc.parallelize(self.collect(), numSlices)

    def __getattr__(self, name: str):
        from pyspark.rdd import RDD

        if not name.startswith("_") and hasattr(RDD, name):
            # map, filter, flatMap, reduceByKey, ...: run on the referenced records' data.
            return getattr(self.to_rdd(), name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        if self._ids is None:
            return f"LineageRDD(run={self.run_id!r}, not computed yet)"
        return f"LineageRDD(run={self.run_id!r}, records={len(self)}, cps={self.capture_points()})"


def _as_set(ids: Any) -> np.ndarray:
    """Distinct ids, ascending (cheap when they already are)."""
    arr = np.asarray(ids, dtype=np.int64)
    if len(arr) < 2 or bool((arr[1:] > arr[:-1]).all()):
        return arr
    return unique_ids(arr)
