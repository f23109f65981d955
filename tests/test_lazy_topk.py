"""Lazy lineage of a limited aggregate (`groupBy().agg()` then `limit`, sorted or not, and
the actions that limit: `show`, `take`, `first`, `head`), also through row-at-a-time
projections and sorts between the aggregate and the limit (`select`, `selectExpr`,
`withColumn(s)`, renames, `drop`, `toDF`, `alias`, `explode`, before or after the `orderBy`):
the aggregate runs without ids, its top rows are computed once, and only they collect their
groups' ids (`_lazyagg.limited`). The rows, their order and types are vanilla's; every row's
backward trace and every source line's forward trace equal the brute-force reference's
(`_dfref`), with null, NaN and -0.0 keys, ties at the k-th row (values and ids from one run,
the keys projected away or not), k = 0 and k above the group count; the lazy plan is really
the one that runs; inputs that are not safe to recompute (a join, a UDF, CSV under "auto"),
projections that are not row-at-a-time builtins (a window, rand, a UDF, a global aggregate),
a cached frame on the way and top rows above the survivors' bound keep the eager aggregate,
with the same lineage.

Each case runs the captured query once (`check` returns it: its plan is the one that ran)."""

from __future__ import annotations

import contextlib
import io
import math

import _dfref as R
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _dfcheck import (
    SCHEMAS,
    Data,
    check,
    make_data,
    nulled,
    qty_by_order,
    ref_qty_by_order,
    tables,
)
from pyspark.sql import Window
from pyspark.sql import functions as F

from agent import LineageContext, LineageRDD
from agent.dataframe import _policy
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


def _open(path):
    return ProvenanceRepository.open(path, RepositoryConfig(sync="none", rollover_interval=3600))


@pytest.fixture
def lc(spark, tmp_path):
    """A LineageContext with lazy aggregates over any input (the CSV test tables)."""
    with _open(tmp_path / "lineage-repo") as r:
        yield LineageContext(spark, r, aggregates="lazy")


@pytest.fixture
def auto(spark, tmp_path):
    """A LineageContext with the default aggregate policy."""
    with _open(tmp_path / "auto-repo") as r:
        yield LineageContext(spark, r)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def _plan(frame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.dataframe.explain()
    return out.getvalue()


def _lazy_plan(plan: str) -> bool:
    """Whether a plan collects ids above its join with the survivors (local rows) only."""
    lines = plan.split("== Initial Plan ==")[0].splitlines()  # (AQE's, once it ran)
    join = next((i for i, line in enumerate(lines) if "Join" in line), None)
    if join is None:
        return False
    return (
        any("collect_list" in line for line in lines[:join])
        and not any("collect_list" in line for line in lines[join:])
        and any("LocalTableScan" in line for line in lines[join:])
    )


def _nulls_first(v):
    return (v is not None, v if v is not None else 0)


def _top(groups, key, k, row=lambda r: r):
    """The reference's top `k` groups by `key` of their row, each row mapped by `row`."""
    return [(row(r), lin) for r, lin in sorted(groups, key=lambda x: key(x[0]))[:k]]


def _label(r):
    return "-".join(["o", *([] if r["okey"] is None else [str(r["okey"])])])


def _exploded(groups):
    """Each group twice, (okey, q) and (okey, n) (`explode(array(q, n))`), sorted by the
    value descending, then okey, the top 7."""
    rows = [({"okey": r["okey"], "v": r[c]}, lin) for r, lin in groups for c in ("q", "n")]
    return sorted(rows, key=lambda x: (-x[0]["v"], _nulls_first(x[0]["okey"])))[:7]


_QN = ["okey", "q", "n"]

# (name: limit over the aggregate, its reference from the reference groups, its columns)
_FORMS = {
    "top-5": (
        lambda a: a.orderBy(F.col("q").desc(), "okey").limit(5),
        lambda g: _top(g, lambda r: (-r["q"], _nulls_first(r["okey"])), 5),
        _QN,
    ),
    # An ordinal (the key: nulls first) and orderBy's `ascending`.
    "ordinal-ascending-kwarg": (
        lambda a: a.sort(["n", 1], ascending=[False, True]).limit(4),
        lambda g: _top(g, lambda r: (-r["n"], _nulls_first(r["okey"])), 4),
        _QN,
    ),
    "k-above-groups": (
        lambda a: a.orderBy("okey").limit(1000),
        lambda g: _top(g, lambda r: _nulls_first(r["okey"]), 1000),
        _QN,
    ),
    "k-0": (lambda a: a.orderBy("okey").limit(0), lambda g: [], _QN),
    # Projections between the aggregate and the limit, before or after the sort.
    "withColumn-then-sort": (
        lambda a: (
            a.withColumn("avg", F.col("q") / F.col("n")).orderBy(F.desc("avg"), "okey").limit(5)
        ),
        lambda g: _top(
            g,
            lambda r: (-r["q"] / r["n"], _nulls_first(r["okey"])),
            5,
            lambda r: {**r, "avg": r["q"] / r["n"]},
        ),
        [*_QN, "avg"],
    ),
    # The sort first, then every other projection, the key projected away (in a label).
    "sort-then-projections-keys-away": (
        lambda a: (
            a.alias("a")
            .orderBy(F.col("n").desc(), F.col("q").desc(), "okey")
            .selectExpr("q / n AS avg", "n", "concat_ws('-', 'o', CAST(a.okey AS STRING)) AS label")
            .withColumnRenamed("n", "cnt")
            .withColumnsRenamed({"avg": "mean"})
            .drop("cnt")
            .toDF("mean", "label")
            .limit(6)
        ),
        lambda g: _top(
            g,
            lambda r: (-r["n"], -r["q"], _nulls_first(r["okey"])),
            6,
            lambda r: {"mean": r["q"] / r["n"], "label": _label(r)},
        ),
        ["mean", "label"],
    ),
    # Columns of the aggregate frame itself (`a["q"]`), before and after the limit.
    "aggregate-columns-around-the-limit": (
        lambda a: (
            a.withColumn("q2", a["q"] * 2)
            .orderBy(a["q"].desc(), "okey")
            .limit(5)
            .select(a["okey"], "q2", a["n"])
        ),
        lambda g: _top(
            g,
            lambda r: (-r["q"], _nulls_first(r["okey"])),
            5,
            lambda r: {"okey": r["okey"], "q2": r["q"] * 2, "n": r["n"]},
        ),
        ["okey", "q2", "n"],
    ),
    "explode": (
        lambda a: (
            a.select("okey", F.explode(F.array("q", "n")).alias("v"))
            .orderBy(F.col("v").desc(), "okey")
            .limit(7)
        ),
        _exploded,
        ["okey", "v"],
    ),
}


@pytest.fixture
def survivor_rows(monkeypatch) -> list:
    """Each time survivors are taken: (for a DataFrame limit, how many rows, None when too
    many)."""
    from agent.dataframe import _lazyagg

    calls: list = []
    real = _lazyagg.survivors

    def spy(df, position=None):
        out = real(df, position)
        # (Local rows: collected without a Spark job.)
        calls.append((position is not None, None if out is None else len(out.collect())))
        return out

    monkeypatch.setattr(_lazyagg, "survivors", spy)
    return calls


@pytest.mark.parametrize("form", list(_FORMS))
def test_sorted_limit_rows_order_and_lineage(lc, spark, data, form, survivor_rows):
    limit, cut, cols = _FORMS[form]

    def build(t):
        return limit(qty_by_order(t))

    q = check(lc, spark, data, build, lambda T: cut(ref_qty_by_order(T)), cols, True)
    plan = _plan(q)
    # (No rows: Spark plans the empty survivors' join as an empty relation.)
    assert _lazy_plan(plan) or (form == "k-0" and "collect_list" not in plan)
    # Only the top rows were survivors (their ids alone collected), taken once.
    assert survivor_rows == [(True, len(cut(ref_qty_by_order(data.ref()))))]


def test_unsorted_limit_takes_some_groups_with_their_lineage(lc, data):
    """`limit` without an order, on the aggregate or through a projection: some `k` groups
    (which ones is Spark's choice), each with exactly its group's lineage."""
    agg = qty_by_order(tables(lc.read, data))
    groups = {R.key_of(r, ["okey"]): (r, lin) for r, lin in ref_qty_by_order(data.ref())}
    for q, k in ((agg.limit(7), 7), (agg.withColumnRenamed("q", "total").limit(6), 6)):
        rows = q.collect()
        assert _lazy_plan(_plan(q))
        assert len(rows) == k and len({r["okey"] for r in rows}) == k
        _check_backward(data, q.lineage(), rows, groups)


def _check_backward(data: Data, lin, rows, groups) -> None:
    """Each returned row is its reference group's row, traced back to its group's lines."""
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    ids = lin.record_ids
    assert len(ids) == len(rows)
    for i, r in enumerate(rows):
        want_row, want_lin = groups[R.key_of(r, ["okey"])[:1]]
        assert R.key_of(r, ["okey", "q", "n"]) == R.key_of(want_row, ["okey", "q", "n"])
        back = LineageRDD(lin.repo, lin.run_id, ids[i : i + 1]).go_back_all().collect()
        assert frozenset((owner[b], b) for b in back) == want_lin


@pytest.mark.parametrize("action", ["take", "head", "first", "show", "toPandas"])
def test_limited_actions_are_lazy_and_exact(lc, spark, data, action, monkeypatch):
    """take / head / first / show / toPandas of a limit return vanilla's rows (show prints
    vanilla's table), each traced to its group's lines; their plan is the lazy one."""
    from agent.dataframe import _lazyagg

    built = []
    real = _lazyagg.limited

    def spy(*args, **kwargs):
        built.append(args[-1])
        return real(*args, **kwargs)

    monkeypatch.setattr(_lazyagg, "limited", spy)

    def ordered(t):
        # (Through a projection: the sort, then a select of the same columns.)
        agg = qty_by_order(t).orderBy(F.col("n").desc(), F.col("q").desc(), "okey")
        return agg.select("okey", "q", "n")

    def run(frame):
        if action == "take":
            return frame.take(4)
        if action == "head":
            return frame.head(4)
        if action == "first":
            return [frame.first()]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            frame.show(4)
        return out.getvalue()

    q = ordered(tables(lc.read, data))
    if action == "toPandas":
        q = q.limit(4)  # the action's output is the limited frame's
        got, vanilla = q.toPandas(), ordered(tables(spark.read, data)).limit(4).toPandas()
        assert got.equals(vanilla) and list(got.dtypes) == list(vanilla.dtypes)
        rows = [tuple(None if v != v else v for v in t) for t in got.itertuples(index=False)]
    else:
        got, vanilla = run(q), run(ordered(tables(spark.read, data)))
        assert got == vanilla
        rows = q.lineage().collect() if action == "show" else got
    lin = q.lineage()
    assert built == ([5] if action == "show" else [1] if action == "first" else [4])
    groups = {R.key_of(r, ["okey"]): (r, lin_) for r, lin_ in ref_qty_by_order(data.ref())}
    want = sorted(
        groups.values(), key=lambda x: (-x[0]["n"], -x[0]["q"], _nulls_first(x[0]["okey"]))
    )
    n = 1 if action == "first" else 4
    assert [R.key_of(r, ["okey", "q", "n"]) for r in rows] == [
        R.key_of(r, ["okey", "q", "n"]) for r, _ in want[:n]
    ]
    _check_backward(data, lin, rows, groups)


def test_ties_at_the_kth_row_values_and_lineage_from_one_run(lc, spark):
    """Many groups tie on the sort value at the k-th row: the returned rows are a valid top
    k (vanilla's sort values), and each carries exactly its own group's rows: the rows and
    their ids come from one computation of the top k. So too through projections that drop
    the key: each row's lineage is one group's, whose values the row holds."""
    data = [(g, g * 100 + j, 1 + (g % 2)) for g in range(30) for j in range(1 + g % 3)]
    members: dict[int, set[int]] = {}
    for g, i, _ in data:
        members.setdefault(g, set()).add(i)

    def direct(df):
        agg = df.groupBy("g").agg(F.max("w").alias("w"), F.count("*").alias("n"))
        return agg.orderBy(F.col("w").desc(), F.col("n").desc()).limit(8)

    def keyless(df):
        agg = df.groupBy("g").agg(F.max("w").alias("w"), F.count("*").alias("n"))
        scored = agg.withColumn("score", F.col("w") * 10 + F.col("n")).drop("g")
        return scored.orderBy(F.col("score").desc()).select("score", "n").limit(11)

    for build in (direct, keyless):
        q = build(lc.createDataFrame(data, "g int, i int, w int"))
        rows = q.collect()
        assert _lazy_plan(_plan(q))
        vanilla = build(spark.createDataFrame(data, "g int, i int, w int")).collect()
        values = 1 if build is direct else 0  # (the sort values: the rows, keys aside)
        assert [r[values:] for r in rows] == [r[values:] for r in vanilla]
        lin = q.lineage()
        for i, r in enumerate(rows):
            back = LineageRDD(lin.repo, lin.run_id, lin.record_ids[i : i + 1])
            got = {x["i"] for x in back.go_back_all().collect()}
            g = next(iter(got)) // 100
            assert got == members[g] and r["n"] == len(members[g])
            if build is direct:
                assert r["g"] == g and r["w"] == 1 + g % 2
            else:
                assert r["score"] == (1 + g % 2) * 10 + r["n"]


def test_float_keys_nan_and_signed_zero(lc, spark):
    """NaN keys form one group, -0.0 and 0.0 one, nulls one, sorted as Spark sorts them
    (NaN largest, nulls first): the rows are vanilla's, their lineage their groups'."""
    keys = [float("nan"), float("nan"), -0.0, 0.0, 0.0, None, None, 1.5, 1.5, 2.5, -3.0]
    data = [(k, i) for i, k in enumerate(keys)]
    schema = "k double, i int"

    def build(df):
        return df.groupBy("k").agg(F.count("*").alias("n")).orderBy(F.col("k").desc()).limit(4)

    q = build(lc.createDataFrame(data, schema))
    rows = q.collect()
    assert _lazy_plan(_plan(q))
    vanilla = build(spark.createDataFrame(data, schema)).collect()
    assert [repr(r) for r in rows] == [repr(r) for r in vanilla]

    def group_of(k):
        if k is None:
            return "null"
        return "nan" if math.isnan(k) else float(k) + 0.0

    want: dict = {}
    for k, i in data:
        want.setdefault(group_of(k), set()).add(i)
    lin = q.lineage()
    for i, r in enumerate(rows):
        back = LineageRDD(lin.repo, lin.run_id, lin.record_ids[i : i + 1])
        assert {x["i"] for x in back.go_back_all().collect()} == want[group_of(r["k"])]


def test_inputs_unsafe_to_recompute_keep_the_eager_form(lc, spark, data):
    t = tables(lc.read, data)
    items = t["items"]
    twice = lc.udf.register("topk_twice", lambda q: q * 2, "int")
    eager = {
        "udf": items.withColumn("q2", twice("qty")),
        "join": items.join(t["orders"], "okey"),
        "sample": items.sample(fraction=0.5, seed=3),
    }
    for name, frame in eager.items():
        agg = frame.groupBy("okey").agg(F.count("*").alias("n"))
        for q in (agg.orderBy("n").limit(3), agg.limit(3)):
            plan = _plan(q)
            assert "collect_list" in plan and not _lazy_plan(plan), name
    cached = items.groupBy("okey").agg(F.count("*").alias("n")).cache()
    assert not _lazy_plan(_plan(cached.orderBy("n").limit(3)))
    agg = items.groupBy("okey").agg(F.count("*").alias("n"))
    assert not _lazy_plan(_plan(agg.orderBy("n").cache().limit(3)))
    assert _lazy_plan(_plan(agg.orderBy("n").limit(3)))
    assert not _lazy_plan(_plan(items.rollup("okey").count().orderBy("count").limit(3)))


def test_projections_not_row_at_a_time_builtins_keep_the_eager_form(lc, data):
    """Between the aggregate and the limit: a window, rand, a UDF, a global aggregate, a
    repartition, a cached frame, or a column of another frame that the replay cannot
    resolve: the eager form (a plan that collects every group's ids)."""
    items = tables(lc.read, data)["items"]
    agg = items.groupBy("okey").agg(F.sum("qty").alias("q"), F.count("*").alias("n"))
    twice = lc.udf.register("topk_twice2", lambda q: q * 2, "int")
    avg = agg.withColumn("avg", F.col("q") / F.col("n"))
    cached = agg.withColumn("avg", F.col("q") / F.col("n")).cache()
    eager = {
        "window": agg.withColumn("rk", F.rank().over(Window.orderBy("q"))).orderBy("rk"),
        "window-expr": agg.selectExpr("okey", "rank() OVER (ORDER BY q) AS rk").orderBy("rk"),
        "rand": agg.withColumn("r", F.rand(1)).orderBy("r"),
        "udf": agg.select("okey", twice("n").alias("n2")).orderBy("n2"),
        "global-aggregate": agg.select(F.sum("q").alias("total")),
        "cached": cached.orderBy("avg"),
        "other-frame's-column": avg.select("okey", avg["avg"]).orderBy("avg"),
        "repartition": agg.repartition(3).orderBy("q"),
    }
    for name, frame in eager.items():
        plan = _plan(frame.limit(3))
        assert "collect_list" in plan and not _lazy_plan(plan), name
    cached.unpersist()


def test_a_join_input_keeps_the_eager_lineage(lc, spark, data):
    def build(t):
        j = t["items"].join(t["orders"], "okey")
        agg = j.groupBy("status").agg(F.sum("qty").alias("q"))
        return agg.orderBy(F.col("q").desc()).limit(2)

    def ref(T):
        j = R.join(T["items"], T["orders"], lambda a, b: a["okey"] == b["okey"])
        g = R.group(
            j,
            lambda r: (r["status"],),
            lambda k, rs: {"status": k[0], "q": sum(r["qty"] for r in rs)},
        )
        return sorted(g, key=lambda x: -x[0]["q"])[:2]

    check(lc, spark, data, build, ref, ["status", "q"], ordered=True)


def test_csv_under_auto_keeps_the_eager_form(auto, spark, data):
    def build(t):
        return qty_by_order(t).orderBy(F.col("q").desc(), "okey").limit(5)

    q = check(
        auto, spark, data, build, lambda T: _FORMS["top-5"][1](ref_qty_by_order(T)), _QN, True
    )
    assert not _lazy_plan(_plan(q))


def test_parquet_and_created_rows_under_auto_are_lazy(auto, spark, data, tmp_path):
    """(Each form of the top-k over one of the two sources: the forms' lineage is checked
    above, under "lazy".)"""
    path = str(tmp_path / "items.parquet")
    # (Written by pyarrow: no Spark job.)
    names = [c.split()[0] for c in SCHEMAS["items"].split(", ")]
    types = [pa.int32(), pa.float64(), pa.int32()]
    columns = [pa.array(c, t) for c, t in zip(zip(*data.rows["items"]), types)]
    pq.write_table(pa.table(columns, names=names), path)
    parquet = auto.read.parquet(path).groupBy("okey").agg(F.sum("qty").alias("q"))
    created = auto.createDataFrame(data.rows["items"], SCHEMAS["items"])
    created = created.groupBy("okey").agg(F.sum("qty").alias("q"))
    assert _lazy_plan(_plan(parquet.orderBy("q").limit(3)))
    assert _lazy_plan(_plan(created.limit(3)))
    assert _lazy_plan(_plan(created.withColumn("q2", F.col("q") * 2).orderBy("q2").limit(3)))


def test_top_rows_above_the_bound_run_eagerly_with_the_same_lineage(lc, spark, data, monkeypatch):
    monkeypatch.setattr(_policy, "SURVIVORS_ROWS", 3)
    limit, cut, cols = _FORMS["withColumn-then-sort"]
    q = check(
        lc,
        spark,
        data,
        lambda t: limit(qty_by_order(t)),
        lambda T: cut(ref_qty_by_order(T)),
        cols,
        True,
    )
    assert not _lazy_plan(_plan(q))


# -- lc.sql: GROUP BY ... [HAVING ...] ORDER BY <output> LIMIT n -------------------------------


def _sql(lc, spark, data, text):
    """`text` over the test tables as views (items' order key nulled as `nulled`), run by
    lc.sql over captured tables or spark.sql over vanilla ones."""

    def build(t):
        captured = hasattr(t["items"], "lineage_columns")
        items = nulled(t)
        items.createOrReplaceTempView("topk_items")
        return (lc.sql if captured else spark.sql)(text)

    return build


_SQL = {
    "order-limit": (
        "SELECT okey, sum(qty) AS q, count(*) AS n FROM topk_items GROUP BY okey "
        "ORDER BY q DESC, okey LIMIT 5",
        lambda g: sorted(g, key=lambda x: (-x[0]["q"], _nulls_first(x[0]["okey"])))[:5],
    ),
    "ordinal-offset": (
        "SELECT okey, sum(qty) AS q, count(*) AS n FROM topk_items GROUP BY okey "
        "ORDER BY 3 DESC, 2 DESC, 1 LIMIT 4 OFFSET 2",
        lambda g: sorted(g, key=lambda x: (-x[0]["n"], -x[0]["q"], _nulls_first(x[0]["okey"])))[
            2:6
        ],
    ),
    "having-order-limit": (
        "SELECT okey, sum(qty) AS q, count(*) AS n FROM topk_items GROUP BY okey "
        "HAVING n >= 2 OR okey IS NULL ORDER BY okey LIMIT 6",
        lambda g: sorted(
            [x for x in g if x[0]["n"] >= 2 or x[0]["okey"] is None],
            key=lambda x: _nulls_first(x[0]["okey"]),
        )[:6],
    ),
    "k-above-groups": (
        "SELECT okey, sum(qty) AS q, count(*) AS n FROM topk_items GROUP BY okey "
        "ORDER BY okey LIMIT 1000",
        lambda g: sorted(g, key=lambda x: _nulls_first(x[0]["okey"])),
    ),
}


@pytest.mark.parametrize("form", list(_SQL))
def test_sql_top_k_rows_order_and_lineage(lc, spark, data, form, survivor_rows):
    text, cut = _SQL[form]
    build = _sql(lc, spark, data, text)
    q = check(lc, spark, data, build, lambda T: cut(ref_qty_by_order(T)), _QN, True)
    assert _lazy_plan(_plan(q))
    # Only the top rows were survivors (their ids alone collected), taken once.
    assert survivor_rows == [(False, len(cut(ref_qty_by_order(data.ref()))))]


def test_sql_limit_without_order_takes_some_groups_with_their_lineage(lc, spark, data):
    q = _sql(
        lc,
        spark,
        data,
        "SELECT okey, sum(qty) AS q, count(*) AS n FROM topk_items GROUP BY okey LIMIT 7",
    )(tables(lc.read, data))
    assert _lazy_plan(_plan(q))
    rows = q.collect()
    assert len(rows) == 7 and len({r["okey"] for r in rows}) == 7
    groups = {R.key_of(r, ["okey"]): (r, lin) for r, lin in ref_qty_by_order(data.ref())}
    _check_backward(data, q.lineage(), rows, groups)


def test_sql_top_k_over_a_join_keeps_the_eager_form(lc, spark, data):
    tables(lc.read, data)["orders"].createOrReplaceTempView("topk_orders")
    q = _sql(
        lc,
        spark,
        data,
        "SELECT status, sum(qty) AS q FROM topk_items JOIN topk_orders "
        "USING (okey) GROUP BY status ORDER BY q DESC LIMIT 2",
    )(tables(lc.read, data))
    plan = _plan(q)
    assert "collect_list" in plan and not _lazy_plan(plan)


def test_replay_and_an_empty_aggregate(lc, data):
    t = tables(lc.read, data)
    q = qty_by_order(t).orderBy(F.col("q").desc(), "okey").limit(3)
    out = q.collect()
    assert _lazy_plan(_plan(q))
    traced = q.lineage().filter(lambda r: r["okey"] == out[0]["okey"]).go_back_all()
    # Evaluated on one group's source rows, the top 3 is that group's row.
    assert lc.replay(traced) == [out[0]]
    empty = t["items"].where("qty > 100").groupBy("okey").agg(F.count("*").alias("n"))
    assert empty.orderBy("n").first() is None and empty.take(2) == []
