"""Parquet under partitioned (`key=value`) directories: rows numbered by (file, row index)
from Spark's `_metadata`, so Spark keeps pruning partitions and pushing filters into the scan;
every output row's backward trace and every source row's forward trace equal brute force,
under any scan settings, and replay rebuilds the query."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from _dfcheck import explained
from pyspark.sql import functions as F

from agent import LineageContext, LineageRDD, UnsupportedInput, UnsupportedOperation
from journals import unpack_record_ids

pytestmark = pytest.mark.spark

# (id, region, year, amount): regions with a space and a quote, as directory names.
REGIONS = ["north", "south east", "o'west"]
ROWS = [(i, REGIONS[i % 3], 2020 + i % 2, (i * 37) % 101) for i in range(90)]


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("part q")  # a space in the path too
    df = spark.createDataFrame(ROWS, "id INT, region STRING, year INT, amount INT")
    # Several files per partition directory, of unequal sizes.
    df.repartition(4, "id").write.partitionBy("region", "year").parquet(str(d / "sales"))
    return str(d / "sales")


def _traced(lc, q, rows, key="id"):
    """Each output row with the `key` of the source rows its backward trace reaches."""
    ids = q.lineage().record_ids
    assert len(ids) == len(rows)
    out = []
    for i, r in enumerate(rows):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all()
        out.append((tuple(r), frozenset(x[key] for x in back.collect())))
    return out


def _forward(lc, q, rows):
    """Each traced source row's id with the output rows its forward trace reaches."""
    sources = q.lineage().go_back_all()
    out = {}
    for rid in sources.record_ids:
        one = LineageRDD(lc.repo, lc.run_id, np.array([rid]))
        (src,) = one.collect()
        positions = unpack_record_ids(one.go_next_all().record_ids)[2].tolist()
        out[src["id"]] = Counter(tuple(rows[p]) for p in positions)
    return out


def test_partition_filter_and_aggregate_against_brute_force(spark, repo, dataset):
    lc = LineageContext(spark, repo)
    q = (
        lc.read.parquet(dataset)
        .where("region <> 'north' AND amount > 20")
        .groupBy("region", "year")
        .agg(F.sum("amount").alias("s"), F.count("*").alias("n"))
    )
    rows = q.collect()
    vanilla = (
        spark.read.parquet(dataset)
        .where("region <> 'north' AND amount > 20")
        .groupBy("region", "year")
        .agg(F.sum("amount").alias("s"), F.count("*").alias("n"))
    )
    assert sorted(rows) == sorted(vanilla.collect())
    members = {}
    for i, region, year, amount in ROWS:
        if region != "north" and amount > 20:
            members.setdefault((region, year), set()).add(i)
    want = {(k, frozenset(v)) for k, v in members.items()}
    got = {(r[:2], ids) for r, ids in _traced(lc, q, rows)}
    assert got == want
    # Forward: a source row reaches its group's row only.
    for sid, outs in _forward(lc, q, rows).items():
        _, region, year, _ = ROWS[sid]
        assert list(outs) == [next(tuple(r) for r in rows if tuple(r[:2]) == (region, year))]
    # Spark still prunes the partitions and pushes the filter into the scan.
    plan = explained(q.dataframe)
    assert "PartitionFilters: [isnotnull(region" in plan
    assert "PushedFilters: [IsNotNull(amount), GreaterThan(amount,20)]" in plan


def test_join_with_a_csv_source_and_other_scan_settings(spark, repo, dataset, tmp_path):
    """A row keeps its id under any partition layout: an action after the settings changed
    is not refused, and both actions' traces are exact."""
    rates = tmp_path / "rates.csv"
    rates.write_text("region,rate\n" + "".join(f"{r},{n + 2}\n" for n, r in enumerate(REGIONS)))
    lc = LineageContext(spark, repo)
    sales = lc.read.parquet(dataset)
    rate = lc.read.csv(str(rates), header=True, schema="region STRING, rate INT")
    q = sales.where("year = 2021").join(rate, "region").select("id", "region", "rate")
    first = q.collect()
    spark.conf.set("spark.sql.files.maxPartitionBytes", "900")
    try:
        again = sales.where("amount < 30").select("id", "amount")
        second = again.collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert sorted(r.id for r in first) == [i for i, _, y, _ in ROWS if y == 2021]
    for r, ids in _traced(lc, again, second):
        assert ids == {r[0]}
    rate_line = {r: f"{r},{n + 2}" for n, r in enumerate(REGIONS)}
    lin = q.lineage()
    for i, r in enumerate(first):
        back = LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect()
        lines = [b for b in back if isinstance(b, str)]
        assert [b["id"] for b in back if not isinstance(b, str)] == [r.id]
        assert lines == [rate_line[r.region]]


def test_replay_without_a_traced_row(spark, repo, dataset):
    lc = LineageContext(spark, repo)
    q = lc.read.parquet(dataset).groupBy("region").agg(F.max("amount").alias("m"))
    rows = q.collect()
    top = max(rows, key=lambda r: r.m)
    traced = q.lineage().filter(lambda r: r["region"] == top.region).go_back_all()
    best = [x for x in traced.collect() if x["amount"] == top.m]
    bad = traced.filter(lambda x: x["amount"] == top.m)
    assert len(best) == len(bad.collect()) >= 1
    got = {r.region: r.m for r in lc.replay(q, exclude=bad)}
    left = [a for i, reg, _, a in ROWS if reg == top.region and a != top.m]
    assert got[top.region] == max(left)


def test_a_metadata_column_is_refused(spark, repo, tmp_path):
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, 2, 3)], "a INT, _metadata INT, p INT").write.partitionBy(
        "p"
    ).parquet(path)
    lc = LineageContext(spark, repo)
    with pytest.raises(UnsupportedInput, match="_metadata"):
        lc.read.parquet(path)


def test_files_of_one_size_are_told_apart(spark, repo, tmp_path):
    """Rows are numbered by their file's size first: files of equal sizes (here every file)
    are told apart by path, and each row traces to its own file's row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "same"
    for p in range(3):
        (root / f"p={p}").mkdir(parents=True)
        for f in range(2):
            ks = [100 * p + 10 * f + i for i in range(5)]
            pq.write_table(
                pa.table({"k": pa.array(ks, pa.int32())}),
                root / f"p={p}" / f"part-{f}.parquet",
                compression="none",
                use_dictionary=False,
            )
    sizes = {f.stat().st_size for f in root.rglob("*.parquet")}
    assert len(sizes) == 1  # the case under test
    lc = LineageContext(spark, repo)
    q = lc.read.parquet(str(root)).where("k % 3 = 0").select("k", "p")
    rows = q.collect()
    keys = [100 * p + 10 * f + i for p in range(3) for f in range(2) for i in range(5)]
    assert sorted(r.k for r in rows) == [k for k in keys if k % 3 == 0]
    for r, ids in _traced(lc, q, rows, key="k"):
        assert ids == {r[0]}


def test_read_table_of_a_parquet_table(spark, repo, tmp_path):
    """`lc.read.table` / `lc.table`: a Parquet catalog table (partitioned; its partition
    column typed by the table, not by the directory names) read as its files: vanilla's rows,
    each traced to its own; other tables are refused."""
    df = spark.createDataFrame(ROWS, "id INT, region STRING, year INT, amount INT")
    df.write.partitionBy("year").saveAsTable("prov_sales", path=str(tmp_path / "sales"))
    df.limit(3).write.format("csv").saveAsTable("prov_csv", path=str(tmp_path / "csv"))
    try:
        lc = LineageContext(spark, repo)
        t = lc.table("prov_sales")
        assert t.schema == spark.table("prov_sales").schema
        q = t.where("amount > 50").select("id", "year")
        rows = q.collect()
        assert sorted(rows) == sorted(
            spark.table("prov_sales").where("amount > 50").select("id", "year").collect()
        )
        for r, ids in _traced(lc, q, rows):
            assert ids == {r[0]}
        df.coalesce(2).write.saveAsTable("prov_flat", path=str(tmp_path / "flat"))
        flat = lc.read.table("prov_flat").where("id % 7 = 0").select("id")
        rows = flat.collect()
        assert sorted(r.id for r in rows) == [i for i, *_ in ROWS if i % 7 == 0]
        for r, ids in _traced(lc, flat, rows):
            assert ids == {r[0]}
        with pytest.raises(UnsupportedOperation, match="provider csv"):
            lc.read.table("prov_csv")
        spark.range(2).createOrReplaceTempView("prov_view")
        with pytest.raises(UnsupportedOperation, match="a view"):
            lc.read.table("prov_view")
    finally:
        spark.sql("DROP TABLE IF EXISTS prov_sales")
        spark.sql("DROP TABLE IF EXISTS prov_csv")
        spark.sql("DROP TABLE IF EXISTS prov_flat")
        spark.catalog.dropTempView("prov_view")


def test_sql_over_a_parquet_table(spark, repo, tmp_path):
    """`lc.sql` reads a Parquet catalog table (unqualified and qualified, twice in one
    query) as `lc.read.table` does: vanilla's rows, exact traces, and replay without a
    traced row; a table of another provider is still refused."""
    df = spark.createDataFrame(ROWS, "id INT, region STRING, year INT, amount INT")
    df.write.partitionBy("region").saveAsTable("prov_sql_sales", path=str(tmp_path / "s"))
    df.limit(3).write.format("json").saveAsTable("prov_sql_json", path=str(tmp_path / "j"))
    text = (
        "SELECT s.year, count(*) AS n, max(t.amount) AS m FROM prov_sql_sales s "
        "JOIN default.prov_sql_sales t ON s.id = t.id + 1 WHERE s.amount > 30 GROUP BY s.year"
    )
    try:
        lc = LineageContext(spark, repo)
        q = lc.sql(text)
        rows = q.collect()
        assert sorted(rows) == sorted(spark.sql(text).collect())
        by_id = {i: (y, a) for i, _, y, a in ROWS}
        for r in rows:
            back = q.lineage().filter(lambda x, y=r.year: x["year"] == y).go_back_all()
            got = {x["id"] for x in back.collect()}
            pairs = [
                (i, i - 1)
                for i, (y, a) in by_id.items()
                if y == r.year and a > 30 and i - 1 in by_id
            ]
            assert got == {i for p in pairs for i in p}
        # Nothing left registered by the query.
        assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("__prov")]
        first = sorted(rows)[0]
        traced = q.lineage().filter(lambda x: x["year"] == first.year).go_back_all()
        replayed = {r.year for r in lc.replay(q, exclude=traced)}
        assert first.year not in replayed and replayed == {r.year for r in rows} - {first.year}
        with pytest.raises(UnsupportedOperation, match="prov_sql_json"):
            lc.sql("SELECT count(*) FROM prov_sql_json")
    finally:
        spark.sql("DROP TABLE IF EXISTS prov_sql_sales")
        spark.sql("DROP TABLE IF EXISTS prov_sql_json")
