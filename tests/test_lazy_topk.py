"""Lazy lineage of a limited aggregate (`groupBy().agg()` then `limit`, sorted or not, and
the actions that limit: `show`, `take`, `first`, `head`): the aggregate runs without ids,
its top rows are computed once, and only they collect their groups' ids (`_lazyagg.limited`).
The rows, their order and types are vanilla's; every row's backward trace and every source
line's forward trace equal the brute-force reference's (`_dfref`), with null, NaN and -0.0
keys, ties at the k-th row, k = 0 and k above the group count; the lazy plan is really the
one that runs; inputs that are not safe to recompute (a join, a UDF, CSV under "auto") and
top rows above the survivors' bound keep the eager aggregate, with the same lineage."""

from __future__ import annotations

import contextlib
import io
import math

import _dfref as R
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


# (name, limit over the aggregate, its reference: sorted and cut, from the reference groups)
_FORMS = {
    "top-5": (
        lambda a: a.orderBy(F.col("q").desc(), "okey").limit(5),
        lambda g: sorted(g, key=lambda x: (-x[0]["q"], _nulls_first(x[0]["okey"])))[:5],
    ),
    "nulls-first-ordinal": (
        lambda a: a.orderBy(1).limit(4),
        lambda g: sorted(g, key=lambda x: _nulls_first(x[0]["okey"]))[:4],
    ),
    "ascending-kwarg": (
        lambda a: a.sort(["n", "okey"], ascending=[False, True]).limit(3),
        lambda g: sorted(g, key=lambda x: (-x[0]["n"], _nulls_first(x[0]["okey"])))[:3],
    ),
    "k-above-groups": (
        lambda a: a.orderBy("okey").limit(1000),
        lambda g: sorted(g, key=lambda x: _nulls_first(x[0]["okey"])),
    ),
    "k-0": (lambda a: a.orderBy("okey").limit(0), lambda g: []),
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
        calls.append((position is not None, None if out is None else out.count()))
        return out

    monkeypatch.setattr(_lazyagg, "survivors", spy)
    return calls


@pytest.mark.parametrize("form", list(_FORMS))
def test_sorted_limit_rows_order_and_lineage(lc, spark, data, form, survivor_rows):
    limit, cut = _FORMS[form]

    def build(t):
        return limit(qty_by_order(t))

    check(lc, spark, data, build, lambda T: cut(ref_qty_by_order(T)), ["okey", "q", "n"], True)
    plan = _plan(limit(qty_by_order(tables(lc.read, data))))
    # (No rows: Spark plans the empty survivors' join as an empty relation.)
    assert _lazy_plan(plan) or (form == "k-0" and "collect_list" not in plan)
    rows = len(cut(ref_qty_by_order(data.ref())))
    assert survivor_rows == [(True, rows), (True, rows)]


def test_unsorted_limit_takes_some_groups_with_their_lineage(lc, data):
    """`limit` without an order: some `k` groups (which ones is Spark's choice), each with
    exactly its group's lineage."""
    agg = qty_by_order(tables(lc.read, data))
    groups = {R.key_of(r, ["okey"]): (r, lin) for r, lin in ref_qty_by_order(data.ref())}
    q = agg.limit(7)
    assert _lazy_plan(_plan(q))
    rows = q.collect()
    assert len(rows) == 7 and len({r["okey"] for r in rows}) == 7
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
        return qty_by_order(t).orderBy(F.col("n").desc(), F.col("q").desc(), "okey")

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
    their ids come from one computation of the top k."""
    data = [(g, g * 100 + j, 1 + (g % 2)) for g in range(30) for j in range(1 + g % 3)]
    df = lc.createDataFrame(data, "g int, i int, w int")
    agg = df.groupBy("g").agg(F.max("w").alias("w"), F.count("*").alias("n"))
    q = agg.orderBy(F.col("w").desc(), F.col("n").desc()).limit(8)
    rows = q.collect()
    assert _lazy_plan(_plan(q))
    vdf = spark.createDataFrame(data, "g int, i int, w int")
    vanilla = (
        vdf.groupBy("g")
        .agg(F.max("w").alias("w"), F.count("*").alias("n"))
        .orderBy(F.col("w").desc(), F.col("n").desc())
        .limit(8)
        .collect()
    )
    assert [(r["w"], r["n"]) for r in rows] == [(r["w"], r["n"]) for r in vanilla]
    members: dict[int, set[int]] = {}
    for g, i, _ in data:
        members.setdefault(g, set()).add(i)
    lin = q.lineage()
    for i, r in enumerate(rows):
        assert r["n"] == len(members[r["g"]]) and r["w"] == 1 + r["g"] % 2
        back = LineageRDD(lin.repo, lin.run_id, lin.record_ids[i : i + 1])
        assert {x["i"] for x in back.go_back_all().collect()} == members[r["g"]]


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

    check(
        auto,
        spark,
        data,
        build,
        lambda T: _FORMS["top-5"][1](ref_qty_by_order(T)),
        ["okey", "q", "n"],
        True,
    )
    assert not _lazy_plan(_plan(build(tables(auto.read, data))))


def test_parquet_and_created_rows_under_auto_are_lazy(auto, spark, data, tmp_path):
    path = str(tmp_path / "items.parquet")
    spark.read.csv(data.path("items"), header=True, schema=SCHEMAS["items"]).write.parquet(path)
    for items in (
        auto.read.parquet(path),
        auto.createDataFrame(data.rows["items"], SCHEMAS["items"]),
    ):
        agg = items.groupBy("okey").agg(F.sum("qty").alias("q"))
        assert _lazy_plan(_plan(agg.orderBy("q").limit(3)))
        assert _lazy_plan(_plan(agg.limit(3)))
    # A top-k not on the aggregate itself (a select between) keeps the eager form.
    assert not _lazy_plan(_plan(agg.select("okey", "q").orderBy("q").limit(3)))


def test_top_rows_above_the_bound_run_eagerly_with_the_same_lineage(lc, spark, data, monkeypatch):
    monkeypatch.setattr(_policy, "SURVIVORS_ROWS", 3)
    limit, cut = _FORMS["top-5"]
    check(
        lc,
        spark,
        data,
        lambda t: limit(qty_by_order(t)),
        lambda T: cut(ref_qty_by_order(T)),
        ["okey", "q", "n"],
        True,
    )
    assert not _lazy_plan(_plan(limit(qty_by_order(tables(lc.read, data)))))


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
    check(lc, spark, data, build, lambda T: cut(ref_qty_by_order(T)), ["okey", "q", "n"], True)
    assert _lazy_plan(_plan(build(tables(lc.read, data))))
    # Only the top rows were survivors (their ids alone collected), in each of the 2 runs.
    rows = len(cut(ref_qty_by_order(data.ref())))
    assert survivor_rows == [(False, rows), (False, rows)]


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
