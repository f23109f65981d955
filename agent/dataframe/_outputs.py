"""Actions that return rows to the driver: the rows come back with their hidden lineage
columns, which are stripped here (the caller gets exactly what vanilla PySpark returns), and
the driver journals one output batch: one record per returned row, in order, whose parents
are the row's source records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql import functions as F

from ._columns import Lineage, all_ids, fresh, is_hidden, joined_arrays, parents_of
from ._plumbing import pickled

if TYPE_CHECKING:
    from ._frame import LineageDataFrame
    from ._session import FrameAgent


def _fetch(frame: LineageDataFrame) -> tuple[list, list[list]]:
    """Collect `frame`: (rows without hidden columns, each row's hidden values in
    `lin.names` order; arrays as joined strings)."""
    if frame._collected_df is not None:
        return _split_rows(frame, frame._collected_df.collect())
    return _split_rows(frame, joined_arrays(F, frame._df, frame._lin).collect())


def _split_rows(frame: LineageDataFrame, rows: list) -> tuple[list, list[list]]:
    """(rows without hidden columns, each row's hidden values in `lin.names` order)."""
    if not rows:
        return [], []
    # The rows name their fields: no schema to ask of Spark (a round trip; an RPC under
    # Spark Connect).
    names = getattr(rows[0], "__fields__", None) or frame._all_columns
    visible = [i for i, n in enumerate(names) if not is_hidden(n)]
    fields = [names[i] for i in visible]
    hidden = [names.index(h) for h in frame._lin.names]
    out, lin = [], []
    for r in rows:
        t = tuple(r)
        row = Row(*[t[i] for i in visible])
        row.__fields__ = list(fields)
        out.append(row)
        lin.append([t[i] for i in hidden])
    return out, lin


class Outputs:
    def __init__(self, agent: FrameAgent) -> None:
        self.agent = agent

    def _record(
        self, frame: LineageDataFrame, origin: LineageDataFrame, action: str, run: Any
    ) -> Any:
        return self._record_as(frame._lin, origin, action, run)

    def _record_as(self, lin: Lineage, origin: LineageDataFrame, action: str, run: Any) -> Any:
        """Run `run()` -> (result, rows returned, their hidden values in `lin.names` order)
        inside an action and journal the returned rows as the action's output records."""
        plumbing = self.agent.plumbing
        cp = plumbing.output_cp(action, sorted(lin.cps), of=origin._name)
        with plumbing.action(origin, cp):
            result, rows, hidden = run()
            counts, ids = parents_of(hidden, lin)
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
            rows, hidden = _fetch(frame)
            return rows, rows, hidden

        return self._record(frame, origin or frame, action, run)

    def count(self, frame: LineageDataFrame) -> int:
        if not frame._lin:
            return frame._df.count()
        counted = frame.agg(F.count(F.lit(1)).alias("count"))

        def run():
            rows, hidden = _fetch(counted)
            return int(rows[0][0]), rows, hidden

        return self._record(counted, frame, "count", run)

    def show(self, frame: LineageDataFrame, n: int, truncate: Any, vertical: bool) -> None:
        if not frame._lin:
            frame._df.show(n, truncate, vertical)
            return
        top = frame.limit(n + 1)  # one more tells whether "only showing top n rows" applies

        def run():
            rows, hidden = _fetch(top)
            return rows, rows[:n], hidden[:n]

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
            return pdf, rows, hidden

        return self._record_as(one, frame, "toPandas", run)
