"""What a captured grouped map (`applyInPandas`, `applyInArrow`, cogrouped or not) runs in
Spark's Python workers (executor side: no pyspark driver modules, no repository).

The user's function gets its group as vanilla would give it (the hidden lineage columns taken
out); every row it returns is made from every row of its group (of both groups when
cogrouped): the function saw all of them. The first row it returns carries those rows' ids,
in one array column more, and `GroupTap`, right after in the same task, stores them once as
the group's record, which every row of the group then names (so a group's ids are stored
once, however many rows it gives). When the function raises,
FAIL events name those rows as culprits; then `on_error="fail"` re-raises (the task fails as
Spark's would) and `"skip"` returns no row for the group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from journals import WriterSpec, record_id_base

from .._spec import CapturePoint
from .._worker import TaskJournal
from ._udfrun import UdfSpec, partition_id, record_failure

PREFIX = "__prov_"  # _columns.PREFIX (that module is the driver's)


class _GroupRun:
    """One grouped map: `ids` is the hidden column of each input row's ids (a long, -1 for
    none, or an array of longs); `names` the schema's fields; `out` the ids' output field."""

    def __init__(
        self,
        func: Callable,
        spec: UdfSpec,
        ids: str,
        names: list[str],
        out: str,
        keyed: bool,
        arrow: bool,
        iterator: bool = False,
    ) -> None:
        self.func = func
        self.spec = spec
        self.ids = ids
        self.names = names
        self.out = out
        self.keyed = keyed
        self.arrow = arrow
        self.iterator = iterator

    def __call__(self, key: Any, *groups: Any) -> Any:
        if self.iterator:
            return self._batches(key, *groups)
        ids = np.concatenate([row_ids(g, self.ids, self.arrow) for g in groups])
        shown = [visible(g, self.arrow) for g in groups]
        try:
            result = self.func(key, *shown) if self.keyed else self.func(*shown)
        except Exception as error:
            record_failure(self.spec, ids, error)
            if self.spec.on_error == "fail":
                raise
            return self._empty()
        return self._with_ids(result, ids)

    def _batches(self, key: Any, *groups: Any) -> Iterator[Any]:
        """The iterator form: the group arrives as batches, and the function returns
        batches. It may return some before it has read the group's later rows, so what it
        returns is held until it is done; the first row then carries the ids of every row
        it read."""
        read: list[np.ndarray] = []
        shown = [reading(g, self.ids, self.arrow, read) for g in groups]
        try:
            results = list(self.func(key, *shown) if self.keyed else self.func(*shown))
        except Exception as error:
            record_failure(self.spec, _joined(read), error)
            if self.spec.on_error == "fail":
                raise
            return
        ids: np.ndarray | None = _joined(read)
        for result in results:
            if ids is not None and rows_in(result):
                yield self._with_ids(result, ids)
                ids = None
            else:
                yield self._with_ids(result, None)

    def _empty(self) -> Any:
        if self.arrow:
            import pyarrow as pa

            return pa.table({})
        import pandas as pd

        return pd.DataFrame()  # no rows, no columns: Spark takes it for any schema

    def _with_ids(self, result: Any, ids: np.ndarray | None) -> Any:
        first = _first_only if self.arrow else _first_only_series
        return with_column(result, self.out, lambda n: first(ids, n), self.names, self.arrow)


# -- pandas.DataFrame / pyarrow.Table (or RecordBatch) ----------------------------------------


def row_ids(batch: Any, column: str, arrow: bool) -> np.ndarray:
    """Every id in `batch`'s hidden `column` (a long per row, -1 for none, or an array of
    longs per row), in row order."""
    if arrow:
        import pyarrow as pa
        import pyarrow.compute as pc

        col = batch.column(column)
        if pa.types.is_list(col.type):
            values = pc.list_flatten(col).to_numpy(zero_copy_only=False)
        else:
            values = col.to_numpy(zero_copy_only=False)
        values = np.asarray(values, dtype=np.int64)
    else:
        col = batch[column]
        if col.dtype == object:  # arrays (None: a row with no ids)
            parts = col.dropna().tolist()
            values = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
        else:
            values = col.to_numpy(dtype=np.int64)
    return values[values >= 0]


def reading(batches: Iterator[Any], column: str, arrow: bool, read: list[np.ndarray]) -> Any:
    """`batches` as the user's function gets them (`visible`), each one's ids (`row_ids`)
    added to `read` as it is handed over."""
    for batch in batches:
        read.append(row_ids(batch, column, arrow))
        yield visible(batch, arrow)


def journal_groups(
    writer: WriterSpec, run_id: str, cp: CapturePoint, counts: np.ndarray, parents: np.ndarray
) -> None:
    """Journal and seal this task's group records at `cp` (record k: `counts[k]` parents, in
    order in `parents`), ids from position 0 of the task's partition."""
    journal = TaskJournal(writer, run_id, partition_id())
    journal.batch(cp, len(counts), parent_counts=counts, parent_ids=parents)
    journal.seal()


def visible(batch: Any, arrow: bool) -> Any:
    """`batch` without its hidden lineage columns: what vanilla's function gets."""
    names = batch.column_names if arrow else list(batch.columns)
    keep = [not str(n).startswith(PREFIX) for n in names]
    if arrow:
        return batch.select([i for i, k in enumerate(keep) if k])
    # A mask, not names: two columns may share one (a condition join's keys).
    return batch.loc[:, keep]


def with_column(
    result: Any, name: str, values: Callable[[int], Any], names: list[str], arrow: bool
) -> Any:
    """The user's `result` with one more column `name` holding `values(rows)` (an Arrow
    array of its length, or for pandas a Series). A result that is not of the expected kind,
    or empty with no column (which Spark takes for any schema), is returned as it is:
    Spark's own check names what is wrong."""
    if arrow:
        import pyarrow as pa

        if not isinstance(result, pa.Table | pa.RecordBatch) or (
            result.num_columns == 0 == result.num_rows
        ):
            return result
        return result.append_column(name, values(result.num_rows))
    import pandas as pd

    if not isinstance(result, pd.DataFrame) or (result.empty and len(result.columns) == 0):
        return result
    if not any(isinstance(c, str) for c in result.columns):
        # Spark assigns unnamed columns by position: name them so, as the ids' is named.
        if len(result.columns) == len(names):
            result = result.set_axis(names, axis=1)
    else:
        result = result.copy(deep=False)
    column = values(len(result))
    if isinstance(column, pd.Series):
        result[name] = column.set_axis(result.index)
    else:
        # An Arrow-backed column: Spark takes its Arrow array as it is (a long column's nulls
        # kept, where numpy would make floats).
        result[name] = pd.Series(pd.arrays.ArrowExtensionArray(column), index=result.index)
    return result


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def rows_in(result: Any) -> int:
    """How many rows a function returned (a pandas DataFrame, an Arrow table or batch)."""
    rows = getattr(result, "num_rows", None)
    return int(rows) if rows is not None else len(result)


def _first_only(ids: np.ndarray | None, n: int) -> Any:
    """An Arrow array of `n` lists: `ids` first, then nulls (the group's later rows; all
    null for None), typed as Spark types array<bigint> (no null element: Spark compares the
    types of Arrow results)."""
    import pyarrow as pa

    if ids is None:
        ids = np.empty(0, np.int64)
        first = 0
    else:
        first = 1
    offsets = np.full(n + 1, len(ids), dtype=np.int32)
    offsets[0] = 0
    valid = np.zeros(n, dtype=bool)
    valid[:first] = True
    kind = pa.list_(pa.field("element", pa.int64(), nullable=False))
    mask = pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids), type=kind, mask=mask)


def _first_only_series(ids: np.ndarray | None, n: int) -> Any:
    """`_first_only` as a pandas object column (PySpark converts a null list from None,
    not from an Arrow-backed column's NA)."""
    import pandas as pd

    values = np.empty(n, dtype=object)
    if n and ids is not None:
        values[0] = ids
    return pd.Series(values, dtype=object)


class GroupTap:
    """The `mapInArrow` right after a captured grouped map, in the same task: each group's
    first row carries the group's ids (`_first_only`); the tap gives every row of the k-th
    group the id of this partition's k-th group record instead, and journals those records
    (their parents: the ids) once the partition's rows are all read. It holds them until
    then, so a consumer that stops early still finds the records its rows name, and a failed
    attempt leaves none (only one attempt's may be merged)."""

    def __init__(self, spec: GroupTapSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        spec = self.spec
        base = record_id_base(spec.cp.number, partition_id())
        held: list[Any] = []
        counts: list[np.ndarray] = []
        parents: list[np.ndarray] = []
        groups = 0
        for batch in batches:
            col = batch.column(spec.defs)
            first = col.is_valid().to_numpy(zero_copy_only=False)
            if len(first) and not first[0] and groups == 0:
                raise RuntimeError("grouped map output: a row before its group's first row")
            starts = col.filter(pa.array(first))
            counts.append(pc.list_value_length(starts).to_numpy(zero_copy_only=False))
            parents.append(np.asarray(starts.flatten().to_numpy(zero_copy_only=False), np.int64))
            gids = base + groups + np.cumsum(first, dtype=np.int64) - 1
            groups += int(first.sum())
            index = batch.schema.get_field_index(spec.defs)
            held.append(batch.remove_column(index).append_column(spec.gid, pa.array(gids)))
        if groups and spec.journal:
            counted = np.concatenate(counts).astype(np.int64)
            journal_groups(spec.writer, spec.run_id, spec.cp, counted, np.concatenate(parents))
        yield from held


@dataclass(frozen=True)
class GroupTapSpec:
    run_id: str
    writer: WriterSpec
    cp: CapturePoint  # the group records' capture point
    defs: str  # the grouped map's column of each group's ids (on its first row)
    gid: str  # the column of each row's group record id
    journal: bool  # False in a replay: the run's lineage is not journaled again


def group_function(
    func: Callable,
    spec: UdfSpec,
    ids: str,
    names: list[str],
    out: str,
    arity: int,
    sides: int,
    arrow: bool,
    hints: list[Any] | None = None,
) -> Callable:
    """The function Spark runs for each group (or pair of cogroups): `arity` positional
    parameters, as the user's function has, since Spark passes the grouping key or not by
    counting them. `hints`: the iterator form's type hints (the parameters' in order, then
    the return's), which Spark chooses the form by; None: the plain form (no hints)."""
    run = _GroupRun(func, spec, ids, names, out, arity > sides, arrow, hints is not None)
    fn: Callable
    if sides == 1:
        if arity == 1:

            def one(data):
                return run(None, data)

            fn = one
        else:

            def keyed(key, data):
                return run(key, data)

            fn = keyed
    elif arity == 2:

        def both(left, right):
            return run(None, left, right)

        fn = both
    else:

        def keyed_both(key, left, right):
            return run(key, left, right)

        fn = keyed_both
    params = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    fn.__annotations__ = (
        {} if hints is None else {**dict(zip(params, hints[:-1])), "return": hints[-1]}
    )
    return fn
