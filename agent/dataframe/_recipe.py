"""How each captured DataFrame was made (its *recipe*), so replay can build it again.

A DataFrame's plan is Spark's and cannot be rebuilt over other inputs through the public API,
so each LineageDataFrame (and grouped data) remembers, in Python, the step that made it:

- `Call`: a wrapper method with its arguments, applied to a receiver (a LineageDataFrame or
  LineageGroupedData) -- recorded by the `recorded` class decorator around the public
  transformations;
- `Source`: a scan or `createDataFrame` (the hidden id column, and for files the scan's
  descriptor, to notice when the files changed);
- `SqlQuery`: an `lc.sql` query (its rewritten text, the views it could read).

Recording costs one small object per transformation in the driver and leaves Spark's plans
as they are (capture on or off).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The classes whose instances carry recipes (set by `recorded`).
_RECORDED: set[type] = set()


@dataclass(frozen=True, eq=False)
class Call:
    """`receiver.method(*args, **kwargs)` made the frame."""

    receiver: Any
    method: str
    args: tuple
    kwargs: dict[str, Any]


@dataclass(frozen=True, eq=False)
class Source:
    """A source's rows, named by the hidden long column `column` at capture point `cp`;
    `scan` (files) is how to check the files still read as they did: (format, paths,
    options, descriptor)."""

    cp: int
    column: str
    scan: tuple[str, list[str], dict[str, Any], dict[str, Any]] | None = None


@dataclass(frozen=True, eq=False)
class SqlQuery:
    """`lc.sql`: the rewritten text (which names the views' hidden columns), the views as
    they were when it ran (lower-case name -> LineageDataFrame), the result's columns."""

    text: str
    views: dict[str, Any]
    columns: list[str] = field(default_factory=list)


def is_recorded(obj: Any) -> bool:
    """Whether `obj` is a captured frame or grouped data (whose recipe replay follows)."""
    return type(obj) in _RECORDED


def recipe_of(obj: Any) -> Call | Source | SqlQuery | None:
    # Only our own objects: a pyspark Column answers any attribute with a new Column.
    return vars(obj).get("_recipe") if type(obj) in _RECORDED else None


def frames_under(
    obj: Any, views: bool = True, past: Callable[[Call], bool] | None = None
) -> list[Any]:
    """`obj` and every captured frame or grouped data it was made from, through the
    recipes (calls' receivers and arguments, and `lc.sql` views unless `views` is False;
    a call's receiver only where `past(call)` says so, when given)."""
    seen: dict[int, Any] = {}
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, list | tuple):
            todo.extend(o)
            continue
        if isinstance(o, dict):
            todo.extend(o.values())
            continue
        if type(o) not in _RECORDED or id(o) in seen:
            continue
        seen[id(o)] = o
        recipe = recipe_of(o)
        if isinstance(recipe, Call):
            if past is None or past(recipe):
                todo.append(recipe.receiver)
            todo += [*recipe.args, *recipe.kwargs.values()]
        elif isinstance(recipe, SqlQuery) and views:
            todo += list(recipe.views.values())
    return list(seen.values())


def materialized(call: Call) -> bool:
    """Whether `call` made its rows once for good: an eager `localCheckpoint` /
    `checkpoint`, whose rows (and ids) later jobs read from the checkpoint, not from the
    frame it was called on."""
    if call.method not in ("localCheckpoint", "checkpoint"):
        return False
    eager = call.args[0] if call.args else call.kwargs.get("eager", True)
    return bool(eager)


def set_recipe(obj: Any, recipe: Call | Source | SqlQuery) -> None:
    obj._recipe = recipe


def recorded(*names: str) -> Callable[[type], type]:
    """Class decorator: each named method records, on what it returns, the call that made
    it (unless it returns its receiver: `cache()` and the like change no rows)."""

    def apply(cls: type) -> type:
        _RECORDED.add(cls)
        for name in names:
            setattr(cls, name, _recording(name, cls.__dict__[name]))
        return cls

    return apply


def _recording(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        # Nested calls (distinct -> groupBy().agg()) record first; the outermost call wins.
        if out is not self and type(out) in _RECORDED:
            out._recipe = Call(self, name, args, kwargs)
        return out

    return call
