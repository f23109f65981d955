"""`df.rdd` and `df.toJSON()`: a captured DataFrame's rows handed to the RDD agent, so a
pipeline that goes on with RDD operations keeps its lineage across the change.

Each row becomes a record of the RDD agent (a source of its plan, `FrameSource`) named by its
position in its partition, whose parents are the row's ids: a trace from the RDD's outputs
goes back through it to the DataFrame's source rows, and forward from them to the RDD's
outputs. Positions must name the same rows every time the RDD's plan runs (each action runs
it again, and a partition's records are merged from one run only), so the DataFrame must give
its rows in the same order each time: a source read, then row-at-a-time operators and unions,
or a cached frame. Anything else (a join, an aggregate, a sort, a shuffle) raises, asking
for `cache()`.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from .._rdd import UnsupportedOperation
from ._columns import Lineage, all_ids, fresh, is_hidden
from ._frame import quoted, require_ordered

if TYPE_CHECKING:
    from ._frame import LineageDataFrame


def rows_rdd(frame: LineageDataFrame, once: str | None = None) -> Any:
    """`frame.rdd` as a captured RDD (vanilla's RDD when nothing is captured). `once`: the
    action (`foreach`...) the RDD is made for, its only one, so any order will do."""
    lin = frame._lin
    if not lin:
        return frame._df.rdd
    if once is None:
        require_ordered(frame, "DataFrame.rdd")
    # Each row arrives as its visible columns then its ids, flat: a nested struct would
    # make PySpark convert every row field by field (measured slower than splitting).
    names = [n for n in frame._all_columns if not is_hidden(n)]
    return _captured(once or "rdd", frame, [quoted(n) for n in names], names)


def json_rdd(frame: LineageDataFrame) -> Any:
    """`frame.toJSON()`: each row as a JSON string (Spark's JSON writer, as vanilla's), a
    captured RDD."""
    lin = frame._lin
    if not lin:
        return frame._df.toJSON()
    visible = [quoted(n) for n in frame._all_columns if not is_hidden(n)]
    json = F.to_json(F.struct(*visible))
    spark = frame._df.sparkSession
    if not frame._agent.plumbing.classic or (
        str(spark.conf.get(_TO_JSON_FRAME, "false")).lower() == "true"
    ):
        return frame.select(json.alias("value"))  # as vanilla's (Spark Connect's always)
    require_ordered(frame, "DataFrame.toJSON")
    return _captured("toJSON", frame, [json.alias("value")], None)


# Spark 4's setting under which classic PySpark's toJSON returns a DataFrame of one "value"
# column (Spark Connect's always does).
_TO_JSON_FRAME = "spark.sql.pyspark.toJSON.returnDataFrame"


def _ids(lin: Lineage) -> Any:
    """A row's ids as one value: its long (None: no parent) when it has one, else an array."""
    if len(lin.longs) == 1 and not lin.arrays:
        return F.col(lin.longs[0])
    return all_ids(F, lin)


def _captured(op: str, frame: LineageDataFrame, cols: list, fields: list[str] | None) -> Any:
    """The RDD agent's RDD of `frame`'s rows: `cols` then the ids, each row handed on as a
    Row of `fields` (None: its one value, `toJSON`'s string)."""
    plumbing = frame._agent.plumbing
    if not plumbing.classic:
        raise UnsupportedOperation(
            f"DataFrame.{op} under Spark Connect with lineage capture: the lineage agent's "
            "RDDs need a classic SparkContext"
        )
    df = frame._df.select(*cols, _ids(frame._lin).alias(fresh()))
    # `df.rdd` plans the query now, the scans' partitions with it: their ids' plan too.
    plumbing.prepare(frame, op)
    around = partial(plumbing.blaming, frame)
    return plumbing.rows_rdd(op, df.rdd, sorted(frame._lin.cps), around, fields)
