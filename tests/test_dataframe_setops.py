"""DataFrame set operations with lineage (`intersect`, `intersectAll`, `subtract`,
`exceptAll`): rows equal vanilla PySpark's, and every row's backward trace and every line's
forward trace equal the brute-force reference's (`_dfref.set_operation`: an INTERSECT row has
every duplicate on both sides, an EXCEPT row every left duplicate)."""

from __future__ import annotations

import _dfref as R
import pytest
from _dfcheck import Data, check, make_data
from pyspark.sql import functions as F

pytestmark = pytest.mark.spark

METHODS = {
    "intersect": ("intersect", False),
    "intersectAll": ("intersect", True),
    "subtract": ("except", False),
    "exceptAll": ("except", True),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    return make_data(tmp_path_factory.mktemp("tables"))


def _pairs(T, pred):
    rows = R.where(T["orders"], pred)
    return R.select(rows, lambda r: {"status": r["status"], "tags": r["tags"]})


@pytest.mark.parametrize("method", list(METHODS))
def test_set_operations_with_duplicates_and_nulls(lc, spark, data, method):
    # (status, tags): many duplicates, and null tags on both sides (equal in a set operation).
    def build(t):
        o = t["orders"]
        a = o.where("okey < 45").select("status", "tags")
        b = o.where("okey >= 20 AND ckey < 6").select("status", "tags")
        return getattr(a, method)(b)

    def ref(T):
        kind, every = METHODS[method]
        a = _pairs(T, lambda r: r["okey"] < 45)
        b = _pairs(T, lambda r: r["okey"] >= 20 and r["ckey"] < 6)
        assert all(any(r["tags"] is None for r, _ in side) for side in (a, b))
        return R.set_operation(a, b, kind, every)

    check(lc, spark, data, build, ref, ["status", "tags"])


@pytest.mark.parametrize("method", ["intersectAll", "subtract"])
def test_set_operation_positional_over_aggregates(lc, spark, data, method):
    # By position (the right side's names differ), the right side an aggregate (its lineage
    # an array of ids), then a filter on the result.
    def build(t):
        a = t["items"].where("qty >= 2").select(F.col("okey").alias("k"))
        b = t["orders"].groupBy("ckey").count().select((F.col("ckey") * 5).alias("x"))
        return getattr(a, method)(b).where("k < 40")

    def ref(T):
        kind, every = METHODS[method]
        a = R.select(R.where(T["items"], lambda r: r["qty"] >= 2), lambda r: {"k": r["okey"]})
        g = R.group(T["orders"], lambda r: (r["ckey"],), lambda k, rs: {"k": k[0] * 5})
        out = R.set_operation(a, g, kind, every)
        return R.where(out, lambda r: r["k"] is not None and r["k"] < 40)

    check(lc, spark, data, build, ref, ["k"])
