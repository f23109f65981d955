"""`lc.sql(sqlQuery, args=None, **kwargs)`: `spark.sql`'s arguments.

- `kwargs`: `{name}` fields of the text are formatted as `spark.sql` formats them (Python's
  `str.format`, only when there are kwargs: `{{` for a brace then). A DataFrame must be a
  DataFrame of this LineageContext (its rows have lineage): it becomes a temp view of a
  fresh name while the query is rewritten (its hidden columns with it, as any view), and the
  run text passes it to Spark as a DataFrame argument, as `spark.sql` does; other values
  (columns, strings, numbers) are formatted by PySpark's own formatter.
- `args`: named (`:x`, a dict) or positional (`?`, a list) parameter markers, bound by Spark
  to literals. The rewriter analyzes parts of the query on their own (a subquery, a FROM
  item), so positional markers are named first (`:__prov_arg<i>`, in text order: what they
  bind is unchanged) and every text Spark analyzes or runs gets the same named arguments.
  Replay runs the recorded text with them again (`SqlQueryArgs`).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._rdd import UnsupportedOperation
from ._columns import fresh
from ._recipe import SqlQuery

if TYPE_CHECKING:
    from ._frame import LineageDataFrame
    from ._session import FrameAgent

_POSITIONAL = "__prov_arg"


@dataclass(frozen=True, eq=False)
class SqlQueryArgs(SqlQuery):
    """An `lc.sql` query with parameter markers: its named arguments too."""

    args: dict[str, Any] | None = None


def format_kwargs(
    agent: FrameAgent, text: str, kwargs: Mapping[str, Any]
) -> tuple[str, dict[str, LineageDataFrame]]:
    """`text` formatted with `kwargs` as `spark.sql` formats it, each DataFrame as a temp
    view of a fresh name (created here; the caller drops them), and those views."""
    formatter = _Formatter(agent)
    try:
        return formatter.format(text, **kwargs), formatter.views
    except BaseException:
        drop_views(agent, formatter.views)
        raise


def drop_views(agent: FrameAgent, views: Mapping[str, Any]) -> None:
    for name in views:
        agent.spark.catalog.dropTempView(name)


class _Formatter(string.Formatter):
    def __init__(self, agent: FrameAgent) -> None:
        super().__init__()
        self.agent = agent
        self.views: dict[str, LineageDataFrame] = {}
        self._pyspark = _pyspark_formatter(agent.spark)

    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        obj, first = super().get_field(field_name, args, kwargs)
        return self._convert(obj, field_name), first

    def _convert(self, value: Any, field_name: str) -> Any:
        from pyspark.sql import DataFrame

        from ._frame import LineageDataFrame

        if isinstance(value, LineageDataFrame):
            if value._agent is not self.agent:
                raise UnsupportedOperation(
                    f"lc.sql: {{{field_name}}} is a DataFrame of another LineageContext"
                )
            for name, frame in self.views.items():
                if frame is value:
                    return name
            name = fresh("arg")
            value._df.createOrReplaceTempView(name)
            self.views[name] = value
            return name
        if isinstance(value, DataFrame) or type(value).__name__ == "DataFrame":
            raise UnsupportedOperation(
                f"lc.sql: {{{field_name}}} is a DataFrame not made through this "
                "LineageContext (its rows have no lineage): read or create it with lc.read / "
                "lc.createDataFrame"
            )
        return self._pyspark._convert_value(value, field_name)


def _pyspark_formatter(spark: Any) -> Any:
    """PySpark's own formatter for the session's kind (classic or Spark Connect)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.sql_formatter import SQLStringFormatter
    else:
        from pyspark.sql.sql_formatter import SQLStringFormatter  # type: ignore[assignment]
    return SQLStringFormatter(spark)


def named_markers(text: str, args: Any) -> tuple[str, dict[str, Any] | None]:
    """`text` with its positional markers (`?`) named, and the arguments by name (None
    without arguments). Named markers and a dict pass as they are."""
    if args is None:
        return text, None
    if isinstance(args, Mapping):
        return text, dict(args)
    if not isinstance(args, list | tuple):
        return text, args  # (Spark's error for it, from the vanilla query)
    from sqlglot.tokenizer_core import TokenType

    from ._sqldialect import LineageSpark

    tokens = LineageSpark().tokenize(text)
    marks = [t for t in tokens if t.token_type == TokenType.PLACEHOLDER and t.text == "?"]
    out, end = [], 0
    for i, token in enumerate(marks):
        out.append(text[end : token.start])
        out.append(f":{_POSITIONAL}{i}")
        end = token.end + 1
    out.append(text[end:])
    return "".join(out), {f"{_POSITIONAL}{i}": v for i, v in enumerate(args)}
