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
from ._columns import csr


@dataclass(frozen=True)
class TapSpec:
    run_id: str
    journal: WriterSpec
    cp: CapturePoint
    longs: tuple[str, ...]
    arrays: tuple[str, ...]
    uri: str


def _pairs(batch: Any, spec: TapSpec, first: int) -> tuple[list, list]:
    """(row index, record id) pairs of a batch's hidden columns, rows numbered from `first`."""
    import pyarrow.compute as pc

    rows, ids = [], []
    for name in spec.longs:
        col = batch.column(name)
        valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        vals = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        idx = np.flatnonzero(valid)
        rows.append(idx + first)
        ids.append(vals[idx])
    for name in spec.arrays:
        col = batch.column(name)
        lens = col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        values = col.flatten()  # the elements of the non-null lists, in row order
        owner = np.repeat(np.arange(len(lens), dtype=np.int64) + first, lens)
        flat = values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if values.null_count:  # nulls inside a list (none expected): drop them, vectorized
            valid = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool)
            owner, flat = owner[valid], flat[valid]
        rows.append(owner)
        ids.append(flat)
    return rows, ids


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
            r, i = _pairs(batch, spec, n)
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
