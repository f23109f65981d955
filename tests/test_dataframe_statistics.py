"""`describe`, `summary` and the `stat` functions with lineage: vanilla's rows and values,
each statistic's row made from every input row (a global aggregate's lineage; a crosstab
row from its value's rows), against brute force."""

from __future__ import annotations

import _dfref as R
import pytest
from _dfcheck import check, make_data, tables
from pyspark.sql import Row
from pyspark.sql import functions as F

from agent import LineageContext, UnsupportedOperation

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("tables"))


def _every_row(statistics):
    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 20)
        lin = frozenset().union(*(x for _, x in items))
        return [({"summary": s}, lin) for s in statistics]

    return ref


@pytest.mark.parametrize(
    "method, args, statistics",
    [
        ("describe", ("price", "qty"), ["count", "mean", "stddev", "min", "max"]),
        ("summary", ("count", "min", "50%", "max"), ["count", "min", "50%", "max"]),
    ],
)
def test_statistics_rows_are_made_from_every_row(lc, spark, repo, data, method, args, statistics):
    def build(t):
        return getattr(t["items"].where("price > 20"), method)(*args)

    # The values and the row order are vanilla's (another context: `check` wants a run of
    # one action)...
    got = build(tables(LineageContext(spark, repo).read, data)).collect()
    assert got == build(tables(spark.read, data)).collect()
    # ...and each row, named by its statistic, traces to every input row.
    names = lambda t: build(t).select("summary")  # noqa: E731
    check(lc, spark, data, names, _every_row(statistics), ["summary"], ordered=True)


def test_statistics_over_an_unstable_input_raise(lc, data):
    items = tables(lc.read, data)["items"]
    with pytest.raises(UnsupportedOperation, match="cache"):
        items.limit(5).describe()
    assert items.limit(5).cache().describe().count() == 5


def _key(v) -> str:
    """A value as crosstab names it (Spark casts it to a string, null as "null")."""
    return "null" if v is None else str(v)


@pytest.mark.parametrize("col1, col2", [("status", "ckey"), ("tags", "status")])
def test_crosstab_rows_are_made_from_their_value_rows(lc, spark, data, col1, col2):
    """A row per value of col1 (nulls too: tags), made from the rows with that value; the
    counts are vanilla's."""

    def build(t):
        return t["orders"].where("okey > 3").crosstab(col1, col2)

    first = f"{col1}_{col2}"

    def ref(T):
        orders = R.where(T["orders"], lambda r: r["okey"] > 3)
        groups: dict[str, frozenset] = {}
        for r, lin in orders:
            k = _key(r[col1])
            groups[k] = groups.get(k, frozenset()) | lin
        return [({first: k}, lin) for k, lin in groups.items()]

    got = build(tables(LineageContext(spark, lc.repo).read, data))
    rows = sorted(got.collect())
    assert rows == sorted(build(tables(spark.read, data)).collect())
    assert got.columns == build(tables(spark.read, data)).columns
    check(lc, spark, data, lambda t: build(t).select(first), ref, [first])


def test_freq_items_row_is_made_from_every_row(lc, spark, data):
    def build(t):
        return t["items"].where("price > 20").freqItems(["qty"], 0.3)

    assert (
        build(tables(LineageContext(spark, lc.repo).read, data)).collect()
        == build(tables(spark.read, data)).collect()
    )

    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 20)
        return [({"n": 1}, frozenset().union(*(x for _, x in items)))]

    check(lc, spark, data, lambda t: build(t).select(F.lit(1).alias("n")), ref, ["n"])


@pytest.mark.parametrize(
    "call",
    [
        lambda df: df.corr("price", "qty"),
        lambda df: df.stat.cov("price", "qty"),
        lambda df: df.approxQuantile("price", [0.1, 0.5, 0.9], 0.01),
        lambda df: df.stat.approxQuantile(["price", "qty"], [0.5], 0.0),
    ],
)
def test_numbers_are_vanilla_and_traced_to_every_row(lc, spark, data, call):
    """corr / cov / approxQuantile: vanilla's value; one output record holding it, made from
    every input row."""
    items = tables(lc.read, data)["items"].where("price > 20")
    got = call(items)
    assert got == call(tables(spark.read, data)["items"].where("price > 20"))
    back = items.lineage().go_back_all().collect()
    assert sorted(back) == sorted(
        line for r, line in zip(data.rows["items"], data.lines["items"]) if r[1] > 20
    )
    assert items.lineage().collect() == [Row(value=got)]


def test_numbers_over_an_unstable_input_raise(lc, data):
    items = tables(lc.read, data)["items"]
    with pytest.raises(UnsupportedOperation, match="cache"):
        items.limit(5).corr("price", "qty")
    with pytest.raises(UnsupportedOperation, match="cache"):
        items.limit(5).crosstab("qty", "qty")


def test_col_regex_never_selects_hidden_columns(lc, spark, data):
    items = tables(lc.read, data)["items"]
    vanilla = tables(spark.read, data)["items"]
    for regex in ("`.*`", "`(okey|qty)`", "price"):
        got = items.select(items.colRegex(regex))
        assert got.columns == vanilla.select(vanilla.colRegex(regex)).columns
        assert sorted(got.collect()) == sorted(vanilla.select(vanilla.colRegex(regex)).collect())


def test_capture_off_statistics_are_vanilla(spark, repo, data):
    lc = LineageContext(spark, repo, capture=False)
    items, vanilla = (tables(r.read, data)["items"].limit(40) for r in (lc, spark))
    assert items.corr("price", "qty") == vanilla.corr("price", "qty")
    assert items.approxQuantile("qty", [0.5], 0.0) == vanilla.approxQuantile("qty", [0.5], 0.0)
    assert sorted(items.crosstab("qty", "qty").collect()) == sorted(
        vanilla.crosstab("qty", "qty").collect()
    )
