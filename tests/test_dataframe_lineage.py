"""DataFrame lineage is exact: for every supported operator, on small generated CSV tables,
the backward trace of every output row equals what a brute-force recomputation (`_dfref`)
says it came from, the forward trace of every source line equals the output rows depending
on it, and the rows equal vanilla PySpark's."""

from __future__ import annotations

import contextlib
import io
import json

import _dfref as R
import pytest
from _dfcheck import Data, check, make_data, tables
from pyspark.sql import Observation, Window
from pyspark.sql import functions as F
from pyspark.sql.functions import broadcast

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def merge_cols(*names):
    return lambda a, b: {n: (a or {}).get(n, (b or {}).get(n)) for n in names}


# -- the thin slice and row-preserving operators ------------------------------------------------


def test_filter_join_groupby(lc, spark, data):
    def build(t):
        return (
            t["orders"]
            .where(F.col("status") == "F")
            .join(t["items"], "okey")
            .groupBy("ckey")
            .agg(F.sum("price").alias("spent"))
        )

    def ref(T):
        j = R.join(
            R.where(T["orders"], lambda r: r["status"] == "F"),
            T["items"],
            lambda a, b: a["okey"] == b["okey"],
        )
        return R.group(
            j,
            lambda r: (r["ckey"],),
            lambda k, rs: {"ckey": k[0], "spent": sum(r["price"] for r in rs)},
        )

    check(lc, spark, data, build, ref, ["ckey", "spent"])


def test_select_withcolumn_rename_drop(lc, spark, data):
    def build(t):
        return (
            t["orders"]
            .select((F.col("ckey") * 2).alias("c2"), "*")
            .withColumn("big", F.col("c2") > 8)
            .withColumnRenamed("status", "st")
            .drop("odate", "tags")
            .selectExpr("okey", "c2 + 1 AS c3", "big", "st")
            .where("st != 'P'")
        )

    def ref(T):
        t = R.where(T["orders"], lambda r: r["status"] != "P")
        return R.select(
            t,
            lambda r: {
                "okey": r["okey"],
                "c3": r["ckey"] * 2 + 1,
                "big": r["ckey"] * 2 > 8,
                "st": r["status"],
            },
        )

    check(lc, spark, data, build, ref, ["okey", "c3", "big", "st"])


def test_orderby_limit(lc, spark, data):
    def build(t):
        return t["items"].where("qty > 1").orderBy(F.col("price").desc(), "okey").limit(7)

    def ref(T):
        t = R.where(T["items"], lambda r: r["qty"] > 1)
        t = sorted(t, key=lambda x: (-x[0]["price"], x[0]["okey"] is not None, x[0]["okey"] or 0))
        return t[:7]

    check(lc, spark, data, build, ref, ["okey", "price", "qty"], ordered=True)


JOINS = ["inner", "left", "right", "full", "semi", "anti"]


@pytest.mark.parametrize("how", JOINS)
def test_join_on_names(lc, spark, data, how):
    def build(t):
        return t["customers"].join(t["orders"].where("okey < 30"), "ckey", how)

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 30)
        m = merge_cols("ckey", "name", "nation", "okey", "odate", "status", "tags")

        def merge(a, b):
            return m(a, b) if a is not None else m(b, b)

        return R.join(T["customers"], o, lambda a, b: a["ckey"] == b["ckey"], how, merge)

    cols = ["ckey", "name", "nation"]
    if how not in ("semi", "anti"):
        cols += ["okey", "odate", "status", "tags"]
    check(lc, spark, data, build, ref, cols)


@pytest.mark.parametrize("how", JOINS)
def test_join_on_condition(lc, spark, data, how):
    def build(t):
        o, i = t["orders"], t["items"]
        return o.join(i, (o.okey == i.okey) & (i.qty >= 2), how)

    def ref(T):
        def merge(a, b):
            a, b = a or {}, b or {}
            return {
                "o": a.get("okey"),
                "st": a.get("status"),
                "i": b.get("okey"),
                "price": b.get("price"),
            }

        on = lambda a, b: a["okey"] == b["okey"] and b["qty"] >= 2  # noqa: E731
        j = R.join(T["orders"], T["items"], on, how, merge)
        if how in ("semi", "anti"):
            return R.select(j, lambda r: {"o": r["okey"], "st": r["status"]})
        return j

    if how in ("semi", "anti"):
        check(lc, spark, data, lambda t: build(t).select("okey", "status"), ref, ["o", "st"])
    else:
        check(
            lc,
            spark,
            data,
            lambda t: build(t).select(t["orders"].okey, "status", t["items"].okey, "price"),
            ref,
            ["o", "st", "i", "price"],
        )


def test_broadcast_function_of_a_captured_frame(lc, spark, data):
    """`broadcast(df)` (imported before the context exists) of a captured frame joins as
    `df.hint("broadcast")`: vanilla's rows and plan (a broadcast join), both sides'
    lineage; the join is recorded with the captured frame (replay rebuilds it)."""
    from agent.dataframe._recipe import recipe_of

    def build(t):
        small = t["customers"].where("ckey < 6")
        return t["orders"].join(broadcast(small), "ckey").select("okey", "name")

    def ref(T):
        c = R.where(T["customers"], lambda r: r["ckey"] < 6)
        j = R.join(T["orders"], c, lambda a, b: a["ckey"] == b["ckey"])
        return R.select(j, lambda r: {"okey": r["okey"], "name": r["name"]})

    q = check(lc, spark, data, build, ref, ["okey", "name"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        q.dataframe.explain()
    assert "BroadcastHashJoin" in buf.getvalue()
    joined = recipe_of(q).receiver
    assert recipe_of(joined).method == "join"
    assert type(recipe_of(joined).args[0]).__name__ == "LineageDataFrame"


def test_a_vanilla_method_given_a_captured_frame_raises(lc, data):
    """A vanilla DataFrame's method reading a captured frame (its hidden columns too)
    raises UnsupportedOperation (`hasattr(df, "_jdf")` is still false)."""
    from agent import UnsupportedOperation

    o = tables(lc.read, data)["orders"]
    with pytest.raises(UnsupportedOperation, match="own methods"):
        broadcast(tables(lc.read, data)["customers"]).join(o, "ckey")
    assert not hasattr(o, "_jdf")


def test_cross_join(lc, spark, data):
    def build(t):
        c = t["customers"].where("ckey < 3").select("ckey")
        return c.crossJoin(t["orders"].where("okey < 4").select("okey"))

    def ref(T):
        c = R.select(
            R.where(T["customers"], lambda r: r["ckey"] < 3), lambda r: {"ckey": r["ckey"]}
        )
        o = R.select(R.where(T["orders"], lambda r: r["okey"] < 4), lambda r: {"okey": r["okey"]})
        return R.cross(c, o)

    check(lc, spark, data, build, ref, ["ckey", "okey"])


def test_self_join(lc, spark, data):
    def build(t):
        a = t["orders"].alias("a")
        b = t["orders"].alias("b")
        return (
            a.join(b, F.col("a.ckey") == F.col("b.ckey"))
            .where("a.okey < b.okey")
            .select(F.col("a.okey").alias("x"), F.col("b.okey").alias("y"))
        )

    def ref(T):
        j = R.join(
            T["orders"],
            T["orders"],
            lambda a, b: a["ckey"] == b["ckey"] and a["okey"] < b["okey"],
            merge=lambda a, b: {"x": a["okey"], "y": b["okey"]},
        )
        return j

    check(lc, spark, data, build, ref, ["x", "y"])


def test_self_join_of_two_reads_of_one_file(lc, spark, data):
    """The same file read twice (two scans) and joined: a line is a record at each scan,
    and its forward trace from the file's byte (`records_at`: both) reaches every output
    row of either side."""

    def build(t):
        a, b = t["orders"], t["orders@2"]
        return a.join(b, a.ckey == b.ckey).select(a.okey.alias("x"), b.okey.alias("y"))

    def ref(T):
        return R.join(
            T["orders"],
            T["orders"],
            lambda a, b: a["ckey"] == b["ckey"],
            merge=lambda a, b: {"x": a["okey"], "y": b["okey"]},
        )

    check(lc, spark, data, build, ref, ["x", "y"], again=("orders",))


# -- aggregation ----------------------------------------------------------------------------------


def test_aggregate_functions(lc, spark, data):
    def build(t):
        return (
            t["items"]
            .groupBy("qty")
            .agg(
                F.count("*").alias("n"),
                F.sum("price").alias("s"),
                F.avg("price").alias("a"),
                F.min("okey").alias("lo"),
                F.max("okey").alias("hi"),
                F.countDistinct("okey").alias("d"),
                F.sort_array(F.collect_set("okey")).alias("set"),
            )
        )

    def ref(T):
        def agg(k, rs):
            keys = [r["okey"] for r in rs if r["okey"] is not None]
            return {
                "qty": k[0],
                "n": len(rs),
                "s": sum(r["price"] for r in rs),
                "a": sum(r["price"] for r in rs) / len(rs),
                "lo": min(keys),
                "hi": max(keys),
                "d": len(set(keys)),
                "set": sorted(set(keys)),
            }

        return R.group(T["items"], lambda r: (r["qty"],), agg)

    check(lc, spark, data, build, ref, ["qty", "n", "s", "a", "lo", "hi", "d", "set"])


@pytest.mark.parametrize("grouped", [True, False], ids=["groupBy", "global"])
def test_dict_aggregate_is_sparks(lc, spark, data, grouped):
    """`agg({column: function})` is Spark's own dict aggregate: its spellings (`mean` and
    `average` are `avg`, `std` is `stddev`, `*` counts rows), names and column order (a
    Java map's), each group's rows as lineage."""
    import statistics

    spec = {"price": "mean", "qty": "std", "okey": "average", "*": "count"}

    def build(t):
        items = t["items"].where("price > 30")
        return (items.groupBy("qty") if grouped else items).agg(spec)

    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 30)

        def values(k, rs):
            okeys = [r["okey"] for r in rs if r["okey"] is not None]
            qty = [r["qty"] for r in rs]
            return {
                **({"qty": k[0]} if grouped else {}),
                "avg(price)": sum(r["price"] for r in rs) / len(rs),
                "stddev(qty)": statistics.stdev(qty) if len(qty) > 1 else None,
                "avg(okey)": sum(okeys) / len(okeys) if okeys else None,
                "count(1)": len(rs),
            }

        return R.group(items, (lambda r: (r["qty"],)) if grouped else (lambda r: ()), values)

    cols = build(tables(spark.read, data)).columns
    assert set(cols) == {
        *(["qty"] if grouped else []),
        "avg(price)",
        "stddev(qty)",
        "avg(okey)",
        "count(1)",
    }
    check(lc, spark, data, build, ref, cols)


def test_global_aggregate(lc, spark, data):
    def build(t):
        return t["items"].where("qty = 3").agg(F.sum("qty").alias("s"), F.count("okey").alias("c"))

    def ref(T):
        t = R.where(T["items"], lambda r: r["qty"] == 3)
        return R.group(
            t,
            lambda r: (),
            lambda k, rs: {
                "s": sum(r["qty"] for r in rs),
                "c": sum(r["okey"] is not None for r in rs),
            },
        )

    check(lc, spark, data, build, ref, ["s", "c"])


@pytest.mark.parametrize(
    "how", ["localCheckpoint", "lazy localCheckpoint", "checkpoint", "observe"]
)
def test_checkpoints_and_observe_keep_each_rows_lineage(lc, spark, data, tmp_path, how):
    """`localCheckpoint` / `checkpoint` materialize the rows with their hidden ids and
    `observe` passes them through: a group after them has every row of its group; the
    observed metrics are vanilla's (a star in them spelled out over the visible columns)."""
    spark.sparkContext.setCheckpointDir(str(tmp_path / "checkpoints"))
    observed = []

    def build(t):
        items = t["items"].where("qty > 2")
        if how == "localCheckpoint":
            items = items.localCheckpoint()
        elif how == "lazy localCheckpoint":
            items = items.localCheckpoint(eager=False)
        elif how == "checkpoint":
            items = items.checkpoint()
        else:
            o = Observation()
            observed.append(o)
            metrics = [F.count("*").alias("n"), F.max(F.hash("*")).alias("h")]
            items = items.observe(o, *metrics)
        return items.groupBy("qty").agg(F.count("*").alias("n"))

    def ref(T):
        items = R.where(T["items"], lambda r: r["qty"] > 2)
        return R.group(items, lambda r: (r["qty"],), lambda k, rs: {"qty": k[0], "n": len(rs)})

    check(lc, spark, data, build, ref, ["qty", "n"])
    if observed:
        mine, vanillas = observed
        assert mine.get == vanillas.get and mine.get["n"] > 0


def test_global_aggregate_of_no_rows(lc, spark, data):
    """A global aggregate over no rows still gives one row (sum null, count 0), made from
    no source row: its backward trace is empty (not the output row itself), and no line's
    forward trace reaches it."""

    def build(t):
        return t["items"].where("qty > 1000").agg(F.sum("qty").alias("s"), F.count("*").alias("n"))

    def ref(T):
        return [({"s": None, "n": 0}, frozenset())]

    check(lc, spark, data, build, ref, ["s", "n"])


def test_grouped_count(lc, spark, data):
    def build2(t):
        return t["orders"].groupBy("status").count()

    def ref2(T):
        return R.group(
            T["orders"], lambda r: (r["status"],), lambda k, rs: {"status": k[0], "count": len(rs)}
        )

    check(lc, spark, data, build2, ref2, ["status", "count"])


def test_aggregate_of_join_then_join(lc, spark, data):
    def build(t):
        spent = t["orders"].join(t["items"], "okey").groupBy("ckey").agg(F.sum("qty").alias("q"))
        return spent.join(t["customers"], "ckey").where("q > 3").select("name", "q")

    def ref(T):
        j = R.join(T["orders"], T["items"], lambda a, b: a["okey"] == b["okey"])
        g = R.group(
            j, lambda r: (r["ckey"],), lambda k, rs: {"ckey": k[0], "q": sum(r["qty"] for r in rs)}
        )
        j2 = R.join(g, T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.select(
            R.where(j2, lambda r: r["q"] > 3), lambda r: {"name": r["name"], "q": r["q"]}
        )

    check(lc, spark, data, build, ref, ["name", "q"])


def test_aggregate_of_grouped_and_source_rows(lc, spark, data):
    """An aggregate whose input rows carry both kinds of ids (a customer's long and the
    array of an earlier aggregate's group): its ids are both, concatenated."""

    def build(t):
        spent = t["orders"].join(t["items"], "okey").groupBy("ckey").agg(F.sum("qty").alias("q"))
        return (
            spent.join(t["customers"], "ckey")
            .groupBy((F.col("q") > 3).alias("big"))
            .agg(F.sum("q").alias("total"), F.count("name").alias("n"))
        )

    def ref(T):
        j = R.join(T["orders"], T["items"], lambda a, b: a["okey"] == b["okey"])
        g = R.group(
            j, lambda r: (r["ckey"],), lambda k, rs: {"ckey": k[0], "q": sum(r["qty"] for r in rs)}
        )
        j2 = R.join(g, T["customers"], lambda a, b: a["ckey"] == b["ckey"])
        return R.group(
            j2,
            lambda r: (r["q"] > 3,),
            lambda k, rs: {
                "big": k[0],
                "total": sum(r["q"] for r in rs),
                "n": sum(r["name"] is not None for r in rs),
            },
        )

    check(lc, spark, data, build, ref, ["big", "total", "n"])


@pytest.mark.parametrize("kind", ["rollup", "cube"])
def test_rollup_cube(lc, spark, data, kind):
    def build(t):
        o = t["orders"].where("okey < 40")
        return getattr(o, kind)("status", "ckey").agg(F.count("*").alias("n"))

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 40)
        sets = (
            [("status", "ckey"), ("status",), ()]
            if kind == "rollup"
            else [("status", "ckey"), ("status",), ("ckey",), ()]
        )
        return R.group_sets(o, ["status", "ckey"], sets, lambda rs: {"n": len(rs)})

    check(lc, spark, data, build, ref, ["status", "ckey", "n"])


def test_grouping_sets(lc, spark, data):
    # Each grouping set's group: every row of it (a column and an expression key).
    sets = [["status", "ckey"], [F.col("ckey") % 2], []]

    def build(t):
        o = t["orders"].where("okey < 40")
        return o.groupingSets(sets, "status", "ckey", F.col("ckey") % 2).agg(
            F.count("*").alias("n"), F.sum("okey").alias("s")
        )

    def ref(T):
        o = R.select(
            R.where(T["orders"], lambda r: r["okey"] < 40), lambda r: {**r, "m": r["ckey"] % 2}
        )
        out = R.group_sets(
            o,
            ["status", "ckey", "m"],
            [("status", "ckey"), ("m",), ()],
            lambda rs: {"n": len(rs), "s": sum(r["okey"] for r in rs)},
        )
        named = [({**r, "(ckey % 2)": r["m"]}, lin) for r, lin in out]
        return [({k: v for k, v in r.items() if k != "m"}, lin) for r, lin in named]

    check(lc, spark, data, build, ref, ["status", "ckey", "(ckey % 2)", "n", "s"])


def test_distinct(lc, spark, data):
    def build(t):
        return t["orders"].select("ckey", "status").distinct()

    def ref(T):
        return R.distinct(
            R.select(T["orders"], lambda r: {"ckey": r["ckey"], "status": r["status"]})
        )

    check(lc, spark, data, build, ref, ["ckey", "status"])


def test_drop_duplicates(lc, spark, data):
    def build2(t):
        return t["items"].dropDuplicates(["qty"]).select("qty")

    def ref2(T):
        return R.select(R.distinct(T["items"], ["qty"]), lambda r: {"qty": r["qty"]})

    check(lc, spark, data, build2, ref2, ["qty"])


def _orders_below_customers(t):
    """A condition join whose output repeats a name: `ckey` of both sides."""
    o, c = t["orders"].select("ckey", "status"), t["customers"].select("ckey", "nation")
    return o.join(c, o.ckey < c.ckey)


def _orders_below_customers_ref(T):
    o = R.select(T["orders"], lambda r: {"ckey": r["ckey"], "status": r["status"]})
    c = R.select(T["customers"], lambda r: {"ckey2": r["ckey"], "nation": r["nation"]})
    return R.join(o, c, lambda a, b: a["ckey"] < b["ckey2"])


def test_distinct_over_repeated_names(lc, spark, data, capsys):
    """Over a condition join's repeated `ckey`, `distinct` takes the columns by position,
    as Spark does, and `printSchema` prints vanilla's schema: grouping or selecting by name
    was ambiguous."""
    check(
        lc,
        spark,
        data,
        lambda t: _orders_below_customers(t).distinct(),
        lambda T: R.distinct(_orders_below_customers_ref(T)),
        ["ckey", "status", "ckey2", "nation"],
    )
    _orders_below_customers(tables(lc.read, data)).printSchema()
    captured = capsys.readouterr().out
    _orders_below_customers(tables(spark.read, data)).printSchema()
    assert captured == capsys.readouterr().out


def test_drop_duplicates_over_repeated_names(lc, spark, data):
    """A name in `dropDuplicates`' subset keys every column that has it, as in Spark."""
    cols = ["ckey", "status", "ckey2", "nation"]
    check(
        lc,
        spark,
        data,
        lambda t: (
            _orders_below_customers(t).dropDuplicates(["ckey"]).toDF(*cols).drop("status", "nation")
        ),
        lambda T: R.select(
            R.distinct(_orders_below_customers_ref(T), ["ckey", "ckey2"]),
            lambda r: {"ckey": r["ckey"], "ckey2": r["ckey2"]},
        ),
        ["ckey", "ckey2"],
    )


def test_union_and_union_by_name(lc, spark, data):
    def build(t):
        a = t["orders"].where("okey < 5").select("okey", "ckey")
        b = t["items"].where("qty = 5").select("okey", "qty")
        c = t["customers"].where("ckey > 9").select(F.col("ckey").alias("okey"))
        return a.union(b).unionByName(c, allowMissingColumns=True)

    def ref(T):
        a = R.select(
            R.where(T["orders"], lambda r: r["okey"] < 5),
            lambda r: {"okey": r["okey"], "ckey": r["ckey"]},
        )
        b = R.select(
            R.where(T["items"], lambda r: r["qty"] == 5),
            lambda r: {"okey": r["okey"], "ckey": r["qty"]},
        )
        c = R.select(
            R.where(T["customers"], lambda r: r["ckey"] > 9),
            lambda r: {"okey": r["ckey"], "ckey": None},
        )
        return a + b + c

    check(lc, spark, data, build, ref, ["okey", "ckey"])


def test_explode_posexplode(lc, spark, data):
    def build(t):
        o = t["orders"].where("okey < 20")
        return o.select("okey", F.posexplode(F.split("tags", "[|]")).alias("pos", "tag")).where(
            "tag != 'b'"
        )

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 20 and r["tags"] is not None)
        e = R.explode(
            o,
            lambda r: [
                {"okey": r["okey"], "pos": i, "tag": x} for i, x in enumerate(r["tags"].split("|"))
            ],
        )
        return R.where(e, lambda r: r["tag"] != "b")

    check(lc, spark, data, build, ref, ["okey", "pos", "tag"])


def _json(row: dict) -> str:
    """`to_json` of a struct of these values (Spark's compact spelling, nulls left out)."""
    return json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":"))


def test_stars_inside_expressions_expand_the_visible_columns(lc, spark, data):
    """A star inside an expression (`struct(*)`, `to_json`, `hash` / `xxhash64` of `*`, in
    select, selectExpr, withColumn and a where string, under an operator) expands over the
    visible columns, as in vanilla, not over the hidden lineage columns (their values
    differed: hashes, JSON with `__prov_` fields)."""

    def build(t):
        c = t["customers"].where("ckey < 9")
        return (
            c.select(
                "ckey",
                F.to_json(F.struct("*")).alias("j"),
                (F.xxhash64("*") % 1000).alias("x"),
                F.struct("*")["name"].alias("nm"),
            )
            .selectExpr("*", "hash(*) AS h")
            .withColumn("w", F.to_json(F.struct("*")))
            .where("hash(*) % 3 != 0")
        )

    vanilla = {r.ckey: r for r in build(tables(spark.read, data)).collect()}

    def ref(T):
        kept = R.where(T["customers"], lambda r: r["ckey"] in vanilla)

        def row(r):
            v = vanilla[r["ckey"]]
            out = {"ckey": r["ckey"], "j": _json(r), "x": v.x, "nm": r["name"]}
            return {**out, "h": v.h, "w": _json(out | {"h": v.h})}

        return R.select(kept, row)

    check(lc, spark, data, build, ref, ["ckey", "j", "x", "nm", "h", "w"])


def test_stars_inside_aggregates_and_a_join_side(lc, spark, data):
    """Stars in aggregates (`count_distinct("*")`, which PySpark prints as `count(*)`,
    `collect_list(struct(*))`) and a join side's `t.*` inside an expression see the
    visible columns only; `count("*")` stays a row count."""

    def build(t):
        o = t["orders"].where("okey < 30").select("ckey", "status")
        c = t["customers"].alias("c")
        return (
            o.join(c, "ckey")
            .select("status", F.to_json(F.struct("c.*")).alias("cj"), "nation")
            .groupBy("status")
            .agg(
                F.count_distinct("*").alias("d"),
                F.count("*").alias("n"),
                F.collect_list(F.to_json(F.struct("*"))).alias("l"),
            )
        )

    def ref(T):
        o = R.select(
            R.where(T["orders"], lambda r: r["okey"] < 30),
            lambda r: {"ckey": r["ckey"], "status": r["status"]},
        )
        j = R.select(
            R.join(o, T["customers"], lambda a, b: a["ckey"] == b["ckey"]),
            lambda r: {
                "status": r["status"],
                "cj": _json({k: r[k] for k in ("ckey", "name", "nation")}),
                "nation": r["nation"],
            },
        )
        return R.group(
            j,
            lambda r: (r["status"],),
            lambda k, rs: {
                "status": k[0],
                "d": len({tuple(r.values()) for r in rs}),
                "n": len(rs),
                "l": [_json(r) for r in rs],
            },
        )

    check(lc, spark, data, build, ref, ["status", "d", "n", "l"])


def test_stars_that_cannot_be_spelled_out_raise(lc, spark, data):
    """A star inside an expression that cannot be rewritten as the visible columns (a
    Python UDF's argument, a join with repeated names) raises UnsupportedOperation; one
    vanilla refuses (in orderBy) raises vanilla's error."""
    from pyspark.errors import AnalysisException

    from agent import UnsupportedOperation

    t = tables(lc.read, data)
    o, i = t["orders"], t["items"]
    row_of = F.udf(lambda r: r.okey, "int")
    for call in (
        lambda: o.select(row_of(F.struct("*"))),
        lambda: o.join(i, "okey").select(F.to_json(F.struct(o["*"]))),
        lambda: o.join(i, o.okey == i.okey).select(F.to_json(F.struct("*"))),
    ):
        with pytest.raises(UnsupportedOperation, match="star inside an expression"):
            call()
    with pytest.raises(AnalysisException):
        tables(spark.read, data)["orders"].orderBy(F.hash("*")).collect()
    with pytest.raises(AnalysisException):
        o.orderBy(F.hash("*")).collect()


def test_unsupported_operations_raise(lc, data):
    from agent import UnsupportedOperation

    o = tables(lc.read, data)["orders"]
    for call in (
        lambda: o.join(o, "okey").rdd,  # rows in no fixed order: cache() first
        lambda: o.mergeInto("t", F.lit(True)),
        lambda: o.rollup("ckey").pivot("status"),
        lambda: o.join(lc.spark.range(3), "okey"),
    ):
        with pytest.raises(UnsupportedOperation):
            call()


_ = Window  # windows are tested in their own module


# -- windows ---------------------------------------------------------------------------------------


def test_window_ranking_lag_and_frames(lc, spark, data):
    w = Window.partitionBy("ckey").orderBy("okey")

    def build(t):
        o = t["orders"].where("okey < 40")
        return o.select(
            "okey",
            F.row_number().over(w).alias("rn"),
            F.lag("okey", 1).over(w).alias("prev"),
            F.sum("okey").over(w).alias("running"),
            F.count("*").over(w.rowsBetween(-1, 1)).alias("around"),
        )

    def ref(T):
        out = []
        for r, lin, members in R.window_partitions(
            R.where(T["orders"], lambda r: r["okey"] < 40), "ckey", "okey"
        ):
            i = next(k for k, m in enumerate(members) if m[0] is r)
            prev = members[i - 1] if i else None
            around = members[max(0, i - 1) : i + 2]
            frame = members[: i + 1]
            row = {
                "okey": r["okey"],
                "rn": i + 1,
                "prev": prev[0]["okey"] if prev else None,
                "running": sum(m[0]["okey"] for m in frame),
                "around": len(around),
            }
            lineage = lin.union(*(m[1] for m in frame), *(m[1] for m in around))
            if prev:
                lineage |= prev[1]
            out.append((row, lineage))
        return out

    check(lc, spark, data, build, ref, ["okey", "rn", "prev", "running", "around"])


def test_window_rank_only_keeps_the_row(lc, spark, data):
    w = Window.partitionBy("status").orderBy(F.col("ckey").desc())

    def build(t):
        o = t["orders"].where("okey < 40")
        return o.withColumn("r", F.dense_rank().over(w)).select("okey", "status", "r")

    def ref(T):
        rows = R.where(T["orders"], lambda r: r["okey"] < 40)
        out = []
        for r, lin in rows:
            higher = sorted(
                {x[0]["ckey"] for x in rows if x[0]["status"] == r["status"]}, reverse=True
            )
            out.append(
                ({"okey": r["okey"], "status": r["status"], "r": higher.index(r["ckey"]) + 1}, lin)
            )
        return out

    check(lc, spark, data, build, ref, ["okey", "status", "r"])


@pytest.fixture(params=["spec", "text"])
def window_specs(request, monkeypatch):
    """How windows' lineage columns take their window: "spec", the WindowSpec `over` was
    given (remembered by the agent's wrapper of `Column.over`); "text", rebuilt from the
    column's text, as for a window made before the wrapper or whose text another spec
    printed too."""
    from agent.dataframe import _windows

    monkeypatch.setattr(_windows, "_SPECS", {})
    if request.param == "text":
        monkeypatch.setattr(_windows, "_record", lambda out, window: None)
    return request.param


@pytest.mark.parametrize("expression", [False, True], ids=["spaced-name", "expression"])
def test_window_over_a_spaced_name_and_an_expression(lc, spark, data, window_specs, expression):
    """A window over a column whose name has a space (printed unquoted) is a window over
    that column; over an expression it needs the WindowSpec (its text is not SQL): rebuilt
    from the text, it is refused."""
    from agent import UnsupportedOperation

    def build(t):
        o = t["orders"].where("okey < 40").withColumnRenamed("status", "the status")
        part = (F.col("ckey") % 3) if expression else "the status"
        w = Window.partitionBy(part).orderBy("okey")
        return o.select("okey", F.sum("okey").over(w).alias("running"))

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 40)
        part = (lambda r: r["ckey"] % 3) if expression else (lambda r: r["status"])
        out = []
        for r, lin in o:
            frame = [(x, xl) for x, xl in o if part(x) == part(r) and x["okey"] <= r["okey"]]
            row = {"okey": r["okey"], "running": sum(x["okey"] for x, _ in frame)}
            out.append((row, lin.union(*(xl for _, xl in frame))))
        return out

    if expression and window_specs == "text":
        with pytest.raises(UnsupportedOperation, match="expression"):
            build(tables(lc.read, data))
    else:
        check(lc, spark, data, build, ref, ["okey", "running"])


def test_window_over_one_side_of_a_join_with_repeated_names(lc, spark, data, window_specs):
    """A window partitioned by `i["okey"]` after a join where both sides have `okey`: its
    frame's lineage over that side's column; rebuilt from the text (`okey`, ambiguous) it
    raises UnsupportedOperation, not Spark's AMBIGUOUS_REFERENCE."""
    from agent import UnsupportedOperation

    def build(t):
        o, i = t["orders"].where("okey < 12"), t["items"]
        w = Window.partitionBy(i["okey"])
        return o.join(i, o.okey == i.qty).select(
            o["okey"].alias("o"),
            i["okey"].alias("i"),
            F.count("*").over(w).alias("n"),
            F.max(o["okey"]).over(w).alias("top"),
        )

    def ref(T):
        o = R.where(T["orders"], lambda r: r["okey"] < 12)
        j = R.join(
            o,
            T["items"],
            lambda a, b: a["okey"] == b["qty"],
            merge=lambda a, b: {"o": a["okey"], "i": b["okey"]},
        )
        out = []
        for r, lin in j:
            part = [(x, xl) for x, xl in j if x["i"] == r["i"]]
            row = {**r, "n": len(part), "top": max(x["o"] for x, _ in part)}
            out.append((row, lin.union(*(xl for _, xl in part))))
        return out

    if window_specs == "spec":
        check(lc, spark, data, build, ref, ["o", "i", "n", "top"])
    else:
        with pytest.raises(UnsupportedOperation, match="rename"):
            build(tables(lc.read, data))
