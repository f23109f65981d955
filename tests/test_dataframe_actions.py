"""Actions of captured DataFrames return exactly what vanilla PySpark returns (rows, schema,
pandas frames, printed tables), and each records its output rows' lineage; writes journal
their rows with the output location; capture off leaves Spark's plan untouched."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
from _dfcheck import plan_shape
from pyspark.sql import Row
from pyspark.sql import functions as F

from agent import LineageContext

pytestmark = pytest.mark.spark


@pytest.fixture
def sales(tmp_path):
    path = tmp_path / "sales.csv"
    rows = [
        (i, ["north", "south", "east"][i % 3], float(i % 7) * 1.5, None if i % 11 == 0 else i % 4)
        for i in range(40)
    ]
    with open(path, "w") as f:
        f.write("id,region,amount,flag\n")
        for r in rows:
            f.write(",".join("" if v is None else str(v) for v in r) + "\n")
    lines = {r[0]: ",".join("" if v is None else str(v) for v in r) for r in rows}
    return str(path), rows, lines


SCHEMA = "id INT, region STRING, amount DOUBLE, flag INT"


def both(lc, spark, path):
    return (
        lc.read.csv(path, header=True, schema=SCHEMA),
        spark.read.csv(path, header=True, schema=SCHEMA),
    )


def test_collect_take_first_head_count(lc, spark, sales):
    path, rows, lines = sales
    d, v = both(lc, spark, path)
    q, vq = d.where("amount > 3").orderBy("id"), v.where("amount > 3").orderBy("id")
    assert q.collect() == vq.collect()
    assert q.take(3) == vq.take(3)
    assert q.first() == vq.first() and q.head() == vq.head() and q.head(2) == vq.head(2)
    first = q.first()
    assert q.lineage().go_back_all().collect() == [lines[first.id]]
    assert q.count() == vq.count()
    assert sorted(q.lineage().go_back_all().collect()) == sorted(
        lines[r[0]] for r in rows if r[2] > 3
    )
    assert q.schema == vq.schema and q.columns == vq.columns and q.dtypes == vq.dtypes


def test_rows_are_vanilla_rows(lc, spark, sales):
    path, _, _ = sales
    d, v = both(lc, spark, path)
    got = (
        d.groupBy("region").agg(F.collect_list(F.struct("id", "flag")).alias("s")).orderBy("region")
    )
    want = (
        v.groupBy("region").agg(F.collect_list(F.struct("id", "flag")).alias("s")).orderBy("region")
    )
    a, b = got.collect(), want.collect()
    assert a == b
    assert [r.asDict(recursive=True) for r in a] == [r.asDict(recursive=True) for r in b]
    assert repr(a[0]) == repr(b[0]) and a[0].region == b[0].region


def test_show_prints_what_vanilla_prints(lc, spark, sales):
    path, _, lines = sales
    d, v = both(lc, spark, path)
    for n, trunc, vert in [(5, True, False), (50, 3, False), (2, True, True)]:
        out_a, out_b = io.StringIO(), io.StringIO()
        with redirect_stdout(out_a):
            d.orderBy("id").show(n, trunc, vert)
        with redirect_stdout(out_b):
            v.orderBy("id").show(n, trunc, vert)
        assert out_a.getvalue() == out_b.getvalue()
    shown = d.orderBy("id")
    shown.show(2)
    assert sorted(shown.lineage().go_back_all().collect()) == sorted([lines[0], lines[1]])


def test_to_pandas(lc, spark, sales):
    path, _, lines = sales
    d, v = both(lc, spark, path)
    a = (
        d.where("id < 30")
        .join(d.where("id >= 10").select("id", F.col("amount").alias("a2")), "id", "left")
        .orderBy("id")
    )
    b = (
        v.where("id < 30")
        .join(v.where("id >= 10").select("id", F.col("amount").alias("a2")), "id", "left")
        .orderBy("id")
    )
    pa, pb = a.toPandas(), b.toPandas()
    assert pa.equals(pb) and list(pa.dtypes) == list(pb.dtypes)
    back = a.lineage().go_back_all().collect()
    assert sorted(back) == sorted(lines[i] for i in range(30))


def test_tail_is_empty_to_arrow(lc, spark, sales):
    path, rows, lines = sales
    d, v = both(lc, spark, path)
    q, vq = d.where("amount > 3").orderBy("id"), v.where("amount > 3").orderBy("id")
    assert q.tail(3) == vq.tail(3)
    assert sorted(q.lineage().go_back_all().collect()) == sorted(lines[r.id] for r in vq.tail(3))
    assert q.isEmpty() is False and d.where("id < 0").isEmpty() is True
    assert len(q.lineage().go_back_all().collect()) == 1  # the one row read
    # Groups: their ids as arrays; Arrow's table is vanilla's, each row traced to its group.
    g = d.groupBy("region").agg(F.sum("amount").alias("s")).orderBy("region")
    vg = v.groupBy("region").agg(F.sum("amount").alias("s")).orderBy("region")
    table = g.toArrow()
    assert table.equals(vg.toArrow())
    north = g.lineage().filter(lambda r: r["region"] == "north").go_back_all().collect()
    assert sorted(north) == sorted(lines[r[0]] for r in rows if r[1] == "north")


def test_random_split_to_with_metadata_register_temp_table(lc, spark, sales):
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    path, _, lines = sales
    d, v = both(lc, spark, path)
    parts = d.randomSplit([0.3, 0.7], seed=7)
    vparts = v.randomSplit([0.3, 0.7], seed=7)
    for p, vp in zip(parts, vparts):
        got = p.collect()
        assert sorted(got) == sorted(vp.collect())
        assert sorted(p.lineage().go_back_all().collect()) == sorted(lines[r.id] for r in got)
    schema = StructType([StructField("amount", DoubleType()), StructField("id", LongType())])
    t, vt = d.to(schema), v.to(schema)
    assert t.schema == vt.schema and t.collect() == vt.collect()
    m = d.withMetadata("id", {"note": "key"})
    assert m.schema["id"].metadata == {"note": "key"}
    m.where("id = 4").registerTempTable("sales_view")
    got = lc.sql("SELECT id FROM sales_view")
    assert got.collect() == [Row(id=4)]
    assert got.lineage().go_back_all().collect() == [lines[4]]


def test_create_dataframe_rows_are_sources(lc, spark):
    data = [("a", 1), ("b", 2), ("a", 3)]
    df = lc.createDataFrame(data, "k STRING, v INT")
    vanilla = spark.createDataFrame(data, "k STRING, v INT")
    q = df.groupBy("k").agg(F.sum("v").alias("s")).orderBy("k")
    assert q.collect() == vanilla.groupBy("k").agg(F.sum("v").alias("s")).orderBy("k").collect()
    back = q.lineage().filter(lambda r: r["k"] == "a").go_back_all().collect()
    assert sorted(back) == [Row(k="a", v=1), Row(k="a", v=3)]


def test_cache_keeps_lineage(lc, spark, sales):
    path, rows, lines = sales
    d, _ = both(lc, spark, path)
    c = d.where("flag = 1").cache()
    assert c.count() == sum(1 for r in rows if r[3] == 1)
    q = c.select("id")
    q.collect()
    assert sorted(q.lineage().go_back_all().collect()) == sorted(
        lines[r[0]] for r in rows if r[3] == 1
    )
    c.unpersist()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_write_journals_rows_with_location(lc, spark, sales, tmp_path, fmt):
    path, rows, lines = sales
    d, v = both(lc, spark, path)
    out = tmp_path / f"out-{fmt}"
    q = d.where("amount >= 3").groupBy("region").agg(F.sum("amount").alias("t"))
    getattr(q.write.mode("overwrite"), fmt)(str(out))
    written = spark.read.format(fmt).schema("region STRING, t DOUBLE").load(str(out)).collect()
    want = v.where("amount >= 3").groupBy("region").agg(F.sum("amount").alias("t")).collect()
    assert sorted(written) == sorted(want)
    lin = q.lineage()
    assert len(lin) == len(want)
    events = lin.events()
    assert {e.location.uri for e in events} == {"file://" + str(out)}
    assert {e.event_type.value for e in events} == {"SEND"}
    assert sorted(lin.go_back_all().collect()) == sorted(lines[r[0]] for r in rows if r[2] >= 3)


def test_insert_into_and_write_to_tables(lc, spark, sales, tmp_path):
    # Catalog tables (DataFrameWriterV2 is how Iceberg and Delta tables are written): the
    # rows written are the action's output, at table:<name>.
    path, _, lines = sales
    d, v = both(lc, spark, path)
    try:
        first = d.where("id < 5")
        first.writeTo("prov_v2").using("parquet").option("path", str(tmp_path / "v2")).create()
        created = first.lineage()
        assert sorted(created.go_back_all().collect()) == sorted(lines[i] for i in range(5))
        q = d.where("id >= 35")
        q.write.insertInto("prov_v2")
        assert {e.location.uri for e in q.lineage().events()} == {"table:prov_v2"}
        assert sorted(q.lineage().go_back_all().collect()) == sorted(
            lines[i] for i in range(35, 40)
        )
        got = spark.table("prov_v2").collect()
        assert sorted(got) == sorted(v.where("id < 5").collect() + v.where("id >= 35").collect())
        # (append(), overwrite(), replace() need a v2 catalog's table, as in vanilla; they
        # take the same path as create().)
    finally:
        spark.sql("DROP TABLE IF EXISTS prov_v2")


def _capture_off(spark, repo, sales):
    """Sales and a one-row frame through a context with capture off, and vanilla's."""
    path, _, _ = sales
    lc = LineageContext(spark, repo, capture=False)
    frames = []
    for reader in (lc, spark):
        frames.append(reader.read.csv(path, header=True, schema=SCHEMA))
        frames.append(reader.createDataFrame([(1, "north")], "id INT, region STRING"))
    return frames


def test_capture_off_leaves_the_plan_untouched(spark, repo, sales):
    d, o, v, vo = _capture_off(spark, repo, sales)
    q = d.where("amount > 1").join(o, ["id", "region"]).groupBy("region").agg(F.max("amount"))
    vq = v.where("amount > 1").join(vo, ["id", "region"]).groupBy("region").agg(F.max("amount"))

    assert plan_shape(q.dataframe) == plan_shape(vq)
    assert q.collect() == vq.collect()


def test_capture_off_broadcast_function(spark, repo, sales):
    """`F.broadcast(df)` of a frame of a context with capture off joins as vanilla's."""
    d, o, v, vo = _capture_off(spark, repo, sales)
    q = d.join(F.broadcast(o), ["id", "region"])
    assert sorted(q.collect()) == sorted(v.join(F.broadcast(vo), ["id", "region"]).collect())


def test_capture_off_dict_aggregate_is_sparks(spark, repo, sales):
    """`agg(dict)` with capture off is Spark's own dict aggregate: names (`avg`,
    `stddev`) and column order as vanilla's."""
    path, _, _ = sales
    lc = LineageContext(spark, repo, capture=False)
    d = lc.read.csv(path, header=True, schema=SCHEMA)
    v = spark.read.csv(path, header=True, schema=SCHEMA)
    spec = {"amount": "mean", "id": "std", "*": "count"}
    for q, vq in (
        (d.groupBy("region").agg(spec), v.groupBy("region").agg(spec)),
        (d.agg(spec), v.agg(spec)),
    ):
        assert q.columns == vq.columns
        assert sorted(q.collect()) == sorted(vq.collect())


def test_attributes_that_describe_the_frame(lc, spark, sales):
    """`is_cached`, `sameSemantics` and `semanticHash` answer as vanilla's do, over the
    visible columns (they raised AttributeError / PySparkTypeError)."""
    path, _, _ = sales
    d = lc.read.csv(path, header=True, schema=SCHEMA)
    v = spark.read.csv(path, header=True, schema=SCHEMA)
    big = d.where("amount > 3")
    assert d.is_cached is False and v.is_cached is False
    assert big.cache().is_cached is True
    assert big.unpersist().is_cached is False
    assert d.sameSemantics(d) and big.sameSemantics(big)
    assert not d.sameSemantics(big) and not big.sameSemantics(v.where("amount > 3"))
    assert isinstance(d.semanticHash(), int)
    assert d.semanticHash() == d.semanticHash() != big.semanticHash()


def test_group_ids_come_back_exactly_as_joined_strings(spark):
    """Actions bring a group's ids back as one comma-joined string: every id survives
    exactly (ids pass 2**53), nulls inside and null or empty arrays give no parent."""
    import numpy as np

    from agent.dataframe._columns import Lineage, joined_arrays, parents_of

    big = (1 << 62) + 12345
    df = spark.createDataFrame(
        [(0, 7, [big, None, 5, big]), (1, None, []), (2, 3, None), (3, None, [1 << 53 | 1])],
        "k INT, l BIGINT, a ARRAY<BIGINT>",
    )
    lin = Lineage(("l",), ("a",))
    rows = joined_arrays(F, df, lin).orderBy("k").collect()
    assert isinstance(rows[0]["a"], str)
    counts, ids = parents_of([[r["l"], r["a"]] for r in rows], lin)
    assert counts.tolist() == [3, 0, 1, 1]
    assert ids.tolist() == [5, 7, big, 3, (1 << 53) | 1]
    assert ids.dtype == np.int64


def test_group_ids_come_back_exactly_through_arrow(spark):
    """Rows that carry group ids are collected as Arrow batches when their visible types
    allow: the same parents as the joined strings give, and the very rows `collect()`
    gives (field names too); a type Arrow would convert differently takes the string way."""
    import datetime
    from decimal import Decimal

    from agent.dataframe._columns import Lineage, arrow_parents, parents_of
    from agent.dataframe._outputs import _fetch_arrow

    big = (1 << 62) + 12345
    data = [
        (0, 7, [big, None, 5, big], "x", Decimal("1.50"), datetime.date(2020, 1, 2)),
        (1, None, [], None, None, None),
        (2, 3, None, "z", Decimal("-0.25"), datetime.date(1999, 12, 31)),
        (3, None, [1 << 53 | 1], "w", Decimal(2), datetime.date(2000, 2, 29)),
    ]
    schema = "k INT, l BIGINT, a ARRAY<BIGINT>, s STRING, d DECIMAL(10,2), t DATE"
    df = spark.createDataFrame(data, schema).toDF("k", "__prov_l", "__prov_a", "s", "d", "t")
    lin = Lineage(("__prov_l",), ("__prov_a",))
    if not hasattr(df, "toArrow"):
        pytest.skip("PySpark < 4: no Arrow collection")
    one = df.orderBy("k").coalesce(1)
    rows, (counts, ids) = _fetch_arrow(one, lin)
    assert counts.tolist() == [3, 0, 1, 1]
    assert ids.tolist() == [5, 7, big, 3, (1 << 53) | 1]
    want = one.select("k", "s", "d", "t").collect()
    assert rows == want and [r.__fields__ for r in rows] == [r.__fields__ for r in want]
    hidden = [[r["__prov_l"], r["__prov_a"]] for r in one.collect()]
    expected = parents_of(hidden, lin)
    got = arrow_parents(one.toArrow(), lin)
    assert [x.tolist() for x in got] == [x.tolist() for x in expected]
    assert _fetch_arrow(one.withColumn("ts", F.current_timestamp()), lin) is None


@pytest.mark.parametrize("high", [1000, 1 << 40, 1 << 62])
def test_parents_are_each_rows_distinct_sorted_ids(high):
    """`csr` against a brute force over random (row, id) pairs with repeats, in sorted runs
    as aggregates bring them and shuffled: ids close together take the one-key sort, ids
    spread over 2**62 the two-key fallback; both give each row's distinct ids, sorted."""
    import numpy as np

    from agent.dataframe._columns import csr

    rng = np.random.default_rng(high % 1009)
    for trial in range(60):
        n = int(rng.integers(1, 12))
        rows = [rng.integers(0, n, size=int(rng.integers(0, 80))) for _ in range(3)]
        ids = [np.sort(rng.integers(0, high, size=len(r))) for r in rows]
        if trial % 2:
            ids = [rng.permutation(i) for i in ids]
        ids[0][: len(ids[0]) // 2] = ids[0][0] if len(ids[0]) else 0  # repeats
        counts, parents = csr(n, rows, ids)
        pairs = sorted(set(zip(np.concatenate(rows).tolist(), np.concatenate(ids).tolist())))
        expect = [sorted(v for r, v in pairs if r == k) for k in range(n)]
        assert counts.tolist() == [len(e) for e in expect]
        assert parents.tolist() == [v for e in expect for v in e]
        assert parents.dtype == np.int64


def test_replay_of_a_dataframe_run(lc, sales):
    """A DataFrame trace replays (tests/test_dataframe_replay.py checks the answers against
    brute force): selectively its rows' groups, exclusively without them."""
    path, _, _ = sales
    q = lc.read.csv(path, header=True, schema=SCHEMA).groupBy("region").count()
    out = sorted(q.collect())
    back = q.lineage().filter(lambda r, first=out[0]: r == first).go_back_all()
    assert lc.replay(back) == [out[0]]
    assert sorted(lc.replay(q, exclude=back)) == out[1:]


def test_sorted_groups_collect_in_vanillas_order_with_their_rows(lc, spark, sales):
    """collect() of an orderBy over aggregated rows sorts them in one task (their ids are
    not shuffled again): the rows come back in vanilla's order, each group with exactly its
    source lines, while the aggregate's output spans several partitions."""
    path, rows, lines = sales
    mine, theirs = both(lc, spark, path)
    key = "spark.sql.adaptive.coalescePartitions.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")  # keep the groups in several partitions
    try:

        def query(df):
            g = df.groupBy((F.col("id") % 13).alias("k")).agg(F.sum("amount").alias("s"))
            return g.orderBy(F.col("k").desc())

        q = query(mine)
        assert q._df.rdd.getNumPartitions() > 1
        got = q.collect()
        assert got == query(theirs).collect()
        lin = q.lineage()
        for row in got:
            back = lin.filter(lambda r, k=row["k"]: r["k"] == k).go_back_all().collect()
            assert sorted(back) == sorted(lines[r[0]] for r in rows if r[0] % 13 == row["k"])
    finally:
        spark.conf.set(key, before)


def test_a_read_projects_its_ids_once_on_first_use(lc, spark, sales):
    # The id projection costs Spark an analysis: a source the query never uses must not pay
    # it, and every frame derived from one read must share the one projection (one scan id
    # per row, whichever frame asks).
    path, rows, lines = sales
    d, v = both(lc, spark, path)
    assert d._built is None
    a, b = d.where("flag = 1"), d.where("flag = 2")
    assert d._built is not None and d._df is d._built
    assert a.union(b).collect() == v.where("flag = 1").union(v.where("flag = 2")).collect()
    q = a.union(b)
    q.collect()
    assert sorted(q.lineage().go_back_all().collect()) == sorted(
        lines[r[0]] for r in rows if r[3] in (1, 2)
    )


@pytest.mark.parametrize("seed", range(4))
def test_few_big_groups_parents_match_brute_force(seed):
    """An aggregate's few rows of one id array (TPC-H Q1's 4 groups) take `_few_lists`, a
    sort per row: each row's distinct ids, sorted, as brute force gives them, over sorted
    runs in shuffled order, repeats, empty and null lists, chunked and sliced Arrow data;
    an array holding a null id takes the general path (the null gives no parent)."""
    import numpy as np
    import pyarrow as pa

    from agent.dataframe import _columns
    from agent.dataframe._columns import Lineage, arrow_parents

    rng = np.random.default_rng(seed)
    lin = Lineage((), ("__prov_a",))
    took = []
    few = _columns._few_lists

    def spy(col):
        took.append(len(col))
        return few(col)

    for trial in range(40):
        n = int(rng.integers(1, 9))
        lists: list = []
        for _ in range(n + 2):  # two rows sliced off below
            kind = rng.integers(0, 6)
            if kind == 0:
                lists.append(None)
                continue
            runs = [
                np.sort(
                    rng.integers(0, 1 << int(rng.integers(8, 62)), size=int(rng.integers(0, 50)))
                )
                for _ in range(int(rng.integers(0, 5)))
            ]
            ids = np.concatenate(runs) if runs else np.array([], dtype=np.int64)
            if kind == 1 and len(ids):
                ids = np.concatenate([ids, ids[: len(ids) // 2]])  # repeats
            lists.append(ids.tolist())
        if trial % 7 == 3:
            lists[1] = [5, None, 5]
        arr = pa.array(lists, type=pa.list_(pa.int64())).slice(1, n)
        cut = int(rng.integers(0, n + 1))
        table = pa.table({"k": pa.array(range(n)), "__prov_a": arr})
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
        expect = [sorted({v for v in (lst or []) if v is not None}) for lst in lists[1 : n + 1]]
        took.clear()
        _columns._few_lists = spy
        try:
            counts, ids = arrow_parents(table, lin)
        finally:
            _columns._few_lists = few
        assert took == [n]
        assert counts.tolist() == [len(e) for e in expect]
        assert ids.tolist() == [v for e in expect for v in e]
        assert ids.dtype == np.int64
