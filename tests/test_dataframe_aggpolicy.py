"""The aggregate policy (`LineageContext(..., aggregates=...)`): "auto", the default, takes
the lazy form of a filtered aggregate (`_lazyagg`, `_sqllazy`) when the aggregate's input
reads Parquet or `createDataFrame` rows and keeps the eager one over CSV / JSON / text;
"eager" and "lazy" force theirs. The lazy form holds its survivors in the plan only when
they are few (`_policy.SURVIVORS_ROWS` / `SURVIVORS_BYTES`, lowered here): above the bound,
or when computing them fails, the filter runs on the eager aggregate, with the same rows
and lineage (brute force, `_dfcheck.check`) and vanilla's error."""

from __future__ import annotations

import contextlib
import io

import _dfref as R
import pytest
from _dfcheck import SCHEMAS, Data, check, make_data, tables
from pyspark.sql import functions as F

from agent import LineageContext
from agent.dataframe import _policy
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


def _open(path):
    return ProvenanceRepository.open(path, RepositoryConfig(sync="none", rollover_interval=3600))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


@pytest.fixture(scope="module")
def formats(spark, data, tmp_path_factory) -> dict[str, str]:
    """items as Parquet, JSON lines and text files beside the CSV (format -> path)."""
    d = tmp_path_factory.mktemp("items")
    items = spark.read.csv(data.path("items"), header=True, schema=SCHEMAS["items"])
    items.write.parquet(f"{d}/items.parquet")
    items.write.json(f"{d}/items.json")
    items.select(F.concat_ws(",", "okey", "price", "qty")).write.text(f"{d}/items.txt")
    return {
        "parquet": f"{d}/items.parquet",
        "json": f"{d}/items.json",
        "text": f"{d}/items.txt",
        "csv": data.path("items"),
    }


def _ctx(spark, repo, policy: str | None):
    kwargs = {} if policy is None else {"aggregates": policy}
    return LineageContext(spark, repo, **kwargs)


def _items(lc, formats, data, fmt: str):
    if fmt == "created":
        return lc.createDataFrame(data.rows["items"], SCHEMAS["items"])
    if fmt == "csv":
        return lc.read.csv(formats["csv"], header=True, schema=SCHEMAS["items"])
    if fmt == "text":
        parts = F.split("value", ",")
        return lc.read.text(formats["text"]).select(
            parts[0].cast("int").alias("okey"), parts[2].cast("int").alias("qty")
        )
    return getattr(lc.read, fmt)(formats[fmt])


def _plan(frame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.dataframe.explain()
    return out.getvalue()


def _lazy(frame) -> bool:
    """Whether the plan has the lazy form: ids collected above a join with the survivors
    (local rows), none collected below it."""
    plan = _plan(frame).splitlines()
    join = next((i for i, line in enumerate(plan) if "Join" in line), None)
    if join is None:
        assert any("collect_list" in line for line in plan)  # the eager aggregate
        return False
    return not any("collect_list" in line for line in plan[join:]) and any(
        "LocalTableScan" in line for line in plan[join:]
    )


def _filtered(items):
    return items.groupBy("okey").agg(F.sum("qty").alias("q")).where(F.col("q") > 6)


CHOICES = [
    (None, "parquet", True),
    (None, "created", True),
    (None, "csv", False),
    (None, "json", False),
    (None, "text", False),
    ("auto", "parquet", True),
    ("eager", "parquet", False),
    ("eager", "created", False),
    ("lazy", "csv", True),
    ("lazy", "json", True),
]


@pytest.mark.parametrize(("policy", "fmt", "lazy"), CHOICES)
def test_which_sources_take_the_lazy_form(spark, repo, data, formats, policy, fmt, lazy):
    lc = _ctx(spark, repo, policy)
    q = _filtered(_items(lc, formats, data, fmt))
    assert _lazy(q) is lazy
    # Either way the rows are vanilla's.
    vanilla = _filtered(spark.read.csv(formats["csv"], header=True, schema=SCHEMAS["items"]))
    assert sorted(q.collect()) == sorted(vanilla.collect())


@pytest.mark.parametrize(("policy", "fmt", "lazy"), CHOICES)
def test_which_views_take_the_lazy_form_in_sql(spark, repo, data, formats, policy, fmt, lazy):
    lc = _ctx(spark, repo, policy)
    _items(lc, formats, data, fmt).createOrReplaceTempView("policy_items")
    text = "SELECT okey, sum(qty) AS q FROM policy_items GROUP BY okey HAVING sum(qty) > 6"
    q = lc.sql(text)
    assert _lazy(q) is lazy
    spark.read.csv(formats["csv"], header=True, schema=SCHEMAS["items"]).createOrReplaceTempView(
        "policy_items"
    )
    assert sorted(q.collect()) == sorted(spark.sql(text).collect())


@pytest.fixture
def lazy_lc(spark, tmp_path):
    with _open(tmp_path / "lazy-repo") as r:
        yield LineageContext(spark, r, aggregates="lazy")


def _by_order(t):
    return t["items"].groupBy("okey").agg(F.sum("qty").alias("q"), F.count("*").alias("n"))


def _ref_by_order(T):
    return R.group(
        T["items"],
        lambda r: (r["okey"],),
        lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs), "n": len(rs)},
    )


def _check_q_over_2(lc, spark, data, build):
    """Rows and traces of `build` (the groups of items whose quantity is over 2) against
    the brute-force reference."""

    def ref(T):
        return R.where(_ref_by_order(T), lambda r: r["q"] > 2)

    check(lc, spark, data, build, ref, ["okey", "q", "n"])


@pytest.mark.parametrize(
    ("rows", "size", "lazy"),
    [(1000, 1 << 20, True), (3, 1 << 20, False), (1000, 64, False)],
    ids=["within", "too-many-rows", "too-many-bytes"],
)
def test_survivors_over_the_bound_run_the_eager_plan(
    lazy_lc, spark, data, monkeypatch, rows, size, lazy
):
    """Many survivors (more than the bound: 40-odd groups pass here) are not broadcast:
    the filter runs on the eager aggregate, and the rows and every trace are exact."""
    monkeypatch.setattr(_policy, "SURVIVORS_ROWS", rows)
    monkeypatch.setattr(_policy, "SURVIVORS_BYTES", size)

    def build(t):
        return _by_order(t).where(F.col("q") > 2)

    _check_q_over_2(lazy_lc, spark, data, build)
    # (After the check: it needs its query to be the run's one reader of the files.)
    assert _lazy(build(tables(lazy_lc.read, data))) is lazy


@pytest.mark.parametrize("rows", [1000, 3], ids=["within", "too-many-rows"])
def test_sql_survivors_over_the_bound_run_the_eager_rewrite(
    lazy_lc, spark, data, monkeypatch, rows
):
    monkeypatch.setattr(_policy, "SURVIVORS_ROWS", rows)
    text = "SELECT okey, sum(qty) AS q, count(*) AS n FROM items GROUP BY okey HAVING q > 2"

    def build(t):
        captured = hasattr(t["items"], "lineage_columns")
        t["items"].createOrReplaceTempView("items")
        return (lazy_lc.sql if captured else spark.sql)(text)

    _check_q_over_2(lazy_lc, spark, data, build)
    assert _lazy(build(tables(lazy_lc.read, data))) is (rows == 1000)


def test_a_failing_filter_fails_as_vanilla_when_run(lazy_lc, spark, data):
    """Computing the survivors fails (the condition raises): building the query does not,
    and running it raises vanilla's error (the eager plan runs it)."""

    def build(t):
        q = F.col("q")
        boom = F.when(q > 10, F.raise_error(F.lit("policy boom"))).otherwise(q > 2)
        return _by_order(t).where(boom)

    q = build(tables(lazy_lc.read, data))
    assert not _lazy(q)
    with pytest.raises(Exception, match="policy boom"):
        build(tables(spark.read, data)).collect()
    with pytest.raises(Exception, match="policy boom"):
        q.collect()
