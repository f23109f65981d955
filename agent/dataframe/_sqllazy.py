"""`lc.sql`'s `GROUP BY ... HAVING` blocks in the lazy form, where the aggregate policy takes
it (`_lazyagg`: "auto" over Parquet / `createDataFrame` views, "lazy" over any; the SQL
side of `_lazyagg`). The survivors are computed when the query is rewritten.

A block `SELECT e.. FROM v [WHERE w] GROUP BY k.. HAVING h [ORDER BY ..] [LIMIT ..]` (at the
top, in a derived table or CTE, in a set operation's branch, or as the subquery of
`x IN (SELECT k FROM v GROUP BY k HAVING ...)` under an OR; as a WHERE conjunct, TPC-H Q18's
text, Spark already restricts the eager form to the survivors: `SqlRewriter._contribution`
keeps it there, in `eager_blocks`) becomes `_lazyagg`'s plan
written in SQL (`filtered_sql`): the block itself without ids, its group keys added as
columns (the survivors, computed now and passed to Spark as a DataFrame argument of the
rewritten text when few: `_lazyagg.survivors`), broadcast and joined null-safely on the keys
to `v`'s rows that pass `w` (keys and ids), grouped again by the survivors' keys. A block
with a LIMIT (HAVING then optional) keeps its ORDER BY / LIMIT / OFFSET in the survivors (a
top-k: only its rows collect ids); its ORDER BY and LIMIT sort them again above. Replay runs
the text with the survivors' query in their place, over the rebuilt views.

It applies only where it is exact, by `_lazyagg`'s rules: `v` is a view of a captured
DataFrame that `lazy_input` accepts (a source followed by row-at-a-time deterministic calls),
`w` calls deterministic builtins only, every key is a column of `v` of an atomic type, the
GROUP BY is plain (no ROLLUP / CUBE / GROUPING SETS / ALL), and the block has no join, lateral
view, window, subquery, DISTINCT, hint, captured UDF, or ORDER BY on anything but its output
columns. The select list and HAVING are computed once (in the survivors), so they may call
anything. Every other block keeps the eager rewrite (`_sql`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _lazyagg
from ._columns import fresh
from ._lazyagg import atomic, deterministic_sql, filtered_sql, lazy_input
from ._sqldialect import parse_one, to_sql

if TYPE_CHECKING:
    from ._sql import Item, Rel, SqlRewriter

# Select clauses the lazy form carries over (the others make the block eager).
_CLAUSES = frozenset({"with_", "expressions", "from_", "where", "group", "having"})
_AFTER = ("order", "limit", "offset")


def lazy_block(
    rw: SqlRewriter, sel: Any, ctes: dict[str, Item], merged: str | None
) -> tuple[Any, Rel] | None:
    """The lazy form of the Select `sel` with its lineage, or None when it must be eager."""
    from ._sql import ARRAY, Rel

    E = rw.E
    if rw.agent.aggregates == "eager" or id(sel) in rw.eager_blocks or not _plain(E, sel):
        return None
    table = sel.args["from_"].this
    name = table.name.lower()
    frame = rw.views.get(name)
    if frame is None or name in ctes or not lazy_input(frame, rw.agent.aggregates):
        return None
    alias = table.alias_or_name
    types = {c.lower(): t for c, t in frame.dtypes}
    if len(types) != len(frame.dtypes):
        return None  # column names equal but for case: leave their resolution to Spark
    group = sel.args["group"].expressions
    for g in group:
        if not isinstance(g, E.Column) or g.is_star or g.args.get("db"):
            return None
        if g.table and g.table.lower() != alias.lower():
            return None
        if not atomic(str(types.get(g.name.lower(), ""))):
            return None
    where = sel.args.get("where")
    if where is not None and not deterministic_sql(to_sql(where.this)):
        return None
    udfs = {n for n, u in rw.agent.udfs.registered.items() if u.captured}
    if any(str(f.this).lower() in udfs for f in sel.find_all(E.Anonymous)):
        return None
    names = _output_names(rw, sel, ctes)
    if names is None or not _order_on_output(E, sel.args.get("order"), names):
        return None

    n, m = len(sel.expressions), len(group)
    cols = [fresh("k") for _ in range(m)] + [fresh("c") for _ in range(n)]
    # The survivors: the block as written (its HAVING may name its select aliases), its
    # group keys added; renamed by position in `filtered_sql`. With a LIMIT, the block's
    # ORDER BY / LIMIT / OFFSET too: only its top rows collect ids (a top-k), taken by
    # this one run (ties at the last row too).
    topk = sel.args.get("limit") is not None
    survivors = sel.copy()
    for key in ("with_", *([] if topk else _AFTER)):
        survivors.set(key, None)
    keys = [g.copy() for g in group]
    if topk:
        # Named apart (ORDER BY names the block's own columns) and counted before them (an
        # ORDER BY ordinal).
        keys = [E.alias_(g, c) for g, c in zip(keys, cols)]
        if survivors.args.get("order") is not None:
            for o in survivors.args["order"].expressions:
                if isinstance(o.this, E.Literal) and not o.this.is_string:
                    o.set("this", E.Literal.number(int(o.this.this) + m))
    survivors.set("expressions", keys + [e.copy() for e in sel.expressions])
    # The input again: the keys and the ids of the rows that pass WHERE.
    ids = fresh("id")
    pre = sel.copy()
    for key in ("with_", "group", "having", *_AFTER):
        pre.set(key, None)
    pre.set(
        "expressions",
        [E.alias_(g.copy(), c) for g, c in zip(group, cols)]
        + [E.alias_(E.column(frame.lineage_columns.longs[0], table=alias), ids)],
    )
    # The survivors computed now, once, and held in the plan when they are few
    # (`_lazyagg.survivors`), as a view `token` while the query is rewritten and analyzed.
    query = to_sql(survivors)
    try:
        kept = _lazyagg.survivors(rw.spark_sql(query))
    except Exception:  # not analyzable alone (correlated): the eager rewrite
        kept = None
    if kept is None:
        return None
    token = fresh("survivors")
    kept.createOrReplaceTempView(token)
    rw.survivors[token] = (kept, query)
    out = merged or fresh()
    text = filtered_sql(f"SELECT * FROM {token}", cols, m, names, to_sql(pre), ids, out)
    node = parse_one(text)
    # (After a top-k, its ORDER BY and LIMIT again, not OFFSET: one sort in one task of
    # the k rows; a sort alone would sample them, running the join once more.)
    for key in ("with_", *(("order", "limit") if topk else _AFTER)):
        if sel.args.get(key) is not None:
            node.set(key, sel.args[key])
    rw.cps |= frame.lineage_columns.cps
    return node, Rel([(out, ARRAY)])


def _plain(E: Any, sel: Any) -> bool:
    """A one-view block with a plain GROUP BY and a HAVING or a LIMIT, nothing else that
    changes rows."""
    for key, value in sel.args.items():
        if value and key not in _CLAUSES and key not in _AFTER:
            return False
    group, having, from_ = sel.args.get("group"), sel.args.get("having"), sel.args.get("from_")
    limit = sel.args.get("limit")
    if group is None or (having is None and limit is None) or from_ is None:
        return False
    if not group.expressions:
        return False
    if any(v for k, v in group.args.items() if k != "expressions"):
        return False
    table = from_.this
    if not isinstance(table, E.Table) or table.args.get("db") or table.args.get("catalog"):
        return False
    alias = table.args.get("alias")
    if any(v for k, v in table.args.items() if k not in ("this", "alias")):
        return False
    if alias is not None and alias.args.get("columns"):
        return False
    stars = (
        isinstance(e, E.Star) or (isinstance(e, E.Column) and e.is_star) for e in sel.expressions
    )
    if any(stars):
        return False
    # No window, subquery (IN / EXISTS / scalar) or nested query anywhere in the block.
    return not any(
        node is not sel and isinstance(node, E.Query | E.Window | E.Exists) for node in sel.walk()
    )


def _output_names(rw: SqlRewriter, sel: Any, ctes: dict[str, Item]) -> list[str] | None:
    """The block's output column names: aliases and column names as written; Spark's own
    names (the block analyzed alone) when an expression has none."""
    E = rw.E
    names: list[str] = []
    for e in sel.expressions:
        if isinstance(e, E.Alias | E.Column):
            names.append(e.alias_or_name)
        else:
            plain = sel.copy()
            for key in ("with_", *_AFTER):
                plain.set(key, None)
            return rw.output_columns(to_sql(plain), ctes)
    return names


def _order_on_output(E: Any, order: Any, names: list[str]) -> bool:
    """Whether an ORDER BY sorts by output columns only (names or ordinals): it moves above
    the lazy form, which outputs those columns and no others."""
    if order is None:
        return True
    visible = {n.lower() for n in names}
    for o in order.expressions:
        key = o.this
        if isinstance(key, E.Literal) and not key.is_string:
            continue
        if not isinstance(key, E.Column) or key.table or key.name.lower() not in visible:
            return False
    return True
