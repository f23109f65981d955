"""`lc.sql`'s PIVOT clause with lineage, as the DataFrame pivot (`_pivot`) computes it.

`FROM src PIVOT (aggs FOR col IN (values))` groups by src's columns that neither `col` nor
the aggregates refer to (implicitly: src's lineage columns would be keys too, a group a
row). It is rewritten into the derived table of Spark's own two-aggregate plan, written in
SQL over src's visible columns: the first aggregate by (keys, `col`) also collects its
rows' ids; the second, by the keys, puts each first-level value in its value's cell
(`first` of the one row that matches null-safely, null when none does) and gives the row the
ids of its group's rows whose `col` is among the values (all of them when none is). The
keys, names and types are vanilla's: read from Spark's analysis of the clause over src's
visible columns. As in the DataFrame pivot, aggregates must return a type Spark pivots that
way (boolean, integral, floating, decimal); a pivot over several columns at once raises, and
so does a captured UDF in the aggregates (`SqlRewriter._pivoted`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._rdd import UnsupportedOperation
from ._columns import fresh, sql_name
from ._pivot import FLOATING, pivot_first
from ._sqldialect import to_sql


def pivot_query(
    E: Any,
    src_sql: str,
    alias: str,
    visible: list[str],
    pivot: Any,
    ids_sql: str,
    dtypes: Callable[[str], list[tuple[str, str]]],
) -> tuple[str, list[str], str]:
    """The query that computes `src_sql PIVOT (...)` (`pivot`, sqlglot's node) with
    lineage: its text, its visible columns, and its lineage column (an array of ids).
    `alias`: the name src's columns are qualified by (`o.v` in `FROM t o PIVOT (sum(o.v)
    ...)`); `visible`: src's visible columns; `ids_sql`: an aggregate of a group's ids over src;
    `dtypes`: Spark's analysis of a query text (its columns' names and types)."""
    fields = pivot.args.get("fields") or []
    if len(fields) != 1 or not isinstance(fields[0], E.In) or isinstance(fields[0].this, E.Tuple):
        raise UnsupportedOperation("lc.sql: PIVOT over several columns at once")
    column = to_sql(fields[0].this)
    values = [v.this if isinstance(v, E.PivotAlias) else v for v in fields[0].expressions]
    if any(isinstance(v, E.Tuple) for v in values):
        raise UnsupportedOperation("lc.sql: PIVOT over several columns at once")
    aggs = [a.this if isinstance(a, E.Alias) else a for a in pivot.expressions]

    # Vanilla's clause over src's visible columns: its errors, its keys, names and types.
    bare = pivot.copy()
    bare.set("alias", None)
    cols = ", ".join(sql_name(c) for c in visible)
    named = sql_name(alias)  # (the clause's columns may be qualified by it)
    out = dtypes(f"SELECT * FROM (SELECT {cols} FROM {src_sql}) AS {named} {to_sql(bare)}")
    nkeys = len(out) - len(values) * len(aggs)
    keys = [sql_name(n) for n, _ in out[:nkeys]]

    p, ids = fresh("p"), fresh()
    a = [fresh("a") for _ in aggs]
    group = ", ".join([*keys, column])
    first = (
        f"SELECT {''.join(k + ', ' for k in keys)}{column} AS {p}, "
        + "".join(f"{to_sql(x)} AS {n}, " for x, n in zip(aggs, a))
        + f"{ids_sql} AS {ids} FROM {src_sql} GROUP BY {group}"
    )
    types = dict(dtypes(first))
    odd = [types[n] for n in a if not pivot_first(types[n])]
    if odd:
        raise UnsupportedOperation(
            f"lc.sql: PIVOT with an aggregate of type {odd[0]} (Spark computes each cell as a "
            "conditional aggregate then); aggregates of boolean, integral, floating or decimal "
            "type are supported"
        )
    ptype = types[p]
    match = [f"{p} <=> CAST(({to_sql(v)}) AS {ptype})" for v in values]
    if ptype in FLOATING:  # (NaN matches no value, as in Spark's pivot)
        match = [f"{m} AND NOT isnan({p})" for m in match]
    inside = " OR ".join(f"({m})" for m in match) if match else "false"
    cells = [f"first(CASE WHEN {m} THEN {n} END, true)" for m in match for n in a]
    lin = fresh()
    cast = [
        c if t == types.get(n, t) else f"CAST({c} AS {t})"
        for c, n, (_, t) in zip(cells, [n for _ in match for n in a], out[nkeys:])
    ]
    select = [
        *keys,
        *[f"{c} AS {sql_name(name)}" for c, (name, _) in zip(cast, out[nkeys:])],
        f"CASE WHEN count_if({inside}) > 0 THEN flatten(collect_list(CASE WHEN {inside} "
        f"THEN {ids} END)) ELSE flatten(collect_list({ids})) END AS {lin}",
    ]
    text = f"SELECT {', '.join(select)} FROM ({first}) AS {fresh('f')}"
    if keys:
        text += f" GROUP BY {', '.join(keys)}"
    return text, [n for n, _ in out], lin
