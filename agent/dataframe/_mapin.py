"""`mapInPandas` / `mapInArrow` with lineage.

The user's function reads its partition's batches and may return any rows, in any number,
at any time: which input rows a returned row was made from is not visible from outside. So
by default (`lineage="partition"`, always sound, as an RDD's `mapPartitions`) every row it
returns is made from every row of its partition that reached it, stored once: the rows name
their partition's group record, whose parents are those input rows (`_mapinrun`). A trace
back from one returned row gives its whole partition's rows.

`lineage="row"` is for functions that map each batch row by row (a model's predictions, a
column computed per row): row i of a returned batch is made from row i of the batch read
last. The returned batch's length is checked; its order and meaning are the function's
promise, as `mapPartitions(lineage="record")`'s streaming is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from .._spec import CapturePoint
from ._columns import Lineage, as_struct, fresh, one_ids_column
from ._mapinrun import MapInSpec, PartitionMap
from ._udfrun import UdfSpec

if TYPE_CHECKING:
    from ._frame import LineageDataFrame

LINEAGE_MODES = ("partition", "row")
# The group capture point of a replay's rebuilt query (nothing is journaled at it).
NO_GROUP = CapturePoint(0, "replay", "group", "JOIN")
_MODULES = (
    "agent.dataframe._udfrun",
    "agent.dataframe._mapgroupsrun",
    "agent.dataframe._mapinrun",
)


def partition_map(
    frame: LineageDataFrame,
    func: Any,
    schema: Any,
    arrow: bool,
    lineage: str,
    **options: Any,
) -> LineageDataFrame:
    """`frame.mapInPandas(func, schema, **options)` (`mapInArrow` when `arrow`) with
    `lineage` "partition" or "row" (see the module's text)."""
    what = "mapInArrow" if arrow else "mapInPandas"
    if lineage not in LINEAGE_MODES:
        raise ValueError(f"{what}: lineage must be 'partition' or 'row', got {lineage!r}")
    lin = frame._lin
    if not lin:
        return frame._new(getattr(frame._df, what)(func, schema, **options))
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType

    agent = frame._agent
    plumbing = agent.plumbing
    fields = as_struct(agent.spark, schema)
    ids, out = fresh("mi"), fresh()
    group = None
    single = len(lin.longs) == 1 and not lin.arrays
    if lineage == "partition":
        # A replay journals nothing: its rows carry a group id only to have the captured
        # columns.
        group = NO_GROUP if agent.replaying else plumbing.group_cp(what, sorted(lin.cps))
        cps = lin.cps if agent.replaying else frozenset({group.number})
        kind, out_lin = StructField(out, LongType(), False), Lineage((out,), (), cps)
    elif single:
        kind, out_lin = StructField(out, LongType(), True), Lineage((out,), (), lin.cps)
    else:
        ids_type = ArrayType(LongType(), False)
        kind, out_lin = StructField(out, ids_type, True), Lineage((), (out,), lin.cps)
    name = getattr(func, "__name__", what)
    spec = MapInSpec(
        UdfSpec(plumbing.run_id, plumbing.writer_spec, name, plumbing.on_error),
        ids,
        out,
        tuple(fields.names),
        arrow,
        group,
        journal=not agent.replaying,
    )
    src = frame._src().withColumn(ids, one_ids_column(F, lin)).drop(*lin.names)
    with agent.capture_python(_MODULES):
        df = getattr(src, what)(
            PartitionMap(func, spec), StructType([*fields.fields, kind]), **options
        )
    return frame._new(df, out_lin)
