"""Lazy lineage of an aggregate filtered on its output (HAVING-style `where`): the aggregate
runs without collecting ids, and the surviving groups get theirs afterwards (`_lazyagg`).
Its lineage is the eager one, exactly: backward and forward traces against the brute-force
reference (`_dfref`) with null keys, several keys, no survivors, every group surviving, and
the result used by joins, semi joins, a second aggregate, a window, orderBy/limit, `lc.sql`
and replay; the lazy plan is really the one that runs; inputs that are not safe to
recompute keep the eager aggregate."""

from __future__ import annotations

import contextlib
import io
import json
import math

import _dfref as R
import pytest
from _dfcheck import (
    Data,
    check,
    make_data,
    nulled,
    qty_by_order,
    ref_nulled,
    ref_qty_by_order,
    tables,
)
from pyspark.sql import Window
from pyspark.sql import functions as F

from agent import LineageContext
from agent.dataframe import LineageDataFrame
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


@pytest.fixture
def lc(spark, tmp_path):
    """A LineageContext with lazy filtered aggregates."""
    with ProvenanceRepository.open(
        tmp_path / "lineage-repo", RepositoryConfig(sync="none", rollover_interval=3600)
    ) as r:
        yield LineageContext(spark, r, aggregates="lazy")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


@pytest.mark.parametrize("bound", [6, 1000, 0], ids=["some-survive", "none-survive", "all-survive"])
def test_filtered_aggregate_with_null_keys(lc, spark, data, bound):
    def build(t):
        return qty_by_order(t).where(F.col("q") > bound)

    def ref(T):
        return R.where(ref_qty_by_order(T), lambda r: r["q"] > bound)

    check(lc, spark, data, build, ref, ["okey", "q", "n"])


def test_several_keys_nulls_and_a_derived_column(lc, spark, data):
    def build(t):
        return (
            nulled(t)
            .withColumn("hi", F.col("price") > 50)
            .where(F.col("qty") != 3)
            .groupBy("okey", F.col("hi"))
            .agg(F.max("price").alias("top"), F.count("*").alias("n"))
            .filter("n >= 2 OR okey IS NULL")
        )

    def ref(T):
        t = R.select(
            R.where(ref_nulled(T), lambda r: r["qty"] != 3), lambda r: {**r, "hi": r["price"] > 50}
        )
        g = R.group(
            t,
            lambda r: (r["okey"], r["hi"]),
            lambda k, rs: {
                "okey": k[0],
                "hi": k[1],
                "top": max(r["price"] for r in rs),
                "n": len(rs),
            },
        )
        return R.where(g, lambda r: r["n"] >= 2 or r["okey"] is None)

    check(lc, spark, data, build, ref, ["okey", "hi", "top", "n"])


def test_q18_shape_semi_join_join_second_aggregate_order_limit(lc, spark, data):
    """TPC-H Q18's shape: a filtered aggregate in a left semi join, then a join, a second
    aggregate, orderBy and limit."""

    def build(t):
        big = (
            t["items"]
            .groupBy("okey")
            .agg(F.sum("qty").alias("q"))
            .where(F.col("q") >= 8)
            .select(F.col("okey").alias("bkey"))
        )
        return (
            t["orders"]
            .join(big, F.col("okey") == F.col("bkey"), "left_semi")
            .join(t["items"], "okey")
            .groupBy("okey", "ckey")
            .agg(F.sum("qty").alias("tq"))
            .orderBy(F.col("tq").desc(), "okey")
            .limit(5)
        )

    def ref(T):
        g = R.group(
            T["items"],
            lambda r: (r["okey"],),
            lambda k, rs: {"bkey": k[0], "q": sum(r["qty"] for r in rs)},
        )
        big = R.where(g, lambda r: r["q"] >= 8)
        semi = R.join(T["orders"], big, lambda a, b: a["okey"] == b["bkey"], "semi")
        j = R.join(semi, T["items"], lambda a, b: a["okey"] == b["okey"])
        out = R.group(
            j,
            lambda r: (r["okey"], r["ckey"]),
            lambda k, rs: {"okey": k[0], "ckey": k[1], "tq": sum(r["qty"] for r in rs)},
        )
        out.sort(key=lambda x: (-x[0]["tq"], x[0]["okey"]))
        return out[:5]

    check(lc, spark, data, build, ref, ["okey", "ckey", "tq"], ordered=True)


def test_join_and_window_over_the_survivors(lc, spark, data):
    w = Window.partitionBy("status").orderBy(F.col("q").desc(), "okey")

    def build(t):
        big = qty_by_order(t).where("q > 5")
        return big.join(t["orders"], "okey").select(
            "okey", "status", "q", F.rank().over(w).alias("rk")
        )

    def ref(T):
        big = R.where(ref_qty_by_order(T), lambda r: r["q"] > 5)
        j = R.join(big, T["orders"], lambda a, b: a["okey"] == b["okey"])
        out = []
        for r, lin, members in R.window_partitions(j, "status", "okey"):
            before = [m for m in members if (-m[0]["q"], m[0]["okey"]) < (-r["q"], r["okey"])]
            rk = 1 + len(before)
            row = {"okey": r["okey"], "status": r["status"], "q": r["q"], "rk": rk}
            out.append((row, lin))
        return out

    check(lc, spark, data, build, ref, ["okey", "status", "q", "rk"])


def test_sql_over_a_view_of_the_survivors(lc, spark, data):
    def build(t):
        big = qty_by_order(t).where(F.col("q") > 6)
        big.createOrReplaceTempView("lazyagg_big")
        run = lc.sql if isinstance(big, LineageDataFrame) else spark.sql
        return run("SELECT okey, q * 2 AS q2 FROM lazyagg_big WHERE n > 1")

    def ref(T):
        big = R.where(ref_qty_by_order(T), lambda r: r["q"] > 6 and r["n"] > 1)
        return R.select(big, lambda r: {"okey": r["okey"], "q2": r["q"] * 2})

    check(lc, spark, data, build, ref, ["okey", "q2"])


def test_columns_of_the_aggregate_after_its_filter(lc, spark, data):
    """Columns taken from the aggregate frame (`agg["q"]`) after its filter, in select,
    withColumn and orderBy, resolve as over vanilla's filtered frame (its columns are the
    aggregate's own); the lazy plan is the one that runs."""

    def build(t):
        agg = qty_by_order(t)
        big = agg.where("q > 6")
        return (
            big.withColumn("q2", agg["q"] * 2)
            .orderBy(agg["n"].desc(), agg["okey"])
            .select(agg["okey"], "q2", agg["n"])
        )

    def ref(T):
        big = R.where(ref_qty_by_order(T), lambda r: r["q"] > 6)
        big = sorted(big, key=lambda x: (-x[0]["n"], x[0]["okey"] is not None, x[0]["okey"]))
        return R.select(big, lambda r: {"okey": r["okey"], "q2": r["q"] * 2, "n": r["n"]})

    check(lc, spark, data, build, ref, ["okey", "q2", "n"], ordered=True)
    agg = qty_by_order(tables(lc.read, data))
    plan = _plan(agg.where("q > 6").select(agg["okey"])).splitlines()
    join = next(i for i, line in enumerate(plan) if "Join" in line)
    assert not any("collect_list" in line for line in plan[join:])


def test_stars_inside_expressions_over_the_survivors(lc, spark, data):
    """`to_json(struct(*))` over a filtered aggregate (lazy) sees its visible columns only."""

    def build(t):
        return qty_by_order(t).where("q > 6").select("okey", F.to_json(F.struct("*")).alias("j"))

    def ref(T):
        big = R.where(ref_qty_by_order(T), lambda r: r["q"] > 6)
        return R.select(
            big,
            lambda r: {
                "okey": r["okey"],
                "j": json.dumps(
                    {k: v for k, v in r.items() if v is not None}, separators=(",", ":")
                ),
            },
        )

    check(lc, spark, data, build, ref, ["okey", "j"])


def _plan(frame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.dataframe.explain()
    return out.getvalue()


def test_the_lazy_plan_runs_the_aggregate_without_ids(lc, data):
    t = tables(lc.read, data)
    agg = t["items"].groupBy("okey").agg(F.sum("qty").alias("q"))
    # (A condition on the aggregate's own column object, as vanilla code writes it.)
    plan = _plan(agg.where(agg["q"] > 6)).splitlines()
    # The ids are collected above the join with the survivors only; the aggregate of the
    # whole input ran already, without ids: the survivors are local rows in the plan.
    join = next(i for i, line in enumerate(plan) if "Join" in line)
    assert any("collect_list" in line for line in plan[:join])
    assert not any("collect_list" in line for line in plan[join:])
    assert any("LocalTableScan" in line for line in plan[join:])
    assert not any("HashAggregate" in line and "sum(" in line for line in plan[join:])
    # Unfiltered, the same aggregate collects its ids as it runs.
    assert "collect_list" in _plan(agg)


def test_the_default_policy_stays_eager(spark, repo, data):
    eager = LineageContext(spark, repo)
    agg = tables(eager.read, data)["items"].groupBy("okey").agg(F.sum("qty").alias("q"))
    plan = _plan(agg.where(F.col("q") > 6))
    assert "collect_list" in plan and "Join" not in plan


def test_inputs_unsafe_to_recompute_stay_eager(lc, spark, data):
    t = tables(lc.read, data)
    items = t["items"]
    yr = lc.udf.register("lazyagg_twice", lambda q: q * 2, "int")
    eager = {
        "udf": items.withColumn("q2", yr("qty")),
        "sample": items.sample(fraction=0.5, seed=3),
        "rand": items.where(F.rand(1) < 0.5),
        "join": items.join(t["orders"], "okey"),
        "cached": items.where("qty > 1"),
    }
    for name, frame in eager.items():
        grouped = frame.groupBy("okey").agg(F.count("*").alias("n"))
        if name == "cached":
            grouped = grouped.cache()
        assert "collect_list" in _plan(grouped.where("n > 1")), name
    assert "collect_list" in _plan(items.rollup("okey").count().where("count > 1"))
    lazy = items.where("qty > 1").select("okey", (F.col("qty") + 1).alias("q"))
    filtered = lazy.groupBy("okey").agg(F.sum("q").alias("s")).where("s > 1")
    plan = _plan(filtered).splitlines()
    join = next(i for i, line in enumerate(plan) if "Join" in line)
    assert not any("collect_list" in line for line in plan[join:])


def test_float_keys_group_as_spark_groups(lc, spark):
    """NaN keys form one group, -0.0 and 0.0 one, nulls one: the survivors' ids are their
    groups' rows exactly (the key match is Spark's grouping equality)."""
    keys = [float("nan"), float("nan"), -0.0, 0.0, 0.0, None, None, 1.5, 1.5, 2.5]
    data = [(k, i) for i, k in enumerate(keys)]
    df = lc.createDataFrame(data, "k double, i int")
    q = df.groupBy("k").agg(F.count("*").alias("n")).where("n >= 2")
    out = q.collect()
    assert "collect_list" not in _plan(q).split("Join")[-1]
    lin = q.lineage()

    def group_of(k):
        if k is None:
            return "null"
        return "nan" if math.isnan(k) else float(k) + 0.0  # -0.0 -> 0.0

    want = {}
    for k, i in data:
        want.setdefault(group_of(k), set()).add(i)
    got = {}
    for row in out:
        g = group_of(row["k"])  # (NaN != NaN: rows are matched by their group)
        back = lin.filter(lambda r, g=g: group_of(r["k"]) == g).go_back_all().collect()
        got[g] = {r["i"] for r in back}
    assert got == {g: ids for g, ids in want.items() if len(ids) >= 2}


def test_selective_and_exclusive_replay(lc, spark, data):
    t = tables(lc.read, data)
    q = qty_by_order(t).where(F.col("q") > 6).join(t["orders"], "okey").select("okey", "q")
    out = q.collect()
    assert out
    first = sorted(out)[0]
    traced = q.lineage().filter(lambda r: r["okey"] == first["okey"]).go_back_all()
    # Evaluated on the traced source rows, the query gives the traced row back.
    assert sorted(lc.replay(traced)) == [first]
    # Without them, that order's row is gone and the others stay.
    rest = sorted(lc.replay(q, exclude=traced))
    assert rest == sorted(r for r in out if r["okey"] != first["okey"])


def test_an_unknown_aggregate_policy_is_one_clear_error(spark, repo):
    from repository import BadInput

    with pytest.raises(BadInput, match="aggregates must be one of auto, eager, lazy, got 'lazily'"):
        LineageContext(spark, repo, aggregates="lazily")
