"""`lc.sql` lineage is exact: queries over views of captured DataFrames (joins, aggregates,
HAVING, DISTINCT, UNION, CTEs, derived tables, IN / EXISTS / scalar subqueries, correlated or
not, NOT IN / NOT EXISTS, UDFs) give vanilla Spark SQL's rows, and every row's backward trace
and every line's forward trace equal the brute-force reference's."""

from __future__ import annotations

import _dfref as R
import pytest
from _dfcheck import Data, check, make_data

from agent import UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


_VIEWS = {"orders": "o", "items": "i", "customers": "c"}


def sql(text: str):
    """A `check` builder: register the tables as views (per run: lineage or vanilla) and
    run `text` through lc.sql (captured) or spark.sql (vanilla)."""

    def build(t):
        first = next(iter(t.values()))
        captured = hasattr(first, "lineage_columns")
        suffix = "" if captured else "_v"
        for name, df in t.items():
            df.createOrReplaceTempView(name + suffix)
        q = text
        if not captured:
            for name in t:
                q = q.replace("{" + name + "}", name + suffix)
            return first.sparkSession.sql(q)
        for name in t:
            q = q.replace("{" + name + "}", name)
        return build.lc.sql(q)

    return build


def run(lc, spark, data, text, ref, cols, ordered=False):
    b = sql(text)
    b.lc = lc
    check(lc, spark, data, b, ref, cols, ordered)


def test_join_group_having_order(lc, spark, data):
    text = """SELECT c.nation, count(*) AS n, sum(i.qty) AS q
              FROM {customers} c JOIN {orders} o ON c.ckey = o.ckey, {items} i
              WHERE o.okey = i.okey AND o.status <> 'P'
              GROUP BY c.nation HAVING count(*) > 2 ORDER BY q DESC"""

    def ref(T):
        j = R.join(T["customers"], T["orders"], lambda a, b: a["ckey"] == b["ckey"])
        j = R.join(j, T["items"], lambda a, b: a["okey"] == b["okey"] and a["status"] != "P")
        g = R.group(
            j,
            lambda r: (r["nation"],),
            lambda k, rs: {"nation": k[0], "n": len(rs), "q": sum(r["qty"] for r in rs)},
        )
        return sorted(R.where(g, lambda r: r["n"] > 2), key=lambda x: -x[0]["q"])

    run(lc, spark, data, text, ref, ["nation", "n", "q"], ordered=True)


def test_in_subquery_and_not_in(lc, spark, data):
    text = """SELECT okey, status FROM {orders}
              WHERE okey IN (SELECT okey FROM {items} WHERE qty >= 4)
                AND ckey NOT IN (SELECT ckey FROM {customers} WHERE nation = 'JP')"""

    def ref(T):
        jp = {r["ckey"] for r, _ in T["customers"] if r["nation"] == "JP"}
        o = R.where(T["orders"], lambda r: r["ckey"] not in jp)
        j = R.join(
            o,
            R.where(T["items"], lambda r: r["qty"] >= 4),
            lambda a, b: a["okey"] == b["okey"],
            "semi",
        )
        return R.select(j, lambda r: {"okey": r["okey"], "status": r["status"]})

    run(lc, spark, data, text, ref, ["okey", "status"])


def test_exists_correlated_equality_and_not_exists(lc, spark, data):
    # A row that passes through the OR's other branch has matches in the NOT EXISTS
    # subquery, and they still are not its lineage.
    text = """SELECT c.ckey, c.name FROM {customers} c
              WHERE EXISTS (SELECT * FROM {orders} o WHERE o.ckey = c.ckey AND o.status = 'F')
                AND (c.ckey = 1 OR NOT EXISTS (
                    SELECT * FROM {orders} o2 WHERE o2.ckey = c.ckey AND o2.okey < 10))"""

    def ref(T):
        bad = {r["ckey"] for r, _ in T["orders"] if r["okey"] < 10}
        assert 1 in bad  # the OR's first branch matters
        c = R.where(T["customers"], lambda r: r["ckey"] == 1 or r["ckey"] not in bad)
        f = R.where(T["orders"], lambda r: r["status"] == "F")
        j = R.join(c, f, lambda a, b: a["ckey"] == b["ckey"], "semi")
        return R.select(j, lambda r: {"ckey": r["ckey"], "name": r["name"]})

    run(lc, spark, data, text, ref, ["ckey", "name"])


def test_exists_correlated_inequality(lc, spark, data):
    # TPC-H Q21's shape: another row of the same order from a different supplier.
    text = """SELECT i1.okey, i1.qty FROM {items} i1
              WHERE i1.price > 50 AND EXISTS (
                  SELECT * FROM {items} i2 WHERE i2.okey = i1.okey AND i2.qty <> i1.qty)"""

    def ref(T):
        i1 = R.where(T["items"], lambda r: r["price"] > 50)
        j = R.join(
            i1,
            T["items"],
            lambda a, b: a["okey"] is not None and a["okey"] == b["okey"] and a["qty"] != b["qty"],
            "semi",
        )
        return R.select(j, lambda r: {"okey": r["okey"], "qty": r["qty"]})

    run(lc, spark, data, text, ref, ["okey", "qty"])


def test_scalar_subqueries(lc, spark, data):
    # Uncorrelated in WHERE (all its rows) and correlated (its group's rows).
    text = """SELECT i.okey, i.price FROM {items} i
              WHERE i.price > (SELECT avg(price) FROM {items} WHERE qty = 5)
                AND i.qty >= (SELECT max(i2.qty) FROM {items} i2 WHERE i2.okey = i.okey) - 1"""

    def ref(T):
        five = R.where(T["items"], lambda r: r["qty"] == 5)
        avg = sum(r["price"] for r, _ in five) / len(five)
        five_lin = frozenset().union(*(lin for _, lin in five))
        out = []
        for r, lin in T["items"]:
            same = [
                (x, ln) for x, ln in T["items"] if r["okey"] is not None and x["okey"] == r["okey"]
            ]
            if r["price"] > avg and same and r["qty"] >= max(x["qty"] for x, _ in same) - 1:
                group = frozenset().union(*(ln for _, ln in same))
                out.append(({"okey": r["okey"], "price": r["price"]}, lin | five_lin | group))
        return out

    run(lc, spark, data, text, ref, ["okey", "price"])


def test_cte_derived_table_union_distinct(lc, spark, data):
    text = """WITH big AS (SELECT okey, sum(price) AS total FROM {items} GROUP BY okey)
              SELECT t.k FROM (SELECT okey AS k FROM big WHERE total > 150
                               UNION SELECT ckey FROM {orders} WHERE status = 'F') AS t(k)
              WHERE t.k < 20"""

    def ref(T):
        big = R.group(
            T["items"],
            lambda r: (r["okey"],),
            lambda k, rs: {"okey": k[0], "total": sum(r["price"] for r in rs)},
        )
        a = R.select(R.where(big, lambda r: r["total"] > 150), lambda r: {"k": r["okey"]})
        b = R.select(R.where(T["orders"], lambda r: r["status"] == "F"), lambda r: {"k": r["ckey"]})
        u = R.distinct(a + b)
        return R.where(u, lambda r: r["k"] is not None and r["k"] < 20)

    run(lc, spark, data, text, ref, ["k"])


def test_union_all_select_distinct_left_join(lc, spark, data):
    text = """SELECT DISTINCT c.nation, o.status
              FROM {customers} c LEFT JOIN {orders} o ON c.ckey = o.ckey AND o.okey < 10
              UNION ALL SELECT name, NULL FROM {customers} WHERE ckey = 3"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 10)
        j = R.join(
            T["customers"],
            o,
            lambda a, b: a["ckey"] == b["ckey"],
            "left",
            lambda a, b: {"nation": a["nation"], "status": (b or {}).get("status")},
        )
        d = R.distinct(j)
        c3 = R.select(
            R.where(T["customers"], lambda r: r["ckey"] == 3),
            lambda r: {"nation": r["name"], "status": None},
        )
        return d + c3

    run(lc, spark, data, text, ref, ["nation", "status"])


def test_udf_in_sql_groups(lc, spark, data):
    lc.udf.register("month_of", lambda d: int(d[5:7]), "int")
    text = """SELECT month_of(odate) AS m, count(*) AS n FROM {orders}
              GROUP BY month_of(odate)"""

    def ref(T):
        return R.group(
            T["orders"], lambda r: (int(r["odate"][5:7]),), lambda k, rs: {"m": k[0], "n": len(rs)}
        )

    b = sql(text)
    b.lc = lc

    def build(t):
        if not hasattr(next(iter(t.values())), "lineage_columns"):
            spark.udf.register("month_of", lambda d: int(d[5:7]), "int")
        return b(t)

    check(lc, spark, data, build, ref, ["m", "n"])


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("SELECT okey FROM orders INTERSECT SELECT okey FROM items", "INTERSECT"),
        ("SELECT okey, rank() OVER (ORDER BY okey) FROM orders", "window"),
        ("SELECT * FROM orders LEFT SEMI JOIN items ON orders.okey = items.okey", "SEMI"),
        ("SELECT * FROM orders_plain", "not a view"),
    ],
)
def test_unsupported_sql_raises(lc, spark, data, text, what):
    from _dfcheck import tables

    for name, df in tables(lc.read, data).items():
        df.createOrReplaceTempView(name)
    spark.range(3).createOrReplaceTempView("orders_plain")
    with pytest.raises(UnsupportedOperation, match=what):
        lc.sql(text)
