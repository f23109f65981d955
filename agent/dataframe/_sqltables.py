"""`lc.sql` over Parquet tables of the catalog: each table the query reads that is not a view
of a captured DataFrame (nor a CTE) and is a Parquet table (`lc.read.table`'s rule) is read
as its files, with ids, and named in the query by a temp view of a fresh name, as a `{name}`
DataFrame argument is (`_sqlargs`): the caller drops the views after the query is made, and
replay rebuilds them from the frames the recipe keeps. Tables that are none of these stay as
written, and the rewrite refuses them, naming them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._rdd import UnsupportedOperation
from ._columns import fresh

if TYPE_CHECKING:
    from ._frame import LineageDataFrame
    from ._session import FrameAgent


def read_catalog_tables(agent: FrameAgent, text: str, views: dict[str, LineageDataFrame]) -> str:
    """`text` with each catalog Parquet table it reads replaced by a new view (added to
    `views`); `text` itself when it reads none."""
    from sqlglot import exp

    from ._sqldialect import parse_one, to_sql

    try:
        tree = parse_one(text)
    except Exception:  # the rewrite reports what it cannot parse
        return text
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    known = {n.lower() for n in (*agent.views, *views)}
    made: dict[str, str] = {}  # the table's name as written (lower case) -> its view
    for table in list(tree.find_all(exp.Table)):
        if isinstance(table.this, exp.Func) or not table.name:
            continue
        qualified = bool(table.args.get("db") or table.args.get("catalog"))
        if not qualified and (table.name.lower() in ctes or table.name.lower() in known):
            continue
        written = ".".join(
            p.sql(dialect="spark")
            for p in (table.args.get("catalog"), table.args.get("db"), table.this)
            if p is not None
        )
        key = written.lower()
        if key not in made:
            frame = _parquet_table(agent, written)
            if frame is None:
                continue
            view = fresh("table")
            frame._df.createOrReplaceTempView(view)
            views[view] = frame
            made[key] = view
        original = table.name
        for part in ("catalog", "db"):
            table.set(part, None)
        table.set("this", exp.to_identifier(made[key]))
        if not table.alias:  # columns qualified by the table's name still resolve
            table.set("alias", exp.TableAlias(this=exp.to_identifier(original)))
    return to_sql(tree) if made else text


def _parquet_table(agent: FrameAgent, name: str) -> LineageDataFrame | None:
    """The table read with ids, or None when it is not a Parquet table of the catalog (a
    temp view of no captured frame, another provider: the rewrite refuses it)."""
    from pyspark.errors import AnalysisException

    from ._reader import table_scan

    try:
        return table_scan(agent, name)
    except (UnsupportedOperation, AnalysisException):
        return None
