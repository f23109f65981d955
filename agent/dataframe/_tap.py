"""The write tap (executor side): a `mapInArrow` function between a captured DataFrame and
its writer. It strips the hidden lineage columns from each Arrow batch it passes on and,
when its partition is done, journals one batch of output records (the rows it handed to the
writer, in order) whose parents are each row's source records. Only a task that completed
seals its journal, so a failed or retried attempt leaves no lineage, as for RDD tasks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from journals import Location, WriterSpec

from .._spec import CapturePoint
from .._worker import TaskJournal
from ._columns import arrow_pairs, csr


@dataclass(frozen=True)
class TapSpec:
    run_id: str
    journal: WriterSpec
    cp: CapturePoint
    longs: tuple[str, ...]
    arrays: tuple[str, ...]
    uri: str


class WriteTap:
    def __init__(self, spec: TapSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        spec = self.spec
        tc = TaskContext.get()
        partition = int(tc.partitionId()) if tc is not None else 0
        hidden = set(spec.longs) | set(spec.arrays)
        rows: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        n = 0
        for batch in batches:
            r, i = arrow_pairs(batch.column, spec.longs, spec.arrays, n)
            rows += r
            ids += i
            n += batch.num_rows
            keep = [k for k, name in enumerate(batch.schema.names) if name not in hidden]
            yield batch.select(keep)
        counts, parents = csr(n, rows, ids)
        journal = TaskJournal(spec.journal, spec.run_id, partition)
        journal.batch(
            spec.cp,
            n,
            parent_counts=counts,
            parent_ids=parents,
            location=Location(uri=spec.uri, offset=0, length=-1),
            attributes={"part": str(partition)},
        )
        journal.seal()
