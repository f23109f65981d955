"""`lc.sql(text)`: Spark SQL over views made from captured DataFrames, with lineage.

The query is parsed with sqlglot (Spark dialect) and rewritten, Perm-style, so that every
query block also outputs its rows' lineage columns; Spark then runs the rewritten text.

- FROM items: a view carries the hidden columns of the DataFrame it was made from; a derived
  table or CTE carries what its rewritten query outputs. A block outputs all of them
  (joins concatenate; outer joins leave the missing side null).
- Aggregates (GROUP BY, aggregate functions, HAVING, SELECT DISTINCT): one array column,
  every id of the group's rows (`collect_list`, `flatten`); where the aggregate policy takes
  the lazy form, a `GROUP BY ... HAVING` block over a recomputable view collects them after
  HAVING, for the surviving groups only (`_sqllazy`).
- UNION [ALL]: each branch outputs its lineage as one array column of the same name;
  UNION (distinct) groups the rows and collects them.
- Subqueries in WHERE / HAVING (the predicate itself is left exactly as written):
  * positive `x IN (SELECT y ...)`: the subquery rows whose y matches x, through a LEFT JOIN
    on the subquery grouped by y (one match at most, so no row is repeated); correlated, as
    a correlated EXISTS with `y = x` as one more correlation predicate;
  * `EXISTS (...)` and scalar subqueries: the subquery's rows; uncorrelated ones through a
    CROSS JOIN with a one-row relation of their ids; correlated ones through a LEFT JOIN on
    the subquery's rows grouped by the distinct values of the outer columns it refers to
    (any correlation predicate, equalities or not);
  * `NOT IN` / `NOT EXISTS`: nothing (an anti-join contributes no row).
- Window functions (`f(...) OVER (...)`, named windows too): ranking functions add nothing
  to the row's lineage; `lag` / `lead` add the row at the offset (the same call over the
  row's ids); any other function adds every row of its frame (`collect_list` of the ids over
  the same window). In an aggregate block the ids are the group's, so a frame brings every
  row of its groups.
- LEFT SEMI JOIN: rewritten to the EXISTS it means (the left row and the right rows it
  matches); LEFT ANTI JOIN: the left row only.
- INTERSECT / EXCEPT [ALL]: both branches' rows grouped by value (nulls equal); an
  INTERSECT row has every duplicate's lineage on both sides, an EXCEPT row every left
  duplicate's (the right side only excludes, as in an anti join).
- QUALIFY: rewritten to the derived table it means (its windows in the select list, the
  filter outside), so its windows bring their lineage as above.
- LATERAL VIEW [OUTER] explode / posexplode / inline (and their `_outer` forms, stack): a
  generated row has the lineage of the row it came from.
- UNPIVOT: a row it makes has the lineage of the row it came from (the lineage columns
  ride as its implicit id columns). PIVOT: rewritten into the derived table of Spark's
  two-aggregate plan over the item's visible columns (`_sqlpivot`; as the DataFrame pivot).
  Over a FROM clause with joins (which Spark pivots whole) PIVOT raises, and so does an
  UNPIVOT with an alias.
- Captured UDFs (`lc.udf.register`) get the row's ids as a hidden last argument.

Anything else that would lose lineage (other lateral views, tables that are not lineage views,
correlated subqueries outside WHERE, ...) raises `UnsupportedOperation` naming the construct.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._rdd import UnsupportedOperation
from ._columns import Lineage, fresh, is_hidden
from ._sqldialect import (
    DIALECT,
    OFFSET_WINDOWS,
    RANKING,
    function_name,
    parse,
    parse_one,
    to_sql,
)
from ._sqllazy import lazy_block

if TYPE_CHECKING:
    from ._frame import LineageDataFrame
    from ._session import FrameAgent

LONG, ARRAY = "long", "array"


@dataclass(eq=False)
class Item:
    """A FROM item of a block: its alias and lineage columns [(name, kind)]."""

    alias: str
    lin: list[tuple[str, str]]
    columns: list[str] | None  # visible output columns, when known (for correlation)
    sql: str | None = None  # a CTE's rewritten body


@dataclass
class Rel:
    """A rewritten query: its lineage output columns [(name, kind)]."""

    lin: list[tuple[str, str]]


class SqlRewriter:
    def __init__(
        self,
        agent: FrameAgent,
        params: dict[str, Any] | None = None,
        arg_views: dict[str, LineageDataFrame] | None = None,
    ) -> None:
        from sqlglot import exp

        self.E = exp
        self.agent = agent
        # `spark.sql`'s named arguments, for every text Spark analyzes or runs (`_sqlargs`).
        self.params = params
        # `{name}` DataFrame arguments' views (`_sqlargs`): passed to Spark as DataFrames.
        self.arg_views = dict(arg_views or {})
        self.views = {**agent.views, **self.arg_views}
        self.cps: set[int] = set()
        self._columns_cache: dict[str, list[str]] = {}
        # Select blocks (by id) that keep the eager form under any aggregate policy.
        self.eager_blocks: set[int] = set()
        # Lazy blocks' survivors (`_sqllazy`): a temp view's name (in the rewritten text)
        # -> (the survivors' DataFrame, the query that computed them).
        self.survivors: dict[str, tuple[Any, str]] = {}

    def texts(self, rewritten: str) -> tuple[str, dict[str, Any], str]:
        """The rewritten text to run, with the survivors' views as `spark.sql` DataFrame
        arguments (`{name}`: they live in the plan, not the session), those arguments, and
        the text to record for replay (each survivors' query in place of its view: replay
        computes them again over its own inputs)."""
        if not self.survivors and not self.arg_views:
            return rewritten, {}, rewritten
        run = rewritten.replace("{", "{{").replace("}", "}}")
        replay = rewritten
        frames: dict[str, Any] = {}
        for name, (df, query) in self.survivors.items():
            # Replacements as functions: the query's backslashes are not escapes.
            run = _token(name).sub(_constant("{" + name + "}"), run)
            replay = _token(name).sub(_constant(f"({query}) AS {name}"), replay)
            frames[name] = df
        for name, frame in self.arg_views.items():
            run = _token(name).sub(_constant("{" + name + "}"), run)
            frames[name] = frame._df
        return run, frames, replay

    def spark_sql(self, text: str) -> Any:
        """`spark.sql(text)` with the query's parameter arguments."""
        return self.agent.spark.sql(text, self.params)

    def drop_views(self) -> None:
        """Drop the survivors' temp views (the run text names them as arguments)."""
        for name in self.survivors:
            self.agent.spark.catalog.dropTempView(name)

    # -- entry -------------------------------------------------------------------------------

    def rewrite(self, text: str) -> tuple[str, Lineage]:
        try:
            trees = parse(text)
        except Exception as e:
            raise UnsupportedOperation(f"lc.sql cannot parse this query for lineage: {e}") from e
        trees = [t for t in trees if t is not None]
        if len(trees) != 1:
            raise UnsupportedOperation("lc.sql takes one statement")
        tree = trees[0]
        if not isinstance(tree, self.E.Query):
            raise UnsupportedOperation(
                f"lc.sql: {type(tree).__name__} statements (only queries carry lineage)"
            )
        self._expand_stars(tree, {})
        tree, rel = self.query(tree, {})
        longs = tuple(n for n, k in rel.lin if k == LONG)
        arrays = tuple(n for n, k in rel.lin if k == ARRAY)
        return to_sql(tree), Lineage(longs, arrays, frozenset(self.cps))

    # -- stars inside expressions ------------------------------------------------------------

    def _expand_stars(self, node: Any, scope: dict[str, tuple[str, str]]) -> None:
        """Every block's `*` / `t.*` inside an expression (`struct(*)`, `hash(*)`,
        `to_json(struct(t.*))`, `count(DISTINCT *)`; not `count(*)`, which counts rows) is
        replaced by the columns Spark expands it to, less the views' hidden lineage columns,
        which Spark would expand it to as well: the visible columns of the block's FROM items
        (each qualified by its item, in the FROM clause's order), as Spark analyzes them.
        Every block of the query, those left as written too (an `IN` subquery's); inner
        blocks first (a derived table's column names are then vanilla's). `scope`: the
        CTEs in scope, name -> (name as written, body)."""
        E = self.E
        with_ = node.args.get("with_") if isinstance(node, E.Query) else None
        if with_ is not None:
            scope = dict(scope)
            for cte in with_.expressions:
                self._expand_stars(cte.this, scope)
                scope[cte.alias_or_name.lower()] = (cte.alias_or_name, to_sql(cte.this))
        for child in list(node.iter_expressions()):
            if child is not with_:
                self._expand_stars(child, scope)
        if isinstance(node, E.Select):
            self._natural_joins(node, scope)
            self._expand_block_stars(node, scope)

    def _scope_columns(self, probe: Any, scope: dict[str, tuple[str, str]]) -> list[str]:
        """The visible columns of the query `probe` (a node), the CTEs `scope` in scope."""
        defs = ", ".join(f"{_quote(n)} AS ({body})" for n, body in scope.values())
        text = (f"WITH {defs} " if defs else "") + to_sql(probe)
        return [n for n in self._columns_of_sql(text) if not is_hidden(n)]

    def _natural_joins(self, sel: Any, scope: dict[str, tuple[str, str]]) -> None:
        """`a NATURAL JOIN b` joins on every column name the two sides share, and views of
        frames with a common lineage column share its hidden name: written as the `USING`
        join on their common visible columns it means (`ON TRUE` without any)."""
        E = self.E
        joins = sel.args.get("joins") or []
        for i, join in enumerate(joins):
            if (join.method or "").upper() != "NATURAL":
                continue
            what = f"lc.sql: NATURAL JOIN {to_sql(join.this)}"
            try:
                left = self._scope_columns(
                    E.Select(
                        expressions=[E.Star()],
                        from_=sel.args["from_"].copy(),
                        joins=[j.copy() for j in joins[:i]],
                    ),
                    scope,
                )
                right = self._scope_columns(
                    E.Select(expressions=[E.Star()], from_=E.From(this=join.this.copy())), scope
                )
            except Exception as e:
                raise UnsupportedOperation(f"{what}: its columns ({e})") from e
            names = {n.lower() for n in right}
            common: list[str] = []
            for n in left:
                if n.lower() in names and n.lower() not in {c.lower() for c in common}:
                    common.append(n)
            join.set("method", None)
            if common:
                join.set("using", [E.to_identifier(n, quoted=True) for n in common])
            else:
                join.set("on", E.true())

    def _inner_stars(self, sel: Any) -> list:
        """The block's stars inside expressions (Star or `t.*` Column nodes), not in nested
        blocks; a select-list `*` / `t.*` is not one, nor `count(*)`."""
        E = self.E
        out = []
        for n in self._local(sel, E.Star | E.Column):
            if isinstance(n, E.Column):
                if not n.is_star:
                    continue
            elif isinstance(n.parent, E.Column):
                continue  # (the Column `t.*` stands for it)
            if n.parent is sel and n.arg_key == "expressions":
                continue
            call = n.parent
            if (
                isinstance(n, E.Star)
                and function_name(call) == "count"
                and list(call.expressions) == [n]
            ):
                continue  # count(*): Spark counts rows, nothing is expanded
            out.append(n)
        return out

    def _expand_block_stars(self, sel: Any, scope: dict[str, tuple[str, str]]) -> None:
        E = self.E
        stars = self._inner_stars(sel)
        if not stars:
            return
        what = f"lc.sql: {to_sql(stars[0].parent)}"
        for star in stars:
            clause = star
            while clause.parent is not sel:
                clause = clause.parent
            if clause.arg_key not in ("expressions", "where", "group", "having"):
                raise UnsupportedOperation(f"{what} in {clause.arg_key.upper()} (list the columns)")
            inner = star.this if isinstance(star, E.Column) else star
            if any(inner.args.get(k) for k in ("except_", "replace", "rename", "except")):
                raise UnsupportedOperation(f"{what}: * EXCEPT / REPLACE inside an expression")
        from_ = sel.args.get("from_")
        if from_ is None:
            raise UnsupportedOperation(f"{what} without FROM")
        joins = sel.args.get("joins") or []
        if any(j.args.get("using") or (j.method or "").upper() == "NATURAL" for j in joins):
            raise UnsupportedOperation(
                f"{what} over a JOIN ... USING / NATURAL JOIN (list the columns)"
            )
        # The qualifiers `*` expands over, in order: the FROM items (not a semi / anti join's
        # right side), then the lateral views.
        items = [from_.this] + [
            j.this for j in joins if (j.kind or "").upper() not in ("SEMI", "ANTI")
        ]
        for item in items:
            if isinstance(item, E.Subquery) and not item.alias:
                item.set("alias", E.TableAlias(this=E.to_identifier(fresh("d"))))
        qualifiers = [_pivot_alias(i) or i.alias_or_name for i in items]
        qualifiers += [lv.alias_or_name for lv in sel.args.get("laterals") or []]
        columns: dict[str, list[str]] = {}

        def of(q: str) -> list[str]:
            key = q.lower()
            if key not in columns:
                probe = E.Select(
                    expressions=[E.Column(this=E.Star(), table=E.to_identifier(q))],
                    **{
                        k: _copy(sel.args.get(k))
                        for k in ("from_", "joins", "laterals")
                        if sel.args.get(k)
                    },
                )
                try:
                    names = self._scope_columns(probe, scope)
                except Exception as e:
                    raise UnsupportedOperation(
                        f"{what}: cannot list the columns of {q} ({str(e).splitlines()[0]})"
                    ) from e
                if len({n.lower() for n in names}) != len(names):
                    raise UnsupportedOperation(
                        f"{what} over {q}, whose column names repeat (list the columns)"
                    )
                columns[key] = names
            return columns[key]

        for star in stars:
            qs = [star.table] if isinstance(star, E.Column) else qualifiers
            cols = [E.column(n, table=q, quoted=True) for q in qs for n in of(q)]
            parent, key = star.parent, star.arg_key
            siblings = parent.args.get(key)
            if not isinstance(siblings, list) or not cols:
                raise UnsupportedOperation(f"{what} (list the columns)")
            at = next(i for i, x in enumerate(siblings) if x is star)
            parent.set(key, [*siblings[:at], *cols, *siblings[at + 1 :]])

    # -- queries -----------------------------------------------------------------------------

    def query(self, node: Any, ctes: dict[str, Item], merged: str | None = None) -> tuple[Any, Rel]:
        """Rewrite a query (Select, set operation, parenthesized query); with `merged`, its
        lineage is output as one array column of that name (for set operations)."""
        E = self.E
        ctes = dict(ctes)
        with_ = node.args.get("with_")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise UnsupportedOperation("lc.sql: recursive CTEs")
            for cte in with_.expressions:
                body, rel = self.query(cte.this, ctes)
                cte.set("this", body)
                name = cte.alias_or_name
                text = to_sql(body)
                cols = self.output_columns(text, ctes)
                ctes[name.lower()] = Item(name, rel.lin, cols, text)
        if isinstance(node, E.Select):
            if node.args.get("qualify") is not None:
                return self.query(self._unqualify(node, ctes), ctes, merged)
            lazy = lazy_block(self, node, ctes, merged)
            if lazy is not None:
                return lazy
            return node, self.select(node, ctes, merged)
        if isinstance(node, E.Subquery):
            inner, rel = self.query(node.this, ctes, merged)
            node.set("this", inner)
            return node, rel
        if isinstance(node, E.Union):
            return self.union(node, ctes, merged)
        if isinstance(node, E.Intersect | E.Except):
            return self.setop(node, ctes, merged)
        raise UnsupportedOperation(f"lc.sql: {type(node).__name__} queries")

    def union(self, node: Any, ctes: dict[str, Item], merged: str | None) -> tuple[Any, Rel]:
        E = self.E
        name = merged or fresh("u")
        left, _ = self.query(node.this, ctes, name)
        right, _ = self.query(node.expression, ctes, name)
        node.set("this", left)
        node.set("expression", right)
        if node.args.get("by_name"):
            raise UnsupportedOperation("lc.sql: UNION BY NAME")
        if not node.args.get("distinct"):
            return node, Rel([(name, ARRAY)])
        # UNION (distinct): group the UNION ALL's rows, collecting their ids.
        node.set("distinct", False)
        order, limit = node.args.get("order"), node.args.get("limit")
        node.set("order", None)
        node.set("limit", None)
        cols = self.output_columns(to_sql(node), ctes)
        if cols is None:
            raise UnsupportedOperation("lc.sql: UNION over a query Spark cannot analyze alone")
        out = fresh("u")
        t = fresh("t")
        wrapper = E.select(
            *[E.column(c, table=t, quoted=True) for c in cols],
            E.alias_(self._flat_collect([(t, name, ARRAY)]), out),
        ).from_(E.Subquery(this=node, alias=E.TableAlias(this=E.to_identifier(t))))
        wrapper.set(
            "group", E.Group(expressions=[E.Literal.number(i + 1) for i in range(len(cols))])
        )
        if order is not None:
            wrapper.set("order", order)
        if limit is not None:
            wrapper.set("limit", limit)
        if merged:
            wrapper.expressions[-1].set("alias", E.to_identifier(merged))
            return wrapper, Rel([(merged, ARRAY)])
        return wrapper, Rel([(out, ARRAY)])

    def _unqualify(self, sel: Any, ctes: dict[str, Item]) -> Any:
        """`SELECT ... QUALIFY p` is `SELECT <its columns> FROM (SELECT ..., <p's windows>)
        WHERE p` (sqlglot's own transform): QUALIFY's windows then bring their lineage as
        windows in a select list do. A `SELECT *` block's columns are listed by name, so the
        windows' columns stay hidden."""
        from sqlglot.transforms import eliminate_qualify

        E = self.E
        star = any(
            isinstance(e, E.Star) or (isinstance(e, E.Column) and e.is_star)
            for e in sel.expressions
        )
        names: list[str] | None = None
        if star:
            plain = sel.copy()
            plain.set("qualify", None)
            names = self.output_columns(to_sql(plain), ctes)
            if names is None or len({n.lower() for n in names}) != len(names):
                raise UnsupportedOperation(
                    "lc.sql: QUALIFY over SELECT * with repeated column names (list the columns)"
                )
        # ORDER BY / LIMIT / OFFSET come after QUALIFY: they move to the outer query (which
        # eliminate_qualify would leave inside, before the filter).
        after = {k: sel.args.get(k) for k in ("order", "limit", "offset")}
        for k, v in after.items():
            if v is not None:
                sel.set(k, None)
        out = eliminate_qualify(sel)
        if names is not None:
            t = out.args["from_"].this.alias_or_name
            out.set("expressions", [E.column(n, table=t, quoted=True) for n in names])
        order = after["order"]
        if order is not None:
            visible = {e.alias_or_name.lower() for e in out.expressions}
            for col in order.find_all(E.Column):
                if col.table or col.name.lower() not in visible:
                    raise UnsupportedOperation(
                        f"lc.sql: QUALIFY with ORDER BY {col.sql()} (order by output columns)"
                    )
        for k, v in after.items():
            if v is not None:
                out.set(k, v)
        return out

    def setop(self, node: Any, ctes: dict[str, Item], merged: str | None) -> tuple[Any, Rel]:
        """INTERSECT / EXCEPT [ALL]: both branches' rows, tagged by side, grouped by value
        (nulls equal, as the set operations compare). A row of INTERSECT has the lineage of
        every duplicate on both sides; a row of EXCEPT that of every duplicate on the left
        (the right side's rows only exclude, like an anti join). ALL repeats a row
        min(left, right) / left - right times, each copy with the group's lineage."""
        E = self.E
        intersect = isinstance(node, E.Intersect)
        what = "INTERSECT" if intersect else "EXCEPT"
        if node.args.get("by_name"):
            raise UnsupportedOperation(f"lc.sql: {what} BY NAME")
        ids = fresh("u")
        left, _ = self.query(node.this, ctes, ids)
        right, _ = self.query(node.expression, ctes, ids)
        cols = self.output_columns(to_sql(left), ctes)
        if cols is None:
            raise UnsupportedOperation(f"lc.sql: {what} over a query Spark cannot analyze alone")
        c = [fresh("c") for _ in cols]
        cs = ", ".join(c)
        if intersect:
            lineage, copies = "concat(g.l, g.r)", "least(g.nl, g.nr)"
        else:
            lineage, copies = "g.l", "greatest(g.nl - g.nr, 0)"
        if node.args.get("distinct"):
            repeat = ""
            keep = "g.nl > 0 AND g.nr > 0" if intersect else "g.nl > 0 AND g.nr = 0"
        else:
            rep = fresh("r")
            repeat = f"LATERAL VIEW explode(array_repeat(0, CAST({copies} AS INT))) {rep} AS {rep}"
            keep = "TRUE"
        out = merged or fresh("u")
        visible = ", ".join(f"g.{ci} AS {_quote(n)}" for ci, n in zip(c, cols))
        sides = " UNION ALL ".join(
            self._setop_side(branch, side, c, ids, ctes, what)
            for side, branch in enumerate((left, right))
        )
        text = (
            f"SELECT {visible}, {lineage} AS {out} FROM ("
            f"SELECT {cs}, flatten(collect_list(CASE WHEN x.s = 0 THEN x.{ids} END)) AS l, "
            f"flatten(collect_list(CASE WHEN x.s = 1 THEN x.{ids} END)) AS r, "
            f"count_if(x.s = 0) AS nl, count_if(x.s = 1) AS nr FROM ({sides}) AS x "
            f"GROUP BY {cs}) AS g {repeat} WHERE {keep}"
        )
        wrapper = parse_one(text)
        for key in ("with_", "order", "limit", "offset"):
            if node.args.get(key) is not None:
                wrapper.set(key, node.args[key])
        return wrapper, Rel([(out, ARRAY)])

    def _setop_side(
        self, branch: Any, side: int, c: list[str], ids: str, ctes: dict[str, Item], what: str
    ) -> str:
        """A set operation's branch as `c..., ids, s` (s: 0 left, 1 right). Its columns are
        taken by position; a `SELECT *` branch also outputs its views' hidden columns, so
        there they are taken by name (when the visible names are distinct)."""
        text = to_sql(branch)
        t = fresh("t")
        every = self.output_columns(text, ctes, hidden=True) or []
        names = [n for n in every if not is_hidden(n)]
        if len(names) != len(c):
            raise UnsupportedOperation(f"lc.sql: {what} branches with different column counts")
        if every == [*names, ids]:
            return f"SELECT *, {side} AS s FROM ({text}) AS {t}({', '.join(c)}, {ids})"
        if len({n.lower() for n in names}) != len(names):
            raise UnsupportedOperation(
                f"lc.sql: {what} over SELECT * with repeated column names (list the columns)"
            )
        picks = ", ".join(f"{t}.{_quote(n)} AS {ci}" for n, ci in zip(names, c))
        return f"SELECT {picks}, {t}.{ids}, {side} AS s FROM ({text}) AS {t}"

    # -- one block ---------------------------------------------------------------------------

    def select(self, sel: Any, ctes: dict[str, Item], merged: str | None) -> Rel:
        E = self.E
        self._semi_joins_to_exists(sel)
        items = self._from_items(sel, ctes)
        extra: list[tuple[str, str, str]] = []  # (alias, column, "row" | "const") arrays
        where = sel.args.get("where")
        if where is not None:
            for sub, positive in self._subqueries(where.this):
                if positive:
                    extra.append(self._contribution(sel, sub, items, ctes))
        having = sel.args.get("having")
        if having is not None:
            for sub, positive in self._subqueries(having.this):
                if positive:
                    extra.append(
                        self._contribution(sel, sub, items, ctes, uncorrelated_only="HAVING")
                    )
        for e in sel.expressions:
            for sub, _ in self._subqueries(e):
                extra.append(self._contribution(sel, sub, items, ctes, uncorrelated_only="SELECT"))
        self._udf_calls(sel, items)
        windows = [w for e in sel.expressions for w in self._local(e, E.Window)]
        refs = [(it.alias, n, k) for it in items for n, k in it.lin]
        aggregate = (
            sel.args.get("group") is not None
            or having is not None
            or any(self._group_aggs(e) for e in sel.expressions)
        )
        if windows and sel.args.get("distinct") is not None:
            raise UnsupportedOperation("lc.sql: SELECT DISTINCT with window functions")
        if sel.args.get("distinct") is not None and not aggregate:
            if any(
                isinstance(e, E.Star) or (isinstance(e, E.Column) and e.is_star)
                for e in sel.expressions
            ):
                raise UnsupportedOperation("lc.sql: SELECT DISTINCT *")
            n = len(sel.expressions)
            sel.set("distinct", None)
            sel.set("group", E.Group(expressions=[E.Literal.number(i + 1) for i in range(n)]))
            aggregate = True
        elif sel.args.get("distinct") is not None:
            raise UnsupportedOperation("lc.sql: SELECT DISTINCT with aggregates")
        if aggregate:
            parts = [self._collect(a, n, k) for a, n, k in refs]
            parts += [
                E.func("coalesce", E.func("first", E.column(c, table=a)), _empty(E))
                if how == "const"
                else self._collect(a, c, ARRAY)
                for a, c, how in extra
            ]
            name = merged or fresh()
            group_ids = _concat(E, parts)
            framed = self._window_lineage(windows, group_ids)
            sel.append("expressions", E.alias_(_concat(E, [group_ids, *framed]), name))
            return Rel([(name, ARRAY)])
        row = [(a, n, k) for a, n, k in refs] + [(a, c, ARRAY) for a, c, _ in extra]
        framed = self._window_lineage(windows, self._row_ids(row)) if windows else []
        if merged:
            sel.append("expressions", E.alias_(_concat(E, [self._row_ids(row), *framed]), merged))
            return Rel([(merged, ARRAY)])
        out: list[tuple[str, str]] = []
        for table, column, kind in row:
            col = fresh()
            sel.append("expressions", E.alias_(E.column(column, table=table), col))
            out.append((col, kind))
        for expr in framed:
            col = fresh()
            sel.append("expressions", E.alias_(expr, col))
            out.append((col, ARRAY))
        return Rel(out)

    # -- window functions --------------------------------------------------------------------

    def _window_func(self, node: Any) -> bool:
        """Whether `node` is the function of a window expression (`f(...) OVER (...)`)."""
        E = self.E
        parent = node.parent
        # (`f(x) IGNORE NULLS OVER`, `percentile_cont(p) WITHIN GROUP (...) OVER`,
        # `f(x) FILTER (WHERE c) OVER`: the window's function is wrapped.)
        while isinstance(parent, E.IgnoreNulls | E.RespectNulls | E.WithinGroup | E.Filter):
            node, parent = parent, parent.parent
        return isinstance(parent, E.Window) and parent.this is node

    def _group_aggs(self, node: Any) -> list:
        """Aggregate calls in `node` that aggregate a group (not window functions)."""
        return [a for a in self._local(node, self.E.AggFunc) if not self._window_func(a)]

    def _window_lineage(self, windows: list, ids: Any) -> list:
        """The extra lineage of each window expression, as arrays, given `ids` (a row's ids,
        or in an aggregate block its group's): nothing for ranking functions; `lag` / `lead`:
        the row at the offset; anything else aggregates its frame: every row of the frame.
        Each is the same window (partition, order, frame) over `ids`."""
        E = self.E
        out: list = []
        seen: set[str] = set()
        for w in windows:
            fn = w.this
            ignore_nulls = isinstance(fn, E.IgnoreNulls)
            while isinstance(fn, E.IgnoreNulls | E.RespectNulls | E.WithinGroup | E.Filter):
                fn = fn.this
            name = function_name(fn)
            if name in RANKING:
                continue
            key = to_sql(w)
            if key in seen:
                continue
            seen.add(key)
            if name in OFFSET_WINDOWS:
                args = list(fn.expressions)
                if ignore_nulls or len(args) > 3 or any(isinstance(a, E.IgnoreNulls) for a in args):
                    # (the row taken is not the one at the offset)
                    raise UnsupportedOperation(f"lc.sql: {key} (lag / lead IGNORE NULLS)")
                offset = [args[1].copy()] if len(args) > 1 else []
                call = E.Anonymous(this=name, expressions=[ids.copy(), *offset])
                framed = w.copy()
                framed.set("this", call)
                out.append(E.func("coalesce", framed, _empty(E)))
                continue
            framed = w.copy()
            framed.set("this", E.func("collect_list", ids.copy()))
            out.append(E.func("flatten", framed))
        return out

    def _semi_joins_to_exists(self, sel: Any) -> None:
        """`a LEFT SEMI JOIN b ON p` is `a ... WHERE EXISTS (SELECT ... FROM b WHERE p)`: the
        left row and every right row it matches, through the EXISTS rewrite. Not when a
        RIGHT / FULL join follows (it would keep rows the semi join removed first)."""
        E = self.E
        joins = sel.args.get("joins") or []
        semis = [j for j in joins if (j.kind or "").upper() == "SEMI"]
        if not semis:
            return
        first = joins.index(semis[0])
        if any((j.side or "").upper() in ("RIGHT", "FULL") for j in joins[first:]):
            raise UnsupportedOperation("lc.sql: LEFT SEMI JOIN followed by a RIGHT / FULL join")
        conds = []
        for j in semis:
            if j.args.get("using"):
                raise UnsupportedOperation("lc.sql: LEFT SEMI JOIN ... USING (write ON)")
            body = E.select(E.alias_(E.Literal.number(1), "one")).from_(j.this.copy())
            on = j.args.get("on")
            if on is not None:
                body = body.where(on.copy())
            conds.append(E.Exists(this=body))
            j.pop()
        where = sel.args.get("where")
        if where is not None:
            conds.insert(0, E.Paren(this=where.this.copy()))
        sel.set("where", E.Where(this=_and(E, conds)))

    def _from_items(self, sel: Any, ctes: dict[str, Item]) -> list[Item]:
        for lateral in sel.args.get("laterals") or []:
            # A generator makes rows out of one row: each has that row's lineage, which its
            # columns already carry.
            name = function_name(lateral.this)
            if not lateral.args.get("view") or name.replace("_", "") not in _GENERATORS:
                raise UnsupportedOperation(f"lc.sql: {to_sql(lateral)}")
        for key in ("pivots", "connect", "qualify", "sample"):
            if sel.args.get(key):
                raise UnsupportedOperation(f"lc.sql: {key.upper()}")
        from_ = sel.args.get("from_")
        if from_ is None:
            return []
        joins = sel.args.get("joins") or []
        if joins:
            self._no_pivot_over_join([from_.this, *joins, *(j.this for j in joins)])
        items = [self._source(from_.this, ctes)]
        for join in sel.args.get("joins") or []:
            kind = (join.kind or "").upper()
            item = self._source(join.this, ctes)
            if kind != "ANTI":  # an anti-join's right side contributes nothing
                items.append(item)
        return items

    def _no_pivot_over_join(self, nodes: list) -> None:
        """Raises for a PIVOT, or an UNPIVOT with an alias, in a FROM clause with joins
        (`nodes`: its items and joins, where sqlglot puts the clause). Spark applies the
        clause to the whole join, which `_pivoted` does not rewrite: its implicit keys would
        take the lineage columns (a group per row); an UNPIVOT's alias hides the items'
        names, by which their lineage columns are read (without one, the lineage columns
        ride as implicit id columns, as over one item)."""
        for node in nodes:
            for clause in node.args.get("pivots") or []:
                if not clause.args.get("unpivot"):
                    raise UnsupportedOperation(
                        "lc.sql: PIVOT over a join (pivot a derived table that joins)"
                    )
                if clause.args.get("alias") is not None:
                    raise UnsupportedOperation(
                        "lc.sql: UNPIVOT with an alias over a join (unpivot a derived table "
                        "that joins)"
                    )

    def _source(self, src: Any, ctes: dict[str, Item]) -> Item:
        unpivot = _pivot_of(src)
        if unpivot is not None and not unpivot.args.get("unpivot"):
            src.set("pivots", None)
            return self._pivoted(src, unpivot, self._plain_source(src, ctes), ctes)
        item = self._plain_source(src, ctes)
        if unpivot is None:
            return item
        # UNPIVOT keeps every column it does not unpivot as an id column, the lineage
        # columns too: each row it makes has the lineage of the row it came from. Its alias,
        # if any, names the result; its columns are not tracked (correlation asks to qualify).
        alias = unpivot.args.get("alias")
        return Item(alias.name if alias is not None else item.alias, item.lin, None)

    def _pivoted(self, src: Any, pivot: Any, item: Item, ctes: dict[str, Item]) -> Item:
        """`src PIVOT (...)` replaced by the derived table that computes it with lineage
        (`_sqlpivot`)."""
        from ._sqlpivot import pivot_query

        E = self.E
        udfs = self.agent.udfs.registered
        for call in pivot.find_all(E.Anonymous):
            udf = udfs.get(str(call.this).lower())
            if udf is not None and udf.captured:
                # (The rewritten aggregates would call it without the row's ids.)
                raise UnsupportedOperation(
                    f"lc.sql: PIVOT with a captured UDF in its aggregates: {to_sql(call)}"
                )
        src_sql = to_sql(src)
        visible = item.columns
        if visible is None:
            visible = self.output_columns(f"SELECT * FROM {src_sql}", ctes)
        if visible is None:
            raise UnsupportedOperation("lc.sql: PIVOT over a FROM item whose columns are unknown")
        if len({c.lower() for c in visible}) != len(visible):
            # (The rewrite names the item's columns, in its keys and the vanilla clause's
            # analysis: a repeated name is ambiguous there.)
            raise UnsupportedOperation(
                "lc.sql: PIVOT over a FROM item with repeated column names (name them apart)"
            )
        ids = to_sql(self._flat_collect([(item.alias, n, k) for n, k in item.lin]))
        text, names, lin = pivot_query(
            E, src_sql, item.alias, visible, pivot, ids, lambda q: self.output_types(q, ctes)
        )
        alias = pivot.args.get("alias")
        name = alias.name if alias is not None else fresh("pv")
        body = parse_one(text)
        src.replace(E.Subquery(this=body, alias=E.TableAlias(this=E.to_identifier(name))))
        return Item(name, [(lin, ARRAY)], names)

    def _identifier_table(self, src: Any) -> None:
        """`FROM IDENTIFIER('v')` (or `IDENTIFIER(:name)` with a string argument) is
        `FROM v`: the table it names, as Spark reads the string (a possibly qualified
        name)."""
        E = self.E
        call = src.this
        if function_name(call) != "identifier" or len(call.expressions) != 1:
            return
        (arg,) = call.expressions
        value = None
        if isinstance(arg, E.Literal) and arg.is_string:
            value = arg.this
        elif isinstance(arg, E.Placeholder) and isinstance(self.params, dict):
            value = self.params.get(arg.name)
        if not isinstance(value, str):
            raise UnsupportedOperation(
                f"lc.sql: FROM {to_sql(src)} (IDENTIFIER of a string literal or a named "
                "string argument only)"
            )
        try:
            table = E.to_table(value, dialect=DIALECT)
        except Exception as e:
            raise UnsupportedOperation(f"lc.sql: FROM {to_sql(src)}: {e}") from e
        for key in ("this", "db", "catalog"):
            src.set(key, table.args.get(key))

    def _plain_source(self, src: Any, ctes: dict[str, Item]) -> Item:
        E = self.E
        if isinstance(src, E.Table):
            self._identifier_table(src)
            if isinstance(src.this, E.Func):
                raise UnsupportedOperation(
                    f"lc.sql: FROM {to_sql(src)} is not a view made from a captured DataFrame "
                    "(a table-valued function's rows have no lineage)"
                )
            if src.args.get("db") or src.args.get("catalog"):
                raise UnsupportedOperation(f"lc.sql: table {to_sql(src)} (only temp views)")
            name = src.name.lower()
            alias = src.alias_or_name
            if name in ctes:
                cte = ctes[name]
                return Item(alias, cte.lin, cte.columns)
            frame = self.views.get(name)
            if frame is None:
                raise UnsupportedOperation(
                    f"lc.sql: {src.name} is not a view made from a captured DataFrame "
                    "(df.createOrReplaceTempView on a DataFrame of this LineageContext)"
                )
            self.cps |= frame._lin.cps
            lin = [(n, LONG) for n in frame._lin.longs] + [(n, ARRAY) for n in frame._lin.arrays]
            return Item(alias, lin, frame.columns)
        if isinstance(src, E.Subquery):
            alias = src.args.get("alias")
            if alias is None:  # Spark allows it; its lineage columns need a name to refer to
                alias = E.TableAlias(this=E.to_identifier(fresh("d")))
                src.set("alias", alias)
            names = alias.args.get("columns")
            body = src.this
            if names:
                # `(SELECT ...) AS t(a, b)`: the rewritten body has more columns than names;
                # the names become the aliases of its (leftmost) select list.
                first = body
                while isinstance(first, E.Union | E.Subquery):
                    first = first.this
                if not isinstance(first, E.Select) or any(
                    isinstance(e, E.Star) or (isinstance(e, E.Column) and e.is_star)
                    for e in first.expressions
                ):
                    raise UnsupportedOperation("lc.sql: a column alias list on this subquery")
                for e, n in zip(first.expressions, names):
                    e.replace(E.alias_(e.this if isinstance(e, E.Alias) else e, n.copy()))
                alias.set("columns", None)
            inner, rel = self.query(body, ctes)
            src.set("this", inner)
            return Item(alias.name, rel.lin, None)
        raise UnsupportedOperation(f"lc.sql: {type(src).__name__} in FROM")

    # -- subqueries --------------------------------------------------------------------------

    def _local(self, node: Any, kind: Any) -> list:
        """Nodes of `kind` in `node`, not inside a nested query."""
        E = self.E
        out = []
        for n in node.walk(prune=lambda x: isinstance(x, E.Query) and x is not node):
            if isinstance(n, kind):
                out.append(n)
        return out

    def _subqueries(self, cond: Any) -> list[tuple[Any, bool]]:
        """(subquery predicate, positive) in a condition: IN / EXISTS nodes and scalar
        subqueries, with whether they sit under an odd number of NOTs."""
        E = self.E
        out: list[tuple[Any, bool]] = []

        def visit(n: Any, positive: bool) -> None:
            if isinstance(n, E.Not):
                visit(n.this, not positive)
                return
            if isinstance(n, E.In) and n.args.get("query") is not None:
                out.append((n, positive))
                visit(n.this, positive)
                return
            if isinstance(n, E.Exists):
                out.append((n, positive))
                return
            if isinstance(n, E.Subquery):
                out.append((n, True))  # a scalar subquery's rows make its value
                return
            if isinstance(n, E.Query):
                return
            for child in n.iter_expressions():
                visit(child, positive)

        visit(cond, True)
        return out

    def _contribution(
        self,
        sel: Any,
        pred: Any,
        items: list[Item],
        ctes: dict[str, Item],
        uncorrelated_only: str | None = None,
    ) -> tuple[str, str, str]:
        """Join `sel` with the ids of the subquery rows `pred` (IN, EXISTS, scalar) makes
        true; returns (alias, array column, "row" | "const")."""
        E = self.E
        if isinstance(pred, E.In):
            body = pred.args["query"].this.copy()
            key = pred.this
            if isinstance(key, E.Tuple):
                raise UnsupportedOperation("lc.sql: IN with several columns")
        else:
            body = (pred.this if isinstance(pred, E.Exists | E.Subquery) else pred).copy()
            key = None
        while isinstance(body, E.Subquery):
            body = body.this
        if not isinstance(body, E.Select):
            raise UnsupportedOperation(f"lc.sql: a {type(body).__name__} subquery")
        inner_items = self._peek_items(body, ctes)
        correlated, local = self._split_correlation(body, inner_items)
        if correlated and uncorrelated_only:
            raise UnsupportedOperation(f"lc.sql: a correlated subquery in {uncorrelated_only}")
        alias = fresh("s")
        if not correlated and key is None:
            # EXISTS / scalar: every row of the subquery, one array for all outer rows.
            sub, rel = self.query(body, ctes)
            t = fresh("t")
            ids = fresh("ids")
            lin = E.select(E.alias_(self._flat_collect([(t, n, k) for n, k in rel.lin]), ids))
            lin = lin.from_(E.Subquery(this=sub, alias=E.TableAlias(this=E.to_identifier(t))))
            self._join(sel, lin, alias, None, "CROSS")
            return alias, ids, "const"
        if not correlated:
            # x IN (SELECT y ...): the rows whose y matches x, grouped by y.
            if len(body.expressions) != 1:
                raise UnsupportedOperation("lc.sql: IN subquery with several columns")
            y = body.expressions[0]
            # Hidden names: the joined columns must not make the block's own (a `k`, an
            # `ids`) ambiguous.
            kn, ids = fresh("k"), fresh("ids")
            body.set("expressions", [E.alias_(y.this if isinstance(y, E.Alias) else y, kn)])
            if self._conjunct(sel, pred):
                # Spark infers `k IN (subquery)` for the ids' side from `x IN (subquery)` and
                # the join on x = k, and filters the aggregate's input with it: the eager form
                # then collects the surviving groups' ids only, and the lazy form would read
                # the input once more (TPC-H Q18's text: bench/dataframe.py --queries q18sql).
                self.eager_blocks.add(id(body))
            sub, rel = self.query(body, ctes)
            t = fresh("t")
            grouped = E.select(
                E.column(kn, table=t),
                E.alias_(self._flat_collect([(t, n, k) for n, k in rel.lin]), ids),
            ).from_(E.Subquery(this=sub, alias=E.TableAlias(this=E.to_identifier(t))))
            grouped.set("group", E.Group(expressions=[E.column(kn, table=t)]))
            self._join(
                sel,
                grouped,
                alias,
                E.EQ(this=key.copy(), expression=E.column(kn, table=alias)),
                "LEFT",
            )
            return alias, ids, "row"
        if key is not None:
            # A correlated `x IN (SELECT y ... WHERE c)` is true through the rows where c and
            # y = x hold: one more correlation predicate, x's columns the outer block's.
            correlated.append(self._in_predicate(body, key, items, inner_items))
        return self._correlated(
            sel, pred, body, key, correlated, local, items, inner_items, ctes, alias
        )

    def _conjunct(self, sel: Any, pred: Any) -> bool:
        """Whether `pred` is one of the conjuncts of `sel`'s WHERE (not under OR / NOT)."""
        E = self.E
        where = sel.args.get("where")
        node = pred
        while node.parent is not None and node.parent is not where:
            node = node.parent
            if not isinstance(node, E.And | E.Paren):
                return False
        return where is not None and node.parent is where

    def _in_predicate(self, body: Any, key: Any, items: list[Item], inner_items: list[Item]):
        E = self.E
        if len(body.expressions) != 1:
            raise UnsupportedOperation("lc.sql: IN subquery with several columns")
        y = body.expressions[0]
        y = y.this if isinstance(y, E.Alias) else y
        if self._group_aggs(y) or isinstance(y, E.Star):
            raise UnsupportedOperation(f"lc.sql: a correlated IN (SELECT {y.sql()} ...)")
        x = key.copy()
        inner = {it.alias.lower() for it in inner_items}
        for col in x.find_all(E.Column):
            owner = self._owner(col, items)
            if owner is None or owner.alias.lower() in inner:
                raise UnsupportedOperation(
                    f"lc.sql: correlated IN: qualify {col.sql()} with an alias of its own"
                )
            col.set("table", E.to_identifier(owner.alias))
        return E.EQ(this=y.copy(), expression=x)

    def _correlated(self, sel, pred, body, key, correlated, local, items, inner_items, ctes, alias):
        """A correlated subquery's matching rows, for each distinct value of the outer
        columns it refers to: K = those values, C = K joined with the subquery's rows on the
        correlation predicates, grouped by K; the block LEFT JOINs C on K (one match)."""
        E = self.E
        if body.args.get("group") is not None or body.args.get("having") is not None:
            raise UnsupportedOperation("lc.sql: a correlated subquery with GROUP BY / HAVING")
        outer_cols: dict[tuple[str | None, str], Any] = {}
        inner_cols: dict[tuple[str | None, str], Any] = {}
        for conj in correlated:
            for c in conj.find_all(E.Column):
                k = (c.table or None, c.name)
                if self._is_outer(c, inner_items):
                    outer_cols.setdefault(k, c)
                else:
                    inner_cols.setdefault(k, c)
        owner = {self._owner(c, items) for c in outer_cols.values()}
        if len(owner) != 1 or None in owner:
            raise UnsupportedOperation(
                "lc.sql: a correlated subquery whose outer columns are not all of one FROM item"
            )
        (found,) = owner
        assert found is not None
        outer_item: Item = found
        # K: the outer FROM item's distinct values of those columns.
        onames = {k: fresh("o") for k in outer_cols}  # hidden: see _contribution
        inames = {k: f"i{i}" for i, k in enumerate(inner_cols)}
        src = self._item_source(sel, outer_item)
        kq = E.select(
            *[
                E.alias_(E.column(c.name, table=outer_item.alias), onames[k])
                for k, c in outer_cols.items()
            ]
        )
        kq = kq.from_(src).distinct()
        # The subquery's rows (local predicates only), with the inner columns it correlates on.
        body.set("where", E.Where(this=_and(E, local)) if local else None)
        body.set(
            "expressions",
            [E.alias_(c.copy(), inames[k]) for k, c in inner_cols.items()]
            or [E.alias_(E.Literal.number(1), "i_")],
        )
        sub, rel = self.query(body, ctes)
        kt, st, ids = fresh("k"), fresh("t"), fresh("ids")
        on = _and(
            E, [self._retarget(c.copy(), inner_items, kt, onames, st, inames) for c in correlated]
        )
        c = E.select(
            *[E.column(n, table=kt) for n in onames.values()],
            E.alias_(self._flat_collect([(st, n, k) for n, k in rel.lin]), ids),
        ).from_(E.Subquery(this=kq, alias=E.TableAlias(this=E.to_identifier(kt))))
        c = c.join(
            E.Subquery(this=sub, alias=E.TableAlias(this=E.to_identifier(st))),
            on=on,
            join_type="inner",
        )
        c.set("group", E.Group(expressions=[E.column(n, table=kt) for n in onames.values()]))
        cond = _and(
            E,
            [
                E.NullSafeEQ(
                    this=E.column(col.name, table=outer_item.alias),
                    expression=E.column(onames[k], table=alias),
                )
                for k, col in outer_cols.items()
            ],
        )
        self._join(sel, c, alias, cond, "LEFT")
        return alias, ids, "row"

    def _retarget(self, cond, inner_items, kt, onames, st, inames):
        E = self.E
        for col in list(cond.find_all(E.Column)):
            k = (col.table or None, col.name)
            if self._is_outer(col, inner_items):
                col.replace(E.column(onames[k], table=kt))
            else:
                col.replace(E.column(inames[k], table=st))
        return cond

    def _item_source(self, sel: Any, item: Item) -> Any:
        """A FROM-able copy of the block's FROM item named `item.alias`."""
        from_ = sel.args.get("from_")
        sources = [from_.this] + [j.this for j in sel.args.get("joins") or []]
        for s in sources:
            if s.alias_or_name == item.alias:
                return s.copy()
        raise UnsupportedOperation(f"lc.sql: cannot find FROM item {item.alias}")

    def _peek_items(self, body: Any, ctes: dict[str, Item]) -> list[Item]:
        """The FROM items of a subquery (aliases and visible columns), without rewriting."""
        E = self.E
        out: list[Item] = []
        from_ = body.args.get("from_")
        if from_ is None:
            return out
        for s in [from_.this] + [j.this for j in body.args.get("joins") or []]:
            unpivot = _pivot_of(s)
            if unpivot is not None:
                alias = unpivot.args.get("alias")
                out.append(Item(alias.name if alias is not None else s.alias_or_name, [], None))
            elif isinstance(s, E.Table):
                name = s.name.lower()
                if name in ctes:
                    out.append(Item(s.alias_or_name, [], ctes[name].columns))
                elif name in self.views:
                    out.append(Item(s.alias_or_name, [], self.views[name].columns))
                else:
                    out.append(Item(s.alias_or_name, [], None))
            elif isinstance(s, E.Subquery):
                cols = self.output_columns(to_sql(s.this), ctes)
                out.append(Item(s.alias_or_name, [], cols))
            else:
                out.append(Item(s.alias_or_name, [], None))
        return out

    def _is_outer(self, col: Any, inner_items: list[Item]) -> bool:
        aliases = {it.alias.lower() for it in inner_items}
        if col.table:
            return col.table.lower() not in aliases
        for it in inner_items:
            if it.columns is None:
                raise UnsupportedOperation(
                    f"lc.sql: cannot tell whether column {col.name} is correlated; qualify it"
                )
            if col.name.lower() in {c.lower() for c in it.columns}:
                return False
        return True

    def _owner(self, col: Any, items: list[Item]) -> Item | None:
        if col.table:
            for it in items:
                if it.alias.lower() == col.table.lower():
                    return it
            return None
        owners = [
            it for it in items if it.columns and col.name.lower() in {c.lower() for c in it.columns}
        ]
        return owners[0] if len(owners) == 1 else None

    def _split_correlation(self, body: Any, inner_items: list[Item]) -> tuple[list, list]:
        E = self.E
        where = body.args.get("where")
        if where is None:
            return [], []
        conjuncts = list(_conjuncts(E, where.this))
        correlated: list[Any] = []
        local: list[Any] = []
        for c in conjuncts:
            outer = any(
                self._is_outer(col, inner_items)
                for col in c.find_all(E.Column)
                if not any(isinstance(a, E.Query) for a in _ancestors(col, c))
            )
            (correlated if outer else local).append(c)
        return correlated, local

    def _join(self, sel: Any, query: Any, alias: str, on: Any, kind: str) -> None:
        E = self.E
        sub = E.Subquery(this=query, alias=E.TableAlias(this=E.to_identifier(alias)))
        if kind == "CROSS":
            join = E.Join(this=sub, kind="CROSS")
        else:
            join = E.Join(this=sub, side=kind, on=on)
        sel.append("joins", join)

    # -- UDFs --------------------------------------------------------------------------------

    def _udf_calls(self, sel: Any, items: list[Item]) -> None:
        """Captured UDF calls get the row's ids as their hidden last argument. Under
        on_error="skip" the block's WHERE also drops the rows on which a call raises (its
        probe, over the same arguments): the row leaves the output, the filter or its group,
        as in the DataFrame API. Spark runs a filter's Python functions after its other
        predicates, so a row those remove is not probed (nor called)."""
        E = self.E
        udfs = self.agent.udfs.registered
        if not udfs:
            return
        refs = [(it.alias, n, k) for it in items for n, k in it.lin]
        calls = [
            (udf, call)
            for call in self._local(sel, E.Anonymous)
            if (udf := udfs.get(str(call.this).lower())) is not None and udf.captured
        ]
        probes = [(udf.sql_probe, call) for udf, call in calls if udf.sql_probe is not None]
        for _, call in probes:
            self._check_skip_site(sel, call)
        for _, call in calls:
            call.append("expressions", self._row_ids(refs))
        if not probes:
            return
        # After every call has its ids: a probe copies its call's arguments, calls and all.
        unique: dict[str, Any] = {}
        for p, call in probes:
            probe = E.Anonymous(this=p, expressions=[a.copy() for a in call.expressions])
            unique.setdefault(to_sql(probe), E.Not(this=probe))
        conds = list(unique.values())
        where = sel.args.get("where")
        if where is not None:
            conds.insert(0, E.Paren(this=where.this.copy()))
        sel.set("where", E.Where(this=_and(E, conds)))

    def _check_skip_site(self, sel: Any, call: Any) -> None:
        """A skip-mode call is dropped by a probe in the block's WHERE: only where it runs
        on the block's rows before any aggregation (WHERE, the select list of a block
        without aggregates, GROUP BY, an aggregate's argument)."""
        E = self.E
        what = f"lc.sql with on_error='skip': {to_sql(call)}"
        clause = None
        node = call
        while node.parent is not None and node is not sel:
            parent = node.parent
            if isinstance(parent, E.Window):
                raise UnsupportedOperation(f"{what} in a window")
            if isinstance(parent, E.AggFunc) and not self._window_func(parent):
                return  # an aggregate's argument: one call per input row
            if parent is sel:
                clause = node.arg_key
            node = parent
        group = sel.args.get("group")
        aggregate = (
            group is not None
            or sel.args.get("having") is not None
            or any(self._group_aggs(e) for e in sel.expressions)
        )
        if clause == "where" or clause == "group":
            return
        if clause == "expressions" and not aggregate:
            return
        if clause == "expressions" and group is not None:
            keys = {to_sql(g) for g in group.expressions}
            p = call
            while p is not None and p is not sel:
                if to_sql(p) in keys:
                    return  # a grouping key: computed per row before the groups
                p = p.parent
        where = "over aggregates" if aggregate else f"in {clause}"
        raise UnsupportedOperation(f"{what} {where}")

    # -- expressions -------------------------------------------------------------------------

    def _collect(self, alias: str, name: str, kind: str) -> Any:
        """A group's ids from one lineage column. An array column is collected as a set of
        arrays, then its distinct ids: rows of a group often share one array or much of it
        (a subquery's or a joined aggregate's lineage on every row it matches), and a list
        would hold it once per row, squaring the group's size (TPC-DS q14 and q70 ran the
        JVM out of memory that way)."""
        E = self.E
        if kind == LONG:
            return E.func("collect_list", E.column(name, table=alias))
        sets = E.func("collect_set", E.column(name, table=alias))
        return E.func("array_distinct", E.func("flatten", sets))

    def _flat_collect(self, refs: list[tuple[str, str, str]]) -> Any:
        return _concat(self.E, [self._collect(a, n, k) for a, n, k in refs])

    def _row_ids(self, refs: list[tuple[str, str, str]]) -> Any:
        """One array of a row's ids: its longs (not null) and its arrays' elements."""
        E = self.E
        longs = [E.column(n, table=a) for a, n, k in refs if k == LONG]
        parts = []
        if longs:
            parts.append(E.func("array_compact", E.func("array", *longs)))
        parts += [
            E.func("coalesce", E.column(n, table=a), _empty(E)) for a, n, k in refs if k == ARRAY
        ]
        return _concat(E, parts)

    def output_columns(
        self, text: str, ctes: dict[str, Item], hidden: bool = False
    ) -> list[str] | None:
        """The visible columns a query outputs (Spark analyzes it, earlier CTEs in scope);
        with `hidden`, the lineage columns too."""
        try:
            cols = self._columns_of_sql(self._with_ctes(text, ctes))
        except Exception:  # not analyzable on its own: correlation must then be qualified
            return None
        return cols if hidden else [c for c in cols if not is_hidden(c)]

    def output_types(self, text: str, ctes: dict[str, Item]) -> list[tuple[str, str]]:
        """The columns a query outputs and their types, as Spark analyzes it (earlier CTEs
        in scope); Spark's error for a bad query."""
        return list(self.spark_sql(self._with_ctes(text, ctes)).dtypes)

    def _with_ctes(self, text: str, ctes: dict[str, Item]) -> str:
        defs = ", ".join(f"`{it.alias}` AS ({it.sql})" for it in ctes.values() if it.sql)
        return f"WITH {defs} {text}" if defs else text

    def _columns_of_sql(self, sql: str) -> list[str]:
        cols = self._columns_cache.get(sql)
        if cols is None:
            cols = list(self.spark_sql(sql).columns)
            self._columns_cache[sql] = cols
        return cols


# LATERAL VIEW generators (names without "_") with lineage: the row's.
_GENERATORS = {
    "explode",
    "explodeouter",
    "posexplode",
    "posexplodeouter",
    "inline",
    "inlineouter",
    "stack",
}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _token(name: str) -> re.Pattern[str]:
    """A (fresh) name as a whole token of SQL text, quoted or not."""
    return re.compile(rf"`{name}`|(?<![\w`]){name}(?![\w`])")


def _constant(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _: text


def _empty(E: Any) -> Any:
    return E.Cast(this=E.func("array"), to=E.DataType.build("array<bigint>"))


def _concat(E: Any, parts: list) -> Any:
    if not parts:
        return _empty(E)
    return parts[0] if len(parts) == 1 else E.func("concat", *parts)


def _copy(value: Any) -> Any:
    return [v.copy() for v in value] if isinstance(value, list) else value.copy()


def _pivot_alias(src: Any) -> str | None:
    """The alias of a FROM item's PIVOT / UNPIVOT clause, if any (its columns' qualifier)."""
    pivots = src.args.get("pivots") or []
    alias = pivots[0].args.get("alias") if pivots else None
    return alias.name if alias is not None else None


def _pivot_of(src: Any) -> Any | None:
    """A FROM item's PIVOT or UNPIVOT clause, None without one (several raise)."""
    pivots = src.args.get("pivots") or []
    if len(pivots) > 1:
        raise UnsupportedOperation("lc.sql: several PIVOT / UNPIVOT clauses on one FROM item")
    return pivots[0] if pivots else None


def _and(E: Any, conds: list) -> Any:
    out = conds[0]
    for c in conds[1:]:
        out = E.And(this=out, expression=c)
    return out


def _conjuncts(E: Any, cond: Any):
    if isinstance(cond, E.And):
        yield from _conjuncts(E, cond.this)
        yield from _conjuncts(E, cond.expression)
    elif isinstance(cond, E.Paren) and isinstance(cond.this, E.And):
        yield from _conjuncts(E, cond.this)
    else:
        yield cond


def _ancestors(node: Any, stop: Any):
    p = node.parent
    while p is not None and p is not stop:
        yield p
        p = p.parent


def run_sql(
    agent: FrameAgent, text: str, args: Any = None, kwargs: dict[str, Any] | None = None
) -> LineageDataFrame:
    """`lc.sql(text, args, **kwargs)`: the query's rows as a LineageDataFrame (`spark.sql`'s
    arguments: `_sqlargs`)."""
    from ._frame import LineageDataFrame
    from ._recipe import set_recipe
    from ._sqlargs import SqlQueryArgs, drop_views, format_kwargs, named_markers
    from ._sqltables import read_catalog_tables

    spark = agent.spark
    kwargs = kwargs or {}
    if not agent.plumbing.capture:
        plain = {k: v._df if isinstance(v, LineageDataFrame) else v for k, v in kwargs.items()}
        return LineageDataFrame(agent, spark.sql(text, args, **plain), Lineage())
    views: dict[str, LineageDataFrame] = {}
    if kwargs:
        text, views = format_kwargs(agent, text, kwargs)
    rw = None
    try:
        # Spark's own errors for a bad query, and the column names.
        vanilla = spark.sql(text, args)
        names = [c for c in vanilla.columns if not is_hidden(c)]
        text, params = named_markers(text, args)
        text = read_catalog_tables(agent, text, views)
        rw = SqlRewriter(agent, params, views)
        rewritten, lin = rw.rewrite(text)
        run, frames, rewritten = rw.texts(rewritten)
        df = spark.sql(run, params, **frames) if frames else spark.sql(rewritten, params)
    finally:
        if rw is not None:
            rw.drop_views()
        drop_views(agent, views)
    cols = list(df.columns)
    visible = [c for c in cols if not is_hidden(c)]
    if visible != names and len(visible) == len(names):
        it = iter(names)
        df = df.toDF(*[c if is_hidden(c) else next(it) for c in cols])
    frame = LineageDataFrame(agent, df, lin)
    recipe = SqlQueryArgs(rewritten, {**agent.views, **views}, list(df.columns), params)
    set_recipe(frame, recipe)
    return frame
