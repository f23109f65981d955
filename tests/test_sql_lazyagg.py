"""Lazy filtered aggregates through `lc.sql` (`_sqllazy`): a `GROUP BY ... HAVING` block and
TPC-H Q18's `IN (SELECT k ... GROUP BY k HAVING ...)` take `_lazyagg`'s plan where it is
exact. Their lineage is the eager one, exactly: every row's trace against the brute-force
reference (`_dfref`, or the keys of the TPC-H rows) AND against the same query captured
eagerly, with null / NaN / -0.0 keys, several keys, no survivors, every group surviving;
the lazy plan is really the one that runs, a block over a view that is not safe to recompute
stays eager, and replay gives the traced rows back."""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections import Counter

import _dfref as R
import pytest
from _dfcheck import Data, check, make_data, tables

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


def _open(path):
    return ProvenanceRepository.open(path, RepositoryConfig(sync="none", rollover_interval=3600))


@pytest.fixture
def lc(spark, tmp_path):
    """A LineageContext with lazy filtered aggregates."""
    with _open(tmp_path / "lazy-repo") as r:
        yield LineageContext(spark, r, aggregates="lazy")


@pytest.fixture
def eager(spark, tmp_path):
    """An eager LineageContext, to compare traces with."""
    with _open(tmp_path / "eager-repo") as r:
        yield LineageContext(spark, r, aggregates="eager")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def _plan(frame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.dataframe.explain()
    return out.getvalue()


def _views(reader, data: Data, nulled: bool = True, t: dict | None = None) -> None:
    """The test tables (read now, or `t`) as views; items' order key null on every fifth
    order (null keys)."""
    from pyspark.sql import functions as F

    t = dict(tables(reader, data) if t is None else t)
    if nulled:
        okey = F.col("okey")
        t["items"] = t["items"].withColumn("okey", F.when(okey % 5 == 0, None).otherwise(okey))
    for name, df in t.items():
        df.createOrReplaceTempView(name)


def _ref_items(T):
    return R.select(T["items"], lambda r: {**r, "okey": None if r["okey"] % 5 == 0 else r["okey"]})


def _traces(lc, q, cols) -> Counter:
    """Each output row (its `cols`) with the raw source rows its backward trace reaches."""
    rows = q.collect()
    lin = q.lineage()
    out: Counter = Counter()
    for i, r in enumerate(rows):
        back = _back(lc, lin, i)
        out[(R.key_of(r, cols), frozenset(map(str, back)))] += 1
    return out


def _back(lc, lin, i):
    from agent import LineageRDD

    return LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect()


def _same_as_eager(lc, eager, spark, data, text, cols, nulled=True):
    """The query's rows and traces equal the eager capture's (and its plan is lazy)."""
    spark.conf.set("spark.sql.files.maxPartitionBytes", "700")
    try:
        _views(lc.read, data, nulled)
        lazy_q = lc.sql(text)
        got = _traces(lc, lazy_q, cols)
        _views(eager.read, data, nulled)
        want = _traces(eager, eager.sql(text), cols)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert got == want
    return lazy_q


def _plan_tree(frame) -> list[tuple[int, str]]:
    """The physical plan's operators as (depth, line)."""
    lines = [x for x in _plan(frame).splitlines() if x.strip() and not x.startswith("==")]
    return [(len(x) - len(x.lstrip(" :+-")), x) for x in lines]


def _lazy_plan(frame) -> bool:
    """Whether the plan has the lazy form: an aggregate that only collects ids (and takes
    the survivors' values, `first`) above a broadcast join, with no id collected below
    that join, where the survivors are local rows (the aggregate of the whole input ran
    without ids, before)."""
    tree = _plan_tree(frame)

    def below(i):
        out = []
        for d, x in tree[i + 1 :]:
            if d <= tree[i][0]:
                break
            out.append(x)
        return out

    for i, (_, x) in enumerate(tree):
        if "Aggregate" not in x or "functions=[" not in x:
            continue
        funcs = set(re.findall(r"(\w+)\(", x.split("functions=[", 1)[1]))
        if "collect_list" not in funcs or not funcs <= {"first", "collect_list"}:
            continue
        under = below(i)
        join = next((k for k, y in enumerate(under) if "BroadcastHashJoin" in y), None)
        if join is None:
            continue
        rest = under[join:]
        if not any("collect_list" in y for y in rest) and any("LocalTableScan" in y for y in rest):
            return True
    return False


def _semi_joined_ids(frame) -> bool:
    """Whether an aggregate computing `sum` collects ids over a semi join (its input
    restricted to the surviving keys by Spark), none over its whole input."""
    tree = _plan_tree(frame)
    found = False
    for i, (d, x) in enumerate(tree):
        if "Aggregate" in x and "collect_list" in x and "sum(" in x:
            under = []
            for d2, y in tree[i + 1 :]:
                if d2 <= d:
                    break
                under.append(y)
            if not any("LeftSemi" in y for y in under):
                return False
            found = True
    return found


def _eager_plan(frame, fn: str = "sum(") -> bool:
    """Whether an aggregate computes the query's `fn` and collects ids together (eager)."""
    return any("Aggregate" in x and "collect_list" in x and fn in x for _, x in _plan_tree(frame))


def run(lc, spark, data, text, ref, cols, ordered=False, nulled=True):
    def build(t):
        captured = hasattr(t["items"], "lineage_columns")
        reader = lc.read if captured else spark.read
        _views(reader, data, nulled, t)
        return (lc.sql if captured else spark.sql)(text)

    check(lc, spark, data, build, ref, cols, ordered)


@pytest.mark.parametrize("bound", [6, 1000, 0], ids=["some-survive", "none-survive", "all-survive"])
def test_having_with_null_keys(lc, eager, spark, data, bound):
    text = f"""SELECT okey, sum(qty) AS q, count(*) AS n FROM items
               GROUP BY okey HAVING sum(qty) > {bound}"""

    def ref(T):
        g = R.group(
            _ref_items(T),
            lambda r: (r["okey"],),
            lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs), "n": len(rs)},
        )
        return R.where(g, lambda r: r["q"] > bound)

    run(lc, spark, data, text, ref, ["okey", "q", "n"])
    q = _same_as_eager(lc, eager, spark, data, text, ["okey", "q", "n"])
    # No survivors: Spark plans the join with no rows as no rows (no join).
    assert (_lazy_plan(q) or bound == 1000) and not _eager_plan(q)


def test_several_keys_where_alias_in_having_order_limit(lc, eager, spark, data):
    """Two keys (one with nulls), a WHERE and a derived key column in the view, HAVING on a
    select alias, ORDER BY output columns and LIMIT (moved above the lazy form)."""
    from pyspark.sql import functions as F

    def build(t):
        items = t["items"]
        okey = F.col("okey")
        items = items.withColumn("okey", F.when(okey % 5 == 0, None).otherwise(okey))
        items = items.withColumn("hi", F.col("price") > 50).where(F.col("qty") != 3)
        items.createOrReplaceTempView("items_hi")
        run_sql = lc.sql if hasattr(items, "lineage_columns") else spark.sql
        return run_sql(
            """SELECT okey, hi, max(price) AS top, count(*) AS n FROM items_hi AS t
               WHERE t.price < 95 GROUP BY t.okey, hi HAVING n >= 2 OR okey IS NULL
               ORDER BY n DESC, 1, hi LIMIT 7"""
        )

    def ref(T):
        t = R.where(_ref_items(T), lambda r: r["qty"] != 3 and r["price"] < 95)
        t = R.select(t, lambda r: {**r, "hi": r["price"] > 50})
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
        g = R.where(g, lambda r: r["n"] >= 2 or r["okey"] is None)
        nulls_first = lambda v: (v is not None, v)  # noqa: E731 (Spark: nulls first, ascending)
        g.sort(key=lambda x: (-x[0]["n"], nulls_first(x[0]["okey"]), x[0]["hi"]))
        return g[:7]

    check(lc, spark, data, build, ref, ["okey", "hi", "top", "n"], ordered=True)
    assert _lazy_plan(build(tables(lc.read, data)))


@pytest.mark.parametrize("form", ["conjunct", "or"])
def test_in_subquery_with_group_by_having(lc, eager, spark, data, form):
    """Q18's shape: `x IN (SELECT k FROM v GROUP BY k HAVING ...)` over small data. As a
    WHERE conjunct it keeps the eager form, whose id aggregate Spark restricts to the
    surviving keys itself (a semi join below it); under an OR it takes the lazy form."""
    other = " OR o.status = 'P'" if form == "or" else ""
    text = f"""SELECT o.okey, o.ckey, o.status FROM orders o
              WHERE o.okey IN (SELECT okey FROM items GROUP BY okey HAVING sum(qty) >= 8){other}"""

    def ref(T):
        g = R.group(
            _ref_items(T),
            lambda r: (r["okey"],),
            lambda k, rs: {"k": k[0], "q": sum(r["qty"] for r in rs)},
        )
        big = R.where(g, lambda r: r["q"] >= 8)
        keys = {r["k"] for r, _ in big}
        rows = R.where(T["orders"], lambda r: r["okey"] in keys or (other and r["status"] == "P"))
        out = []
        for r, lin in rows:
            for b, blin in big:
                if b["k"] == r["okey"]:
                    lin = lin | blin
            out.append(({"okey": r["okey"], "ckey": r["ckey"], "status": r["status"]}, lin))
        return out

    run(lc, spark, data, text, ref, ["okey", "ckey", "status"])
    q = _same_as_eager(lc, eager, spark, data, text, ["okey", "ckey", "status"])
    if form == "or":
        assert _lazy_plan(q)
    else:
        assert not _lazy_plan(q) and _semi_joined_ids(q)


def test_float_keys_group_as_spark_groups(lc, eager, spark):
    """NaN keys form one group, -0.0 and 0.0 one, nulls one; with a second key (both null
    in one surviving group)."""
    keys = [float("nan"), float("nan"), -0.0, 0.0, 0.0, None, None, 1.5, 1.5, 2.5, -0.0]
    js = [0, 0, 0, 0, 1, None, None, 1, 1, 0, 0]
    rows = [(k, j, i) for i, (k, j) in enumerate(zip(keys, js))]
    text = "SELECT k, j, count(*) AS n FROM fk GROUP BY k, j HAVING count(*) >= 2"

    def group_of(k):
        if k is None:
            return "null"
        return "nan" if math.isnan(k) else float(k) + 0.0  # -0.0 -> 0.0

    def traces(ctx):
        ctx.createDataFrame(rows, "k double, j int, i int").createOrReplaceTempView("fk")
        q = ctx.sql(text)
        out = q.collect()
        lin = q.lineage()
        got = {}
        for n, row in enumerate(out):
            back = _back(ctx, lin, n)
            got[(group_of(row["k"]), row["j"], row["n"])] = {r["i"] for r in back}
        return q, got

    q, got = traces(lc)
    assert _lazy_plan(q)
    want = {}
    for k, j, i in rows:
        want.setdefault((group_of(k), j), set()).add(i)
    want = {(g, j, len(ids)): ids for (g, j), ids in want.items() if len(ids) >= 2}
    assert len(want) == 4 and ("null", None, 2) in want
    assert got == want
    assert traces(eager)[1] == want


@pytest.mark.parametrize("form", ["standard", "joined"])
def test_q18_sql_text(lc, eager, spark, tmp_path_factory, form):
    """TPC-H Q18 in SQL (the standard text, and with its HAVING subquery joined as a derived
    table; the bound lowered so that the tiny data has survivors): the same rows as Spark,
    the same traces as the eager capture, and each row's trace is its customer, its order and
    every line item of that order. The joined form takes the lazy plan; the standard one's
    IN keeps the eager form, its ids collected over a semi join with the survivors."""
    tpch = pytest.importorskip("_tpch")
    pytest.importorskip("duckdb_ext", reason="duckdb-ext-tpch (test extra) generates TPC-H data")
    folder = tpch.generate(0.01, str(tmp_path_factory.mktemp("tpch")), tables=TPCH_Q18)
    text = tpch.sql_queries()[18] if form == "standard" else tpch.Q18_HAVING_JOIN
    text = text.replace("> 300", "> 250")
    assert "> 250" in text

    def run_on(reader, ctx):
        for name in TPCH_Q18:
            reader.parquet(f"{folder}/{name}.parquet").createOrReplaceTempView(name)
        return ctx.sql(text)

    q = run_on(lc.read, lc)
    assert _lazy_plan(q) if form == "joined" else not _lazy_plan(q) and _semi_joined_ids(q)
    rows = q.collect()
    assert rows == run_on(spark.read, spark).collect()
    assert len(rows) >= 2
    got = []
    for i, row in enumerate(rows):
        back = _back(lc, q.lineage(), i)
        got.append(frozenset(map(str, back)))
        keys = Counter(
            "customer" if "c_custkey" in r else "orders" if "o_custkey" in r else "lineitem"
            for r in back
        )
        assert {r["c_custkey"] for r in back if "c_custkey" in r} == {row["c_custkey"]}
        assert {r["o_orderkey"] for r in back if "o_custkey" in r} == {row["o_orderkey"]}
        items = [r for r in back if "l_orderkey" in r]
        assert {r["l_orderkey"] for r in items} == {row["o_orderkey"]}
        assert sum(r["l_quantity"] for r in items) == row[5]
        assert keys["customer"] == keys["orders"] == 1
    e = run_on(eager.read, eager)
    assert e.collect() == rows
    assert got == [frozenset(map(str, _back(eager, e.lineage(), i))) for i in range(len(rows))]


TPCH_Q18 = ("customer", "orders", "lineitem")


def test_views_unsafe_to_recompute_stay_eager(lc, spark, data):
    _views(lc.read, data)
    t = tables(lc.read, data)
    twice = lc.udf.register("sqllazy_twice", lambda q: q * 2, "int")
    t["items"].withColumn("q2", twice("qty")).createOrReplaceTempView("by_udf")
    t["items"].join(t["orders"], "okey").createOrReplaceTempView("joined")
    texts = {
        "udf view": "SELECT okey, sum(q2) AS s FROM by_udf GROUP BY okey HAVING s > 3",
        "join view": "SELECT okey, sum(qty) AS s FROM joined GROUP BY okey HAVING s > 3",
        "udf in where": "SELECT okey, sum(qty) AS s FROM items WHERE sqllazy_twice(qty) > 2 "
        "GROUP BY okey HAVING s > 3",
        "rand in where": "SELECT okey, sum(qty) AS s FROM items WHERE rand(1) < 0.5 "
        "GROUP BY okey HAVING s > 3",
        "expression key": "SELECT okey + 1 AS k, sum(qty) AS s FROM items "
        "GROUP BY okey + 1 HAVING s > 3",
        "rollup": "SELECT okey, sum(qty) AS s FROM items GROUP BY ROLLUP(okey) HAVING s > 3",
        "join": "SELECT i.okey, sum(qty) AS s FROM items i JOIN orders o ON i.okey = o.okey "
        "GROUP BY i.okey HAVING s > 3",
    }
    for what, text in texts.items():
        q = lc.sql(text)
        assert _eager_plan(q) and not _lazy_plan(q), what
    # The same block over the plain view is lazy.
    q = lc.sql("SELECT okey, sum(qty) AS s FROM items GROUP BY okey HAVING s > 3")
    assert _lazy_plan(q) and not _eager_plan(q)


def test_the_default_policy_stays_eager(eager, data):
    _views(eager.read, data)
    q = eager.sql("SELECT okey, sum(qty) AS s FROM items GROUP BY okey HAVING s > 3")
    assert _eager_plan(q) and not _lazy_plan(q)


def test_selective_and_exclusive_replay(lc, spark, data):
    _views(lc.read, data)
    q = lc.sql(
        """SELECT o.okey, o.status, b.q FROM orders o
           JOIN (SELECT okey, sum(qty) AS q FROM items GROUP BY okey HAVING sum(qty) > 6) b
           ON o.okey = b.okey"""
    )
    assert _lazy_plan(q)
    out = q.collect()
    assert len(out) >= 2
    first = sorted(out)[0]
    traced = q.lineage().filter(lambda r: r["okey"] == first["okey"]).go_back_all()
    assert sorted(lc.replay(traced)) == [first]
    rest = sorted(lc.replay(q, exclude=traced))
    assert rest == sorted(r for r in out if r["okey"] != first["okey"])


def test_cte_and_union_branches(lc, eager, spark, data):
    """A lazy block as a CTE read twice and as a UNION ALL branch (its lineage in the
    branches' shared column), beside an eager branch."""
    text = """WITH big AS (SELECT okey, sum(qty) AS q FROM items GROUP BY okey HAVING q > 7)
              SELECT okey, q FROM big WHERE okey < 40
              UNION ALL SELECT okey, q + 100 AS q FROM big WHERE okey >= 40
              UNION ALL SELECT ckey AS okey, count(*) AS q FROM orders GROUP BY ckey"""

    def ref(T):
        g = R.group(
            _ref_items(T),
            lambda r: (r["okey"],),
            lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs)},
        )
        big = R.where(g, lambda r: r["q"] > 7)
        low = R.where(big, lambda r: r["okey"] is not None and r["okey"] < 40)
        high = R.select(
            R.where(big, lambda r: r["okey"] is not None and r["okey"] >= 40),
            lambda r: {"okey": r["okey"], "q": r["q"] + 100},
        )
        per = R.group(
            T["orders"], lambda r: (r["ckey"],), lambda k, rs: {"okey": k[0], "q": len(rs)}
        )
        return R.union(R.union(low, high), per)

    run(lc, spark, data, text, ref, ["okey", "q"])
    q = _same_as_eager(lc, eager, spark, data, text, ["okey", "q"])
    assert _lazy_plan(q)
