"""`describe` and `summary` with lineage: vanilla's rows and values, each statistic's row made
from every input row (a global aggregate's lineage), against brute force."""

from __future__ import annotations

import _dfref as R
import pytest
from _dfcheck import check, make_data, tables

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
