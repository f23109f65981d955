"""Grouped maps with lineage: `groupBy(...).applyInPandas(f, schema)` and `applyInArrow`, and
their cogrouped forms (`g1.cogroup(g2).applyInPandas(f, schema)`).

The user's function sees its group as vanilla PySpark gives it and may return any rows, so
each row it returns is made from its whole group (both groups when cogrouped): the function
saw all of them, as an aggregate's output row sees its group's. Spark runs the function as
it would; beside each input row rides one hidden column of its ids, which the worker-side
wrapper (`_mapgroupsrun`) takes out of the group before the call. The first row the call
returns carries them, as one array, to a tap right after the map (`GroupTap`), which stores
them once, as the group's record, and gives every row of the group that record's id. A call
that raises records its group's rows as culprits; under on_error="skip" the group gives no
row.

The iterator forms (a function over an iterator of the group's batches, chosen by its type
hints) are captured too: what the function returns is held until it is done, and its rows
are made from every row it read.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from .._rdd import UnsupportedOperation
from ._columns import Lineage, as_struct, fresh, one_ids_column
from ._mapgroupsrun import GroupTap, GroupTapSpec, group_function
from ._mapin import NO_GROUP
from ._udfrun import UdfSpec

if TYPE_CHECKING:
    from ._frame import LineageDataFrame, LineageGroupedData

_MODULES = ("agent.dataframe._udfrun", "agent.dataframe._mapgroupsrun")
_ITERATOR_EVAL_TYPES = frozenset({215, 216})  # SQL_GROUPED_MAP_{ARROW,PANDAS}_ITER_UDF


def grouped_map(
    grouped: LineageGroupedData, func: Any, schema: Any, arrow: bool
) -> LineageDataFrame:
    """`grouped.applyInPandas(func, schema)` (`applyInArrow` when `arrow`) with lineage."""
    what = _method(arrow)
    frame = grouped._frame
    if not frame._lin:
        return frame._new(getattr(grouped.vanilla(frame._df), what)(func, schema))
    _check(grouped, what)
    return _mapped([grouped], func, schema, arrow, what)


def cogrouped_map(
    left: LineageGroupedData, right: LineageGroupedData, func: Any, schema: Any, arrow: bool
) -> LineageDataFrame:
    """`left.cogroup(right).applyInPandas(func, schema)` (`applyInArrow`) with lineage."""
    what = f"cogroup().{_method(arrow)}"
    lf, rf = left._frame, right._frame
    if not lf._lin and not rf._lin:
        ops = left.vanilla(lf._df).cogroup(right.vanilla(rf._df))
        return lf._new(getattr(ops, _method(arrow))(func, schema))
    _check(left, what)
    _check(right, what)
    return _mapped([left, right], func, schema, arrow, what)


def _method(arrow: bool) -> str:
    return "applyInArrow" if arrow else "applyInPandas"


def _check(grouped: LineageGroupedData, what: str) -> None:
    if grouped.kind != "groupBy":
        raise UnsupportedOperation(
            f"{what} after {grouped.kind} with lineage capture (Spark maps the groups of a groupBy)"
        )


def _mapped(
    sides: list[LineageGroupedData], func: Any, schema: Any, arrow: bool, what: str
) -> LineageDataFrame:
    frame = sides[0]._frame
    agent = frame._agent
    hints = _iterator_hints(func, arrow, what, len(sides))
    arity = len(inspect.getfullargspec(func).args)
    if arity not in (len(sides), len(sides) + 1):
        raise TypeError(
            f"{what}: the function takes {arity} positional arguments; Spark passes "
            f"{len(sides)} (the group{'s' if len(sides) > 1 else ''}) or {len(sides) + 1} "
            "(the grouping key first)"
        )
    fields = as_struct(agent.spark, schema)
    ids, defs, gid = fresh("gm"), fresh(), fresh()
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType

    returned = StructType([*fields.fields, StructField(defs, ArrayType(LongType(), False))])
    tapped = StructType([*fields.fields, StructField(gid, LongType(), False)])
    plumbing = agent.plumbing
    name = getattr(func, "__name__", _method(arrow))
    spec = UdfSpec(plumbing.run_id, plumbing.writer_spec, name, plumbing.on_error)
    cps: frozenset[int] = frozenset()
    grouped = []
    for side in sides:
        lin = side._frame._lin
        cps |= lin.cps
        src = side._frame._src(*side.keys).withColumn(ids, one_ids_column(F, lin)).drop(*lin.names)
        grouped.append(side.vanilla(src))
    # A replay journals nothing: its rows carry a group id only to have the captured columns.
    group = NO_GROUP if agent.replaying else plumbing.group_cp(_method(arrow), sorted(cps))
    tap = GroupTap(
        GroupTapSpec(plumbing.run_id, plumbing.writer_spec, group, defs, gid, not agent.replaying)
    )
    with agent.capture_python(_MODULES):
        wrapper = group_function(
            func, spec, ids, fields.names, defs, arity, len(sides), arrow, hints
        )
        mapped = grouped[0] if len(grouped) == 1 else grouped[0].cogroup(grouped[1])
        df = getattr(mapped, _method(arrow))(wrapper, returned).mapInArrow(tap, tapped)
    return frame._new(
        df, Lineage((gid,), (), cps if agent.replaying else frozenset({group.number}))
    )


def _iterator_hints(func: Any, arrow: bool, what: str, sides: int) -> list[Any] | None:
    """The type hints of an iterator form (told by them, as PySpark tells it: the function
    takes and returns batches), in parameter order, then the return's; None for the plain
    form (hints PySpark cannot read leave it, as for vanilla)."""
    try:
        from typing import get_type_hints

        from pyspark.sql.pandas import typehints

        infer = (
            typehints.infer_group_arrow_eval_type_from_func
            if arrow
            else typehints.infer_group_pandas_eval_type_from_func
        )
        eval_type = infer(func)
        hints = get_type_hints(func)
    except Exception:  # no such inference in this PySpark, or hints it cannot read
        return None
    if eval_type not in _ITERATOR_EVAL_TYPES:
        return None
    if sides > 1:
        raise UnsupportedOperation(f"{what} with a function over iterators of batches")
    params = inspect.getfullargspec(func).args
    return [hints.get(p) for p in params] + [hints.get("return")]
