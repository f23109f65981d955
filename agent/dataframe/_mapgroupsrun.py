"""What a captured grouped map (`applyInPandas`, `applyInArrow`, cogrouped or not) runs in
Spark's Python workers (executor side: no pyspark driver modules, no repository).

The user's function gets its group as vanilla would give it (the hidden lineage columns taken
out); every row it returns gets, in one array column more, the ids of every row of its group
(of both groups when cogrouped): the function saw all of them. When the function raises,
FAIL events name those rows as culprits; then `on_error="fail"` re-raises (the task fails as
Spark's would) and `"skip"` returns no row for the group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._udfrun import UdfSpec, record_failure

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
    ) -> None:
        self.func = func
        self.spec = spec
        self.ids = ids
        self.names = names
        self.out = out
        self.keyed = keyed
        self.arrow = arrow

    def __call__(self, key: Any, *groups: Any) -> Any:
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

    def _empty(self) -> Any:
        if self.arrow:
            import pyarrow as pa

            return pa.table({})
        import pandas as pd

        return pd.DataFrame()  # no rows, no columns: Spark takes it for any schema

    def _with_ids(self, result: Any, ids: np.ndarray) -> Any:
        return with_column(result, self.out, lambda n: _repeated(ids, n), self.names, self.arrow)


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
    array of its length). A result that is not of the expected kind, or empty with no column (which
    Spark takes for any schema), is returned as it is: Spark's own check names what is
    wrong."""
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
    # An Arrow-backed column: Spark takes its Arrow array as it is (a list array's offsets
    # checked for overflow; a long column's nulls kept, where numpy would make floats).
    result[name] = pd.Series(pd.arrays.ArrowExtensionArray(values(len(result))), index=result.index)
    return result


def _repeated(ids: np.ndarray, n: int) -> Any:
    """An Arrow array of `n` lists, each `ids`, typed as Spark types array<bigint> (no null
    element: Spark compares the types of Arrow results)."""
    import pyarrow as pa

    offsets = np.arange(n + 1, dtype=np.int64) * len(ids)
    kind = pa.large_list(pa.field("element", pa.int64(), nullable=False))
    return pa.LargeListArray.from_arrays(offsets, np.tile(ids, n), type=kind).cast(
        pa.list_(pa.field("element", pa.int64(), nullable=False))
    )


def group_function(
    func: Callable,
    spec: UdfSpec,
    ids: str,
    names: list[str],
    out: str,
    arity: int,
    sides: int,
    arrow: bool,
) -> Callable:
    """The function Spark runs for each group (or pair of cogroups): `arity` positional
    parameters, as the user's function has, since Spark passes the grouping key or not by
    counting them."""
    run = _GroupRun(func, spec, ids, names, out, arity > sides, arrow)
    if sides == 1:
        if arity == 1:

            def one(data: Any) -> Any:
                return run(None, data)

            return one

        def keyed(key: Any, data: Any) -> Any:
            return run(key, data)

        return keyed
    if arity == 2:

        def both(left: Any, right: Any) -> Any:
            return run(None, left, right)

        return both

    def keyed_both(key: Any, left: Any, right: Any) -> Any:
        return run(key, left, right)

    return keyed_both
