"""`lc.read`: DataFrameReader's shape; every row gets its record id at the scan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._rdd import UnsupportedOperation
from ._columns import Lineage, fresh, scan_id_sql, sql_name
from ._frame import LineageDataFrame
from ._recipe import Source, set_recipe
from ._scan import plan_scan

if TYPE_CHECKING:
    from ._session import FrameAgent

_FORMATS = ("csv", "json", "text", "parquet")


def _paths(path: Any) -> list[str]:
    if isinstance(path, str):
        return [path]
    if isinstance(path, list | tuple) and all(isinstance(p, str) for p in path):
        return list(path)
    raise TypeError(f"path must be a string or a list of strings, got {type(path).__name__}")


class LineageReader:
    """`lc.read`: csv, json (JSON lines), text and parquet, from local or shared paths."""

    def __init__(self, agent: FrameAgent) -> None:
        self._agent = agent
        self._format: str | None = None
        self._options: dict[str, Any] = {}
        self._schema: Any = None

    def format(self, source: str) -> LineageReader:
        self._format = source.lower()
        return self

    def option(self, key: str, value: Any) -> LineageReader:
        self._options[key] = value
        return self

    def options(self, **options: Any) -> LineageReader:
        self._options.update(options)
        return self

    def schema(self, schema: Any) -> LineageReader:
        self._schema = schema
        return self

    def load(
        self, path: Any = None, format: str | None = None, schema: Any = None, **options: Any
    ) -> LineageDataFrame:
        fmt = (format or self._format or "parquet").lower()
        if fmt not in _FORMATS:
            raise UnsupportedOperation(
                f"reading format {fmt!r} with lineage (supported: {', '.join(_FORMATS)})"
            )
        if path is None:
            raise UnsupportedOperation("load() without a path (tables) with lineage")
        opts = {**self._options, **{k: v for k, v in options.items() if v is not None}}
        return self._agent.scan(fmt, _paths(path), schema or self._schema, opts)

    def csv(self, path: Any, schema: Any = None, **options: Any) -> LineageDataFrame:
        return self.load(path, "csv", schema, **options)

    def json(self, path: Any, schema: Any = None, **options: Any) -> LineageDataFrame:
        return self.load(path, "json", schema, **options)

    def text(self, paths: Any, **options: Any) -> LineageDataFrame:
        return self.load(paths, "text", None, **options)

    def parquet(self, *paths: str, **options: Any) -> LineageDataFrame:
        return self.load(list(paths), "parquet", None, **options)

    def table(self, tableName: str) -> LineageDataFrame:
        raise UnsupportedOperation("read.table: catalog tables with lineage (read the files)")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(f"DataFrameReader.{name} with lineage capture")


def scanned(agent: FrameAgent, fmt: str, paths: list[str], schema: Any, opts: dict) -> Any:
    """(vanilla DataFrame, LineageDataFrame) of a file scan with its rows' ids."""
    spark = agent.spark
    # Refuse what cannot be traced before Spark reads anything (its errors would come first).
    scan = plan_scan(spark, fmt, paths, opts) if agent.plumbing.capture else None
    reader = spark.read.format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    if opts:
        reader = reader.options(**opts)
    df = reader.load(paths if len(paths) != 1 else paths[0])
    if scan is None:
        return LineageDataFrame(agent, df, Lineage())
    cp = agent.plumbing.source_cp(fmt, len(scan["partitions"]), path=",".join(paths), scan=scan)
    h = fresh()
    # The id is projected directly over the scan, where monotonically_increasing_id() is
    # (scan partition, row index): see _columns.scan_id_sql. `selectExpr` of text: 7 py4j
    # round trips where `select("*", Column.alias(...))` takes ~25.
    projection = f"{scan_id_sql(cp.number)} AS {sql_name(h)}"
    frame = LineageDataFrame(
        agent,
        None,
        Lineage((h,), (), frozenset({cp.number})),
        make=lambda: df.selectExpr("*", projection),
    )
    set_recipe(frame, Source(cp.number, h, (fmt, list(paths), dict(opts), scan)))
    return frame
