"""`df.stat` and the statistics methods with lineage: `crosstab`, `freqItems`, `corr`,
`cov`, `approxQuantile` (and `sampleBy`, a filter: the frame's own).

Spark computes each over the visible columns exactly as vanilla does; the lineage comes from
one more aggregate of the rows' ids over the same input, so the input must give the same rows
both times (`require_stable`: cache it otherwise).

- `crosstab(c1, c2)`: a row per value of `c1`, made from the rows that have that value (its
  counts are theirs). Spark names the values as strings (null as "null"), and so are they
  matched.
- `freqItems(cols)`: its one row is made from every row (each was counted).
- `corr`, `cov`, `approxQuantile` return numbers, not rows: the action records one output
  record holding the value, made from every row, so `df.lineage()` traces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from ._columns import Lineage, collected, fresh, sql_name

if TYPE_CHECKING:
    from ._frame import LineageDataFrame


def crosstab(frame: LineageDataFrame, col1: str, col2: str) -> LineageDataFrame:
    from ._frame import require_stable

    if not frame._lin:
        return frame._new(frame._df.crosstab(col1, col2))
    require_stable(frame, "crosstab()")
    table = frame._visible_df().crosstab(col1, col2)
    first = table.columns[0]  # "{col1}_{col2}": col1's values, as strings
    key, ids = fresh(), fresh()
    value = f"coalesce(CAST({sql_name(col1)} AS STRING), 'null')"
    keyed = frame._df.groupBy(F.expr(value).alias(key)).agg(collected(F, frame._lin, ids))
    out = table.join(keyed, F.col(sql_name(first)) == F.col(key)).drop(key)
    return frame._new(out, Lineage((), (ids,), frame._lin.cps))


class LineageStatFunctions:
    """`df.stat` of a captured DataFrame: PySpark's DataFrameStatFunctions, with lineage."""

    def __init__(self, frame: LineageDataFrame) -> None:
        self._frame = frame

    def crosstab(self, col1: str, col2: str) -> LineageDataFrame:
        return self._frame.crosstab(col1, col2)

    def freqItems(self, cols: Any, support: float | None = None) -> LineageDataFrame:
        return self._frame.freqItems(cols, support)

    def corr(self, col1: str, col2: str, method: str | None = None) -> float:
        return self._frame.corr(col1, col2, method)

    def cov(self, col1: str, col2: str) -> float:
        return self._frame.cov(col1, col2)

    def approxQuantile(self, col: Any, probabilities: Any, relativeError: float) -> Any:
        return self._frame.approxQuantile(col, probabilities, relativeError)

    def sampleBy(self, col: Any, fractions: dict, seed: int | None = None) -> LineageDataFrame:
        return self._frame.sampleBy(col, fractions, seed)
