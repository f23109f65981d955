"""What a captured `mapInPandas` / `mapInArrow` runs in Spark's Python workers (executor
side: no pyspark driver modules, no repository).

The user's function gets its partition's batches as vanilla would give them (the hidden ids
column taken out of each). What the rows it returns carry depends on the lineage chosen:

- "partition": one id, that of the partition's group record (journaled here, its parents
  every row that reached the function). The function's whole output is held until it
  returns, and only then is the group journaled and sealed and the output handed on: a
  consumer that stops early (a `take`, a `show`) must still find the group its rows name,
  and a task attempt that fails must leave no group (only one attempt's may be merged).
- "row": each returned batch must have as many rows as the batch read last; its row i
  gets the ids of that batch's row i, with no group record. Exact for functions that map
  each batch row by row, in order (a model's predictions); a returned batch of another
  length raises.

A function that raises records FAIL events naming the rows it may have failed on (every row
that reached it under "partition", the batch read last under "row") and the task fails: an
exception ends the user's generator, so nothing can be skipped, as for an RDD mapPartitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from journals import record_id_base, unique_ids

from .._spec import CapturePoint
from ._mapgroupsrun import journal_groups, reading, row_ids, rows_in, visible, with_column
from ._udfrun import UdfSpec, partition_id, record_failure


@dataclass(frozen=True)
class MapInSpec:
    udf: UdfSpec
    ids: str  # the hidden input column: each row's ids (a long, -1 for none, or an array)
    out: str  # the hidden output column
    names: tuple[str, ...]  # the function's schema's fields
    arrow: bool
    group: CapturePoint | None  # partition lineage: the groups' capture point; else row
    journal: bool  # False in a replay: the run's lineage is not journaled again


class PartitionMap:
    """The function Spark runs over each partition's batches."""

    def __init__(self, func: Callable, spec: MapInSpec) -> None:
        self.func = func
        self.spec = spec

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        if self.spec.group is None:
            return self._rows(batches)
        return self._partition(batches, self.spec.group)

    def _partition(self, batches: Iterator[Any], group: CapturePoint) -> Iterator[Any]:
        spec = self.spec
        reached: list[np.ndarray] = []
        try:
            results = list(self.func(reading(batches, spec.ids, spec.arrow, reached)))
        except Exception as error:
            record_failure(spec.udf, unique_ids(reached), error)
            raise
        gid = record_id_base(group.number, partition_id())
        if spec.journal and any(rows_in(r) for r in results):
            # unique_ids: a scan's rows arrive in id order, taken as they are (numpy 2.4's
            # np.unique hashes: 0.8 s for a partition of 600 K ids).
            parents = unique_ids(reached)
            journal_groups(
                spec.udf.journal, spec.udf.run_id, group, np.array([len(parents)]), parents
            )
        names = list(spec.names)
        for result in results:
            yield with_column(result, spec.out, partial(_constant, gid), names, spec.arrow)

    def _rows(self, batches: Iterator[Any]) -> Iterator[Any]:
        spec = self.spec
        last: list[Any] = []  # the batch read last (its hidden ids column)

        def fed() -> Iterator[Any]:
            for batch in batches:
                last[:] = [batch]
                yield visible(batch, spec.arrow)

        returned = None
        while True:
            try:
                if returned is None:
                    returned = iter(self.func(fed()))
                result = next(returned)
            except StopIteration:
                return
            except Exception as error:  # the function's: the batch read last is the culprit
                culprits = row_ids(last[0], spec.ids, spec.arrow) if last else None
                record_failure(spec.udf, culprits, error)
                raise
            n = rows_in(result)
            if not last or n != rows_in(last[0]):
                read = rows_in(last[0]) if last else 0
                raise ValueError(
                    f"{self._what()}(lineage='row'): the function returned a batch of {n} "
                    f"rows after reading one of {read}; lineage='row' needs each returned "
                    "batch to map the batch read last row by row (the default "
                    "lineage='partition' takes any function)"
                )
            ids = partial(_same, self._aligned(last[0]))
            yield with_column(result, spec.out, ids, list(spec.names), spec.arrow)

    def _what(self) -> str:
        return "mapInArrow" if self.spec.arrow else "mapInPandas"

    def _aligned(self, batch: Any) -> Any:
        """The hidden ids of `batch`'s rows as an Arrow array, row by row: a long (null for
        none) or a list of longs (no null element, as the output schema types it)."""
        import pyarrow as pa

        col = batch.column(self.spec.ids) if self.spec.arrow else batch[self.spec.ids]
        if self.spec.arrow and pa.types.is_list(col.type):
            return col.cast(pa.list_(pa.field("element", pa.int64(), nullable=False)))
        if not self.spec.arrow and col.dtype == object:
            kind = pa.list_(pa.field("element", pa.int64(), nullable=False))
            return pa.array(list(col), type=kind)
        values = np.asarray(
            col.to_numpy(zero_copy_only=False) if self.spec.arrow else col.to_numpy(),
            dtype=np.int64,
        )
        return pa.array(values, mask=values < 0)


def _same(values: Any, _n: int) -> Any:
    return values


def _constant(value: int, n: int) -> Any:
    import pyarrow as pa

    return pa.array(np.full(n, value, dtype=np.int64))
