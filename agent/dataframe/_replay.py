"""Replay of DataFrame and `lc.sql` pipelines: selective and exclusive (Newt's ex-replay).

A source row's record id is stable: assigned at the scan (a Parquet row's position, a CSV /
JSON / text line's, a `createDataFrame` row's index), before any shuffle, and it rides in
the source's hidden column. So a replay rebuilds the query from its recipes (`_recipe`) over
each source filtered on those ids:

- exclusive (`lc.replay(df, exclude=traced)`): every source row but the traced ones;
- selective (`lc.replay(traced)`): only the traced source rows, i.e. the query evaluated on
  the traced inputs (Cui-Widom: for an aggregate, a traced output row's group comes back
  whole, so the row is reproduced; see the README for where that does not hold).

The rebuilt query is the captured one (the same wrapper calls on the rebuilt inputs, the
hidden columns renamed to the originals' names, so UDF calls and `lc.sql`'s rewritten text
that refer to them run unchanged), but nothing is journaled and the action selects only the
visible columns: Spark's optimizer prunes the id lists the result does not use. The result is
what `collect()` of the DataFrame returns, with capture off, over those inputs. A UDF that
raises on a replayed row records that failure (a FAIL event) again.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import unpack_record_ids
from repository import BadInput

from .._rdd import UnsupportedOperation
from ._columns import fresh
from ._reader import carried
from ._recipe import Call, Source, SqlQuery, is_recorded, recipe_of

if TYPE_CHECKING:
    from .._trace import LineageRDD
    from ._frame import LineageDataFrame
    from ._session import FrameAgent

# Up to this many ids, a source is filtered with an IN list; above, with a broadcast semi /
# anti join on a DataFrame of the ids (one SQL literal per id would make a huge plan).
_IN_LIST = 5_000


def exclusive(agent: FrameAgent, frame: Any, exclude: Any) -> list:
    """`frame`'s rows (as `collect()` returns them, capture off) over its sources minus
    `exclude`'s source rows."""
    from .._trace import LineageRDD
    from ._frame import LineageDataFrame

    if not isinstance(frame, LineageDataFrame) or frame._agent is not agent:
        raise BadInput("replay(df, exclude=...): df must be a DataFrame of this LineageContext")
    if not frame._lin:
        raise BadInput("replay(df, exclude=...): df carries no lineage (capture is off)")
    if not isinstance(exclude, LineageRDD):
        raise BadInput("replay(..., exclude=...) takes a LineageRDD (e.g. df.lineage()...)")
    ids = _own_ids(agent, exclude, "exclusive replay")
    if not len(ids):
        raise BadInput("exclusive replay: nothing to exclude (the trace is empty)")
    by_cp = _at_sources(agent, frame, ids, "exclusive replay")
    return _run(agent, frame, {cp: (False, v) for cp, v in by_cp.items()})


def selective(agent: FrameAgent, traced: LineageRDD) -> list:
    """The query whose output `traced` was traced back from, re-run on exactly `traced`'s
    source rows (capture off): what its `collect()` returns over them."""
    if traced.origin is None:  # lc.replay sends such traces to the RDD replay, which says why
        raise BadInput("selective replay needs records traced back from an action's output")
    ids = _own_ids(agent, traced, "selective replay")
    frame = agent.plumbing.frames_of.get(int(traced.origin[0].number))
    if frame is None:
        raise BadInput(f"{traced.origin[0].component_id} is not a DataFrame action of this run")
    by_cp = _at_sources(agent, frame, ids, "selective replay")
    empty = np.array([], dtype=np.int64)
    return _run(agent, frame, {cp: (True, by_cp.get(cp, empty)) for cp in carried(frame)})


def is_dataframe_output(agent: FrameAgent | None, traced: Any) -> bool:
    """Whether `traced` was traced back from the output of a DataFrame action of `agent`."""
    origin = getattr(traced, "origin", None)
    return agent is not None and origin is not None and origin[0].number in agent.plumbing.frames_of


def _own_ids(agent: FrameAgent, lin: LineageRDD, what: str) -> np.ndarray:
    run = agent.plumbing.run_id
    if lin.run_id != run:
        raise BadInput(f"{what}: the records are of run {lin.run_id!r}, not this context's {run!r}")
    return lin.record_ids


def _at_sources(
    agent: FrameAgent, frame: LineageDataFrame, ids: np.ndarray, what: str
) -> dict[int, np.ndarray]:
    """`ids` by source capture point; anything but `frame`'s sources' rows is refused."""
    info = agent.plumbing.run_info()
    cps = unpack_record_ids(ids)[0]
    out: dict[int, np.ndarray] = {}
    for n in sorted(int(c) for c in np.unique(cps)):
        cp = info.capture_points.get(n)
        name = f"{cp.component_id} (capture point {n})" if cp is not None else f"capture point {n}"
        if cp is None or cp.dependency != "source":
            raise UnsupportedOperation(
                f"{what} of a DataFrame run at {name}: DataFrame and SQL runs replay from "
                "their source rows only; trace back to them first (go_back_all())"
            )
        if n not in carried(frame):
            raise BadInput(f"{what}: the records at {name} are not rows of this query's sources")
        out[n] = ids[cps == n]
    return out


def _run(agent: FrameAgent, frame: LineageDataFrame, filters: dict[int, tuple[bool, Any]]) -> list:
    rebuild = _Rebuild(agent, filters)
    was, agent.replaying = agent.replaying, True
    try:
        try:
            out = rebuild.frame(frame)
            return out._visible_df().collect()
        except UnsupportedOperation:
            raise
        except Exception as e:
            if _is_analysis_error(e):
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UnsupportedOperation(
                    "replay of this DataFrame: Spark could not analyze the rebuilt query "
                    "(an operator refers to a column bound to an intermediate DataFrame, "
                    f"df['x'] or df.x; write F.col('x') instead): {first}"
                ) from e
            raise
    finally:
        agent.replaying = was
        rebuild.close()


def _is_analysis_error(e: BaseException) -> bool:
    return type(e).__name__ == "AnalysisException" or "UNRESOLVED_COLUMN" in str(e)


class _Rebuild:
    """Builds each frame of a query again over filtered sources, once per frame."""

    def __init__(self, agent: FrameAgent, filters: dict[int, tuple[bool, Any]]) -> None:
        self.agent = agent
        self.filters = filters
        self.memo: dict[int, Any] = {}
        self.views: list[str] = []

    def close(self) -> None:
        catalog = self.agent.spark.catalog
        for v in self.views:
            with contextlib.suppress(Exception):  # a view this replay made, used by nothing else
                catalog.dropTempView(v)

    def value(self, x: Any) -> Any:
        """An argument of a recorded call, with captured frames replaced by rebuilt ones."""
        if is_recorded(x):
            return self.frame(x)
        if isinstance(x, list | tuple):
            return type(x)(self.value(v) for v in x)
        if isinstance(x, dict):
            return {k: self.value(v) for k, v in x.items()}
        return x

    def frame(self, obj: Any) -> Any:
        key = id(obj)
        if key not in self.memo:
            self.memo[key] = self._build(obj)
        return self.memo[key]

    def _build(self, obj: Any) -> Any:
        from ._frame import LineageDataFrame

        recipe = recipe_of(obj)
        if recipe is None:
            raise UnsupportedOperation(
                f"replay of a DataFrame made by an operation that cannot be rebuilt ({obj!r})"
            )
        if isinstance(recipe, Source):
            return self._source(obj, recipe)
        if isinstance(recipe, SqlQuery):
            out = self._sql(obj, recipe)
        else:
            assert isinstance(recipe, Call)
            seed = (
                _sample_seed(recipe.args, recipe.kwargs)
                if recipe.method == "sample"
                else _sample_by_seed(recipe.args, recipe.kwargs)
                if recipe.method == "sampleBy"
                else 0
            )
            if seed is None:
                # PySpark draws a seed per call: rebuilt, it would keep other rows.
                raise UnsupportedOperation(
                    f"replay of a DataFrame made by {recipe.method}() without a seed: the "
                    f"rebuilt query would draw other rows; give {recipe.method}() a seed"
                )
            _refuse_unseeded(recipe.method, (recipe.args, recipe.kwargs))
            receiver = self.frame(recipe.receiver)
            args = self.value(recipe.args)
            kwargs = self.value(recipe.kwargs)
            if recipe.method == "observe":
                # The same rows; the user's Observation keeps the captured run's metrics (it
                # takes one DataFrame only).
                out = receiver
            else:
                out = getattr(receiver, recipe.method)(*args, **kwargs)
        if not isinstance(out, LineageDataFrame):
            return out  # grouped data: its agg makes the frame
        return _renamed(out, obj)

    def _source(self, frame: LineageDataFrame, recipe: Source) -> LineageDataFrame:
        if recipe.scan is not None:
            _check_scan(self.agent, recipe)
        df = frame._df
        keep, ids = self.filters.get(recipe.cp, (False, None))
        if ids is not None:
            df = _filtered(self.agent.spark, df, recipe.column, np.asarray(ids), keep)
        return frame._new(df)

    def _sql(self, frame: LineageDataFrame, recipe: SqlQuery) -> LineageDataFrame:
        from sqlglot import exp

        from ._sqldialect import parse_one, to_sql

        tree = parse_one(recipe.text)
        _refuse_unseeded_sql(tree)
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        named: dict[str, str] = {}
        for table in list(tree.find_all(exp.Table)):
            name = table.name.lower()
            if table.args.get("db") or name in ctes or name not in recipe.views:
                continue
            if name not in named:
                view = fresh("view")
                self.frame(recipe.views[name])._df.createOrReplaceTempView(view)
                self.views.append(view)
                named[name] = view
            original = table.name
            table.set("this", exp.to_identifier(named[name]))
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(original)))
        # (`lc.sql`'s parameter arguments, by name: `_sqlargs.SqlQueryArgs`)
        df = self.agent.spark.sql(to_sql(tree), getattr(recipe, "args", None))
        if list(df.columns) != recipe.columns and len(df.columns) == len(recipe.columns):
            df = df.toDF(*recipe.columns)
        return frame._new(df)


# A random function written without a seed in expression text (F.expr, where("..."),
# selectExpr, lc.sql): Spark draws its seed when it analyzes the query, so a rebuilt query
# draws other values. F.rand() and the like carry the seed drawn when the Column was made.
_UNSEEDED = re.compile(
    r"\b(?:rand|randn|random|uuid)\s*\(\s*\)|\bshuffle\s*\((?:[^(),]|\([^()]*\))*\)", re.I
)


def _refuse_unseeded(method: str, args: Any) -> None:
    """Refuse a recorded call whose expression text holds a random function without a seed."""
    for text in _texts(args):
        hit = _UNSEEDED.search(text)
        if hit:
            raise UnsupportedOperation(
                f"replay of a DataFrame made by {method}() with {hit.group(0)} (no seed): Spark "
                "draws its seed when it analyzes the query, so the rebuilt query would draw "
                "other values; give it a seed (e.g. rand(7)) or use F.rand()"
            )


def _texts(x: Any) -> list[str]:
    from pyspark.sql import Column

    if isinstance(x, str):
        return [x]
    if isinstance(x, Column):
        return [repr(x)]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _texts(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _texts(v)]
    return []


def _refuse_unseeded_sql(tree: Any) -> None:
    """`lc.sql`: the same for TABLESAMPLE and random functions without a seed."""
    from sqlglot import exp

    from ._sqldialect import function_name, to_sql

    for node in tree.walk():
        # (lc.sql's dialect keeps function calls as written: told by name and arguments)
        name = function_name(node)
        args = len(node.expressions) if name else 0
        unseeded = (
            (isinstance(node, exp.TableSample) and node.args.get("seed") is None)
            or (name in ("rand", "randn", "random", "uuid") and args == 0)
            or (name in ("shuffle", "randstr") and args == 1)
            or (name == "uniform" and args == 2)
        )
        if unseeded:
            raise UnsupportedOperation(
                f"replay of an lc.sql query with {to_sql(node)} (no seed): Spark "
                "draws its seed when it analyzes the query, so the rebuilt query would draw "
                "other rows or values; give it a seed (rand(7), TABLESAMPLE ... REPEATABLE (7))"
            )


def _sample_seed(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The seed a `sample(...)` call was given (None if none): `sample(fraction[, seed])`
    or `sample(withReplacement, fraction[, seed])`, positional or by name."""
    if kwargs.get("seed") is not None:
        return kwargs["seed"]
    with_replacement = args[0] if args else kwargs.get("withReplacement")
    at = 2 if with_replacement is None or isinstance(with_replacement, bool) else 1
    if "withReplacement" in kwargs or "fraction" in kwargs:
        at = len(args)  # the rest came by name: a seed would too
    return args[at] if len(args) > at else None


def _sample_by_seed(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The seed a `sampleBy(col, fractions[, seed])` call was given (None if none)."""
    return kwargs.get("seed", args[2] if len(args) > 2 else None)


def _renamed(out: LineageDataFrame, original: LineageDataFrame) -> LineageDataFrame:
    """`out` with its hidden columns named as `original`'s (the same call made the same
    columns under fresh names), so later calls and SQL text that name them find them."""
    new, old = out._lin, original._lin
    if len(new.longs) != len(old.longs) or len(new.arrays) != len(old.arrays):
        raise UnsupportedOperation(
            "replay of this DataFrame: rebuilding it did not give the captured lineage columns"
        )
    mapping = {a: b for a, b in zip(new.names, old.names) if a != b}
    df = out._df.withColumnsRenamed(mapping) if mapping else out._df
    return out._new(df, old)


def _filtered(spark: Any, df: Any, column: str, ids: np.ndarray, keep: bool) -> Any:
    """`df`'s rows whose `column` is (keep) or is not (not keep) one of `ids`. Filtering a
    scan's rows above its id projection: Spark does not push a filter below the
    nondeterministic id, so every row keeps the id it had when captured."""
    from pyspark.sql import functions as F

    from ._frame import quoted

    if not len(ids):
        return df.where(F.lit(not keep))
    if len(ids) <= _IN_LIST:
        test = quoted(column).isin(ids.tolist())
        return df.where(test if keep else ~test)
    col = fresh("id")
    table = spark.createDataFrame([(int(i),) for i in ids.tolist()], f"{col} bigint")
    return df.join(F.broadcast(table), quoted(column) == F.col(col), "semi" if keep else "anti")


def _check_scan(agent: FrameAgent, recipe: Source) -> None:
    """Refuse when the files, or the partitions Spark plans for them under the session's
    settings now, differ from those the rows' ids were made with (the plan in the descriptor,
    brought up to date before each action: `_reader.ScanPlans`): the rebuilt query is a new
    one, which Spark plans again, so its rows would not have the ids they were traced by."""
    from ._reader import scan_plans
    from ._scan import plan_scan, scan_conf

    assert recipe.scan is not None
    fmt, paths, opts, before = recipe.scan
    conf = scan_conf(agent.spark)
    now = plan_scan(agent.spark, fmt, paths, opts, conf)
    source = f"the {fmt} source {','.join(paths)}"
    if now["files"] != before["files"]:
        raise BadInput(
            f"replay: {source} changed since it was captured (its files' sizes or "
            "modification times differ, or files came or went), so its rows' ids no longer "
            "name them"
        )
    if now["partitions"] != before["partitions"]:
        made = scan_plans(agent).conf_of(recipe.cp)
        changed = ", ".join(made.changes(conf)) if made is not None else ""
        raise BadInput(
            f"replay: Spark would split {source} into other partitions now than when its "
            f"rows were numbered ({changed or 'other scan settings'}), so their ids would "
            "name other rows; set the settings back to replay"
        )
