"""Actions that return rows to the driver: the rows come back with their hidden lineage
columns, which are stripped here (the caller gets exactly what vanilla PySpark returns), and
the driver journals one output batch: one record per returned row, in order, whose parents
are the row's source records."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import Row
from pyspark.sql import functions as F

from ._columns import (
    Lineage,
    all_ids,
    arrow_parents,
    collected,
    fresh,
    is_hidden,
    joined_arrays,
    parents_of,
)
from ._plumbing import pickled

if TYPE_CHECKING:
    from ._frame import LineageDataFrame
    from ._session import FrameAgent


Parents = tuple[np.ndarray, np.ndarray]  # CSR: each row's parent count, their ids


def _fetch(frame: LineageDataFrame, tail: int | None = None) -> tuple[list, Parents]:
    """Collect `frame` (`tail`: its last rows only): (rows without hidden columns, each
    row's parents as CSR)."""
    lin = frame._lin
    df = _every_row(frame)
    if lin.arrays and tail is None:
        got = _fetch_arrow(df, lin)
        if got is not None:
            return got
    joined = joined_arrays(F, df, lin)
    rows, hidden = _split_rows(frame, joined.collect() if tail is None else joined.tail(tail))
    return rows, parents_of(hidden, lin)


def _every_row(frame: LineageDataFrame) -> Any:
    """The DataFrame to run for an action that brings every row (or the last ones) back."""
    return frame._df if frame._collected_df is None else frame._collected_df


# Visible column types whose values come out of Arrow exactly as classic `collect()` gives
# them (timestamps, binaries, intervals and nested types differ, or may: not taken).
_ARROW_EXACT = (
    "ByteType",
    "ShortType",
    "IntegerType",
    "LongType",
    "FloatType",
    "DoubleType",
    "DecimalType",
    "StringType",
    "BooleanType",
    "DateType",
)


def _fetch_arrow(df: Any, lin: Lineage) -> tuple[list, Parents] | None:
    """Rows that carry group ids, collected as Arrow batches: the ids stay int64 buffers
    (TPC-H Q1's 1.2 M ids: no text built in the JVM, pickled, decoded and parsed). The rows
    are made as Spark Connect makes its `collect()`'s from Arrow, and so only when every
    visible column's type converts exactly as classic `collect()` does; None otherwise (or
    without Spark's Arrow collection: PySpark < 4)."""
    try:
        from pyspark.sql.conversion import ArrowTableToRowsConversion
    except ImportError:
        return None
    if not hasattr(df, "toArrow"):
        return None
    from pyspark.sql.types import StructType

    schema = df.schema
    names = [f.name for f in schema.fields]
    visible = [i for i, n in enumerate(names) if not is_hidden(n)]
    if any(type(schema.fields[i].dataType).__name__ not in _ARROW_EXACT for i in visible):
        return None
    if len({names[i] for i in visible}) != len(visible) or any(
        names.count(h) != 1 for h in lin.names
    ):
        return None  # the Arrow table's columns are found by name
    table = df.toArrow()
    shown = StructType([schema.fields[i] for i in visible])
    rows = ArrowTableToRowsConversion.convert(table.select(visible), shown)
    return rows, arrow_parents(table, lin)


def _split_rows(frame: LineageDataFrame, rows: list) -> tuple[list, list[list]]:
    """(rows without hidden columns, each row's hidden values in `lin.names` order)."""
    if not rows:
        return [], []
    split = _splitter(frame, rows[0])
    out, lin = [], []
    for r in rows:
        row, hidden = split(r)
        out.append(row)
        lin.append(hidden)
    return out, lin


def _splitter(frame: LineageDataFrame, first: Any) -> Callable[[Any], tuple[Any, list]]:
    """row -> (the row without hidden columns, its hidden values in `lin.names` order), for
    rows shaped as `first`."""
    # The rows name their fields: no schema to ask of Spark (a round trip; an RPC under
    # Spark Connect).
    names = getattr(first, "__fields__", None) or frame._all_columns
    visible = [i for i, n in enumerate(names) if not is_hidden(n)]
    fields = [names[i] for i in visible]
    hidden = [names.index(h) for h in frame._lin.names]

    def split(r: Any) -> tuple[Any, list]:
        t = tuple(r)
        row = Row(*[t[i] for i in visible])
        row.__fields__ = list(fields)
        return row, [t[i] for i in hidden]

    return split


def _head(parents: Parents, n: int) -> Parents:
    """The first `n` rows' parents."""
    counts, ids = parents
    return counts[:n], ids[: int(counts[:n].sum())]


# `toLocalIterator`: rows handed on are journaled in batches of this many.
_ITERATED = 10_000


class Outputs:
    def __init__(self, agent: FrameAgent) -> None:
        self.agent = agent

    def _record(
        self, frame: LineageDataFrame, origin: LineageDataFrame, action: str, run: Any
    ) -> Any:
        return self._record_as(frame._lin, origin, action, run)

    def _record_as(self, lin: Lineage, origin: LineageDataFrame, action: str, run: Any) -> Any:
        """Run `run()` -> (result, rows returned, their parents as CSR) inside an action and
        journal the returned rows as the action's output records."""
        plumbing = self.agent.plumbing
        cp = plumbing.output_cp(action, sorted(lin.cps), of=origin._name)
        with plumbing.action(origin, cp):
            result, rows, (counts, ids) = run()
            plumbing.journal(
                cp, len(rows), parent_counts=counts, parent_ids=ids, values=pickled(rows)
            )
        return result

    def collect(
        self,
        frame: LineageDataFrame,
        action: str = "collect",
        origin: LineageDataFrame | None = None,
    ) -> list:
        if not frame._lin:
            return frame._df.collect()

        def run():
            rows, parents = _fetch(frame)
            return rows, rows, parents

        return self._record(frame, origin or frame, action, run)

    def tail(self, frame: LineageDataFrame, num: int) -> list:
        if not frame._lin:
            return frame._df.tail(num)

        def run():
            rows, parents = _fetch(frame, tail=num)
            return rows, rows, parents

        return self._record(frame, frame, "tail", run)

    def to_arrow(self, frame: LineageDataFrame) -> Any:
        if not frame._lin:
            return frame._df.toArrow()
        lin = frame._lin

        def run():
            table = _every_row(frame).toArrow()
            parents = arrow_parents(table, lin)
            visible = [i for i, n in enumerate(table.column_names) if not is_hidden(n)]
            out = table.select(visible)
            fields = out.column_names
            rows = []
            for values in zip(*(c.to_pylist() for c in out.columns)):
                row = Row(*values)
                row.__fields__ = list(fields)
                rows.append(row)
            return out, rows, parents

        return self._record(frame, frame, "toArrow", run)

    def local_iterator(self, frame: LineageDataFrame, prefetch: bool) -> Iterator[Any]:
        """Spark's `toLocalIterator` (a partition at a time; under Spark Connect too); the
        rows it hands on are the action's output, journaled every `_ITERATED` rows (each
        batch a partition of the output capture point) and when the iteration ends or the
        caller stops reading."""
        if not frame._lin:
            return frame._df.toLocalIterator(prefetch)
        return self._iterate(frame, prefetch)

    def _iterate(self, frame: LineageDataFrame, prefetch: bool) -> Iterator[Any]:
        lin = frame._lin
        plumbing = self.agent.plumbing
        cp = plumbing.output_cp("toLocalIterator", sorted(lin.cps), of=frame._name)
        source = joined_arrays(F, _every_row(frame), lin).toLocalIterator(prefetch)
        rows: list = []
        hidden: list[list] = []
        batches = 0
        split: Callable[[Any], tuple[Any, list]] | None = None

        def journal() -> None:
            nonlocal rows, hidden, batches
            counts, ids = parents_of(hidden, lin)
            plumbing.journal(
                cp,
                len(rows),
                partition=batches,
                parent_counts=counts,
                parent_ids=ids,
                values=pickled(rows),
            )
            rows, hidden, batches = [], [], batches + 1

        with plumbing.action(frame, cp):
            try:
                for got in source:
                    split = split or _splitter(frame, got)
                    row, ids = split(got)
                    rows.append(row)
                    hidden.append(ids)
                    yield row
                    if len(rows) == _ITERATED:
                        journal()
            except GeneratorExit:  # the caller stopped reading: what it read is the output
                pass
            finally:
                if rows:
                    journal()

    def count(self, frame: LineageDataFrame) -> int:
        if not frame._lin:
            return frame._df.count()
        counted = frame.agg(F.count(F.lit(1)).alias("count"))

        def run():
            rows, parents = _fetch(counted)
            return int(rows[0][0]), rows, parents

        return self._record(counted, frame, "count", run)

    def value(self, frame: LineageDataFrame, action: str, compute: Callable[[], Any]) -> Any:
        """`compute()`: a value Spark computes over `frame`'s visible rows apart from their
        ids (a correlation, quantiles), recorded as one output record holding it, made from
        every row of `frame` (one more aggregate of their ids: `frame` must give the same
        rows both times, which the caller checks)."""
        if not frame._lin:
            return compute()
        name = fresh()
        lin = Lineage((), (name,), frame._lin.cps)
        ids = frame._new(frame._df.agg(collected(F, frame._lin, name)), lin)

        def run():
            value = compute()
            _, parents = _fetch(ids)
            return value, [Row(value=value)], parents

        return self._record(ids, frame, action, run)

    def show(self, frame: LineageDataFrame, n: int, truncate: Any, vertical: bool) -> None:
        if not frame._lin:
            frame._df.show(n, truncate, vertical)
            return
        top = frame.limit(n + 1)  # one more tells whether "only showing top n rows" applies

        def run():
            rows, parents = _fetch(top)
            return rows, rows[:n], _head(parents, n)

        rows = self._record(top, frame, "show", run)
        # Spark formats the table: the very rows, handed back, print as vanilla prints them.
        spark = frame._df.sparkSession
        spark.createDataFrame(rows, frame.schema).show(n, truncate, vertical)

    def to_pandas(self, frame: LineageDataFrame) -> Any:
        if not frame._lin:
            return frame._df.toPandas()

        # pandas would turn a nullable long into float64 (ids past 2**53 lose digits): the
        # ids travel as one joined string of exact ints.
        lin = frame._lin
        ids = fresh()
        merged = frame._df.withColumn(ids, F.array_join(all_ids(F, lin), ",")).drop(*lin.names)
        one = Lineage((), (ids,), lin.cps)

        def run():
            pdf = merged.toPandas()
            hidden = [[v] for v in pdf[ids].tolist()]
            pdf = pdf.drop(columns=[ids])
            fields = list(pdf.columns)
            rows = []
            for t in pdf.itertuples(index=False, name=None):
                row = Row(*t)
                row.__fields__ = list(fields)
                rows.append(row)
            return pdf, rows, parents_of(hidden, one)

        return self._record_as(one, frame, "toPandas", run)
