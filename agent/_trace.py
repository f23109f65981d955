"""`LineageRDD`: a set of traced records at one or more capture points of a run.

Titian's LineageRDD, computed in the driver over the repository (numpy over stored lineage,
no Spark job): `go_back()` / `go_next()` hop one capture point, `go_back_all()` /
`go_next_all()` go to the sources / final outputs, `collect()` and `show()` return the raw
records (source lines re-read by byte offset, captured values elsewhere), and `filter(f)`
selects records by their values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import ProvenanceEvent, unpack_record_ids

if TYPE_CHECKING:
    from repository import ProvenanceRepository


class LineageRDD:
    """Traced records of one run. Cheap to create; data is read when asked for."""

    def __init__(
        self,
        repo: ProvenanceRepository,
        run_id: str,
        record_ids: np.ndarray,
        sc: Any = None,
        origin: tuple[Any, np.ndarray] | None = None,
    ) -> None:
        self.repo = repo
        self.run_id = run_id
        self.record_ids = np.unique(np.asarray(record_ids, dtype=np.int64))
        self._sc = sc
        # (output capture point, its selected records) this set was traced back from: what a
        # selective replay must reproduce. Lost by forward hops.
        self.origin = origin

    @property
    def _index(self):
        return self.repo.lineage

    # -- shape -------------------------------------------------------------------------------

    def count(self) -> int:
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

    # -- tracing -----------------------------------------------------------------------------

    def go_back(self) -> LineageRDD:
        """The records these came from, one capture point back."""
        return self._with(self._index.parents(self.run_id, self.record_ids))

    def go_next(self) -> LineageRDD:
        """The records made from these, one capture point forward."""
        return self._with(self._index.children(self.run_id, self.record_ids), origin=None)

    def go_back_all(self) -> LineageRDD:
        """The source records (input lines, parallelized elements) these derive from."""
        return self._with(self._index.trace(self.run_id, self.record_ids)[0])

    def go_next_all(self) -> LineageRDD:
        """The final output records that derive from these."""
        ids = self._index.trace(self.run_id, self.record_ids, forward=True)[0]
        return self._with(ids, origin=None)

    def ancestors(self) -> LineageRDD:
        """Every record these derive from, at every capture point upstream (see `at`)."""
        return self._with(self._index.reachable(self.run_id, self.record_ids))

    def descendants(self) -> LineageRDD:
        """Every record derived from these, at every capture point downstream."""
        ids = self._index.reachable(self.run_id, self.record_ids, forward=True)
        return self._with(ids, origin=None)

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
        where a capture point keeps no values)."""
        return self._index.record_data(self.run_id, self.record_ids)

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
        """The records whose value satisfies f (values as `collect()` returns them)."""
        data = self.collect()
        keep = np.fromiter((bool(f(d)) for d in data), dtype=bool, count=len(data))
        ids = self.record_ids[keep]
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
        return f"LineageRDD(run={self.run_id!r}, records={len(self)}, cps={self.capture_points()})"
