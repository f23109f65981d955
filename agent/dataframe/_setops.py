"""DataFrame `intersect`, `intersectAll`, `subtract`, `exceptAll` with lineage.

As Spark compares rows in a set operation (by position, nulls equal), both sides' rows are
tagged with their side and grouped by value; each group keeps its rows' ids per side:

- an INTERSECT row has every duplicate's lineage on both sides;
- an EXCEPT row has every left duplicate's (the right side only excludes, as in an anti
  join);
- the ALL variants repeat a row min(left, right) / left - right times, each copy with the
  group's lineage (which duplicate a copy is, is not defined).

`lc.sql`'s INTERSECT / EXCEPT rewrite (`_sql.SqlRewriter.setop`) has the same semantics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from ._columns import Lineage, all_ids, fresh, is_hidden

if TYPE_CHECKING:
    from ._frame import LineageDataFrame


def set_operation(
    left: LineageDataFrame, right: LineageDataFrame, intersect: bool, every: bool
) -> LineageDataFrame:
    names = left.columns
    keys = [fresh("c") for _ in names]
    ids, side = fresh(), fresh("s")

    def tagged(frame: LineageDataFrame, s: int):
        # Positional, as Spark's set operations: visible column i becomes keys[i].
        it = iter(keys)
        df = frame._df.toDF(*[c if is_hidden(c) else next(it) for c in frame._all_columns])
        return df.select(*keys, all_ids(F, frame._lin).alias(ids), F.lit(s).alias(side))

    both = tagged(left, 0).union(tagged(right, 1))
    l_ids, r_ids, nl, nr = fresh(), fresh(), fresh(), fresh()

    def of(s: int):
        return F.flatten(F.collect_list(F.when(F.col(side) == s, F.col(ids))))

    groups = both.groupBy(*keys).agg(
        of(0).alias(l_ids),
        of(1).alias(r_ids),
        F.count_if(F.col(side) == 0).alias(nl),
        F.count_if(F.col(side) == 1).alias(nr),
    )
    if intersect:
        lineage = F.concat(F.col(l_ids), F.col(r_ids))
        copies = F.least(F.col(nl), F.col(nr))
        keep = (F.col(nl) > 0) & (F.col(nr) > 0)
    else:
        lineage = F.col(l_ids)
        copies = F.greatest(F.col(nl) - F.col(nr), F.lit(0))
        keep = (F.col(nl) > 0) & (F.col(nr) == 0)
    if every:
        rep = fresh("r")
        groups = groups.withColumn(rep, F.explode(F.array_repeat(F.lit(0), copies.cast("int"))))
    else:
        groups = groups.where(keep)
    out = fresh()
    df = groups.select(*[F.col(k).alias(n) for k, n in zip(keys, names)], lineage.alias(out))
    lin = Lineage((), (out,), left._lin.cps | right._lin.cps)
    return left._new(df, lin)
