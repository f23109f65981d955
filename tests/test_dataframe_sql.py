"""`lc.sql` lineage is exact: queries over views of captured DataFrames (joins, aggregates,
HAVING, DISTINCT, UNION, CTEs, derived tables, IN / EXISTS / scalar subqueries, correlated or
not, NOT IN / NOT EXISTS, window functions, QUALIFY, LATERAL VIEW, UDFs) give vanilla Spark
SQL's rows, and every row's backward trace and every line's forward trace equal the
brute-force reference's."""

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


def test_window_ranking_and_offsets(lc, spark, data):
    # Ranking: the row; lag / lead: also the row at the offset (none when the default is
    # taken). The named window is the WINDOW clause's.
    text = """SELECT okey, row_number() OVER w AS rn,
                     lag(okey, 2) OVER w AS prev2,
                     lead(okey, 1, -1) OVER (PARTITION BY ckey ORDER BY okey) AS nxt
              FROM {orders} WHERE okey < 40
              WINDOW w AS (PARTITION BY ckey ORDER BY okey)"""

    def ref(T):
        out = []
        for r, lin, members in R.window_partitions(
            R.where(T["orders"], lambda r: r["okey"] < 40), "ckey", "okey"
        ):
            i = next(k for k, m in enumerate(members) if m[0] is r)
            prev2 = members[i - 2] if i >= 2 else None
            nxt = members[i + 1] if i + 1 < len(members) else None
            row = {
                "okey": r["okey"],
                "rn": i + 1,
                "prev2": prev2[0]["okey"] if prev2 else None,
                "nxt": nxt[0]["okey"] if nxt else -1,
            }
            out.append((row, lin.union(*(o[1] for o in (prev2, nxt) if o))))
        return out

    run(lc, spark, data, text, ref, ["okey", "rn", "prev2", "nxt"])


def test_window_aggregate_frames(lc, spark, data):
    # Aggregates over a window: every row of the frame (the default RANGE frame with ORDER
    # BY, an explicit ROWS frame).
    text = """SELECT okey, sum(okey) OVER (PARTITION BY ckey ORDER BY okey) AS running,
                     count(*) OVER (PARTITION BY ckey ORDER BY okey
                                    ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING) AS ahead
              FROM {orders} WHERE okey < 40"""

    def ref(T):
        out = []
        for r, lin, members in R.window_partitions(
            R.where(T["orders"], lambda r: r["okey"] < 40), "ckey", "okey"
        ):
            i = next(k for k, m in enumerate(members) if m[0] is r)
            frame, ahead = members[: i + 1], members[i : i + 3]
            row = {
                "okey": r["okey"],
                "running": sum(m[0]["okey"] for m in frame),
                "ahead": len(ahead),
            }
            out.append((row, lin.union(*(m[1] for m in frame + ahead))))
        return out

    run(lc, spark, data, text, ref, ["okey", "running", "ahead"])


def test_window_over_a_join(lc, spark, data):
    # A window in a join block: the frame's rows bring both sides' lineage.
    text = """SELECT o.okey, i.price,
                     sum(i.price) OVER (PARTITION BY o.status ORDER BY o.okey, i.price
                                        ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS pair
              FROM {orders} o JOIN {items} i ON o.okey = i.okey WHERE o.okey < 20"""

    def ref(T):
        j = R.join(
            R.where(T["orders"], lambda r: r["okey"] < 20),
            T["items"],
            lambda a, b: a["okey"] == b["okey"],
        )
        out = []
        for r, lin in j:
            members = sorted(
                (x for x in j if x[0]["status"] == r["status"]),
                key=lambda x: (x[0]["okey"], x[0]["price"]),
            )
            i = next(k for k, m in enumerate(members) if m[0] is r)
            frame = members[max(0, i - 1) : i + 1]
            row = {
                "okey": r["okey"],
                "price": r["price"],
                "pair": sum(m[0]["price"] for m in frame),
            }
            out.append((row, lin.union(*(m[1] for m in frame))))
        return out

    # Ties on (okey, price) would make the frame's rows Spark's choice: there are none.
    assert len({(r[0], r[1]) for r in data.rows["items"] if r[0] is not None and r[0] < 20}) == len(
        [r for r in data.rows["items"] if r[0] is not None and r[0] < 20]
    )
    run(lc, spark, data, text, ref, ["okey", "price", "pair"])


def test_window_over_groups_and_top_n(lc, spark, data):
    # In an aggregate block a window ranges over groups: its frame brings every row of the
    # frame's groups. Then the common top-N per partition: a ranking filtered outside.
    text = """WITH g AS (
                SELECT ckey, status, count(*) AS n,
                       sum(count(*)) OVER (PARTITION BY status ORDER BY ckey) AS upto,
                       rank() OVER (PARTITION BY status ORDER BY count(*) DESC, ckey) AS r
                FROM {orders} GROUP BY ckey, status)
              SELECT ckey, status, n, upto FROM g WHERE r <= 2"""

    def ref(T):
        g = R.group(
            T["orders"],
            lambda r: (r["ckey"], r["status"]),
            lambda k, rs: {"ckey": k[0], "status": k[1], "n": len(rs)},
        )
        out = []
        for r, lin in g:
            same = [x for x in g if x[0]["status"] == r["status"]]
            frame = [x for x in same if x[0]["ckey"] <= r["ckey"]]
            ranked = sorted(same, key=lambda x: (-x[0]["n"], x[0]["ckey"]))
            if ranked.index((r, lin)) >= 2:
                continue
            row = {**r, "upto": sum(x[0]["n"] for x in frame)}
            out.append((row, lin.union(*(x[1] for x in frame))))
        return out

    run(lc, spark, data, text, ref, ["ckey", "status", "n", "upto"])


def test_window_in_a_union_branch(lc, spark, data):
    text = """SELECT okey AS k, first_value(ckey) OVER (PARTITION BY status ORDER BY okey) AS v
              FROM {orders} WHERE okey < 8
              UNION ALL SELECT ckey, ntile(2) OVER (ORDER BY ckey) FROM {customers}
              UNION ALL SELECT ckey, count(*) OVER (PARTITION BY nation) FROM {customers}
                        WHERE ckey < 6"""

    def ref(T):
        out = []
        for r, lin, members in R.window_partitions(
            R.where(T["orders"], lambda r: r["okey"] < 40), "status", "okey"
        ):
            if r["okey"] >= 8:
                continue
            members = [m for m in members if m[0]["okey"] < 8]
            i = next(k for k, m in enumerate(members) if m[0] is r)
            frame = members[: i + 1]
            out.append(
                ({"k": r["okey"], "v": frame[0][0]["ckey"]}, lin.union(*(m[1] for m in frame)))
            )
        cs = sorted(T["customers"], key=lambda x: x[0]["ckey"])
        half = (len(cs) + 1) // 2
        for i, (r, lin) in enumerate(cs):
            out.append(({"k": r["ckey"], "v": 1 if i < half else 2}, lin))
        few = R.where(T["customers"], lambda r: r["ckey"] < 6)
        for r, _ in few:
            same = [x for x in few if x[0]["nation"] == r["nation"]]
            out.append(({"k": r["ckey"], "v": len(same)}, frozenset().union(*(x[1] for x in same))))
        return out

    run(lc, spark, data, text, ref, ["k", "v"])


@pytest.mark.parametrize("every", [False, True])
def test_intersect(lc, spark, data, every):
    text = f"""SELECT ckey, status FROM {{orders}} WHERE okey < 45
               INTERSECT {"ALL" if every else ""}
               SELECT ckey, status FROM {{orders}} WHERE okey >= 25
               ORDER BY ckey, status"""

    def ref(T):
        def part(pred):
            rows = R.where(T["orders"], pred)
            return R.select(rows, lambda r: {"ckey": r["ckey"], "status": r["status"]})

        out = R.set_operation(
            part(lambda r: r["okey"] < 45), part(lambda r: r["okey"] >= 25), "intersect", every
        )
        return sorted(out, key=lambda x: (x[0]["ckey"], x[0]["status"]))

    run(lc, spark, data, text, ref, ["ckey", "status"], ordered=True)


@pytest.mark.parametrize("every", [False, True])
def test_except_with_nulls(lc, spark, data, every):
    # Null tags (a null equals a null in a set operation) on both sides.
    text = f"""SELECT status, tags FROM {{orders}} WHERE okey < 40
               EXCEPT {"ALL" if every else ""}
               SELECT status, tags FROM {{orders}} WHERE ckey < 4 AND status <> 'F'"""

    def ref(T):
        def part(pred):
            rows = R.where(T["orders"], pred)
            return R.select(rows, lambda r: {"status": r["status"], "tags": r["tags"]})

        a = part(lambda r: r["okey"] < 40)
        b = part(lambda r: r["ckey"] < 4 and r["status"] != "F")
        out = R.set_operation(a, b, "except", every)
        # A left null is excluded by a right null, another is kept.
        excluded = {r["status"] for r, _ in b if r["tags"] is None}
        assert any(r["tags"] is None and r["status"] in excluded for r, _ in a)
        assert any(r["tags"] is None for r, _ in out)
        return out

    run(lc, spark, data, text, ref, ["status", "tags"])


def test_except_star_in_a_union_and_cte(lc, spark, data):
    # SELECT * branches also output their views' hidden columns: taken by name. The set
    # operation sits in a CTE and in a UNION branch.
    text = """WITH far AS (SELECT * FROM {customers} EXCEPT SELECT * FROM {customers}
                           WHERE nation = 'FR')
              SELECT ckey, name FROM far WHERE ckey < 9
              UNION ALL (SELECT ckey, name FROM {customers} WHERE ckey > 6
                         INTERSECT SELECT ckey, concat('cust', ckey) FROM {orders})"""

    def ref(T):
        c = T["customers"]
        fr = R.where(c, lambda r: r["nation"] == "FR")
        far = R.where(R.set_operation(c, fr, "except", False), lambda r: r["ckey"] < 9)
        out = R.select(far, lambda r: {"ckey": r["ckey"], "name": r["name"]})
        a = R.select(
            R.where(c, lambda r: r["ckey"] > 6), lambda r: {"ckey": r["ckey"], "name": r["name"]}
        )
        b = R.select(T["orders"], lambda r: {"ckey": r["ckey"], "name": f"cust{r['ckey']}"})
        return out + R.set_operation(a, b, "intersect", False)

    run(lc, spark, data, text, ref, ["ckey", "name"])


def test_left_semi_and_anti_join(lc, spark, data):
    # SEMI: the left row and every right row it matches (a non-equality in ON too); ANTI:
    # the left row only. Then an inner join after them.
    text = """SELECT o.okey, o.status, c.nation FROM {orders} o
              LEFT SEMI JOIN {items} i ON o.okey = i.okey AND i.qty > o.ckey % 4
              LEFT ANTI JOIN {customers} x ON x.ckey = o.ckey AND x.nation = 'JP'
              JOIN {customers} c ON c.ckey = o.ckey
              WHERE o.okey < 50"""

    def ref(T):
        jp = R.where(T["customers"], lambda r: r["nation"] == "JP")
        o = R.where(T["orders"], lambda r: r["okey"] < 50)
        o = R.join(
            o, T["items"], lambda a, b: a["okey"] == b["okey"] and b["qty"] > a["ckey"] % 4, "semi"
        )
        o = R.join(o, jp, lambda a, b: a["ckey"] == b["ckey"], "anti")
        j = R.join(o, T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.select(
            j, lambda r: {"okey": r["okey"], "status": r["status"], "nation": r["nation"]}
        )

    run(lc, spark, data, text, ref, ["okey", "status", "nation"])


def test_uncorrelated_semi_join(lc, spark, data):
    # No ON: every left row if the right side has any row, with all of them.
    text = """SELECT ckey FROM {customers} LEFT SEMI JOIN
              (SELECT * FROM {items} WHERE qty = 5 AND price > 90) AS t"""

    def ref(T):
        t = R.where(T["items"], lambda r: r["qty"] == 5 and r["price"] > 90)
        assert t
        return R.select(
            R.join(T["customers"], t, lambda a, b: True, "semi"), lambda r: {"ckey": r["ckey"]}
        )

    run(lc, spark, data, text, ref, ["ckey"])


@pytest.mark.parametrize(
    ("clause", "sets"),
    [
        ("GROUPING SETS ((nation, status), (status), ())", [("nation", "status"), ("status",), ()]),
        ("ROLLUP (nation, status)", [("nation", "status"), ("nation",), ()]),
        ("CUBE (nation, status)", [("nation", "status"), ("nation",), ("status",), ()]),
    ],
)
def test_grouping_sets_rollup_cube(lc, spark, data, clause, sets):
    # Each grouping set's group: every row of it.
    text = f"""SELECT c.nation, o.status, count(*) AS n, sum(o.okey) AS s
               FROM {{orders}} o JOIN {{customers}} c ON o.ckey = c.ckey
               GROUP BY {clause}"""

    def ref(T):
        j = R.join(T["orders"], T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.group_sets(
            j,
            ["nation", "status"],
            sets,
            lambda rs: {"n": len(rs), "s": sum(r["okey"] for r in rs)},
        )

    run(lc, spark, data, text, ref, ["nation", "status", "n", "s"])


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            "SELECT * FROM orders o JOIN items i ON o.okey = i.okey EXCEPT "
            "SELECT * FROM orders o JOIN items i ON o.okey = i.okey",
            "repeated column names",
        ),
        ("SELECT okey, lag(okey) IGNORE NULLS OVER (ORDER BY okey) FROM orders", "IGNORE NULLS"),
        ("SELECT DISTINCT ckey, rank() OVER (ORDER BY ckey) FROM orders", "DISTINCT with window"),
        (
            "SELECT * FROM orders LEFT SEMI JOIN items ON orders.okey = items.okey "
            "RIGHT JOIN customers ON orders.ckey = customers.ckey",
            "SEMI JOIN followed by a RIGHT",
        ),
        ("SELECT * FROM orders_plain", "not a view"),
        ("SELECT * FROM orders LATERAL VIEW json_tuple(tags, 'a') t AS x", "(?i)json_tuple"),
        (
            "SELECT okey FROM orders QUALIFY row_number() OVER (ORDER BY okey) < 3 ORDER BY ckey",
            "QUALIFY with ORDER BY ckey",
        ),
    ],
)
def test_unsupported_sql_raises(lc, spark, data, text, what):
    from _dfcheck import tables

    for name, df in tables(lc.read, data).items():
        df.createOrReplaceTempView(name)
    spark.range(3).createOrReplaceTempView("orders_plain")
    with pytest.raises(UnsupportedOperation, match=what):
        lc.sql(text)


def test_qualify(lc, spark, data):
    # QUALIFY filters on windows; its windows bring their lineage as in the select list: a
    # ranking nothing, an aggregate its frame (here the whole partition).
    text = """SELECT okey, ckey, sum(okey) OVER (PARTITION BY ckey) AS tot FROM {orders}
              WHERE okey < 50
              QUALIFY row_number() OVER (PARTITION BY ckey ORDER BY okey DESC) <= 2
                  AND count(*) OVER (PARTITION BY status) > 12"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 50)
        out = []
        for r, lin in o:
            part = [x for x in o if x[0]["ckey"] == r["ckey"]]
            same_status = [x for x in o if x[0]["status"] == r["status"]]
            later = [x for x in part if x[0]["okey"] > r["okey"]]
            if len(later) >= 2 or len(same_status) <= 12:
                continue
            row = {"okey": r["okey"], "ckey": r["ckey"], "tot": sum(x[0]["okey"] for x in part)}
            out.append((row, lin.union(*(x[1] for x in part + same_status))))
        assert 0 < len(out) < len(o)
        return out

    run(lc, spark, data, text, ref, ["okey", "ckey", "tot"])


def test_qualify_select_star_lag_order_limit(lc, spark, data):
    # SELECT * keeps vanilla's columns; lag in QUALIFY brings the row at the offset; ORDER
    # BY / LIMIT apply after the filter.
    text = """SELECT * FROM {customers}
              QUALIFY lag(ckey) OVER (PARTITION BY nation ORDER BY ckey) > 3
              ORDER BY ckey LIMIT 4"""

    def ref(T):
        out = []
        for r, lin, members in R.window_partitions(T["customers"], "nation", "ckey"):
            i = next(k for k, m in enumerate(members) if m[0] is r)
            if i >= 1 and members[i - 1][0]["ckey"] > 3:
                out.append((dict(r), lin | members[i - 1][1]))
        # The first 4 customers by ckey do not all pass: a LIMIT before the filter differs.
        assert len(out) > 4 and min(r["ckey"] for r, _ in out) >= 4
        return sorted(out, key=lambda x: x[0]["ckey"])[:4]

    run(lc, spark, data, text, ref, ["ckey", "name", "nation"], ordered=True)


def _tags(r):
    return None if r["tags"] is None else r["tags"].split("|")


@pytest.mark.parametrize("outer", [False, True])
def test_lateral_view_explode_group(lc, spark, data, outer):
    # Each generated row has its row's lineage; OUTER keeps a row without tags (null tag).
    text = f"""SELECT t.tag, count(*) AS n, min(o.okey) AS first
               FROM {{orders}} o LATERAL VIEW {"OUTER" if outer else ""}
                   explode(split(o.tags, '[|]')) t AS tag
               WHERE o.okey < 40 GROUP BY t.tag"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 40)
        assert any(r["tags"] is None for r, _ in o)
        e = R.explode(
            o,
            lambda r: (
                [{**r, "tag": x} for x in _tags(r)]
                if r["tags"] is not None
                else ([{**r, "tag": None}] if outer else [])
            ),
        )
        return R.group(
            e,
            lambda r: (r["tag"],),
            lambda k, rs: {"tag": k[0], "n": len(rs), "first": min(r["okey"] for r in rs)},
        )

    run(lc, spark, data, text, ref, ["tag", "n", "first"])


def test_lateral_view_posexplode_inline_join(lc, spark, data):
    # Two lateral views in a join block: a generated row has both joined rows' lineage.
    text = """SELECT o.okey, c.name, p.pos, p.tag, s.a, s.b
              FROM {orders} o JOIN {customers} c ON o.ckey = c.ckey
              LATERAL VIEW posexplode(split(o.tags, '[|]')) p AS pos, tag
              LATERAL VIEW inline(array(struct(o.okey AS a, c.ckey AS b),
                                        struct(c.ckey AS a, 0 AS b))) s AS a, b
              WHERE o.okey < 25"""

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 25)
        j = R.join(o, T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.explode(
            j,
            lambda r: [
                {"okey": r["okey"], "name": r["name"], "pos": i, "tag": x, "a": a, "b": b}
                for i, x in enumerate(_tags(r) or [])
                for a, b in ((r["okey"], r["ckey"]), (r["ckey"], 0))
            ],
        )

    run(lc, spark, data, text, ref, ["okey", "name", "pos", "tag", "a", "b"])


def test_correlated_in(lc, spark, data):
    # The items rows that make it true: the same okey (the IN's own equality, its outer
    # column unqualified) and the correlation. NOT IN, correlated too, adds nothing.
    text = """SELECT o.okey, o.ckey FROM {orders} o
              WHERE okey IN (SELECT i.okey FROM {items} i WHERE i.qty > o.ckey % 4)
                AND o.ckey NOT IN (SELECT c.ckey FROM {customers} c
                                   WHERE c.nation = 'JP' AND c.ckey <> o.okey)"""

    def ref(T):
        jp = [r for r, _ in T["customers"] if r["nation"] == "JP"]
        out = []
        for r, lin in T["orders"]:
            hits = [
                ln for i, ln in T["items"] if i["okey"] == r["okey"] and i["qty"] > r["ckey"] % 4
            ]
            if hits and not any(c["ckey"] == r["ckey"] and c["ckey"] != r["okey"] for c in jp):
                out.append(({"okey": r["okey"], "ckey": r["ckey"]}, lin.union(*hits)))
        return out

    run(lc, spark, data, text, ref, ["okey", "ckey"])


def test_subquery_columns_do_not_clash_with_the_blocks_own(lc, spark, data):
    # The rewrite joins each subquery's matches as columns of the block; a block whose own
    # columns are named `k`, `ids` or `o0` (names those joins once used) must still resolve.
    text = """WITH x AS (SELECT okey AS k, qty AS ids, price AS o0 FROM {items})
              SELECT * FROM x
              WHERE k IN (SELECT okey FROM {orders} WHERE status = 'F')
                AND EXISTS (SELECT * FROM {orders} o WHERE o.okey = x.k AND o.ckey > ids)
                AND o0 > (SELECT min(price) FROM {items})"""

    def ref(T):
        low = min(r["price"] for r, _ in T["items"])
        every = frozenset().union(*(lin for _, lin in T["items"]))
        out = []
        for r, lin in T["items"]:
            f = [ln for o, ln in T["orders"] if o["status"] == "F" and o["okey"] == r["okey"]]
            e = [
                ln
                for o, ln in T["orders"]
                if r["okey"] is not None
                and o["okey"] == r["okey"]
                and None not in (o["ckey"], r["qty"])
                and o["ckey"] > r["qty"]
            ]
            if r["okey"] is not None and f and e and r["price"] is not None and r["price"] > low:
                row = {"k": r["okey"], "ids": r["qty"], "o0": r["price"]}
                out.append((row, lin.union(*f, *e) | every))
        return out

    run(lc, spark, data, text, ref, ["k", "ids", "o0"])
