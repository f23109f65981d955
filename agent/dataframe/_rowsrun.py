"""What `df.rdd` / `df.toJSON()` run in Spark's Python workers (executor side: no pyspark
driver modules, no repository): each row arrives with its ids as its last field, and goes on
to the RDD agent's segment as (the row as vanilla gives it, its ids)."""

from __future__ import annotations

from typing import Any


class RowSplitter:
    """A row whose last field holds its ids -> (the row without it, its ids). `fields`: the
    other fields' names (vanilla's Row names them); None: the row is its only other field's
    value (`toJSON`'s strings)."""

    def __init__(self, fields: list[str] | None) -> None:
        self.fields = fields

    def __call__(self, row: Any) -> tuple[Any, Any]:
        t = tuple(row)
        ids = t[-1] or ()
        if self.fields is None:
            return t[0], ids
        from pyspark.sql import Row

        out = Row(*t[:-1])
        out.__fields__ = list(self.fields)
        return out, ids
