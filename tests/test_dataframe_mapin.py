"""`mapInPandas` / `mapInArrow` with lineage: vanilla's rows; under lineage="partition" each
traced back to every row of its partition that reached the function (which the function
reports itself, so the reference does not depend on Spark's partitioning), under
lineage="row" to the row it maps; both against brute force, forward traces too."""

from __future__ import annotations

from collections.abc import Iterator

import _dfref as R
import pandas as pd
import pyarrow as pa
import pytest
from _dfcheck import check, make_data, plan_shape, tables
from pyspark.sql import functions as F

from agent import LineageContext, LineageRDD
from agent.dataframe import LineageDataFrame

pytestmark = pytest.mark.spark

SMALL_SPLITS = "spark.sql.files.maxPartitionBytes"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("tables"))


@pytest.fixture(autouse=True)
def small_batches(spark):
    """Several Arrow batches per partition: a partition's group is not its last batch, and
    row lineage is per batch."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def vanilla_rows(spark, data, build) -> list:
    """`build`'s rows with capture off, scanned as `check` scans (small splits: several
    partitions)."""
    spark.conf.set(SMALL_SPLITS, "700")
    try:
        return build(tables(spark.read, data)).collect()
    finally:
        spark.conf.unset(SMALL_SPLITS)


def by_row(df, func, schema, arrow=False):
    """`df.mapInPandas(func, schema)` (mapInArrow), with lineage="row" when captured
    (vanilla has no such argument)."""
    what = "mapInArrow" if arrow else "mapInPandas"
    extra = {"lineage": "row"} if isinstance(df, LineageDataFrame) else {}
    return getattr(df, what)(func, schema, **extra)


# The functions are made inside each test (cloudpickle ships them by value: workers cannot
# import the tests).


def seen_per_partition(key: str):
    """One row per partition: the `key` values of every row the function read."""

    def seen(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        keys: list[int] = []
        for pdf in it:
            keys += [int(k) for k in pdf[key]]
        if keys:
            yield pd.DataFrame({"n": [len(keys)], "seen": [",".join(map(str, sorted(keys)))]})

    return seen


def partition_ref(spark, data, build, source: R.Table, key: str):
    """Each vanilla row made from the rows of `source` whose `key` it lists."""
    rows = vanilla_rows(spark, data, build)
    assert len(rows) > 1  # several partitions: a group is not the whole input
    out = []
    for r in rows:
        keys = {int(k) for k in r["seen"].split(",")}
        lin = frozenset().union(*(lin for row, lin in source if row[key] in keys))
        out.append(({"n": r["n"], "seen": r["seen"]}, lin))
    return out


def test_partition_lineage_is_every_row_that_reached_the_function(lc, spark, data):
    def build(t):
        return (
            t["orders"]
            .where("status != 'O'")
            .mapInPandas(seen_per_partition("okey"), "n long, seen string")
        )

    def ref(T):
        orders = R.where(T["orders"], lambda r: r["status"] != "O")
        return partition_ref(spark, data, build, orders, "okey")

    check(lc, spark, data, build, ref, ["n", "seen"])


def test_partition_lineage_over_a_shuffled_join(lc, spark, data):
    """Rows of two sources (each row's ids an array) hash-partitioned by a key."""

    def build(t):
        joined = t["customers"].join(t["orders"], "ckey").repartition(3, "ckey")
        return joined.mapInPandas(seen_per_partition("okey"), "n long, seen string")

    def ref(T):
        co = R.join(T["customers"], T["orders"], lambda c, o: c["ckey"] == o["ckey"])
        return partition_ref(spark, data, build, co, "okey")

    check(lc, spark, data, build, ref, ["n", "seen"])


def test_arrow_partition_lineage(lc, spark, data):
    def seen(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keys: list[int] = []
        for b in it:
            keys += b.column("okey").to_pylist()
        if keys:
            text = ",".join(map(str, sorted(keys)))
            yield pa.RecordBatch.from_pydict({"n": [len(keys)], "seen": [text]})

    def build(t):
        return t["orders"].mapInArrow(seen, "n long, seen string")

    def ref(T):
        return partition_ref(spark, data, build, T["orders"], "okey")

    check(lc, spark, data, build, ref, ["n", "seen"])


def test_row_lineage_maps_each_row(lc, spark, data):
    """lineage="row": a per-row computation; each row traced to its own line."""

    def doubled(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            yield pdf.assign(total=pdf["price"] * pdf["qty"])[["okey", "total"]]

    def build(t):
        return by_row(t["items"].where("price > 20"), doubled, "okey int, total double")

    def ref(T):
        items = R.where(T["items"], lambda r: r["price"] > 20)
        return R.select(items, lambda r: {"okey": r["okey"], "total": r["price"] * r["qty"]})

    check(lc, spark, data, build, ref, ["okey", "total"])


def test_row_lineage_over_a_left_join(lc, spark, data):
    """Rows of a left join (an order line and maybe an item line: arrays of ids), in pandas
    and in Arrow."""

    def tagged(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            yield pd.DataFrame({"okey": pdf["okey"], "has": pdf["qty"].notna()})

    def tagged_arrow(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in it:
            has = [q is not None for q in b.column("qty").to_pylist()]
            yield pa.RecordBatch.from_pydict({"okey": b.column("okey"), "has": has})

    def ref(T):
        j = R.join(T["orders"], T["items"], lambda a, b: a["okey"] == b["okey"], "left")
        return R.select(j, lambda r: {"okey": r["okey"], "has": r.get("qty") is not None})

    for arrow in (False, True):

        def build(t, arrow=arrow):
            joined = t["orders"].join(t["items"], "okey", "left")
            func = tagged_arrow if arrow else tagged
            return by_row(joined, func, "okey int, has boolean", arrow)

        check(LineageContext(spark, lc.repo), spark, data, build, ref, ["okey", "has"])


def test_row_lineage_refuses_a_batch_of_another_length(lc, data):
    def filtered(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            yield pdf[pdf["price"] > 20]

    items = tables(lc.read, data)["items"]
    q = items.mapInPandas(filtered, items.schema, lineage="row")
    with pytest.raises(Exception, match="lineage='row' needs each returned batch"):
        q.collect()
    assert lc.culprits() == []  # a broken promise, not a row the function failed on
    with pytest.raises(ValueError, match="lineage must be 'partition' or 'row'"):
        items.mapInPandas(filtered, items.schema, lineage="record")


def test_a_take_finds_its_partition(lc, spark, data):
    """A take stops reading the function's output early: the rows it took still trace back
    to their whole partition (the group is journaled before any row is handed on)."""

    def each(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            for k in pdf["okey"]:
                # Big rows: the worker is still writing when the take has its rows.
                yield pd.DataFrame({"okey": [int(k)], "pad": ["x" * (1 << 20)]})

    spark.conf.set(SMALL_SPLITS, "700")
    try:
        q = tables(lc.read, data)["orders"].mapInPandas(each, "okey int, pad string")
        taken = q.take(2)
        parts = (
            spark.read.csv(data.path("orders"), header=True, schema="okey INT")
            .select("okey", F.spark_partition_id().alias("p"))
            .collect()
        )
    finally:
        spark.conf.unset(SMALL_SPLITS)
    part_of = {r.okey: r.p for r in parts}
    assert len(set(part_of.values())) > 1
    lin = q.lineage()
    assert len(lin.record_ids) == 2
    for i, row in enumerate(taken):
        back = LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect()
        want = {
            line
            for r, line in zip(data.rows["orders"], data.lines["orders"])
            if part_of[r[0]] == part_of[row.okey]
        }
        assert set(back) == want


def test_a_failing_function_names_the_rows_it_read_and_fails(spark, repo, data):
    def bad(it: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in it:
            if (pdf["okey"] == 7).any():
                raise ValueError("okey 7")
            yield pdf

    for on_error in ("fail", "skip"):  # a generator that raised cannot go on: both fail
        lc = LineageContext(spark, repo, on_error=on_error)
        orders = tables(lc.read, data)["orders"].select("okey").coalesce(1)
        with pytest.raises(Exception, match="okey 7"):
            orders.mapInPandas(bad, "okey int", lineage="row").collect()
        # The batch read last: okeys 7 to 13 (batches of 7 rows, in file order).
        assert {c.data for c in lc.culprits()} == set(data.lines["orders"][7:14])
    lc = LineageContext(spark, repo)
    orders = tables(lc.read, data)["orders"].select("okey").coalesce(1)
    with pytest.raises(Exception, match="okey 7"):
        orders.mapInPandas(bad, "okey int").collect()
    # Every row that reached the function: the first two batches.
    assert {c.data for c in lc.culprits()} == set(data.lines["orders"][:14])


def test_replay_rebuilds_a_partition_map(lc, spark, data):
    def build(t):
        return t["orders"].mapInPandas(seen_per_partition("okey"), "n long, seen string")

    q = build(tables(lc.read, data))
    rows = q.collect()
    one = q.lineage().filter(lambda r: r["n"] == rows[0].n and r["seen"] == rows[0].seen)
    again = lc.replay(one.go_back_all())
    assert [tuple(r) for r in again] == [tuple(rows[0])]
    before = len(lc.repo.lineage.run_info(lc.run_id).capture_points)
    rest = lc.replay(q, exclude=one.go_back_all())
    assert sorted(tuple(r) for r in rest) == sorted(tuple(r) for r in rows[1:])
    # A replay journals no group of its own.
    assert len(lc.repo.lineage.run_info(lc.run_id).capture_points) == before


def test_capture_off_is_vanilla(spark, repo, data):
    lc = LineageContext(spark, repo, capture=False)

    def ident(it):
        yield from it

    frames = [tables(r.read, data)["items"] for r in (lc, spark)]
    q, vq = (f.mapInPandas(ident, "okey int, price double, qty int") for f in frames)
    assert plan_shape(q.dataframe) == plan_shape(vq)
    assert sorted(q.collect()) == sorted(vq.collect())


def test_a_partition_map_through_sql_and_a_write(lc, spark, data, tmp_path):
    """The group records' rows through an `lc.sql` view and a Parquet write: each written
    row still traces back to the rows its partition's function read."""
    orders = tables(lc.read, data)["orders"].repartition(3, "ckey")
    orders.mapInPandas(seen_per_partition("okey"), "n long, seen string").createOrReplaceTempView(
        "seen_parts"
    )
    q = lc.sql("SELECT seen, n FROM seen_parts WHERE n > 0")
    q.write.parquet(str(tmp_path / "out"))
    written = spark.read.parquet(str(tmp_path / "out")).collect()
    lines = dict(zip((r[0] for r in data.rows["orders"]), data.lines["orders"]))
    lin = q.lineage()
    assert len(lin.record_ids) == len(written) > 1
    # A written record holds its location, not its value: the traces are matched as sets.
    got = {
        frozenset(LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect())
        for i in range(len(written))
    }
    assert got == {frozenset(lines[int(k)] for k in r.seen.split(",")) for r in written}
