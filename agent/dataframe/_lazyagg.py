"""Lazy lineage for an aggregate whose groups are then filtered (HAVING-style `where`), under
`LineageContext(..., aggregates="auto")` (the default: inputs that read Parquet or
`createDataFrame` rows) and `aggregates="lazy"` (any input).

An eager aggregate collects every group's ids (`collect_list`: Spark leaves its codegen hash
aggregate and shuffles every id), even when a `where` on its output keeps a handful of groups
(TPC-H Q18: 300 K groups collect 1.2 M ids to keep ~10). When the aggregate's input is cheap
and safe to compute again, `aggregate().where(cond)` instead runs

1. the aggregate with no ids (Spark's own plan), then `cond`: the surviving groups `S`,
   computed once, when the filtered frame is first used, and held in the plan as local rows
   when they are few (`survivors`; else the filter runs on the eager aggregate);
2. the aggregate's input again, only its group keys and ids, inner-joined to `S` on the keys
   null-safely (`<=>`: null keys match null keys, NaN NaN and -0.0 0.0, as Spark groups),
   `S` broadcast: a shuffle join would shuffle every input row (Spark starts the input's
   shuffle before it knows `S` is small), slower than collecting eagerly (TPC-H Q18, SF 0.2,
   one process, load 7-14: 1.12-1.50x the eager capture; broadcast 0.91x on Parquet, but
   1.14x on CSV, whose second parse of lineitem costs more than the ids it saves). So `S`
   must fit a broadcast (hence the bound), and the input should be cheap to read again
   (hence "auto" takes Parquet and `createDataFrame` inputs only),
3. grouped by `S`'s keys: each surviving row (its values taken from `S`, `first` of equal
   values) with every id of its group, as the eager aggregate gives it.

`S` is used once, so a nondeterministic aggregate or condition (`first`, `rand`) cannot make
the ids and the values disagree. The ids are exact when the input gives the same rows (and
ids) each time it runs: `recomputable` accepts a capture point's source (a file scan,
`createDataFrame`) followed by row-at-a-time, deterministic operators only (select /
withColumn(s) / renames / drop / toDF / alias / filter, with Spark's builtin functions and no
nondeterministic one), group keys that are visible columns of an atomic type, and a plain
`groupBy` (not rollup / cube / grouping sets). Anything else (a UDF, `on_error="skip"`,
`sample`, joins, windows, a replayed or cached input) keeps the eager form.

A `limit` on such an aggregate (and so `show`, `take`, `first`, `head`), directly or through
sorts and row-at-a-time projections of it (`top_k_step`: select / selectExpr / withColumn(s)
/ renames / drop / toDF / alias / orderBy / sort, deterministic builtins only, no window),
takes the same plan (`limited`): those calls replayed over the aggregate without ids, its
group keys carried along as hidden columns, sorted and limited: `S`, computed once (a tie at
the k-th row resolved by that run, for the values and the ids alike), each row with its
position, by which the rows return in order, each with its group's ids.

`lc.sql`'s HAVING and LIMIT blocks take the same plan, written in SQL (`filtered_sql`), where
the same rules hold (`_sqllazy`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from ._columns import Lineage, collected, fresh
from ._frame import quoted  # _frame imports this module lazily: no cycle at load
from ._policy import CHEAP_SOURCES
from ._recipe import Call, Source, recipe_of
from ._windows import column_text, windows_in

if TYPE_CHECKING:
    from ._frame import LineageDataFrame

# Recorded calls that map each input row to at most one row, by its own values.
_ROW_AT_A_TIME = frozenset(
    {
        "select",
        "selectExpr",
        "withColumn",
        "withColumns",
        "withColumnRenamed",
        "withColumnsRenamed",
        "drop",
        "toDF",
        "alias",
        "filter",
        "where",
    }
)

# Recorded calls between a lazy aggregate and a limit that keep each row's lineage its
# group's: projections of one row at a time, renames, and sorts (the top-k's order).
TOP_K_STEPS = (_ROW_AT_A_TIME - {"filter", "where"}) | {"orderBy", "sort"}

# Spark builtins whose value differs between two runs of the same plan.
_NONDETERMINISTIC = frozenset(
    {
        "rand",
        "randn",
        "random",
        "uniform",
        "randstr",
        "uuid",
        "shuffle",
        "monotonically_increasing_id",
        "spark_partition_id",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "reflect",
        "java_method",
        "try_reflect",
    }
)

# Functions a column's text may call: PySpark's builtins (a Python UDF, registered or not,
# has a name of its own and makes the input not recomputable) and Spark's SQL spellings.
_BUILTIN = (
    frozenset(
        {n.lower() for n in dir(F) if not n.startswith("_")}
        | {"cast", "try_cast", "in", "like", "ilike", "rlike", "isnull", "isnotnull", "not"}
    )
    - _NONDETERMINISTIC
)
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")

_ATOMIC = frozenset(
    {
        "boolean",
        "tinyint",
        "smallint",
        "int",
        "bigint",
        "float",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
    }
)


@dataclass(frozen=True)
class LazyAggregate:
    """An aggregate whose ids are not collected yet: its input (`frame`) and its group keys
    (visible column names of the input)."""

    frame: LineageDataFrame
    keys: tuple[str, ...]


def lazy_aggregate(
    frame: LineageDataFrame, kind: str, cols: list, exprs: list, policy: str
) -> LazyAggregate | None:
    """The lazy form of `frame.groupBy(*cols).agg(*exprs)` under the aggregate `policy`, or
    None when it must be eager."""
    from ._udf import uses_current

    if kind != "groupBy" or not cols or not exprs or not lazy_input(frame, policy):
        return None
    if uses_current((*cols, *exprs)):
        return None
    keys = _key_names(frame, cols)
    if keys is None:
        return None
    return LazyAggregate(frame, keys)


def filtered(lazy: LazyAggregate, eager: LineageDataFrame, condition: Any) -> Any:
    """The rows of `lazy`'s aggregate that pass `condition`, each with its group's ids in
    the `eager` aggregate frame's one array column (what the eager aggregate, filtered,
    holds). Runs a job: the survivors are computed now, once, and taken to the driver when
    they are few (`survivors`); when they are not, the eager aggregate filtered."""
    (name,) = eager._lin.arrays
    # The eager aggregate without its ids: Spark prunes the unused collect_list, and a
    # condition made of the aggregate's own columns (agg["q"] > 300) still resolves.
    plain = eager._df.drop(name)
    names = list(plain.columns)
    s = [fresh("s") for _ in names]
    kept = survivors(plain.filter(condition).toDF(*s))
    if kept is None:
        return eager._df.filter(condition)
    m = len(lazy.keys)
    grouped = _joined(lazy, kept, s[:m], s[:m], s[m:], name)
    return attributed(
        eager._df, grouped.select(*[F.col(c).alias(n) for c, n in zip(s, names)], name)
    )


def top_k_step(call: Call) -> bool:
    """Whether a recorded call on a lazy aggregate (or on a frame made from it by such
    calls) may stand between the aggregate and a limit in the lazy top-k: a row-at-a-time
    projection or a sort, calling Spark's deterministic builtins only (no UDF: a captured one
    records the row's ids, which the replay does not carry), with no window (its value is
    not the row's alone)."""
    from ._udf import uses_current

    args = (*call.args, *call.kwargs.values())
    if call.method not in TOP_K_STEPS or not _deterministic(args):
        return False
    texts = [column_text(a) for a in _flat_args(args) if isinstance(a, str) or _is_column(a)]
    return not uses_current(texts) and not any(windows_in(t) for t in texts)


def limited(
    lazy: LazyAggregate,
    agg: LineageDataFrame,
    calls: list[Call],
    frame: LineageDataFrame,
    num: int,
) -> Any:
    """The first `num` rows of `frame`, which `calls` (each a `top_k_step`) made from `lazy`'s
    aggregate frame `agg`, in that order, each with its group's ids in `agg`'s one array
    column: what `frame` limited holds. Runs a job: the rows are computed now, once, by
    `calls` replayed over the aggregate without ids, its group keys carried as hidden columns
    (`survivors`: ties at the `num`-th row resolved by that one run, both for the values and
    the ids); when they are too many, or a call does not resolve over the replayed frame (a
    column taken from another frame, `df2["r"]`), `frame` eagerly, limited."""
    from pyspark.errors import AnalysisException

    lin = agg.lineage_columns
    (name,) = lin.arrays
    plain = agg.dataframe.drop(name)
    hidden = [fresh("g") for _ in lazy.keys]
    try:
        # The keys by name: the aggregate's first columns (its columns kept as they are, so
        # that `agg["q"]` in a call still resolves).
        keyed = plain.withColumns(dict(zip(hidden, map(quoted, plain.columns[: len(hidden)]))))
        top = agg.rebased(keyed, Lineage(tuple(hidden), (), lin.cps))
        for call in calls:
            top = getattr(top, call.method)(*call.args, **call.kwargs)
        rows = top.dataframe.limit(num)
        columns = list(rows.columns)
    except AnalysisException:
        return frame.dataframe.limit(num)
    s = [fresh("s") for _ in columns]
    pos = fresh("pos")
    kept = survivors(rows.toDF(*s), position=pos)
    if kept is None:
        return frame.dataframe.limit(num)
    named = dict(zip(columns, s))  # (hidden names are unique)
    values = [(sn, c) for c, sn in zip(columns, s) if c not in hidden]
    grouped = _joined(lazy, kept, [named[h] for h in hidden], [pos], [v for v, _ in values], name)
    # The k rows in the survivors' order: one task sorts them (a global sort would sample,
    # running the join and grouping above once more).
    ordered = grouped.coalesce(1).sortWithinPartitions(pos)
    return attributed(
        frame.dataframe, ordered.select(*[F.col(v).alias(c) for v, c in values], name)
    )


def attributed(df: Any, rows: Any) -> Any:
    """`rows`, which hold `df`'s columns (what `df` filtered or limited holds), as output
    columns of `df` itself: `df` emptied (Spark's optimizer prunes it: never computed)
    united with them (a union's columns are its first child's), so that a column taken from
    the aggregate or frame (`agg["k"]`) resolves over the result, as it does over vanilla's
    filtered or limited frame. `rows` as they are when the names or types differ (a union
    would convert them)."""
    want = df.schema
    names = [f.name for f in want.fields]
    if len(set(names)) < len(names):
        return rows
    rows = rows.select(*[quoted(n) for n in names]) if rows.columns != names else rows
    if [f.dataType for f in rows.schema.fields] != [f.dataType for f in want.fields]:
        return rows
    return df.where(F.lit(False)).unionAll(rows)


def _joined(
    lazy: LazyAggregate, kept: Any, keys: list[str], by: list[str], values: list[str], name: str
) -> Any:
    """`lazy`'s input (its keys and ids) joined null-safely to the broadcast survivors
    `kept` (keys `keys`), grouped by `by` (a survivor's keys, or its position when a key
    may repeat): each survivor's `values` columns (`first`: equal in a group) and its
    group's ids in the array column `name`."""
    src = lazy.frame._lin
    k = [fresh("k") for _ in lazy.keys]
    ids = [quoted(h) for h in src.longs]
    pre = lazy.frame._df.select(*[quoted(c).alias(kn) for c, kn in zip(lazy.keys, k)], *ids)
    on = reduce(lambda a, b: a & b, [F.col(kn).eqNullSafe(F.col(sn)) for kn, sn in zip(k, keys)])
    return (
        pre.join(F.broadcast(kept), on, "inner")
        .groupBy(*by)
        .agg(*[F.first(F.col(c)).alias(c) for c in values], collected(F, src, name))
    )


def survivors(df: Any, position: str | None = None) -> Any | None:
    """`df` (a filtered aggregate, no ids) computed now and held as a local relation in the
    plan (its rows taken to the driver as Arrow data: exact values), or None when its rows
    are more than `SURVIVORS_ROWS`, its Arrow data more than `SURVIVORS_BYTES`, a column is
    not of an atomic type, or computing it fails (the eager plan then gives the rows, or
    vanilla's error when it runs). Used once, so a nondeterministic aggregate or condition
    (`first`, `rand`) cannot make the ids and the values disagree; a broadcast of this size
    cannot hit Spark's limits or fill the driver's heap. `position`: a long column of that
    name added, each row's index in `df`'s order (what a top-k returns them in)."""
    from . import _policy

    if not all(atomic(t) for _, t in df.dtypes):
        return None
    rows, size = _policy.SURVIVORS_ROWS, _policy.SURVIVORS_BYTES
    try:
        table = df.limit(rows + 1).toArrow()
    except Exception:  # the eager plan raises vanilla's error, if there is one, when run
        return None
    if table.num_rows > rows or table.nbytes > size:
        return None
    schema = df.schema
    if position is not None:
        import pyarrow as pa

        table = table.append_column(position, pa.array(range(table.num_rows), pa.int64()))
        schema = schema.add(position, "long", nullable=False)
    return df.sparkSession.createDataFrame(table, schema=schema)


def filtered_sql(
    survivors: str, columns: list[str], keys: int, names: list[str], pre: str, ids: str, out: str
) -> str:
    """`filtered`'s plan as Spark SQL text (for `lc.sql`'s HAVING): `survivors` is a query of
    the filtered aggregate's rows, its columns named `columns` by position (its first
    `keys` are the group keys, the others its output, named `names` in the result); `pre`
    the aggregate's input, the same keys (as `columns[:keys]`) and the ids column `ids`.
    Each surviving row, its values as `survivors` gives them, with every id of its group in
    the array column `out`."""
    from sqlglot import exp

    from ._sqldialect import to_sql

    p, s = fresh("p"), fresh("s")
    key = columns[:keys]
    on = " AND ".join(f"{p}.{k} <=> {s}.{k}" for k in key)
    values = ", ".join(
        f"first({s}.{c}) AS {to_sql(exp.to_identifier(n, quoted=True))}"
        for c, n in zip(columns[keys:], names)
    )
    return (
        f"SELECT /*+ BROADCAST({s}) */ {values}, collect_list({p}.{ids}) AS {out} "
        f"FROM ({pre}) AS {p} JOIN ({survivors}) AS {s}({', '.join(columns)}) ON {on} "
        f"GROUP BY {', '.join(f'{s}.{k}' for k in key)}"
    )


def lazy_input(frame: LineageDataFrame, policy: str) -> bool:
    """Whether `frame` can feed a lazy aggregate under the aggregate `policy`: one source's
    rows (one id column), with `recomputable` calls; under "auto", a source cheap to read
    again (Parquet, `createDataFrame`)."""
    lin = frame._lin
    if policy == "eager" or lin.arrays or len(lin.longs) != 1:
        return False
    source = recomputable(frame)
    if source is None:
        return False
    return policy == "lazy" or (source.scan[0] if source.scan else None) in CHEAP_SOURCES


def deterministic_sql(text: str) -> bool:
    """Whether a Spark SQL expression calls Spark's deterministic builtins only (what a
    recomputed input may compute)."""
    return _deterministic(text)


def atomic(dtype: str) -> bool:
    """Whether a column of this Spark type (`dtypes` spelling) can be a lazy group key."""
    return dtype in _ATOMIC or dtype.startswith("decimal")


def recomputable(frame: LineageDataFrame) -> Source | None:
    """The source of `frame` when `frame` is that source followed by row-at-a-time
    deterministic calls only, else None."""
    from ._frame import LineageDataFrame

    obj: Any = frame
    while True:
        recipe = recipe_of(obj)
        if isinstance(recipe, Source):
            return recipe
        if not isinstance(recipe, Call) or recipe.method not in _ROW_AT_A_TIME:
            return None
        if not all(_deterministic(a) for a in (*recipe.args, *recipe.kwargs.values())):
            return None
        obj = recipe.receiver
        if type(obj) is not LineageDataFrame:
            return None


def calls_only_builtins(col: Any) -> bool:
    """Whether a column (or SQL text) calls Spark's builtin functions only (deterministic
    or not): no UDF."""
    if not (isinstance(col, str) or _is_column(col)):
        return True
    names = {c.lower() for c in _CALL.findall(column_text(col))}
    return names <= _BUILTIN | _NONDETERMINISTIC


def deterministic_args(args: Any) -> bool:
    """Whether recorded call arguments are deterministic (see `_deterministic`)."""
    return _deterministic(args)


def _is_column(arg: Any) -> bool:
    return type(arg).__name__ == "Column"


def _flat_args(args: Any) -> list:
    """`args`' leaves (a dict's keys and values, a list's items)."""
    if isinstance(args, list | tuple):
        return [x for a in args for x in _flat_args(a)]
    if isinstance(args, dict):
        return _flat_args([*args.keys(), *args.values()])
    return [args]


def _deterministic(arg: Any) -> bool:
    if isinstance(arg, list | tuple):
        return all(_deterministic(a) for a in arg)
    if isinstance(arg, dict):
        return all(_deterministic(a) for a in (*arg.keys(), *arg.values()))
    if isinstance(arg, str) or type(arg).__name__ == "Column":
        calls = _CALL.findall(column_text(arg))
        return all(c.lower() in _BUILTIN for c in calls)
    return isinstance(arg, int | float | bool | type(None))


def _key_names(frame: LineageDataFrame, cols: list) -> tuple[str, ...] | None:
    """The visible input columns `cols` name, when each is one of an atomic type."""
    types = dict(frame.dtypes)
    out = []
    for c in cols:
        text = column_text(c) if isinstance(c, str) or type(c).__name__ == "Column" else None
        if text is None:
            return None
        if text.startswith("`") and text.endswith("`") and "`" not in text[1:-1]:
            text = text[1:-1]
        elif "." in text or "`" in text:
            return None
        if not atomic(str(types.get(text, ""))):
            return None
        out.append(text)
    return tuple(out)
