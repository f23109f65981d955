"""`LineageDataFrame`: a PySpark DataFrame that carries its rows' lineage in hidden columns.

Every supported DataFrame method is applied to the underlying DataFrame with the hidden
columns kept (see `_columns`); the user sees the same columns, rows and results as vanilla
PySpark. Anything not wrapped here raises `UnsupportedOperation` naming it, rather than
silently losing lineage.
"""

from __future__ import annotations

import re
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from .._rdd import UnsupportedOperation
from . import _windows
from ._columns import (
    PREFIX,
    Lineage,
    Star,
    code_mask,
    collected,
    expand_stars,
    fresh,
    infix,
    is_hidden,
    null_of,
    sql_name,
    stars_in,
    udf_ids,
)
from ._recipe import Call, recipe_of, recorded
from ._udf import CURRENT, uses_current, vanilla_named, vanilla_names

if TYPE_CHECKING:
    from .._spec import CapturePoint
    from .._trace import LineageRDD
    from ._lazyagg import LazyAggregate
    from ._session import FrameAgent
    from ._stats import LineageStatFunctions

# DataFrame methods that return something other than a DataFrame and touch no rows.
_PASSTHROUGH = (
    "explain",
    "isStreaming",
    "isLocal",
    "storageLevel",
    "sparkSession",
    "inputFiles",
)

_JOIN_HOWS = {
    "inner": "inner",
    "cross": "cross",
    "outer": "full",
    "full": "full",
    "fullouter": "full",
    "full_outer": "full",
    "left": "left",
    "leftouter": "left",
    "left_outer": "left",
    "right": "right",
    "rightouter": "right",
    "right_outer": "right",
    "semi": "semi",
    "leftsemi": "semi",
    "left_semi": "semi",
    "anti": "anti",
    "leftanti": "anti",
    "left_anti": "anti",
}


def quoted(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def _star(col: Any) -> bool:
    """Whether a select column is spelled as a star (`*`, `t.*`, `df["*"]`)."""
    if isinstance(col, int | bool):
        return False
    text = _windows.column_text(col)
    return text == "*" or text.endswith(".*") or "resolvedstar(" in text


def _top_alias(text: str) -> tuple[str, str] | None:
    """(expression, alias) of a column's text `<expression> AS <alias>` (PySpark's spelling
    of an aliased Column: the alias unquoted), or None."""
    mask = code_mask(text)
    depths = _windows._depths(text)
    cut = -1
    for i in range(len(text) - 4):
        if text[i : i + 4].upper() == " AS " and mask[i + 1] and depths[i] == 0:
            cut = i
    return None if cut < 0 else (text[:cut], text[cut + 4 :])


def _selected(df: Any, cols: list) -> Any:
    """A column's context in `select`, `withColumn(s)` and `filter` (see `_unstarred`)."""
    return df.select(*cols)


@contextmanager
def _quiet() -> Iterator[None]:
    """PySpark logs every AnalysisException with a query context at ERROR as it is made:
    not those of the spellings `_spelled_out` tries."""
    from pyspark.logger import PySparkLogger  # (made as PySpark makes them, or its calls fail)

    names = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
    loggers = [PySparkLogger.getLogger(n) for n in names]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before):
            lg.disabled = was


def _sorted(df: Any, cols: list) -> Any:
    return df.orderBy(*cols)


def _keyed(df: Any, cols: list) -> Any:
    return df.groupBy(*cols).count()


def _mentions(name: str, hidden: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<!\w){re.escape(h)}(?!\w)", name) for h in hidden)


_CONNECT = "pyspark.sql.connect"

# Frames whose JVM Dataset PySpark's `F.broadcast` took (`LineageDataFrame._jdf`), latest
# last: `join` / `crossJoin` take its vanilla DataFrame back as the frame they were given.
_LENT: list[weakref.ref] = []
_LENT_KEPT = 16


class _NotVanilla(UnsupportedOperation, AttributeError):
    """A vanilla PySpark API read a captured frame's JVM Dataset (an AttributeError too,
    so that `hasattr` still says no)."""


def recorded_as(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A method whose calls are recorded (`_recipe`) as calls of the public method `name`,
    which prepares its arguments and calls it: replay calls `name` again."""
    from ._recipe import _recording

    return lambda method: _recording(name, method)


def _taken_back(other: Any) -> Any:
    """`other`, or the captured frame it is `F.broadcast` of (that frame hinted for a
    broadcast, as `df.hint("broadcast")`): a vanilla DataFrame whose plan is Spark's the
    same as a lent frame's visible columns hinted."""
    from pyspark.sql import DataFrame

    if not isinstance(other, DataFrame) or not _LENT:
        return other
    for ref in reversed(_LENT):
        frame = ref()
        if frame is None:
            continue
        try:
            with _quiet():
                same = other.sameSemantics(frame._visible_df().hint("broadcast"))
        except Exception:  # another session's DataFrame, ...
            continue
        if same:
            return frame.hint("broadcast")
    return other


def _map_options(barrier: bool, profile: Any) -> dict[str, Any]:
    """mapInPandas / mapInArrow's options as PySpark takes them (no profile: not passed,
    as Spark Connect takes none)."""
    return {"barrier": barrier} if profile is None else {"barrier": barrier, "profile": profile}


def _flat(cols: tuple) -> list:
    if len(cols) == 1 and isinstance(cols[0], list | tuple):
        return list(cols[0])
    return list(cols)


# Every transformation records how it was made, for replay (`_recipe`, `_replay`).
@recorded(
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
    "orderBy",
    "sort",
    "sortWithinPartitions",
    "limit",
    "offset",
    "sample",
    "repartition",
    "repartitionByRange",
    "coalesce",
    "hint",
    "withMetadata",
    "to",
    "dropna",
    "fillna",
    "replace",
    "union",
    "unionAll",
    "unionByName",
    "intersect",
    "intersectAll",
    "subtract",
    "exceptAll",
    "groupBy",
    "groupby",
    "rollup",
    "cube",
    "groupingSets",
    "agg",
    "distinct",
    "dropDuplicates",
    "drop_duplicates",
    "unpivot",
    "melt",
    "localCheckpoint",
    "checkpoint",
    "observe",
    "sampleBy",
    "describe",
    "summary",
    "mapInPandas",
    "mapInArrow",
    "crosstab",
    "freqItems",
)
class LineageDataFrame:
    """A captured DataFrame. Transformations return LineageDataFrames; actions return what
    PySpark returns and record their output rows' lineage; `lineage()` traces them."""

    def __init__(
        self,
        agent: FrameAgent,
        df: Any,
        lin: Lineage,
        name: str = "",
        *,
        make: Callable[[], Any] | None = None,
    ) -> None:
        self._agent = agent
        # `make` builds the DataFrame on first use instead (`df` is then None): a source's
        # id projection costs Spark an analysis of its own (~20 ms a table, 0.1-0.2 s for
        # TPC-H's eight on a loaded machine, against a 0.25 s Q6 job), paid only by the
        # sources a query uses.
        self._built = df
        self._make = make
        self._lin = lin
        self._name = name or agent.plumbing.node_name("dataframe")
        # Every column name, hidden ones included: asking Spark costs a schema round trip
        # (an analysis RPC under Spark Connect), so operators that know it hand it on.
        self._columns: list[str] | None = None
        self.last_output: CapturePoint | None = None
        # What an action that returns every row collects instead of `df`, when cheaper (see
        # orderBy): the same rows in the same order.
        self._collected_df: Any = None
        # An aggregate whose ids a filter or limit on its output collects for its survivors
        # only (a limit also through projections and sorts of it: `_top_k_chain`).
        self._lazy: LazyAggregate | None = None
        # Cached or persisted: a limit reads these rows, not a lazy aggregate under them.
        self._cached = False

    # -- plumbing ----------------------------------------------------------------------------

    @property
    def _df(self) -> Any:
        # `_built` is set before `_make` is cleared; two threads racing here build the same
        # deterministic projection, and one of them is kept.
        if self._make is not None:
            self._built, self._make = self._make(), None
        return self._built

    def _new(
        self, df: Any, lin: Lineage | None = None, columns: list[str] | None = None
    ) -> LineageDataFrame:
        """A frame over `df`; `columns`: its column names when known for sure (an operator
        that keeps its input's columns passes `self._columns`), else asked of Spark."""
        out = LineageDataFrame(self._agent, df, self._lin if lin is None else lin)
        if columns is not None:
            out._columns = list(columns)
        return out

    def _same_columns(self, df: Any) -> LineageDataFrame:
        """A frame over `df`, which has exactly this frame's columns (a filter, a sort...)."""
        return self._new(df, columns=self._columns)

    @property
    def _all_columns(self) -> list[str]:
        if self._columns is None:
            self._columns = list(self._df.columns)
        return self._columns

    @property
    def dataframe(self) -> Any:
        """The underlying PySpark DataFrame, hidden lineage columns included."""
        return self._df

    @property
    def lineage_columns(self) -> Lineage:
        return self._lin

    def rebased(self, df: Any, lin: Lineage) -> LineageDataFrame:
        """A frame of this one's context over another DataFrame `df`, whose hidden columns
        are `lin`'s (the lazy top-k replays a frame's calls over its aggregate's rows with
        their group keys hidden: `_lazyagg.limited`)."""
        return self._new(df, lin)

    def _src(self, *cols: Any) -> Any:
        """The underlying DataFrame, plus the row's ids as `__prov_cur` when one of `cols`
        calls a captured UDF (its hidden last argument), without the rows on which a UDF
        under on_error="skip" raises; a call site without ids notes it as its input."""
        return self._agent.udfs.source(self, self._df, self._lin, cols)

    def _visible_df(self) -> Any:
        """The same rows without the hidden columns (what vanilla PySpark would hold): the
        hidden ones dropped by name, as selecting the visible ones by name would be
        ambiguous where two share one (a condition join's `ckey` of both sides)."""
        if not self._lin:
            return self._df
        return self._df.drop(*[c for c in self._all_columns if is_hidden(c)])

    # -- stars inside expressions ------------------------------------------------------------

    def _unstarred(
        self,
        cols: Sequence,
        what: str,
        context: Callable[[Any, list], Any] | None = None,
        sql: bool = False,
        rewrite: bool = True,
    ) -> list:
        """`cols` with each star inside an expression (`F.struct("*")`, `hash(*)`, `t.*` as
        an argument, `count(DISTINCT *)`) spelled out as the columns it expands to in
        vanilla PySpark, which has no hidden ones: Spark would expand it over the hidden
        columns too. `context(df, columns)` is the operator over `df` (`df.select(*columns)`):
        the rewritten column must mean there, over the visible columns, exactly what the
        column means (Spark's `sameSemantics`, names and types), else `UnsupportedOperation`;
        not `rewrite`: any such star raises (vanilla's error first, when the operator fails
        over the visible columns); without a context it just raises. A top-level star
        (`select("*")`) is the operator's. `sql`: strings are SQL expressions (a
        condition), else column names."""
        if not self._lin:
            return list(cols)
        out = list(cols)
        counts: list[tuple[int, str, list[Star]]] = []
        for i, c in enumerate(cols):
            if not (isinstance(c, Column) or (sql and isinstance(c, str))):
                continue
            text = _windows.column_text(c)
            if "*" not in text and "star(" not in text.lower():
                continue
            stars = stars_in(text)
            if not stars or (len(stars) == 1 and (stars[0].start, stars[0].end) == (0, len(text))):
                continue
            refused = any(s.kind == "opaque" for s in stars) or uses_current((text,))
            if refused or context is None:
                raise self._star_refused(what, text)
            if not rewrite:
                column = F.expr(c) if isinstance(c, str) else c
                context(self._visible_df(), [column])  # vanilla's error, if any
                raise self._star_refused(what, text)
            if all(s.kind == "count" for s in stars):
                # `count(*)` counts rows, unless it is classic PySpark's
                # `count_distinct("*")`, which prints the same (SQL text and Spark Connect
                # spell DISTINCT): asked of Spark below.
                if not isinstance(c, str) and not type(c).__module__.startswith(_CONNECT):
                    counts.append((i, text, stars))
                continue
            out[i] = self._spelled_out(c, text, stars, what, context)
        if counts and context is not None:
            for k in self._distinct_counts([out[i] for i, _, _ in counts], what, context):
                i, text, stars = counts[k]
                out[i] = self._spelled_out(out[i], text, stars, what, context, distinct=True)
        return out

    def _star_refused(self, what: str, text: str) -> UnsupportedOperation:
        return UnsupportedOperation(
            f"a star inside an expression ({text}) in {what} with lineage capture: the "
            "captured DataFrame's hidden lineage columns would be expanded too; list the "
            "columns instead (e.g. F.struct(*df.columns))"
        )

    def _spelled_out(
        self,
        col: Any,
        text: str,
        stars: list[Star],
        what: str,
        context: Callable,
        distinct: bool = False,
    ) -> Column:
        """`col` (its text `text`) with `stars` spelled out as the visible columns (see
        `_unstarred`); `distinct`: `count(*)` is a distinct count."""
        visible = self._visible_df()
        # What the column means over the visible columns (vanilla's meaning; its error, if
        # it has one, is vanilla's too).
        ref = context(visible, [F.expr(col) if isinstance(col, str) else col])
        every = ", ".join(sql_name(n) for n in self.columns)

        def spelled(s: Star) -> str | None:
            if s.kind == "count":
                return f"DISTINCT {every}" if distinct else None
            if s.target is None:
                return every
            names = list(self._df.select(F.col(f"{s.target}.*")).columns)
            if not any(is_hidden(n) for n in names):
                return None  # a struct's fields, or a side of a join without ids
            return ", ".join(f"{s.target}.{sql_name(n)}" for n in names if not is_hidden(n))

        expanded = expand_stars(text, stars, spelled)
        name = ref.columns[-1]
        candidates: list[tuple[str, str | None]] = [(expanded, None), (infix(expanded), None)]
        aliased = _top_alias(expanded)
        if aliased is not None:
            candidates += [(aliased[0], name), (infix(aliased[0]), name)]
        with _quiet():
            for sql_text, alias in dict.fromkeys(candidates):
                try:
                    got_col = F.expr(sql_text)
                    if alias is not None:
                        got_col = got_col.alias(alias)
                    got = context(visible, [got_col])
                    if (
                        got.columns == ref.columns
                        and got.schema == ref.schema
                        and ref.sameSemantics(got)
                    ):
                        return got_col
                except Exception:  # not SQL that means the same: the next spelling, or refused
                    continue
        raise self._star_refused(what, text)

    def _distinct_counts(self, cols: list, what: str, context: Callable) -> list[int]:
        """Which of `cols`, whose only stars are `count(*)`, expand them over the hidden
        columns (distinct counts): Spark's name for such a column inside an array (where an
        alias does not replace it) then names them."""
        try:
            with _quiet():
                probe = context(self._df, [F.array(c) for c in cols])
            names = list(probe.columns)[-len(cols) :]
        except Exception:
            # Vanilla's error when the columns are wrong there; else not known: refused.
            context(self._visible_df(), cols)
            raise self._star_refused(what, ", ".join(map(_windows.column_text, cols))) from None
        return [i for i, name in enumerate(names) if _mentions(name, self._lin.names)]

    # -- schema ------------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return [c for c in self._all_columns if not is_hidden(c)]

    @property
    def schema(self) -> Any:
        if not self._lin:
            return self._df.schema
        from pyspark.sql.types import StructType

        return StructType([f for f in self._df.schema.fields if not is_hidden(f.name)])

    @property
    def dtypes(self) -> list[tuple[str, str]]:
        return [(n, t) for n, t in self._df.dtypes if not is_hidden(n)]

    def printSchema(self, level: int | None = None) -> None:
        self._visible_df().printSchema(level)

    @property
    def is_cached(self) -> bool:
        """Whether `cache()` / `persist()` was called (and not `unpersist()` since), as
        vanilla's attribute says."""
        return bool(getattr(self._df, "is_cached", self._cached))

    def semanticHash(self) -> int:
        """Spark's hash of the plan of the visible columns (hidden ones dropped)."""
        return int(self._visible_df().semanticHash())

    def sameSemantics(self, other: Any) -> bool:
        """Whether Spark finds this frame's plan and `other`'s (a captured frame or a
        vanilla DataFrame) the same, over their visible columns. Two captured reads of one
        file are two sources (their ids differ), unlike two vanilla reads."""
        if isinstance(other, LineageDataFrame):
            other = other._visible_df()
        return bool(self._visible_df().sameSemantics(other))

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return self._df[item]
        if isinstance(item, Column):
            return self.filter(item)
        if isinstance(item, list | tuple):
            return self.select(*item)
        if isinstance(item, int):
            return self._df[self.columns[item]]
        raise TypeError(f"unexpected item type: {type(item).__name__}")

    def __getattr__(self, name: str) -> Any:
        if name == "_jdf":
            raise _NotVanilla(
                f"a captured DataFrame passed to PySpark's {sys._getframe(1).f_code.co_name} "
                "(a vanilla DataFrame's method or a function that reads its JVM Dataset) "
                "with lineage capture: call the captured DataFrame's own methods (to "
                "broadcast it, df.hint('broadcast'))"
            )
        if name.startswith("_"):
            raise AttributeError(name)
        from pyspark.sql import DataFrame

        if name in _PASSTHROUGH:
            return getattr(self._df, name)
        if hasattr(DataFrame, name):
            raise UnsupportedOperation(
                f"DataFrame.{name} is not supported with lineage capture (it would lose "
                "record-level lineage); see README, Capturing lineage from DataFrames and SQL"
            )
        if name in self.columns:
            return self._df[name]
        raise AttributeError(f"'LineageDataFrame' object has no attribute {name!r}")

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {t}" for n, t in self.dtypes)
        return f"LineageDataFrame[{cols}]"

    # -- row-preserving ----------------------------------------------------------------------

    def select(self, *cols: Any) -> LineageDataFrame:
        cols = tuple(self._unstarred(_flat(cols), "select", _selected))
        src = self._src(*cols)
        if not self._lin:
            return self._new(src.select(*cols))
        cols, extra = _windows.with_frames(self, cols)
        windows = [e.column for e in extra]
        names: list[str] | None = None
        try:
            if any(_star(c) for c in cols):
                # A star takes some hidden columns along (all, or one side's of a join):
                # only the others are added, which the star's output tells.
                base = src.select(*cols)
                taken = set(base.columns)
                missing = [quoted(h) for h in self._lin.names if h not in taken]
                if missing or windows:
                    base = src.select(*cols, *windows, *missing)
                names = list(base.columns)  # analyze now (Spark Connect analyzes lazily)
            else:
                # One analysis, not two: the hidden columns are added at once.
                hidden = [quoted(h) for h in self._lin.names]
                base = src.select(*cols, *windows, *hidden)
                names = list(base.columns)
                if any(names.count(h) > 1 for h in self._lin.names):
                    # An expression that is not spelled as a star took some along.
                    base = src.select(
                        *cols,
                        *windows,
                        *[quoted(h) for h in self._lin.names if names.count(h) == 1],
                    )
                    names = list(base.columns)
        except Exception as e:
            # select(sum(x)) is a global aggregate: it cannot also carry row columns.
            if "MISSING_GROUP_BY" in str(e) or "MISSING_AGGREGATION" in str(e):
                return self.agg(*cols)
            self._window_refused(e, extra, lambda df: df.select(*cols))
            raise
        if CURRENT in names:  # a star took it along
            base = base.drop(CURRENT)
            names = [n for n in names if n != CURRENT]
        base, names = vanilla_named(base, cols, names)
        return self._windowed(base, extra, names)

    def selectExpr(self, *exprs: Any) -> LineageDataFrame:
        return self.select(*[F.expr(e) if isinstance(e, str) else e for e in _flat(exprs)])

    def withColumn(self, colName: str, col: Column) -> LineageDataFrame:
        return self.withColumns({colName: col})

    def withColumns(self, *colsMap: dict) -> LineageDataFrame:
        mapping = dict(colsMap[0]) if colsMap else {}
        if not self._lin:
            return self._new(self._df.withColumns(mapping))
        names = list(mapping)
        values = self._unstarred([mapping[n] for n in names], "withColumns", _selected)
        cols, extra = _windows.with_frames(self, tuple(values))
        src = self._src(*cols)
        try:
            out = src.withColumns({**dict(zip(names, cols)), **{e.name: e.column for e in extra}})
        except Exception as e:
            self._window_refused(e, extra, lambda df: df.withColumns(dict(zip(names, cols))))
            raise
        if src is not self._df:
            out = out.drop(CURRENT)
        return self._windowed(out, extra)

    def _window_refused(
        self, error: BaseException, extra: list[_windows.Extra], vanilla: Callable[[Any], Any]
    ) -> None:
        """After `error` building windows' lineage columns (`extra`) rebuilt from their
        text: where a name in it is ambiguous (a join's both sides have the column the
        window takes from one, `t["g"]`), vanilla's error if the operator fails over the
        visible columns too, else UnsupportedOperation."""
        if not extra or "AMBIGUOUS_REFERENCE" not in str(error):
            return
        vanilla(self._visible_df())
        raise UnsupportedOperation(
            "a window over a column whose name other columns have too (a join's both sides) "
            "with lineage capture, its WindowSpec not known (made before the context, or "
            "another spec printed the same): rename the column apart before the join"
        ) from error

    def _windowed(
        self, df: Any, extra: list[_windows.Extra], columns: list[str] | None = None
    ) -> LineageDataFrame:
        if not extra:
            return self._new(df, columns=columns)
        # A window function's extra lineage (its frame, or lag/lead's other row) rides as
        # new columns: arrays for frames, longs for offset rows.
        lin = self._lin
        longs = lin.longs + tuple(c.name for c in extra if c.kind == "long")
        arrays = lin.arrays + tuple(c.name for c in extra if c.kind == "array")
        return self._new(df, Lineage(longs, arrays, lin.cps), columns)

    def withColumnRenamed(self, existing: str, new: str) -> LineageDataFrame:
        return self._new(self._df.withColumnRenamed(existing, new))

    def withColumnsRenamed(self, colsMap: dict[str, str]) -> LineageDataFrame:
        return self._new(self._df.withColumnsRenamed(colsMap))

    def drop(self, *cols: Any) -> LineageDataFrame:
        return self._new(self._df.drop(*cols))

    def toDF(self, *cols: str) -> LineageDataFrame:
        names = list(cols)
        if len(names) != len(self.columns):
            # Let PySpark raise its own error for the visible shape.
            self._visible_df().toDF(*names)
        it = iter(names)
        return self._new(
            self._df.toDF(*[c if is_hidden(c) else next(it) for c in self._all_columns])
        )

    def alias(self, alias: str) -> LineageDataFrame:
        return self._same_columns(self._df.alias(alias))

    def filter(self, condition: Any) -> LineageDataFrame:
        (condition,) = self._unstarred([condition], "filter", _selected, sql=True)
        if self._lazy is not None and not uses_current((condition,)):
            from ._lazyagg import filtered

            # Built on first use (a job: the survivors are computed then, once).
            lazy = self._lazy
            return LineageDataFrame(
                self._agent, None, self._lin, make=lambda: filtered(lazy, self, condition)
            )
        src = self._src(condition)
        out = src.filter(condition)
        return self._same_columns(out if src is self._df else out.drop(CURRENT))

    where = filter

    def orderBy(self, *cols: Any, **kwargs: Any) -> LineageDataFrame:
        order = self._ordinals(
            self._unstarred(_flat(cols), "orderBy", _sorted, rewrite=False), sort=True
        )
        src = self._src(*order)

        def ordered() -> Any:
            out = src.orderBy(*order, **kwargs)
            return out if src is self._df else out.drop(CURRENT)

        if not self._lin.arrays:
            return self._same_columns(ordered())
        # Rows that carry their groups' ids would go through a range exchange after the
        # aggregate that made them (whose sampling job computes it once more): TPC-H Q1
        # 1.32x vanilla that way, 1.18x sorted in the one task that returns every row to
        # the driver anyway. Only actions that return every row use this plan, built here
        # (its analysis checks the order, as orderBy's own would). The global sort is built
        # only if something else uses the frame: one analysis less for a query that ends in
        # orderBy().collect().
        one = src.coalesce(1).sortWithinPartitions(*order, **kwargs)
        frame = LineageDataFrame(self._agent, None, self._lin, make=ordered)
        frame._columns = self._columns
        frame._collected_df = one if src is self._df else one.drop(CURRENT)
        return frame

    sort = orderBy

    def sortWithinPartitions(self, *cols: Any, **kwargs: Any) -> LineageDataFrame:
        order = self._ordinals(
            self._unstarred(_flat(cols), "sortWithinPartitions", _sorted, rewrite=False), sort=True
        )
        return self._same_columns(self._df.sortWithinPartitions(*order, **kwargs))

    def _ordinals(self, cols: list, sort: bool = False) -> list:
        """Integer column ordinals (1-based; negative: descending) name visible columns:
        the hidden ones must not shift them."""
        out: list[Any] = []
        for c in cols:
            if isinstance(c, int) and not isinstance(c, bool):
                if c == 0 or abs(c) > len(self.columns):
                    out.append(c)  # PySpark's own error
                    continue
                col = quoted(self.columns[abs(c) - 1])
                out.append(col.desc() if (sort and c < 0) else col)
            else:
                out.append(c)
        return out

    def limit(self, num: int) -> LineageDataFrame:
        # Over a lazy aggregate, through projections and sorts of it: only the top `num`
        # rows collect their groups' ids (`show`, `take`, `first`, `head` limit through here).
        exact = isinstance(num, int) and not isinstance(num, bool)
        chain = self._top_k_chain() if exact else None
        if chain is not None:
            from ._lazyagg import limited

            agg, calls = chain
            lazy = agg._lazy
            assert lazy is not None
            # Built on first use (a job: the top rows are computed then, once).
            return LineageDataFrame(
                self._agent,
                None,
                self._lin,
                make=lambda: limited(lazy, agg, calls, self, num),
            )
        return self._same_columns(self._df.limit(num))

    def _top_k_chain(self) -> tuple[LineageDataFrame, list[Call]] | None:
        """The lazy aggregate this frame is made from and the calls that made it from there,
        when each call keeps every row's lineage its group's (`_lazyagg.top_k_step`: a
        projection one row at a time or a sort, deterministic builtins only) and no frame on
        the way is cached; else None."""
        from ._lazyagg import TOP_K_STEPS, top_k_step

        calls: list[Call] = []
        obj = self
        while obj._lazy is None:
            recipe = recipe_of(obj)
            if obj._cached or not isinstance(recipe, Call) or recipe.method not in TOP_K_STEPS:
                return None
            receiver = recipe.receiver
            # The same hidden columns: no window's frame, no global aggregate (a select of
            # sum(x) is one) came in between.
            if type(receiver) is not LineageDataFrame or receiver._lin is not obj._lin:
                return None
            calls.append(recipe)
            obj = receiver
        # (The arguments last: reading a Column's text is a round trip to the JVM, paid only
        # by a limit that does reach a lazy aggregate. cache() clears `_lazy`: the aggregate
        # itself is not cached.)
        if not all(top_k_step(c) for c in calls):
            return None
        return obj, calls[::-1]

    def offset(self, num: int) -> LineageDataFrame:
        return self._same_columns(self._df.offset(num))

    def sample(self, *args: Any, **kwargs: Any) -> LineageDataFrame:
        return self._same_columns(self._df.sample(*args, **kwargs))

    def sampleBy(self, col: Any, fractions: dict, seed: int | None = None) -> LineageDataFrame:
        """Spark's stratified sample (a seeded `rand` filter on each row, in the same
        partitions and order as vanilla's): each row's lineage is its own."""
        (col,) = self._unstarred([col], "sampleBy")
        return self._same_columns(self._df.sampleBy(col, fractions, seed))

    def repartition(self, *args: Any, **kwargs: Any) -> LineageDataFrame:
        return self._same_columns(self._df.repartition(*args, **kwargs))

    def repartitionByRange(self, *args: Any, **kwargs: Any) -> LineageDataFrame:
        return self._same_columns(self._df.repartitionByRange(*args, **kwargs))

    def coalesce(self, numPartitions: int) -> LineageDataFrame:
        return self._same_columns(self._df.coalesce(numPartitions))

    def hint(self, name: str, *parameters: Any) -> LineageDataFrame:
        return self._same_columns(self._df.hint(name, *parameters))

    def withMetadata(self, columnName: str, metadata: dict[str, Any]) -> LineageDataFrame:
        return self._same_columns(self._df.withMetadata(columnName, metadata))

    def to(self, schema: Any) -> LineageDataFrame:
        """Spark's `to` (columns matched by name, reordered and cast to `schema`); the
        hidden columns are kept after them."""
        from pyspark.sql.types import StructField, StructType

        lin = self._lin
        if not lin:
            return self._same_columns(self._df.to(schema))
        by_name = {f.name: f for f in self._df.schema.fields}
        hidden = [StructField(n, by_name[n].dataType, by_name[n].nullable) for n in lin.names]
        df = self._df.to(StructType(list(schema.fields) + hidden))
        return self._new(df, columns=[f.name for f in schema.fields] + list(lin.names))

    def randomSplit(self, weights: list[float], seed: int | None = None) -> list[Any]:
        """Spark's split: each part a seeded sample of the rows sorted within their
        partitions by every orderable column. The hidden columns sort after the visible
        ones, so a part holds vanilla's visible rows (rows equal in every orderable visible
        column may trade places); each row's lineage is its own. Replay cannot rebuild the
        parts."""
        lin = self._lin
        if not lin:
            return [self._same_columns(d) for d in self._df.randomSplit(weights, seed)]
        visible = [c for c in self._all_columns if not is_hidden(c)]
        last = self._df.select(*[quoted(c) for c in visible], *lin.names)
        columns = visible + list(lin.names)
        return [self._new(d, columns=columns) for d in last.randomSplit(weights, seed)]

    def cache(self) -> LineageDataFrame:
        self._lazy = None  # later filters and limits read the cached (eager) rows
        self._cached = True
        self._df.cache()
        return self

    def persist(self, *args: Any, **kwargs: Any) -> LineageDataFrame:
        self._lazy = None
        self._cached = True
        self._df.persist(*args, **kwargs)
        return self

    def unpersist(self, blocking: bool = False) -> LineageDataFrame:
        self._df.unpersist(blocking)
        return self

    def localCheckpoint(self, eager: bool = True, storageLevel: Any = None) -> LineageDataFrame:
        """Spark's, over the rows with their hidden ids: each row's lineage is its own, as
        for `cache` (the ids are data, materialized with the rows)."""
        kwargs = {} if storageLevel is None else {"storageLevel": storageLevel}
        self._before_job("localCheckpoint", eager)
        return self._same_columns(self._df.localCheckpoint(eager, **kwargs))

    def checkpoint(self, eager: bool = True) -> LineageDataFrame:
        """As `localCheckpoint`, to the SparkContext's checkpoint directory."""
        self._before_job("checkpoint", eager)
        return self._same_columns(self._df.checkpoint(eager))

    def _before_job(self, what: str, runs: bool) -> None:
        """A call that runs a job over the rows now (an eager checkpoint) numbers its scans'
        rows as an action does: their plans are brought up to date first."""
        if runs:
            self._agent.plumbing.prepare(self, what)

    def observe(self, observation: Any, *exprs: Any) -> LineageDataFrame:
        """Spark's metrics over the rows that pass (the hidden ids are not among them: a
        star in the metrics is spelled out as for `agg`); rows and lineage unchanged."""
        exprs = tuple(self._unstarred(exprs, "observe", lambda df, cols: df.agg(*cols)))
        return self._same_columns(self._df.observe(observation, *exprs))

    def describe(self, *cols: Any) -> LineageDataFrame:
        """Spark's `describe` (its rows and values); each statistic's row is made from every
        input row, as a global aggregate's."""
        return self._statistics("describe", cols)

    def summary(self, *statistics: str) -> LineageDataFrame:
        """Spark's `summary`, with `describe`'s lineage."""
        return self._statistics("summary", statistics)

    def _statistics(self, method: str, args: tuple) -> LineageDataFrame:
        """Spark's statistics over the visible columns, each row joined to one aggregate of
        every input row's ids. The input runs twice, so it must give the same rows each
        time (`_stable`)."""
        if not self._lin:
            return self._new(getattr(self._df, method)(*args))
        require_stable(self, f"{method}()")
        stats = getattr(self._visible_df(), method)(*args)
        name = fresh()
        ids = self._df.agg(collected(F, self._lin, name))
        return self._new(stats.crossJoin(ids), Lineage((), (name,), self._lin.cps))

    # -- statistics (`_stats`) ------------------------------------------------------------

    @property
    def stat(self) -> LineageStatFunctions:
        from ._stats import LineageStatFunctions

        return LineageStatFunctions(self)

    def crosstab(self, col1: str, col2: str) -> LineageDataFrame:
        """Spark's contingency table; the row of a value of `col1` is made from the rows
        that have it."""
        from ._stats import crosstab

        return crosstab(self, col1, col2)

    def freqItems(self, cols: Any, support: float | None = None) -> LineageDataFrame:
        """Spark's frequent items; its row is made from every row (as `describe`'s)."""
        return self._statistics("freqItems", (cols, support))

    def corr(self, col1: str, col2: str, method: str | None = None) -> float:
        """Spark's correlation, recorded as one output record made from every row."""
        visible = self._visible_df()
        return self._number("corr", lambda: visible.corr(col1, col2, method))

    def cov(self, col1: str, col2: str) -> float:
        """Spark's sample covariance, recorded as `corr` is."""
        visible = self._visible_df()
        return self._number("cov", lambda: visible.cov(col1, col2))

    def approxQuantile(self, col: Any, probabilities: Any, relativeError: float) -> Any:
        """Spark's approximate quantiles, recorded as `corr` is."""
        visible = self._visible_df()
        return self._number(
            "approxQuantile", lambda: visible.approxQuantile(col, probabilities, relativeError)
        )

    def _number(self, action: str, compute: Callable[[], Any]) -> Any:
        """`compute()` (Spark's, over the visible rows), recorded as one output record made
        from every row; the ids come from one more aggregate, so the input must be stable."""
        if not self._lin:
            return compute()
        require_stable(self, f"{action}()")
        return self._agent.outputs.value(self, action, compute)

    def colRegex(self, colName: str) -> Column:
        """The visible columns whose names match the backquoted regex `colName` (never a
        hidden lineage column), as PySpark selects them."""
        if not isinstance(colName, str):
            raise TypeError(f"colName should be a string, got {type(colName).__name__}")
        if not self._lin or not (len(colName) > 1 and colName[0] == colName[-1] == "`"):
            return self._df.colRegex(colName)  # a plain name: the column itself
        return self._df.colRegex(f"`(?!{PREFIX})(?:{colName[1:-1]})`")

    def transform(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    def dropna(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> Any:
        subset = self.columns if subset is None else subset
        return self._same_columns(self._df.dropna(how, thresh, subset))

    def fillna(self, value: Any, subset: Any = None) -> LineageDataFrame:
        if isinstance(value, dict):
            return self._same_columns(self._df.fillna(value))
        subset = self.columns if subset is None else subset
        return self._same_columns(self._df.fillna(value, subset))

    def replace(self, to_replace: Any, value: Any = None, subset: Any = None) -> Any:
        subset = self.columns if subset is None else subset
        if isinstance(to_replace, dict):
            return self._same_columns(self._df.replace(to_replace, subset=subset))
        return self._same_columns(self._df.replace(to_replace, value, subset))

    @property
    def na(self) -> _NaFunctions:
        return _NaFunctions(self)

    # -- maps over partitions (`_mapin`) -----------------------------------------------------

    def mapInPandas(
        self,
        func: Callable,
        schema: Any,
        barrier: bool = False,
        profile: Any = None,
        *,
        lineage: str = "partition",
    ) -> LineageDataFrame:
        """Maps each partition's batches with `func` (iterator of pandas DataFrames ->
        iterator of pandas DataFrames), as PySpark does. `lineage="partition"` (default,
        always sound): every returned row is made from every row of its partition that
        reached `func`. `lineage="row"`: each returned batch maps the batch read last row by
        row (row i from row i; another length raises). See `_mapin`."""
        from ._mapin import partition_map

        return partition_map(self, func, schema, False, lineage, **_map_options(barrier, profile))

    def mapInArrow(
        self,
        func: Callable,
        schema: Any,
        barrier: bool = False,
        profile: Any = None,
        *,
        lineage: str = "partition",
    ) -> LineageDataFrame:
        """Maps each partition's Arrow record batches with `func`, as mapInPandas."""
        from ._mapin import partition_map

        return partition_map(self, func, schema, True, lineage, **_map_options(barrier, profile))

    # -- joins and set operations ------------------------------------------------------------

    def join(self, other: Any, on: Any = None, how: str | None = None) -> LineageDataFrame:
        # (Recorded with `other` taken back: see `_taken_back`.)
        return self._join(_taken_back(other), on, how)

    def crossJoin(self, other: Any) -> LineageDataFrame:
        return self._cross_join(_taken_back(other))

    @property
    def _jdf(self) -> Any:
        """The JVM Dataset, which classic PySpark's `F.broadcast(df)` reads to return a
        vanilla DataFrame hinted for broadcast: it is given the visible columns' (vanilla's
        rows), and `join` / `crossJoin` take that DataFrame back as this frame hinted
        (`_taken_back`), its lineage kept. Anything else that reads it (a vanilla
        DataFrame's method given this frame) is refused: it would see the hidden columns."""
        caller = sys._getframe(1)
        if caller.f_code.co_name == "broadcast" and str(
            caller.f_globals.get("__name__", "")
        ).startswith("pyspark.sql"):
            _LENT.append(weakref.ref(self))
            del _LENT[:-_LENT_KEPT]
            return self._visible_df()._jdf
        # (Python then asks `__getattr__`, which raises the error.)
        raise AttributeError("_jdf")

    @recorded_as("join")
    def _join(self, other: Any, on: Any = None, how: str | None = None) -> LineageDataFrame:
        other = self._agent.frame_of(other, "join")
        if isinstance(on, Column) or (isinstance(on, list | tuple) and on):
            conditions = [on] if isinstance(on, Column) else list(on)
            (self if self._lin else other)._unstarred(conditions, "a join condition")
        kind = _JOIN_HOWS.get((how or "inner").lower().replace(" ", ""))
        if kind is None:
            return self._new(self._df.join(other._df, on, how))  # PySpark's own error
        if not self._lin and not other._lin:
            return self._new(self._df.join(other._df, on, how))
        right, rlin = other._df, other._lin
        clash = {n: fresh() for n in rlin.names if n in self._lin.names}
        if clash:
            right, rlin = right.withColumnsRenamed(clash), rlin.renamed(clash)
        if kind == "anti":
            return self._new(self._df.join(right, on, how))
        if kind == "semi":
            return self._semi_join(right, rlin, on)
        return self._new(self._df.join(right, on, how), self._lin.merged(rlin))

    def _semi_join(self, right: Any, rlin: Lineage, on: Any) -> LineageDataFrame:
        """Left rows with a match; lineage: the left row and every matching right row."""
        matched = fresh()
        lin = Lineage(self._lin.longs, (*self._lin.arrays, matched), self._lin.cps | rlin.cps)
        keys = [on] if isinstance(on, str) else on
        if isinstance(keys, list | tuple) and keys and all(isinstance(k, str) for k in keys):
            # Equi-join on names: group the right side by the key (one row per key, its
            # rows' ids), so an inner join keeps each matching left row once.
            grouped = right.groupBy(*keys).agg(collected(F, rlin, matched))
            joined = self._df.join(grouped, list(keys), "inner")
            return self._new(joined.select(*[quoted(c) for c in self._all_columns], matched), lin)
        # A condition: number the left rows, join, and gather each left row's matches.
        rowkey = fresh("rk")
        left = self._df.withColumn(rowkey, F.monotonically_increasing_id())
        joined = left.join(right, on, "inner")
        firsts = [F.first(left[c]).alias(c) for c in self._all_columns]
        out = joined.groupBy(rowkey).agg(*firsts, collected(F, rlin, matched))
        return self._new(out.select(*[quoted(c) for c in self._all_columns], matched), lin)

    @recorded_as("crossJoin")
    def _cross_join(self, other: Any) -> LineageDataFrame:
        other = self._agent.frame_of(other, "crossJoin")
        right, rlin = other._df, other._lin
        clash = {n: fresh() for n in rlin.names if n in self._lin.names}
        if clash:
            right, rlin = right.withColumnsRenamed(clash), rlin.renamed(clash)
        return self._new(self._df.crossJoin(right), self._lin.merged(rlin))

    def _aligned(self, lin: Lineage, by_name: bool = False) -> Any:
        """This frame's rows with visible columns first (in order) and then every hidden
        column of `lin` (null where this frame has none): both sides of a union alike."""
        types = lin.types()
        hidden = [
            quoted(n) if n in self._lin.names else null_of(F, types[n]).alias(n) for n in lin.names
        ]
        return self._df.select(*[quoted(c) for c in self.columns], *hidden)

    def union(self, other: Any) -> LineageDataFrame:
        other = self._agent.frame_of(other, "union")
        if not self._lin and not other._lin:
            return self._new(self._df.union(other._df))
        lin = self._lin.merged(other._lin)
        return self._new(self._aligned(lin).union(other._aligned(lin)), lin)

    unionAll = union

    def unionByName(self, other: Any, allowMissingColumns: bool = False) -> LineageDataFrame:
        other = self._agent.frame_of(other, "unionByName")
        if not self._lin and not other._lin:
            return self._new(self._df.unionByName(other._df, allowMissingColumns))
        lin = self._lin.merged(other._lin)
        return self._new(
            self._aligned(lin).unionByName(other._aligned(lin), allowMissingColumns), lin
        )

    # -- set operations (`_setops`) ----------------------------------------------------------

    def _set_operation(self, other: Any, name: str, intersect: bool, every: bool) -> Any:
        other = self._agent.frame_of(other, name)
        if not self._lin and not other._lin:
            return self._new(getattr(self._df, name)(other._df))
        if len(self.columns) != len(other.columns):
            getattr(self._visible_df(), name)(other._visible_df())  # PySpark's own error
        from ._setops import set_operation

        return set_operation(self, other, intersect, every)

    def intersect(self, other: Any) -> LineageDataFrame:
        return self._set_operation(other, "intersect", True, False)

    def intersectAll(self, other: Any) -> LineageDataFrame:
        return self._set_operation(other, "intersectAll", True, True)

    def subtract(self, other: Any) -> LineageDataFrame:
        return self._set_operation(other, "subtract", False, False)

    def exceptAll(self, other: Any) -> LineageDataFrame:
        return self._set_operation(other, "exceptAll", False, True)

    # -- aggregation -------------------------------------------------------------------------

    def groupBy(self, *cols: Any) -> LineageGroupedData:
        keys = self._unstarred(_flat(cols), "groupBy", _keyed, rewrite=False)
        return LineageGroupedData(self, "groupBy", self._ordinals(keys))

    groupby = groupBy

    def rollup(self, *cols: Any) -> LineageGroupedData:
        keys = self._unstarred(_flat(cols), "rollup", _keyed, rewrite=False)
        return LineageGroupedData(self, "rollup", self._ordinals(keys))

    def cube(self, *cols: Any) -> LineageGroupedData:
        keys = self._unstarred(_flat(cols), "cube", _keyed, rewrite=False)
        return LineageGroupedData(self, "cube", self._ordinals(keys))

    def groupingSets(self, groupingSets: Any, *cols: Any) -> LineageGroupedData:
        sets = [
            self._unstarred(list(s), "groupingSets", _keyed, rewrite=False) for s in groupingSets
        ]
        keys = self._unstarred(_flat(cols), "groupingSets", _keyed, rewrite=False)
        return LineageGroupedData(self, "groupingSets", self._ordinals(keys), sets)

    def agg(self, *exprs: Any) -> LineageDataFrame:
        return self.groupBy().agg(*exprs)

    def distinct(self) -> LineageDataFrame:
        if not self._lin:
            return self._new(self._df.distinct())
        if len(set(self.columns)) < len(self.columns):
            return self._by_position(lambda df, _names: df.distinct())
        return self.groupBy(*[quoted(c) for c in self.columns]).agg()

    def dropDuplicates(self, subset: list[str] | None = None) -> LineageDataFrame:
        if not self._lin:
            return self._new(self._df.dropDuplicates(subset))
        if subset is None:
            return self.distinct()
        if isinstance(subset, str):
            subset = [subset]
        keys = list(dict.fromkeys(subset))
        for k in keys:
            if k not in self.columns:
                self._visible_df().dropDuplicates(keys)  # PySpark's own error
        if len(set(self.columns)) < len(self.columns):
            # As Spark does, a name keys every column that has it.
            return self._by_position(
                lambda df, names: df.dropDuplicates(
                    [t for t, c in zip(df.columns, names) if c in keys]
                )
            )
        # As Spark plans it: group by the subset, first() of every other column.
        others = [F.first(quoted(c)).alias(c) for c in self.columns if c not in keys]
        grouped = self.groupBy(*keys).agg(*others)
        return grouped.select(*[quoted(c) for c in self.columns])

    def _by_position(
        self, op: Callable[[LineageDataFrame, list[str]], LineageDataFrame]
    ) -> LineageDataFrame:
        """`op` over this frame with its visible columns renamed apart, then named back:
        a condition join repeats names (`ckey` of both sides), which Spark's own
        `distinct` / `dropDuplicates` take by position, but a group key by name would be
        ambiguous."""
        names = self.columns
        apart = self.toDF(*[f"_{i}_{c}" for i, c in enumerate(names)])
        return op(apart, names).toDF(*names)

    drop_duplicates = dropDuplicates

    def unpivot(
        self, ids: Any, values: Any, variableColumnName: str, valueColumnName: str
    ) -> LineageDataFrame:
        """One row per input row and value column; each keeps its input row's lineage."""
        if not self._lin:
            return self._new(self._df.unpivot(ids, values, variableColumnName, valueColumnName))
        from ._pivot import unpivoted

        return unpivoted(self, ids, values, variableColumnName, valueColumnName)

    def melt(
        self, ids: Any, values: Any, variableColumnName: str, valueColumnName: str
    ) -> LineageDataFrame:
        return self.unpivot(ids, values, variableColumnName, valueColumnName)

    # -- views -------------------------------------------------------------------------------

    def createOrReplaceTempView(self, name: str) -> None:
        self._agent.register_view(name, self, replace=True)

    def createTempView(self, name: str) -> None:
        self._agent.register_view(name, self, replace=False)

    def registerTempTable(self, name: str) -> None:
        """Deprecated in PySpark for `createOrReplaceTempView`, which it is."""
        self._agent.register_view(name, self, replace=True)

    # -- actions -----------------------------------------------------------------------------

    def collect(self) -> list:
        return self._agent.outputs.collect(self)

    def take(self, num: int) -> list:
        return self._agent.outputs.collect(self.limit(num), action="take", origin=self)

    def head(self, n: int | None = None) -> Any:
        if n is None:
            rows = self.take(1)
            return rows[0] if rows else None
        return self.take(n)

    def first(self) -> Any:
        return self.head()

    def count(self) -> int:
        return self._agent.outputs.count(self)

    def tail(self, num: int) -> list:
        return self._agent.outputs.tail(self, num)

    def isEmpty(self) -> bool:
        """Whether there is no row (one row is read, and recorded, when there is one)."""
        return not self._agent.outputs.collect(self.limit(1), action="isEmpty", origin=self)

    def toArrow(self) -> Any:
        return self._agent.outputs.to_arrow(self)

    def show(self, n: int = 20, truncate: bool | int = True, vertical: bool = False) -> None:
        self._agent.outputs.show(self, n, truncate, vertical)

    def toPandas(self) -> Any:
        return self._agent.outputs.to_pandas(self)

    @property
    def rdd(self) -> Any:
        """The rows as an RDD of the lineage agent (`CapturedRDD`): RDD operations after it
        keep the lineage back to this DataFrame's sources. The DataFrame must give its rows
        in the same order each time it runs (see `agent.dataframe._rows`)."""
        from ._rows import rows_rdd

        return rows_rdd(self)

    def toJSON(self, use_unicode: bool = True) -> Any:
        """Each row as a JSON string, in a captured RDD (see `rdd`)."""
        from ._rows import json_rdd

        return json_rdd(self)

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Iterator[Any]:
        """Spark's, a partition at a time; the rows handed on are the action's output
        (`lineage()` once the iteration ended or was closed)."""
        return self._agent.outputs.local_iterator(self, prefetchPartitions)

    def foreach(self, f: Callable[[Any], Any]) -> None:
        """`f` on every row, on the executors. Each row `f` returned on is an output record
        (SEND) made from the row's sources; a row it raised on is a culprit (FAIL), and under
        on_error="skip" the job goes on without it."""
        self._each("foreach", f)

    def foreachPartition(self, f: Callable[[Any], Any]) -> None:
        """`f` on each partition's iterator of rows. One output record per partition, made
        from the sources of every row that reached `f`."""
        self._each("foreachPartition", f)

    def _each(self, action: str, f: Callable[[Any], Any]) -> None:
        """`action(f)` on the rows as an RDD of the lineage agent, made for this one action
        (so any row order will do)."""
        from ._rows import rows_rdd

        if not self._lin:
            getattr(self._df, action)(f)
            return
        rows = rows_rdd(self, once=action)
        getattr(rows, action)(f)
        self.last_output = rows.last_output

    @property
    def write(self) -> Any:
        from ._writer import LineageWriter

        return LineageWriter(self)

    def writeTo(self, table: str) -> Any:
        """DataFrameWriterV2 (`append`, `create`, `overwrite`...): the rows written are the
        action's output records, at `table:<table>`."""
        from ._writer import LineageWriterV2

        return LineageWriterV2(self, table)

    def lineage(self) -> LineageRDD:
        """The output rows of this DataFrame's last action, traceable (`go_back_all()` gives
        the raw source rows)."""
        if self.last_output is None:
            raise ValueError("no action has run on this DataFrame yet (collect, show, ...)")
        return self._agent.plumbing.lineage_of(self.last_output)


class _NaFunctions:
    def __init__(self, frame: LineageDataFrame) -> None:
        self._frame = frame

    def drop(self, how: str = "any", thresh: int | None = None, subset: Any = None) -> Any:
        return self._frame.dropna(how, thresh, subset)

    def fill(self, value: Any, subset: Any = None) -> Any:
        return self._frame.fillna(value, subset)

    def replace(self, to_replace: Any, value: Any = None, subset: Any = None) -> Any:
        return self._frame.replace(to_replace, value, subset)


def _stable(obj: Any, calls: frozenset[str] | None = None) -> bool:
    """Whether the captured frame `obj` gives the same rows, with the same ids, each time
    its plan runs: a source, then row-at-a-time calls, joins, unions, sorts and
    repartitions, calling Spark's deterministic builtins only (no UDF, `rand`, sample,
    limit, aggregate, `lc.sql`); cached frames are."""
    from ._lazyagg import deterministic_args
    from ._recipe import Source

    if getattr(obj, "_cached", False):
        return True
    recipe = recipe_of(obj)
    if isinstance(recipe, Source):
        return True
    if not isinstance(recipe, Call) or recipe.method not in (calls or _STABLE_CALLS):
        return False
    args = [*recipe.args, *recipe.kwargs.values()]
    frames = [a for a in args if isinstance(a, LineageDataFrame)]
    others = [a for a in args if not isinstance(a, LineageDataFrame)]
    return (
        type(recipe.receiver) is LineageDataFrame
        and _stable(recipe.receiver, calls)
        and all(_stable(f, calls) for f in frames)
        and deterministic_args(others)
    )


def require_stable(frame: Any, what: str) -> None:
    """Refuse `what`, which Spark computes apart from the ids over `frame` run twice, when
    `frame` may give other rows the second time."""
    if not _stable(frame):
        raise UnsupportedOperation(
            f"{what} over an input that may give other rows when it runs again (a sample, a "
            "limit, a UDF or a nondeterministic function, an aggregate before it, lc.sql) with "
            "lineage capture: Spark computes it apart from the ids; cache() the input first"
        )


def require_ordered(frame: Any, what: str) -> None:
    """Refuse `what`, which names `frame`'s rows by their positions in its partitions, when
    `frame` may give them in another order when it runs again (see `_ORDERED_CALLS`)."""
    if not _stable(frame, _ORDERED_CALLS):
        raise UnsupportedOperation(
            f"{what} over a DataFrame whose rows may come in another order when it runs again "
            "(after a join, an aggregate, a sort, a shuffle, a sample, a limit, a UDF or a "
            "nondeterministic function, lc.sql) with lineage capture: its rows are named by "
            "their positions; cache() the DataFrame first"
        )


# Calls that keep their input's row order, partition by partition (row at a time, or
# partitions concatenated or merged as they are).
_ORDERED_CALLS = frozenset(
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
        "coalesce",
        "hint",
        "withMetadata",
        "to",
        "dropna",
        "fillna",
        "replace",
        "union",
        "unionAll",
        "unionByName",
    }
)
# Calls that give the same rows each time, maybe in another order.
_STABLE_CALLS = _ORDERED_CALLS | {
    "orderBy",
    "sort",
    "sortWithinPartitions",
    "repartition",
    "repartitionByRange",
    "join",
    "crossJoin",
}

_GROUPED_SIMPLE = {"sum": F.sum, "avg": F.avg, "mean": F.avg, "min": F.min, "max": F.max}


@recorded(
    "agg",
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "pivot",
    "applyInPandas",
    "applyInArrow",
    "cogroup",
)
class LineageGroupedData:
    """groupBy / rollup / cube / groupingSets, and groupBy().pivot(): every aggregate also
    collects its group's lineage."""

    def __init__(
        self,
        frame: LineageDataFrame,
        kind: str,
        cols: list,
        sets: list | None = None,
        pivot: tuple[str, list] | None = None,
    ) -> None:
        self._frame = frame
        self._kind = kind
        self._cols = cols
        self._sets = sets  # groupingSets' sets
        self._pivot = pivot  # pivot's column and values
        self._vanilla: Any = None  # PySpark's pivoted GroupedData, for a frame with no ids

    def pivot(self, pivot_col: str, values: list | None = None) -> LineageGroupedData:
        """Pivots `pivot_col` (see `_pivot` for the lineage); without `values`, computes
        them now (a job), as PySpark does."""
        frame = self._frame
        if self._kind != "groupBy" or self._pivot is not None:
            what = "pivot" if self._pivot is not None else self._kind
            raise UnsupportedOperation(
                f"pivot after {what} is not supported with lineage capture (Spark pivots a "
                "groupBy only)"
            )
        if not frame._lin:
            grouped = self._grouped(frame._df).pivot(pivot_col, values)
            out = LineageGroupedData(frame, self._kind, self._cols, pivot=(pivot_col, []))
            out._vanilla = grouped  # its values computed by PySpark
            return out
        from ._pivot import pivot_values

        vals = pivot_values(frame, pivot_col, values)
        return LineageGroupedData(frame, self._kind, self._cols, pivot=(pivot_col, vals))

    @property
    def kind(self) -> str:
        """groupBy, rollup, cube, groupingSets, or pivot (of a groupBy)."""
        return "pivot" if self._pivot is not None else self._kind

    @property
    def keys(self) -> list:
        """The grouping columns."""
        return list(self._cols)

    def vanilla(self, df: Any) -> Any:
        """PySpark's GroupedData of this grouping over `df` (a pivot's: over its frame with
        capture off)."""
        if self._vanilla is not None:
            return self._vanilla
        return self._grouped(df)

    def applyInPandas(self, func: Callable, schema: Any) -> LineageDataFrame:
        """Maps each group with `func` (pandas DataFrame -> pandas DataFrame); each row it
        returns is made from its whole group (see `_mapgroups`)."""
        from ._mapgroups import grouped_map

        return grouped_map(self, func, schema, arrow=False)

    def applyInArrow(self, func: Callable, schema: Any) -> LineageDataFrame:
        """Maps each group with `func` (Arrow table -> Arrow table), as applyInPandas."""
        from ._mapgroups import grouped_map

        return grouped_map(self, func, schema, arrow=True)

    def cogroup(self, other: LineageGroupedData) -> LineageCogroupedData:
        """Cogroups with `other` (a groupBy of a frame of this context) for a cogrouped
        applyInPandas / applyInArrow."""
        if not isinstance(other, LineageGroupedData):
            raise UnsupportedOperation(
                "cogroup with grouped data not made through this LineageContext (its rows "
                "have no lineage)"
            )
        self._frame._agent.frame_of(other._frame, "cogroup")
        return LineageCogroupedData(self, other)

    def _aggregated(self, df: Any, exprs: list) -> Any:
        """An aggregate expression's context (see `LineageDataFrame._unstarred`)."""
        return self._grouped(df).agg(*exprs)

    def _grouped(self, df: Any) -> Any:
        lead = [] if self._sets is None else [self._sets]
        return getattr(df, self._kind)(*lead, *self._cols)

    def agg(self, *exprs: Any) -> LineageDataFrame:
        frame = self._frame
        if len(exprs) == 1 and isinstance(exprs[0], dict):
            if not frame._lin:  # Spark's own dict aggregate
                grouped = self._vanilla if self._pivot is not None else self._grouped(frame._df)
                return frame._new(grouped.agg(exprs[0]))
            exprs = self._dict_exprs(exprs[0])
        exprs = tuple(frame._unstarred(_flat(exprs), "agg", self._aggregated))
        if self._pivot is not None:
            if not frame._lin:
                return frame._new(self._vanilla.agg(*exprs))
            from ._pivot import pivoted

            return pivoted(frame, self._cols, *self._pivot, list(exprs))
        if not frame._lin:
            return frame._new(self._grouped(frame._df).agg(*exprs))
        if self._calls_pandas_aggregate(exprs):
            return self._pandas_aggregate(exprs)
        return frame._agent.aggregate(frame, self._grouped, self._cols, list(exprs), self._kind)

    def _dict_exprs(self, spec: dict) -> tuple:
        """`agg({column: function})` as the columns Spark's own dict aggregate makes: its
        spellings (`mean` / `average` are `avg`, `std` is `stddev`, `size` is `count`, `*`
        counts rows), its order (a Java map's) and names, checked against it by Spark
        (`sameSemantics`, names, types) over the visible columns."""
        spelled = {"average": "avg", "mean": "avg", "std": "stddev", "size": "count"}
        mine = []
        for c, fn in spec.items():
            name = spelled.get(str(fn).lower(), str(fn))
            if c == "*" and name.lower() == "count":
                mine.append(F.count(F.lit(1)))
            else:
                mine.append(F.call_function(name, F.col(c)))
        visible = self._frame._visible_df()
        want = self._grouped(visible).agg(spec)  # vanilla's (its error, if any)
        with _quiet():
            try:
                names = list(self._grouped(visible).agg(*mine).columns)
                keys = len(names) - len(mine)
                order = {n: i for i, n in enumerate(names[keys:])}
                if len(order) == len(mine) and set(order) == set(want.columns[keys:]):
                    mine = [mine[order[n]] for n in want.columns[keys:]]
                    got = self._grouped(visible).agg(*mine)
                    if got.schema == want.schema and want.sameSemantics(got):
                        return tuple(mine)
            except Exception:  # not the same aggregate: refused below
                pass
        raise UnsupportedOperation(
            f"agg({spec!r}) with lineage capture: its columns could not be made as Spark's "
            "dict aggregate makes them; pass the aggregate Columns instead"
        )

    def _calls_pandas_aggregate(self, exprs: tuple) -> bool:
        """Whether `exprs` call a grouped-aggregate pandas UDF, which Spark allows beside no
        other aggregate (the ids' `collect_list`): asked of Spark when they call anything
        but its builtins (a column's text does not tell a UDF's kind)."""
        from ._lazyagg import calls_only_builtins

        if all(calls_only_builtins(e) for e in exprs):
            return False
        import contextlib
        import io

        frame = self._frame
        df = frame._df
        if uses_current(exprs):
            df = df.withColumn(CURRENT, udf_ids(F, frame._lin))
        try:
            # Spark refuses the mix when it plans the aggregate (not when it analyzes it):
            # planned over no rows (the optimizer prunes the input; a global aggregate
            # stays).
            probe = df.where(F.lit(False)).groupBy().agg(*exprs, F.count(F.lit(1)))
            with _quiet(), contextlib.redirect_stdout(io.StringIO()):
                probe.explain()
        except Exception as e:
            return "INVALID_PANDAS_UDF_PLACEMENT" in str(e)
        return False

    def _pandas_aggregate(self, exprs: tuple) -> LineageDataFrame:
        """The aggregate of `exprs`, which call a grouped-aggregate pandas UDF: computed by
        Spark without ids (vanilla's plan), joined null-safely on its group keys (and
        grouping set) to the groups' ids, aggregated apart over the same input. The input
        runs twice, so it must give the same rows each time (`_stable`)."""
        frame = self._frame
        require_stable(frame, "a grouped-aggregate pandas UDF")
        lin = frame._lin
        src = frame._src(*self._cols, *exprs)
        gid = [F.grouping_id().alias(fresh("gid"))] if self._kind != "groupBy" else []
        # A global aggregate as one group of a constant: Spark fails to plan a join of a
        # global pandas aggregate (INTERNAL_ERROR), and over no rows both give no row.
        whole = not self._cols and not gid
        group = (lambda df: df.groupBy(F.lit(True))) if whole else self._grouped
        values = vanilla_names(group(src).agg(*exprs, *gid), (*self._cols, *exprs))
        names = list(values.columns)
        name = fresh()
        ids = group(src).agg(collected(F, lin, name), *gid)
        keys = len(names) - len(exprs) - len(gid)
        vk = [fresh("k") for _ in range(keys + len(gid))]
        ik = [fresh("k") for _ in vk]
        aggs = names[keys : keys + len(exprs)]
        left = values.toDF(*vk[:keys], *aggs, *vk[keys:])
        right = ids.toDF(*ik[:keys], name, *ik[keys:])
        on = [F.col(a).eqNullSafe(F.col(b)) for a, b in zip(vk, ik)]
        joined = left.join(right, reduce(lambda a, b: a & b, on), "inner")
        shown = names[keys : -len(gid) or None] if whole else names[: keys + len(exprs)]
        kept = vk[keys:keys] if whole else vk[:keys]
        out = joined.select(*map(quoted, [*kept, *aggs]), name).toDF(*shown, name)
        return frame._new(out, Lineage((), (name,), lin.cps))

    def count(self) -> LineageDataFrame:
        return self.agg(F.count(F.lit(1)).alias("count"))

    def _simple(self, fn: str, cols: Iterable[str]) -> LineageDataFrame:
        names = list(cols)
        if not names:
            numeric = ("tinyint", "smallint", "int", "bigint", "float", "double")
            names = [n for n, t in self._frame.dtypes if t in numeric or t.startswith("decimal")]
        return self.agg(*[_GROUPED_SIMPLE[fn](quoted(c)) for c in names])

    def sum(self, *cols: str) -> LineageDataFrame:
        return self._simple("sum", cols)

    def avg(self, *cols: str) -> LineageDataFrame:
        return self._simple("avg", cols)

    mean = avg

    def min(self, *cols: str) -> LineageDataFrame:
        return self._simple("min", cols)

    def max(self, *cols: str) -> LineageDataFrame:
        return self._simple("max", cols)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(
            f"GroupedData.{name} is not supported with lineage capture (it would lose "
            "record-level lineage)"
        )


@recorded("applyInPandas", "applyInArrow")
class LineageCogroupedData:
    """`g1.cogroup(g2)`: each row a cogrouped map returns is made from both its groups."""

    def __init__(self, left: LineageGroupedData, right: LineageGroupedData) -> None:
        self._left = left
        self._right = right

    def applyInPandas(self, func: Callable, schema: Any) -> LineageDataFrame:
        from ._mapgroups import cogrouped_map

        return cogrouped_map(self._left, self._right, func, schema, arrow=False)

    def applyInArrow(self, func: Callable, schema: Any) -> LineageDataFrame:
        from ._mapgroups import cogrouped_map

        return cogrouped_map(self._left, self._right, func, schema, arrow=True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(f"PandasCogroupedOps.{name} with lineage capture")
