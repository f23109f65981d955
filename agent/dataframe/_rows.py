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

from ._columns import all_ids, fresh, is_hidden
from ._frame import require_ordered
from ._rowsrun import RowSplitter

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
    ids = fresh()
    df = frame._df.withColumn(ids, all_ids(F, lin)).drop(*lin.names)
    fields = [f.name for f in df.schema.fields if not is_hidden(f.name)]
    return _captured(once or "rdd", frame, df, RowSplitter(fields))


def json_rdd(frame: LineageDataFrame) -> Any:
    """`frame.toJSON()`: each row as a JSON string (Spark's JSON writer, as vanilla's), a
    captured RDD."""
    lin = frame._lin
    if not lin:
        return frame._df.toJSON()
    require_ordered(frame, "DataFrame.toJSON")
    visible = [frame._df[n] for n in frame._all_columns if not is_hidden(n)]
    ids = fresh()
    df = frame._df.select(F.to_json(F.struct(*visible)).alias("value"), all_ids(F, lin).alias(ids))
    return _captured("toJSON", frame, df, RowSplitter(None))


def _captured(op: str, frame: LineageDataFrame, df: Any, split: RowSplitter) -> Any:
    plumbing = frame._agent.plumbing
    # `df.rdd` plans the query now, the scans' partitions with it: their ids' plan too.
    plumbing.prepare(frame, op)
    around = partial(plumbing.around, frame)
    return plumbing.rows_rdd(op, df.rdd.map(split), sorted(frame._lin.cps), around)
