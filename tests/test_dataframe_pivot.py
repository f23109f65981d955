"""`groupBy().pivot().agg()` and `unpivot` / `melt` with lineage: rows, columns and types equal
vanilla PySpark's; every output row's backward trace and every source line's forward trace
equal a brute-force pivot's (a row: the rows of its group whose pivot value is among the
values, or all of them when none is); re-running the query on a row's traced lines alone
gives that row back (Cui-Widom)."""

from __future__ import annotations

from collections import Counter

import _dfref as R
import pytest
from _dfcheck import SCHEMAS, Data, check, make_data, nulled, tables
from pyspark.sql import functions as F

from agent import LineageRDD, UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def pivot_ref(t: R.Table, key, pivot, values, aggs, single: bool) -> R.Table:
    """A brute-force pivot: one row per group; a cell per (value, aggregate) over the rows
    whose pivot value equals it (None equal to None), null when there is none; lineage the
    rows whose pivot value is among `values`, or all the group's rows when none is."""
    groups: dict[tuple, list] = {}
    for r, lin in t:
        groups.setdefault(key(r), []).append((r, lin))
    out: R.Table = []
    for k, members in groups.items():
        row = dict(k)
        for v in values:
            hit = [r for r, _ in members if pivot(r) == v]
            for name, fn in aggs:
                col = str("null" if v is None else v) if single else f"{v}_{name}"
                row[col] = fn(hit) if hit else None
        inside = [lin for r, lin in members if pivot(r) in values]
        out.append((row, frozenset().union(*(inside or [lin for _, lin in members]))))
    return out


def same_types(lc, spark, data, build) -> None:
    assert build(tables(lc.read, data)).dtypes == build(tables(spark.read, data)).dtypes


def reexecuted(lc, spark, data, build, cols, tmp_path, sample: int = 3, again=None) -> None:
    """Cui-Widom: the query (`again`, else `build`) over a row's traced source lines alone
    gives that row back."""
    again_build = again or build
    q = build(tables(lc.read, data))
    rows = q.collect()
    ids = q.lineage().record_ids
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    for i in range(0, len(rows), max(1, len(rows) // sample)):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        d = tmp_path / f"sub{i}"
        d.mkdir()
        for name in SCHEMAS:
            header = ",".join(c.split()[0] for c in SCHEMAS[name].split(", "))
            kept = [b for b in back if owner[b] == name]
            (d / f"{name}.csv").write_text("\n".join([header, *kept]) + "\n")
        sub = Data(str(d), data.rows, data.lines, data.offsets)
        rerun = again_build(tables(spark.read, sub)).collect()
        assert R.key_of(rows[i], cols) in {R.key_of(r, cols) for r in rerun}


def _sum(c):
    def fn(rs):
        got = [r[c] for r in rs if r[c] is not None]
        return sum(got) if got else None

    return fn


def nulled_ref(T) -> R.Table:
    """`nulled`'s items, brute force."""
    return R.select(
        T["items"],
        lambda r: {**r, "okey": None if r["okey"] is not None and r["okey"] % 5 == 0
                   else r["okey"]},
    )  # fmt: skip


def _max(c):
    return lambda rs: max(r[c] for r in rs)


def _max_of(c):
    """max over the rows whose `c` is not null, None when there are none."""
    return lambda rs: max((r[c] for r in rs if r[c] is not None), default=None)


def _count(c):
    return lambda rs: sum(r[c] is not None for r in rs) or 0


# -- pivot -----------------------------------------------------------------------------------------


def test_pivot_explicit_values_several_aggregates(lc, spark, data, tmp_path):
    # Status "P" is outside the values: its rows reach no cell, and a tags group with only
    # "P" orders still gives a row (all null), traced to those orders.
    def build(t):
        return (
            t["orders"]
            .groupBy("tags")
            .pivot("status", ["F", "O", "X"])
            .agg(F.sum("okey").alias("s"), F.count("ckey"), F.avg("ckey").alias("a"))
        )

    def avg(rs):
        return sum(r["ckey"] for r in rs) / len(rs)

    aggs = [("s", _sum("okey")), ("count(ckey)", _count("ckey")), ("a", avg)]

    def ref(T):
        return pivot_ref(
            T["orders"], lambda r: (("tags", r["tags"]),), lambda r: r["status"],
            ["F", "O", "X"], aggs, single=False,
        )  # fmt: skip

    rows = pivot_ref(
        data.ref()["orders"], lambda r: (("tags", r["tags"]),), lambda r: r["status"],
        ["F", "O", "X"], aggs, single=False,
    )  # fmt: skip
    assert any(all(v is None for k, v in r.items() if k != "tags") for r, _ in rows)
    cols = ["tags"] + [f"{v}_{n}" for v in "FOX" for n, _ in aggs]
    check(lc, spark, data, build, ref, cols)
    same_types(lc, spark, data, build)
    reexecuted(lc, spark, data, build, cols, tmp_path)


def test_pivot_values_computed_with_null_pivot_values(lc, spark, data, tmp_path):
    # tags is null on some orders: a "null" column, sorted first, as Spark computes values.
    def build(t):
        return t["orders"].groupBy("status").pivot("tags").count()

    values = sorted({r[4] for r in data.rows["orders"]}, key=lambda v: (v is not None, v or ""))

    def ref(T):
        return pivot_ref(
            T["orders"], lambda r: (("status", r["status"]),), lambda r: r["tags"], values,
            [("count", len)], single=True,
        )  # fmt: skip

    cols = ["status"] + [str("null" if v is None else v) for v in values]
    assert None in values
    check(lc, spark, data, build, ref, cols)
    same_types(lc, spark, data, build)

    # Without values the columns depend on every input row, not only a row's own: the
    # re-execution check holds with the values the full run computed.
    def fixed(t):
        return t["orders"].groupBy("status").pivot("tags", values).count()

    reexecuted(lc, spark, data, build, cols, tmp_path, again=fixed)


def test_pivot_explicit_null_value(lc, spark, data):
    # okey is null on some items: the null value's cell is theirs (matched null-safely).
    def build(t):
        return nulled(t).groupBy("qty").pivot("okey", [None, 3, 4]).agg(F.max("price"))

    def ref(T):
        items = nulled_ref(T)

        return pivot_ref(
            items, lambda r: (("qty", r["qty"]),), lambda r: r["okey"], [None, 3, 4],
            [("max", _max("price"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, build, ref, ["qty", "null", "3", "4"])


def test_pivot_after_join(lc, spark, data):
    # Two sources' ids through the first aggregate.
    def build(t):
        return (
            t["orders"]
            .join(t["customers"], "ckey")
            .groupBy("nation")
            .pivot("status", ["F", "O"])
            .agg(F.max("okey"))
        )

    def ref(T):
        j = R.join(T["orders"], T["customers"], lambda a, b: a["ckey"] == b["ckey"])

        return pivot_ref(
            j, lambda r: (("nation", r["nation"]),), lambda r: r["status"], ["F", "O"],
            [("max", _max("okey"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, build, ref, ["nation", "F", "O"])


@pytest.mark.parametrize("values", [["F", "O"], None])
def test_pivot_after_join_with_repeated_column_names(lc, spark, data, values):
    # A join on a condition keeps both sides' ckey: the pivot, which uses neither, runs as
    # vanilla's does (it raised AMBIGUOUS_REFERENCE, selecting the visible columns by name).
    def build(t):
        o, c = t["orders"], t["customers"]
        j = o.join(c, o["ckey"] == c["ckey"])
        return j.groupBy("nation").pivot("status", values).agg(F.max("okey"))

    vals = values or sorted({r[3] for r in data.rows["orders"]})

    def ref(T):
        j = R.join(T["orders"], T["customers"], lambda a, b: a["ckey"] == b["ckey"])

        return pivot_ref(
            j, lambda r: (("nation", r["nation"]),), lambda r: r["status"], vals,
            [("max", _max("okey"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, build, ref, ["nation", *vals])


def _nan_pivot(r):
    # (A new NaN each time: `in` and == never match it, as Spark's pivot never does.)
    if r["qty"] == 1 or (r["okey"] is not None and r["okey"] % 4 == 0):
        return float("nan")
    return float(r["qty"])


def test_pivot_nan_value_never_matches(lc, spark, data):
    # Spark's pivot puts no row in a NaN value's cell (its cells are null; its value
    # lookup compares NaN unequal to NaN): rows whose pivot value is NaN reach no cell, so a
    # group's row traces to its other rows, to all of them when none reaches a cell (qty 1:
    # all NaN; qty 2: NaN and 2.0, not a value).
    nan = F.lit(float("nan"))

    def build(t):
        items = t["items"]
        p = F.when((F.col("qty") == 1) | (F.col("okey") % 4 == 0), nan).otherwise(
            F.col("qty").cast("double")
        )
        return items.withColumn("p", p).groupBy("qty").pivot("p", [float("nan"), 3.0, 4.0]).count()

    def ref(T):
        return pivot_ref(
            T["items"], lambda r: (("qty", r["qty"]),), _nan_pivot, [float("nan"), 3.0, 4.0],
            [("count", len)], single=True,
        )  # fmt: skip

    rows = ref(data.ref())  # (its NaN column is "nan": Spark's, "NaN", is compared by place)
    assert any(r["3.0"] for r, _ in rows) and all(r["nan"] is None for r, _ in rows)
    check(lc, spark, data, build, ref, ["qty", "nan", "3.0", "4.0"])


def test_pivot_values_computed_on_a_float_column(lc, spark, data):
    # Spark names a float value's column by the float ("0.1"), not by the double that
    # Python holds for it ("0.10000000149011612"); its cells are the same.
    def build(t):
        items = t["items"].withColumn("f", (F.col("qty") / 10).cast("float"))
        return items.groupBy((F.col("price") > 50).alias("big")).pivot("f").agg(F.max("okey"))

    values = sorted({r[2] / 10 for r in data.rows["items"]})

    def ref(T):
        return pivot_ref(
            T["items"], lambda r: (("big", r["price"] > 50),), lambda r: r["qty"] / 10,
            values, [("max", _max_of("okey"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, build, ref, ["big", *map(str, values)])
    same_types(lc, spark, data, build)


def test_pivot_global_and_numeric_sum(lc, spark, data):
    def build(t):
        return t["items"].groupBy().pivot("qty", [1, 5, 7]).sum("price")

    def ref(T):
        return pivot_ref(
            T["items"], lambda r: (), lambda r: r["qty"], [1, 5, 7],
            [("sum", _sum("price"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, build, ref, ["1", "5", "7"])
    same_types(lc, spark, data, build)


def test_pivot_that_cannot_be_captured_raises(lc, data):
    t = tables(lc.read, data)
    o = t["orders"]
    for call in (
        # A string aggregate: Spark evaluates cells as conditional aggregates.
        lambda: o.groupBy("ckey").pivot("status", ["F"]).agg(F.min("tags")),
        lambda: o.rollup("ckey").pivot("status", ["F"]),
        lambda: o.cube("ckey").pivot("status", ["F"]),
        lambda: o.groupBy("ckey").pivot("status", ["F"]).pivot("tags", ["a"]),
    ):
        with pytest.raises(UnsupportedOperation, match="pivot"):
            call()


# -- unpivot / melt --------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["unpivot", "melt"])
def test_unpivot_several_value_columns_with_nulls(lc, spark, data, tmp_path, method):
    # okey is null on some items: those rows are kept, as Spark keeps them.
    def build(t):
        return getattr(nulled(t), method)(["price"], ["okey", "qty"], "var", "val")

    def ref(T):
        items = nulled_ref(T)
        return R.explode(
            items,
            lambda r: [{"price": r["price"], "var": c, "val": r[c]} for c in ("okey", "qty")],
        )

    cols = ["price", "var", "val"]
    check(lc, spark, data, build, ref, cols)
    same_types(lc, spark, data, build)
    reexecuted(lc, spark, data, build, cols, tmp_path)


def test_unpivot_all_other_columns_after_aggregate(lc, spark, data):
    # values=None: every non-id column (never the hidden ones); rows of an aggregate keep
    # their group's lineage.
    def build(t):
        agg = t["items"].groupBy("qty").agg(F.count("okey").alias("n"), F.max("okey").alias("m"))
        return agg.unpivot("qty", None, "var", "val")

    def ref(T):
        g = R.group(
            T["items"],
            lambda r: (r["qty"],),
            lambda k, rs: {
                "qty": k[0],
                "n": sum(r["okey"] is not None for r in rs),
                "m": max(r["okey"] for r in rs if r["okey"] is not None),
            },
        )
        return R.explode(
            g, lambda r: [{"qty": r["qty"], "var": c, "val": r[c]} for c in ("n", "m")]
        )

    check(lc, spark, data, build, ref, ["qty", "var", "val"])
    q = build(tables(lc.read, data))
    assert q.columns == ["qty", "var", "val"]
    assert Counter(r["var"] for r in q.collect()) == Counter({"n": 5, "m": 5})


# -- lc.sql ----------------------------------------------------------------------------------------


def sql(lc, text: str):
    """A `check` builder: the tables as views (captured or vanilla), `text` run on them."""

    def build(t):
        first = next(iter(t.values()))
        captured = hasattr(first, "lineage_columns")
        for name, df in t.items():
            df.createOrReplaceTempView(name if captured else name + "_v")
        if captured:
            return lc.sql(text.format(**{n: n for n in t}))
        return first.sparkSession.sql(text.format(**{n: n + "_v" for n in t}))

    return build


def test_sql_unpivot_with_alias_after_filter(lc, spark, data, tmp_path):
    # EXCLUDE NULLS (SQL's default) drops the rows whose value is null: Spark's rows, each
    # traced to its one item.
    text = """SELECT u.okey, u.var, u.val * 2 AS v2
              FROM (SELECT okey, price, CAST(qty AS DOUBLE) AS q FROM {items} WHERE qty > 1) d
              UNPIVOT (val FOR var IN (price, q AS qty)) AS u"""

    def ref(T):
        kept = R.where(T["items"], lambda r: r["qty"] > 1)
        return R.explode(
            kept,
            lambda r: [
                {"okey": r["okey"], "var": n, "v2": v * 2}
                for n, v in (("price", r["price"]), ("qty", float(r["qty"])))
                if v is not None
            ],
        )

    cols = ["okey", "var", "v2"]
    check(lc, spark, data, sql(lc, text), ref, cols)
    reexecuted(lc, spark, data, sql(lc, text), cols, tmp_path)


def test_sql_unpivot_include_nulls_then_group(lc, spark, data):
    text = """SELECT var, count(val) AS n, count(*) AS m
              FROM {orders} UNPIVOT INCLUDE NULLS (val FOR var IN (status, tags))
              GROUP BY var"""

    def ref(T):
        rows = R.explode(
            T["orders"], lambda r: [{"var": c, "val": r[c]} for c in ("status", "tags")]
        )
        return R.group(
            rows,
            lambda r: (r["var"],),
            lambda k, rs: {
                "var": k[0],
                "n": sum(r["val"] is not None for r in rs),
                "m": len(rs),
            },
        )

    check(lc, spark, data, sql(lc, text), ref, ["var", "n", "m"])


def test_sql_unpivot_over_a_join(lc, spark, data):
    # Spark unpivots the FROM clause's whole join: both items' lineage columns ride as
    # implicit id columns, so each row traces to its joined pair.
    text = """SELECT nation, var, val FROM (SELECT okey, ckey FROM {orders}) o
              JOIN (SELECT ckey AS k, nation FROM {customers}) c ON o.ckey = c.k
              UNPIVOT (val FOR var IN (okey, k))"""

    def ref(T):
        j = R.join(T["orders"], T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.explode(
            j,
            lambda r: [
                {"nation": r["nation"], "var": n, "val": v}
                for n, v in (("okey", r["okey"]), ("k", r["ckey"]))
            ],
        )

    check(lc, spark, data, sql(lc, text), ref, ["nation", "var", "val"])


def test_sql_pivot_aliases_and_groups_outside_values(lc, spark, data, tmp_path):
    # Implicit keys (tags: every column the clause does not use), aliased values and
    # aggregates; "P" rows reach no cell, tags groups of "P" orders only trace to them all.
    text = """SELECT * FROM (SELECT tags, status, okey, ckey FROM {orders})
              PIVOT (sum(okey) AS s, count(ckey) AS n FOR status IN ('F' AS f, 'O', 'X'))
              AS pv WHERE pv.tags IS NULL OR pv.tags <> 'a'"""
    aggs = [("s", _sum("okey")), ("n", _count("ckey"))]

    def ref(T):
        rows = pivot_ref(
            T["orders"], lambda r: (("tags", r["tags"]),), lambda r: r["status"],
            ["F", "O", "X"], aggs, single=False,
        )  # fmt: skip
        out = []
        for r, lin in rows:
            if r["tags"] != "a":
                out.append(({k.replace("F_", "f_"): v for k, v in r.items()}, lin))
        return out

    cols = ["tags", "f_s", "f_n", "O_s", "O_n", "X_s", "X_n"]
    check(lc, spark, data, sql(lc, text), ref, cols)
    same_types(lc, spark, data, sql(lc, text))
    reexecuted(lc, spark, data, sql(lc, text), cols, tmp_path)


def test_sql_pivot_aggregate_qualified_by_the_item(lc, spark, data):
    # The aggregate names its column by the FROM item's alias, as Spark allows (the
    # rewrite's analysis of the clause used to lose the alias, and failed).
    text = """SELECT * FROM (SELECT tags, status, okey FROM {orders}) AS d
              PIVOT (max(d.okey) FOR status IN ('F', 'O'))"""

    def ref(T):
        return pivot_ref(
            T["orders"], lambda r: (("tags", r["tags"]),), lambda r: r["status"], ["F", "O"],
            [("max", _max("okey"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, sql(lc, text), ref, ["tags", "F", "O"])


def test_sql_pivot_null_value_over_join_in_cte(lc, spark, data):
    # The order key made null on every fifth item: the NULL value's cell is theirs.
    text = """WITH j AS (SELECT o.status, CASE WHEN i.okey % 5 = 0 THEN NULL ELSE i.okey END
                               AS okey, i.price
                        FROM {items} i LEFT JOIN {orders} o ON i.okey = o.okey)
              SELECT * FROM j PIVOT (max(price) FOR okey IN (NULL, 3, 4))"""

    def ref(T):
        def merged(a, b):
            k = a["okey"]
            k = None if k is not None and k % 5 == 0 else k
            return {"okey": k, "price": a["price"], "status": (b or {}).get("status")}

        j = R.join(T["items"], T["orders"], lambda a, b: a["okey"] == b["okey"], "left", merged)
        assert any(r["okey"] is None for r, _ in j)

        return pivot_ref(
            j, lambda r: (("status", r["status"]),), lambda r: r["okey"], [None, 3, 4],
            [("max", _max("price"))], single=True,
        )  # fmt: skip

    check(lc, spark, data, sql(lc, text), ref, ["status", "null", "3", "4"])


def test_sql_pivot_nan_value_never_matches(lc, spark, data):
    # As the DataFrame pivot: the NaN value's cell is null, its rows reach no cell.
    text = """SELECT * FROM (SELECT qty, CASE WHEN qty = 1 OR okey % 4 = 0 THEN double('NaN')
                                         ELSE CAST(qty AS DOUBLE) END AS p FROM {items})
              PIVOT (count(*) FOR p IN (double('NaN') AS nan, 3.0, 4.0))"""

    def ref(T):
        return pivot_ref(
            T["items"], lambda r: (("qty", r["qty"]),), _nan_pivot, [float("nan"), 3.0, 4.0],
            [("count", len)], single=True,
        )  # fmt: skip

    check(lc, spark, data, sql(lc, text), ref, ["qty", "nan", "3.0", "4.0"])


def test_sql_pivot_that_cannot_be_captured_raises(lc, data):
    for name, df in tables(lc.read, data).items():
        df.createOrReplaceTempView(name)
    lc.udf.register("pivot_twice", lambda x: x * 2, "int")
    for text in (
        "SELECT * FROM orders PIVOT (max(tags) FOR status IN ('F', 'O'))",
        "SELECT * FROM (SELECT ckey, okey, status, tags FROM orders) "
        "PIVOT (count(okey) FOR (status, tags) IN (('F', 'a') AS fa))",
        # A captured UDF in the aggregates (as in the DataFrame pivot): it was called
        # without its hidden ids argument, and the query failed in the Python worker.
        "SELECT * FROM (SELECT ckey, okey, status FROM orders) "
        "PIVOT (sum(pivot_twice(okey)) FOR status IN ('F', 'O'))",
        # Spark pivots a FROM clause's whole join: the join's PIVOT ran with the lineage
        # columns as implicit keys (a group per row); the comma join's pivoted its last
        # item alone (and failed).
        "SELECT * FROM (SELECT ckey, status, okey FROM orders) o "
        "JOIN (SELECT ckey AS k, nation FROM customers) c ON o.ckey = c.k "
        "PIVOT (sum(okey) FOR status IN ('F', 'O'))",
        "SELECT * FROM (SELECT ckey, status, okey FROM orders) o, "
        "(SELECT ckey AS k, nation FROM customers) c PIVOT (sum(okey) FOR status IN ('F'))",
        # Repeated column names (Spark's implicit keys take both; the rewrite names them).
        "SELECT * FROM (SELECT o.ckey, c.ckey, o.status, o.okey FROM orders o "
        "JOIN customers c ON o.ckey = c.ckey) PIVOT (sum(okey) FOR status IN ('F'))",
        # An UNPIVOT alias over a join hides the items' names (their lineage columns').
        "SELECT u.var FROM (SELECT ckey, okey FROM orders) o "
        "JOIN (SELECT ckey AS k, nation FROM customers) c ON o.ckey = c.k "
        "UNPIVOT (val FOR var IN (okey, k)) AS u",
    ):
        with pytest.raises(UnsupportedOperation, match="PIVOT"):
            lc.sql(text).collect()
