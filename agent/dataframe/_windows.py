"""Window functions in `select` / `withColumn`: the extra lineage each one needs.

- Ranking functions (`row_number`, `rank`, `dense_rank`, `percent_rank`, `ntile`,
  `cume_dist`): the row itself (its hidden columns ride along already).
- `lag` / `lead`: the row and the row at the offset: the same function over the same window
  applied to each hidden column.
- Aggregates over a window (`sum(x).over(w)`, `first`, `nth_value`, ...): every row of the
  frame: `collect_list` of each hidden column over the same window and frame.

A Column is opaque in PySpark's public API, but its string form (`str(col)`, the same in
classic PySpark and Spark Connect) spells each window expression as
`func(args) OVER (PARTITION BY ... ORDER BY ... frame)`. The lineage columns take the same
window: the WindowSpec itself when `Column.over` gave it (PySpark's `over` is wrapped, once
per process, to remember the spec each window's text was made with: a spec bound to its
DataFrame's columns, `t["g"]` after a join where both sides have `g`, or an expression, which
the text cannot name), else the window part re-used as SQL text, where a column's name is
quoted; a window whose spec is not plain SQL there (e.g. partitioned by an expression, which
prints in prefix form) is refused with `UnsupportedOperation` naming it, and so is one whose
text names a column several columns are called (a join's both sides).
"""

from __future__ import annotations

import importlib
import itertools
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._rdd import UnsupportedOperation
from ._columns import fresh

if TYPE_CHECKING:
    from pyspark.sql import Column

RANKING = {"row_number", "rank", "dense_rank", "percent_rank", "ntile", "cume_dist"}
OFFSET = {"lag", "lead"}
_OVER = re.compile(r"\)\s+OVER\s+\(", re.IGNORECASE)
_BOUND = re.compile(r"^-?\d+L?$")
_FRAME = re.compile(
    r"\b(ROWS|RANGE)\s+BETWEEN\s+(UNBOUNDED PRECEDING|UNBOUNDED FOLLOWING|CURRENT ROW|-?\d+L?)"
    r"\s+AND\s+(UNBOUNDED PRECEDING|UNBOUNDED FOLLOWING|CURRENT ROW|-?\d+L?)",
    re.IGNORECASE,
)
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.`]*$")


@dataclass(frozen=True)
class Extra:
    """A hidden lineage column a window function adds: a column expression and its kind."""

    name: str
    kind: str  # "long" | "array"
    column: Any


def column_text(col: Any) -> str:
    """The string PySpark gives a Column (or the name, for a string)."""
    if isinstance(col, str):
        return col
    text = str(col)
    if text.startswith("Column<'") and text.endswith("'>"):
        return text[8:-2]
    return text


def _depths(text: str) -> list[int | None]:
    """The parenthesis depth before each character of `text` (None inside quotes)."""
    out: list[int | None] = []
    depth, quote = 0, None
    for ch in text:
        if quote:
            out.append(None)
            quote = None if ch == quote else quote
            continue
        out.append(depth)
        if ch in "'`\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
    return out


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesis closing the one at `start`."""
    depths = _depths(text)
    level = depths[start]
    for i in range(start + 1, len(text)):
        if text[i] == ")" and depths[i] == (level or 0) + 1:
            return i + 1
    raise UnsupportedOperation(f"window expression {text!r} (cannot read its window)")


def _function_start(text: str, close: int) -> tuple[str, int]:
    """The function name and the index of its '(' for a call ending at text[close]."""
    depths = _depths(text)
    level = depths[close]
    for i in range(close - 1, -1, -1):
        if text[i] == "(" and depths[i] == (level or 0) - 1:
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)$", text[:i])
            return (m.group(1).lower() if m else ""), i
    return "", -1


def _split_top(text: str) -> list[str]:
    """`text` split at commas outside parentheses and quotes."""
    cuts = [i for i, d in enumerate(_depths(text)) if d == 0 and text[i] == ","]
    bounds = [-1, *cuts, len(text)]
    parts = [text[a + 1 : b].strip() for a, b in itertools.pairwise(bounds)]
    return [p for p in parts if p]


_UNBOUNDED = 1 << 63


def _connect_bound(b: str) -> str:
    n = int(b)
    if n <= -(_UNBOUNDED - 1):
        return "UNBOUNDED PRECEDING"
    if n >= _UNBOUNDED - 1:
        return "UNBOUNDED FOLLOWING"
    return "CURRENT ROW" if n == 0 else f"{abs(n)} {'PRECEDING' if n < 0 else 'FOLLOWING'}"


def _connect_windows(text: str) -> list[tuple[str, str, str]]:
    """Spark Connect spells a window `WindowExpression(f(args), (WindowSpec(PartitionBy(..),
    OrderBy(..), WindowFrame(ROW_FRAME|RANGE_FRAME, lo, hi))))`; returns SQL specs."""
    out: list[tuple[str, str, str]] = []
    start = 0
    while True:
        i = text.find("WindowExpression(", start)
        if i < 0:
            return out
        open_ = i + len("WindowExpression")
        inner = text[open_ + 1 : _balanced(text, open_) - 1]
        parts = _split_top(inner)
        if len(parts) != 2:
            raise UnsupportedOperation(f"window expression {text!r} (cannot read its window)")
        call, spec = parts
        name = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", call)
        args = call[call.find("(") + 1 : call.rfind(")")]
        spec = spec.strip()
        while spec.startswith("(") and spec.endswith(")"):
            spec = spec[1:-1].strip()
        if not spec.startswith("WindowSpec("):
            raise UnsupportedOperation(f"window expression {text!r} (cannot read its window)")
        sql = []
        for piece in _split_top(spec[len("WindowSpec(") : -1]):
            head, _, body = piece.partition("(")
            body = body[:-1]
            if head == "PartitionBy":
                sql.append("PARTITION BY " + ", ".join(_split_top(body)))
            elif head == "OrderBy":
                sql.append("ORDER BY " + ", ".join(_split_top(body)))
            elif head == "WindowFrame":
                kind, lo, hi = _split_top(body)
                frame = "ROWS" if kind == "ROW_FRAME" else "RANGE"
                sql.append(f"{frame} BETWEEN {_connect_bound(lo)} AND {_connect_bound(hi)}")
            else:
                raise UnsupportedOperation(f"window expression {text!r} ({head})")
        out.append(((name.group(1).lower() if name else ""), args, " ".join(sql)))
        start = open_


def windows_in(text: str) -> list[tuple[str, str, str]]:
    """(function, its arguments, window spec) of each window expression in a column's
    text."""
    if "WindowExpression(" in text:
        return _connect_windows(text)
    out = []
    for m in _OVER.finditer(text):
        close = m.start()
        name, open_ = _function_start(text, close)
        spec_open = m.end() - 1
        spec = text[spec_open + 1 : _balanced(text, spec_open) - 1]
        out.append((name, text[open_ + 1 : close] if open_ >= 0 else "", spec))
    return out


def _sql_spec(spec: str, where: str, columns: list[str] | None = None) -> str:
    """The window spec as Spark SQL text (frame bounds spelled as SQL; a term that is one of
    `columns`, a frame's visible column names, quoted: PySpark prints `partitionBy("my g")`
    unquoted)."""

    def bound(b: str) -> str:
        b = b.upper()
        if not _BOUND.match(b):
            return b
        n = int(b.rstrip("L"))
        return "CURRENT ROW" if n == 0 else f"{abs(n)} {'PRECEDING' if n < 0 else 'FOLLOWING'}"

    spec = _FRAME.sub(lambda m: f"{m[1]} BETWEEN {bound(m[2])} AND {bound(m[3])}", spec)
    frame = re.search(r"\b(ROWS|RANGE)\s+BETWEEN.*$", spec, flags=re.IGNORECASE)
    body = spec[: frame.start()] if frame else spec
    out = []
    for piece in re.split(r"(\bPARTITION BY\b|\bORDER BY\b|,)", body, flags=re.IGNORECASE):
        if re.fullmatch(r"PARTITION BY|ORDER BY|,", piece.strip(), flags=re.I) or not piece.strip():
            out.append(piece)
            continue
        order = re.search(r"\s+(ASC|DESC)(\s+NULLS\s+(FIRST|LAST))?\s*$", piece, flags=re.I)
        term = (piece[: order.start()] if order else piece).strip()
        if not _PLAIN.match(term):
            if columns is None or term not in columns:
                raise UnsupportedOperation(
                    f"a window over an expression ({term}) in {where}: add it as a column "
                    "first (withColumn) and window over that column"
                )
            term = "`" + term.replace("`", "``") + "`"
        out.append(f" {term}{order.group(0) if order else ''} ")
    return "".join(out) + (frame.group(0) if frame else "")


def _offset(args: str) -> int:
    parts = [p.strip() for p in args.split(",")]
    if len(parts) >= 2 and re.match(r"^-?\d+$", parts[1]):
        return int(parts[1])
    return 1


def with_frames(frame: Any, cols: tuple) -> tuple[tuple, list[Extra]]:
    """The columns unchanged, and the hidden lineage columns their window functions need."""
    from pyspark.sql import functions as F

    lin = frame._lin
    extra: list[Extra] = []
    seen: set[tuple[str, str, str]] = set()
    for col in cols:
        text = column_text(col)
        if " OVER " not in text.upper() and "WindowExpression(" not in text:
            continue
        for name, args, spec in windows_in(text):
            key = (name, args, spec)
            if key in seen or name in RANKING:
                continue
            seen.add(key)
            window = _SPECS.get(spec)
            if window is not None:
                extra += _over(F, lin, name, args, window)
                continue
            sql = _sql_spec(spec, text, frame.columns)
            if name in OFFSET:
                n = _offset(args)
                for h in lin.longs:
                    e = F.expr(f"{name}(`{h}`, {n}) OVER ({sql})")
                    extra.append(Extra(fresh(), "long", e))
                for h in lin.arrays:
                    e = F.expr(f"{name}(`{h}`, {n}) OVER ({sql})")
                    extra.append(Extra(fresh(), "array", e))
                continue
            parts = [f"collect_list(`{h}`) OVER ({sql})" for h in lin.longs]
            parts += [f"flatten(collect_list(`{h}`) OVER ({sql}))" for h in lin.arrays]
            if parts:
                expr = parts[0] if len(parts) == 1 else "concat(" + ", ".join(parts) + ")"
                extra.append(Extra(fresh(), "array", F.expr(expr)))
    return cols, [Extra(e.name, e.kind, e.column.alias(e.name)) for e in extra]


def column(c: Column | str) -> str:
    return column_text(c)


def _over(F: Any, lin: Any, name: str, args: str, window: Any) -> list[Extra]:
    """The lineage columns of window function `name` (its arguments' text `args`) over the
    WindowSpec `window`, as `with_frames` makes them from SQL text."""
    if name in OFFSET:
        shifted = getattr(F, name)
        n = _offset(args)
        out = [Extra(fresh(), "long", shifted(F.col(h), n).over(window)) for h in lin.longs]
        return out + [
            Extra(fresh(), "array", shifted(F.col(h), n).over(window)) for h in lin.arrays
        ]
    parts = [F.collect_list(F.col(h)).over(window) for h in lin.longs]
    parts += [F.flatten(F.collect_list(F.col(h)).over(window)) for h in lin.arrays]
    if not parts:
        return []
    return [Extra(fresh(), "array", parts[0] if len(parts) == 1 else F.concat(*parts))]


# The WindowSpec each window's spec text was made with by `Column.over` (None: specs that
# print the same were given, which one a column has is not known), the latest `_KEPT`.
_SPECS: dict[str, Any] = {}
_KEPT = 1024


def _record(out: Any, window: Any) -> None:
    try:
        found = windows_in(column_text(out))
    except Exception:  # a text this module cannot read: the column is refused later
        return
    if len(found) != 1:
        return
    spec = found[0][2]
    known = _SPECS.pop(spec, window)
    _SPECS[spec] = window if known is window else None
    while len(_SPECS) > _KEPT:
        del _SPECS[next(iter(_SPECS))]


def remember_windows() -> None:
    """Wrap PySpark's `Column.over` (classic, and Spark Connect's once loaded), once per
    process, to remember each window's WindowSpec (`_record`): the same calls and results."""
    for module in ("pyspark.sql.classic.column", "pyspark.sql.connect.column"):
        if module not in sys.modules and module.endswith("connect.column"):
            continue  # (loaded with a Spark Connect session, before its context)
        try:
            cls = importlib.import_module(module).Column
        except Exception:  # this PySpark has no such module
            continue
        original = cls.__dict__.get("over")
        if original is None or getattr(original, "_provrepo_remembers", False):
            continue

        def over(self: Any, window: Any, _original: Any = original) -> Any:
            out = _original(self, window)
            _record(out, window)
            return out

        over.__doc__ = original.__doc__
        over._provrepo_remembers = True  # type: ignore[attr-defined]
        cls.over = over


remember_windows()
