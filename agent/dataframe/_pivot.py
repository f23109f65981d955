"""`groupBy(...).pivot(col, values).agg(...)` and `unpivot` / `melt` with lineage.

Pivot. Spark turns a pivot whose aggregates all return a type `PivotFirst` supports
(boolean, the integral and floating types, decimal) into two aggregates: one by (group keys,
pivot value), then one by the group keys that places each first-level value in the cell of
its pivot value (a cell with no row is null; rows whose pivot value is not among `values`
reach no cell, but their group still gives a row). The same two aggregates are built here,
the first also collecting each (keys, pivot value) group's ids, so the values are vanilla's
by construction and the input is read once:

- a row's lineage is every input row of its group whose pivot value is among `values`
  (compared null-safely, as Spark does: a null value has its own column; a NaN pivot value
  is among none, as in Spark, whose NaN value's cells are always null), the rows that make
  its cells;
- a group whose rows all fall outside `values` still gives a row (its cells null): its
  lineage is all its rows, which alone make it exist.

`values=None` is computed as Spark computes it (distinct values, sorted, at most
`spark.sql.pivotMaxValues`): a job, as vanilla runs (a float column's values as Spark's
strings, which name its columns as vanilla's). Aggregates of other types (a string
`min`, `collect_list`, `first` of a string) make Spark rewrite each cell into the aggregate
of a conditional instead, with other results (`count` gives 0, not null, for an empty cell;
`first` skips nulls): that plan is not reproduced and raises `UnsupportedOperation`, as do a
pivot after rollup / cube / grouping sets and a captured UDF in the aggregates.

Unpivot / melt makes each input row into one row per value column: each output row's
lineage is its one input row (the hidden columns ride along as id columns).
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from .._rdd import UnsupportedOperation
from ._columns import Lineage, collected, fresh
from ._frame import quoted  # _frame imports this module lazily: no cycle at load
from ._udf import uses_current

if TYPE_CHECKING:
    from ._frame import LineageDataFrame

# Result types of the aggregates for which Spark plans a pivot as two aggregates
# (`PivotFirst.supportsDataType`), in `dtypes` spelling.
_PIVOT_FIRST = frozenset({"boolean", "tinyint", "smallint", "int", "bigint", "float", "double"})

# Pivot column types whose NaN never matches a pivot value, NaN included: Spark's second
# aggregate (`PivotFirst`) looks a row's value up among the values with Scala's `==`, under
# which NaN is unequal to itself (and -0.0 equal to 0.0, as `<=>` has it), so a NaN value's
# cells are null and a row whose pivot value is NaN reaches no cell.
FLOATING = frozenset({"float", "double"})


def pivot_values(frame: LineageDataFrame, column: str, values: list | None) -> list:
    """The pivot values: `values`, or the distinct values of `column` as Spark computes them
    when none are given (`RelationalGroupedDataset.pivot`): sorted, nulls first."""
    if values is not None:
        return list(values)
    visible = frame._visible_df()
    limit = int(visible.sparkSession.conf.get("spark.sql.pivotMaxValues", "10000"))
    one = visible.select(column)
    distinct = one.distinct().limit(limit + 1).sort(column)
    ((name, dtype),) = one.dtypes
    if dtype == "float":
        # As Spark's strings: a float's Python double would name its column by the double
        # ("0.10000000149011612", not "0.1"); the string, cast to float, is the same value.
        distinct = distinct.select(quoted(name).cast("string"))
    rows = distinct.collect()
    if len(rows) > limit:
        visible.groupBy().pivot(column)  # PySpark's own error (too many values)
    return [r[0] for r in rows]


def pivoted(
    frame: LineageDataFrame, cols: list, column: str, values: list, exprs: list
) -> LineageDataFrame:
    """`frame.groupBy(*cols).pivot(column, values).agg(*exprs)`, each row with the ids of its
    group's rows that reach a cell (all of them when none does)."""
    if uses_current((*cols, column, *exprs)):
        raise UnsupportedOperation(
            "pivot with a captured UDF in its keys or aggregates is not supported with "
            "lineage capture"
        )
    # Vanilla's plan, analysed only: its errors, column names and types.
    vanilla = frame._visible_df().groupBy(*cols).pivot(column, values).agg(*exprs)
    out_types = vanilla.dtypes
    lin = frame._lin
    keys = [fresh("k") for _ in cols]
    piv, ids = fresh("p"), fresh()
    aggs = [fresh("a") for _ in exprs]
    first = (
        frame._df.groupBy(*cols, column)
        .agg(*[e.alias(a) for e, a in zip(exprs, aggs)], collected(F, lin, ids))
        .toDF(*keys, piv, *aggs, ids)
    )
    types = dict(first.dtypes)
    odd = [t for a in aggs if not pivot_first(t := types[a])]
    if odd:
        raise UnsupportedOperation(
            f"pivot with an aggregate of type {odd[0]} is not supported with lineage capture "
            "(Spark computes each cell as a conditional aggregate then); aggregates of "
            "boolean, integral, floating or decimal type are"
        )
    ptype = first.schema[piv].dataType
    match = [F.col(piv).eqNullSafe(F.lit(v).cast(ptype)) for v in values]
    if types[piv] in FLOATING:
        match = [m & ~F.isnan(piv) for m in match]
    inside = reduce(lambda a, b: a | b, match) if match else F.lit(False)
    # One first-level row per (keys, pivot value): `first` of the one that matches, null
    # when none does, as PivotFirst fills a cell.
    cells = [F.first(F.when(m, F.col(a)), ignorenulls=True) for m in match for a in aggs]
    name = fresh()
    reached = F.flatten(F.collect_list(F.when(inside, F.col(ids))))
    lineage = F.when(F.count_if(inside) > 0, reached).otherwise(
        F.flatten(F.collect_list(F.col(ids)))
    )
    second = first.groupBy(*keys).agg(*cells, lineage.alias(name))
    names = [n for n, _ in out_types]
    df = second.toDF(*[fresh("o") for _ in names], name)
    # Positional names and types: vanilla's (the types are the same by construction; a cast
    # only where Spark would say otherwise).
    df = df.select(
        *[
            (F.col(c) if t == got else F.col(c).cast(t)).alias(n)
            for (c, got), (n, t) in zip(df.dtypes, out_types)
        ],
        F.col(name),
    )
    return frame._new(df, Lineage((), (name,), lin.cps), columns=[*names, name])


def pivot_first(dtype: str) -> bool:
    """Whether Spark pivots an aggregate of this type (`dtypes` spelling) as two aggregates
    (`PivotFirst.supportsDataType`)."""
    return dtype in _PIVOT_FIRST or dtype.startswith("decimal")


def unpivoted(
    frame: LineageDataFrame,
    ids: Any,
    values: Any,
    variable: str,
    value: str,
) -> LineageDataFrame:
    """`frame.unpivot(ids, values, variable, value)`: each output row keeps its input row's
    hidden columns (added to the id columns, so `values=None` does not take them)."""
    if not isinstance(ids, list | tuple):
        ids = [ids]
    # The hidden columns come after the ids, before the variable and value columns: the
    # visible ones keep vanilla's order.
    hidden = [quoted(h) for h in frame._lin.names]
    return frame._new(frame._df.unpivot([*ids, *hidden], values, variable, value))
