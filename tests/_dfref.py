"""A brute-force reference for DataFrame lineage: tables as Python lists of (row, lineage),
where lineage is the frozenset of source lines a row was made from (which-provenance), and
each operator written as the plainest loop over them. Tests state a query twice, with the
Spark API and with these, and compare rows and lineage."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import product
from typing import Any

Row = dict[str, Any]
Table = list[tuple[Row, frozenset]]


def source(name: str, header: list[str], rows: list[tuple], lines: list[str]) -> Table:
    return [(dict(zip(header, r)), frozenset({(name, line)})) for r, line in zip(rows, lines)]


def where(t: Table, pred: Callable[[Row], bool]) -> Table:
    return [(r, lin) for r, lin in t if pred(r)]


def select(t: Table, fn: Callable[[Row], Row]) -> Table:
    return [(fn(r), lin) for r, lin in t]


def join(
    a: Table,
    b: Table,
    on: Callable[[Row, Row], bool],
    how: str = "inner",
    merge: Callable[[Row | None, Row | None], Row] | None = None,
) -> Table:
    merge = merge or (lambda x, y: {**(y or {}), **(x or {})})
    out: Table = []
    b_matched = [False] * len(b)
    for ra, la in a:
        hits = [(j, rb, lb) for j, (rb, lb) in enumerate(b) if on(ra, rb)]
        if how == "semi":
            if hits:
                out.append((ra, la.union(*(lb for _, _, lb in hits))))
            continue
        if how == "anti":
            if not hits:
                out.append((ra, la))
            continue
        for j, rb, lb in hits:
            b_matched[j] = True
            out.append((merge(ra, rb), la | lb))
        if not hits and how in ("left", "full"):
            out.append((merge(ra, None), la))
    if how in ("right", "full"):
        out.extend((merge(None, rb), lb) for j, (rb, lb) in enumerate(b) if not b_matched[j])
    return out


def cross(a: Table, b: Table) -> Table:
    return [({**ra, **rb}, la | lb) for (ra, la), (rb, lb) in product(a, b)]


def group(t: Table, key: Callable[[Row], tuple], agg: Callable[[tuple, list[Row]], Row]) -> Table:
    groups: dict[tuple, list] = {}
    for r, lin in t:
        groups.setdefault(key(r), []).append((r, lin))
    return [
        (agg(k, [r for r, _ in members]), frozenset().union(*(lin for _, lin in members)))
        for k, members in groups.items()
    ]


def group_sets(
    t: Table, keys: list[str], sets: Iterable[tuple[str, ...]], agg: Callable[[list[Row]], Row]
) -> Table:
    """rollup / cube: one group per (grouping set, values); keys outside the set are None."""
    out: Table = []
    for gs in sets:
        groups: dict[tuple, list] = {}
        for r, lin in t:
            groups.setdefault(tuple(r[k] for k in gs), []).append((r, lin))
        for vals, members in groups.items():
            row = {k: None for k in keys} | dict(zip(gs, vals))
            row |= agg([r for r, _ in members])
            out.append((row, frozenset().union(*(lin for _, lin in members))))
    return out


def distinct(t: Table, cols: list[str] | None = None) -> Table:
    """distinct (cols None) or dropDuplicates(cols): lineage is every duplicate's."""
    groups: dict[tuple, list] = {}
    for r, lin in t:
        groups.setdefault(tuple(r[c] for c in (cols or list(r))), []).append((r, lin))
    return [
        (members[0][0], frozenset().union(*(lin for _, lin in members)))
        for members in groups.values()
    ]


def union(a: Table, b: Table) -> Table:
    return a + b


def set_operation(a: Table, b: Table, kind: str, every: bool) -> Table:
    """INTERSECT / EXCEPT [ALL] by brute force: rows grouped by value (None equal to None);
    an INTERSECT row's lineage is every duplicate's on both sides, an EXCEPT row's every
    left duplicate's; ALL repeats a row min(l, r) / l - r times."""
    out: Table = []
    for key in dict.fromkeys(tuple(r.values()) for r, _ in a):
        left = [lin for r, lin in a if tuple(r.values()) == key]
        right = [lin for r, lin in b if tuple(r.values()) == key]
        if kind == "intersect":
            n = min(len(left), len(right)) if every else int(bool(right))
            lin = frozenset().union(*left, *right)
        else:
            n = max(len(left) - len(right), 0) if every else int(not right)
            lin = frozenset().union(*left)
        row = dict(zip(next(r for r, _ in a if tuple(r.values()) == key), key))
        out += [(row, lin)] * n
    return out


def window_partitions(t: Table, part: str, order: str) -> list[tuple[Row, frozenset, Table]]:
    """Each row with the rows of its window partition (same `part`), sorted by `order`."""
    out = []
    for r, lin in t:
        members = sorted((x for x in t if x[0][part] == r[part]), key=lambda x: x[0][order])
        out.append((r, lin, members))
    return out


def explode(t: Table, fn: Callable[[Row], list[Row]]) -> Table:
    return [(r2, lin) for r, lin in t for r2 in fn(r)]


def norm(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, list):
        return tuple(sorted((norm(x) for x in v), key=repr))
    if isinstance(v, dict):
        return tuple(sorted((k, norm(x)) for k, x in v.items()))
    if hasattr(v, "asDict"):
        return norm(v.asDict())
    return v


def key_of(row: Any, cols: list[str]) -> tuple:
    """A reference row's `cols`, or a Spark row's values in order (queries under test
    output exactly `cols`, in that order)."""
    if isinstance(row, dict):
        return tuple(norm(row.get(c)) for c in cols)
    return tuple(norm(v) for v in row)
