"""`df.write`: DataFrameWriter's shape. The rows pass a tap (`_tap.WriteTap`, a
`mapInArrow` before the writer) that journals them as the write's output records, with
their lineage and the output location; the writer itself is vanilla."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._rdd import UnsupportedOperation
from ._tap import TapSpec, WriteTap

if TYPE_CHECKING:
    from ._frame import LineageDataFrame

_MODULES = ("agent.dataframe._tap",)
_W = TypeVar("_W", bound="_Chained")


class _Chained:
    """A writer's settings, recorded and replayed on vanilla's writer when it writes."""

    _vanilla = "DataFrameWriter"

    def __init__(self, frame: LineageDataFrame) -> None:
        self._frame = frame
        self._calls: list[tuple[str, tuple, dict]] = []

    def _chain(self: _W, name: str, *args: Any, **kwargs: Any) -> _W:
        self._calls.append((name, args, kwargs))
        return self

    def option(self: _W, key: str, value: Any) -> _W:
        return self._chain("option", key, value)

    def options(self: _W, **options: Any) -> _W:
        return self._chain("options", **options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedOperation(f"{self._vanilla}.{name} with lineage capture")


class LineageWriter(_Chained):
    def mode(self, saveMode: str | None) -> LineageWriter:
        return self._chain("mode", saveMode)

    def format(self, source: str) -> LineageWriter:
        return self._chain("format", source)

    def partitionBy(self, *cols: Any) -> LineageWriter:
        return self._chain("partitionBy", *cols)

    def _run(self, method: str, target: str, *args: Any, **kwargs: Any) -> None:
        uri = target if "://" in target or target.startswith("table:") else _file_uri(target)
        _write(self._frame, uri, lambda df: df.write, self._calls, method, args, kwargs)

    def save(self, path: str | None = None, format: str | None = None, **kw: Any) -> None:
        if path is None:
            raise UnsupportedOperation("write.save() without a path with lineage capture")
        self._run("save", path, path, format, **kw)

    def parquet(self, path: str, **kw: Any) -> None:
        self._run("parquet", path, path, **kw)

    def csv(self, path: str, **kw: Any) -> None:
        self._run("csv", path, path, **kw)

    def json(self, path: str, **kw: Any) -> None:
        self._run("json", path, path, **kw)

    def text(self, path: str, **kw: Any) -> None:
        self._run("text", path, path, **kw)

    def orc(self, path: str, **kw: Any) -> None:
        self._run("orc", path, path, **kw)

    def saveAsTable(self, name: str, **kw: Any) -> None:
        self._run("saveAsTable", f"table:{name}", name, **kw)

    def insertInto(self, tableName: str, overwrite: bool | None = None) -> None:
        self._run("insertInto", f"table:{tableName}", tableName, overwrite)


class LineageWriterV2(_Chained):
    """`df.writeTo(table)`: DataFrameWriterV2's shape (Iceberg, Delta and other catalog
    tables), its rows journaled by the same tap, the output location `table:<name>`."""

    _vanilla = "DataFrameWriterV2"

    def __init__(self, frame: LineageDataFrame, table: str) -> None:
        super().__init__(frame)
        self._table = table

    def using(self, provider: str) -> LineageWriterV2:
        return self._chain("using", provider)

    def tableProperty(self, property: str, value: str) -> LineageWriterV2:
        return self._chain("tableProperty", property, value)

    def partitionedBy(self, col: Any, *cols: Any) -> LineageWriterV2:
        return self._chain("partitionedBy", col, *cols)

    def clusterBy(self, col: str, *cols: str) -> LineageWriterV2:
        return self._chain("clusterBy", col, *cols)

    def _run(self, method: str, *args: Any) -> None:
        table = self._table
        _write(
            self._frame,
            f"table:{table}",
            lambda df: df.writeTo(table),
            self._calls,
            method,
            args,
            {},
        )

    def create(self) -> None:
        self._run("create")

    def replace(self) -> None:
        self._run("replace")

    def createOrReplace(self) -> None:
        self._run("createOrReplace")

    def append(self) -> None:
        self._run("append")

    def overwrite(self, condition: Any) -> None:
        self._run("overwrite", condition)

    def overwritePartitions(self) -> None:
        self._run("overwritePartitions")


def _write(
    frame: LineageDataFrame,
    uri: str,
    writer_of: Callable[[Any], Any],
    calls: list[tuple[str, tuple, dict]],
    method: str,
    args: tuple,
    kwargs: dict[str, Any],
) -> None:
    """Write `frame`'s rows through `writer_of(df)` with `calls` chained, then `method`;
    captured, the rows pass the tap first, which journals them as the write's output
    records (SEND, at `uri`), and the write is an action."""
    agent = frame._agent
    lin = frame._lin
    df = frame._df
    if lin:
        plumbing = agent.plumbing
        cp = plumbing.output_cp("write", sorted(lin.cps), of=frame._name)
        spec = TapSpec(plumbing.run_id, plumbing.writer_spec, cp, lin.longs, lin.arrays, uri)
        with agent.capture_python(_MODULES):
            df = df.mapInArrow(WriteTap(spec), frame.schema)
    writer = writer_of(df)
    for name, a, kw in calls:
        writer = getattr(writer, name)(*a, **kw)
    if not lin:
        getattr(writer, method)(*args, **kwargs)
        return
    with agent.plumbing.action(frame, cp):
        getattr(writer, method)(*args, **kwargs)


def _file_uri(path: str) -> str:
    return "file://" + os.path.abspath(path)
