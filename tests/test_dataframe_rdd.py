"""`df.rdd` and `df.toJSON()`: a captured DataFrame's rows go on as an RDD of the lineage
agent, and traces cross the change both ways. Checked against the brute-force reference
(`_dfref`): every RDD output's backward trace is the source lines its reference row was made
from, and every source line's forward trace is the outputs depending on it."""

from __future__ import annotations

import json
from collections import Counter
from operator import add

import _dfref as R
import numpy as np
import pytest
from _dfcheck import SCHEMAS, make_data, tables
from pyspark.sql import Row
from pyspark.sql import functions as F

from agent import LineageRDD, UnsupportedOperation
from journals import unpack_record_ids

pytestmark = pytest.mark.spark


@pytest.fixture
def data(tmp_path):
    return make_data(tmp_path)


def _traced(lc, data, outs, lin, expected, key) -> None:
    """`outs` (an RDD action's records, `lin` its lineage) against `expected` [(record,
    source lines)]: backward per record, forward per line (to this action's outputs)."""
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    ids = lin.record_ids
    assert len(ids) == len(outs)
    got = Counter()
    for i, o in enumerate(outs):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        got[(key(o), frozenset((owner[b], b) for b in back))] += 1
    assert got == Counter((key(o), lines) for o, lines in expected)
    out_cp = int(unpack_record_ids(ids[:1])[0][0])
    index = lc.repo.lineage
    for name in SCHEMAS:
        for line, offset in zip(data.lines[name], data.offsets[name]):
            rids = index.records_at(lc.run_id, data.path(name), offset + 1)
            fwd = LineageRDD(lc.repo, lc.run_id, np.array(rids)).go_next_all().record_ids
            mine = fwd[unpack_record_ids(fwd)[0] == out_cp]  # other actions' outputs aside
            at = np.searchsorted(ids, mine)  # ids ascend in the order the action returned
            want = Counter(key(o) for o, lines in expected if (name, line) in lines)
            assert Counter(key(outs[i]) for i in at.tolist()) == want, (name, line)


def test_rdd_after_filter_goes_on_with_rdd_operators(lc, spark, data):
    # Row-at-a-time frame operators, then an RDD map and reduceByKey: each total traces
    # back to its order lines that passed the filter.
    t = tables(lc.read, data)
    v = tables(spark.read, data)

    def frame(t):
        return t["orders"].where(F.col("status") != "P").select("ckey", "okey")

    # Several scan partitions: `df.rdd` plans them when it is made (in vanilla too), not
    # when the actions run.
    spark.conf.set("spark.sql.files.maxPartitionBytes", "700")
    try:
        rdd = frame(t).rdd
        vanilla = frame(v).rdd
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert rdd.getNumPartitions() == vanilla.getNumPartitions() > 1
    assert rdd.collect() == vanilla.collect()  # the very Rows, in order
    summed = rdd.map(lambda r: (r.ckey, r["okey"])).reduceByKey(add)
    sums = summed.collect()
    ref = R.where(data.ref()["orders"], lambda r: r["status"] != "P")
    expected = R.group(
        ref, lambda r: (r["ckey"],), lambda k, rs: (k[0], sum(r["okey"] for r in rs))
    )
    assert sorted(sums) == sorted(r for r, _ in expected)
    _traced(lc, data, sums, summed.lineage(), expected, key=lambda o: o)


def test_cached_join_rows_carry_both_sides(lc, spark, data):
    # A join's rows come in no fixed order: refused until cached; cached, each row's record
    # has both sides' rows as parents.
    t = tables(lc.read, data)
    joined = t["orders"].join(t["items"], "okey")
    with pytest.raises(UnsupportedOperation, match=r"DataFrame.rdd .*cache\(\)"):
        joined.rdd  # noqa: B018
    pairs = joined.cache().rdd.map(lambda r: (r.okey, r.price))
    outs = pairs.collect()
    T = data.ref()
    expected = R.select(
        R.join(T["orders"], T["items"], lambda a, b: a["okey"] == b["okey"]),
        lambda r: (r["okey"], r["price"]),
    )
    assert sorted(outs) == sorted(r for r, _ in expected)
    _traced(lc, data, outs, pairs.lineage(), expected, key=lambda o: o)


def test_cached_aggregate_rows_carry_their_groups(lc, spark, data):
    t = tables(lc.read, data)
    spent = t["items"].groupBy("okey").agg(F.sum("qty").alias("q")).cache()
    big = spent.rdd.filter(lambda r: r.q > 4)
    outs = big.collect()
    T = data.ref()
    expected = R.where(
        R.group(
            T["items"],
            lambda r: (r["okey"],),
            lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs)},
        ),
        lambda r: r["q"] > 4,
    )
    assert sorted(outs) == sorted(Row(**r) for r, _ in expected)
    _traced(lc, data, outs, big.lineage(), expected, key=lambda o: (o["okey"], o["q"]))


def test_to_json_is_vanillas_and_traces(lc, spark, data):
    t, v = tables(lc.read, data), tables(spark.read, data)
    js = t["orders"].where("okey % 4 = 1").toJSON()
    assert js.collect() == v["orders"].where("okey % 4 = 1").toJSON().collect()
    outs = js.collect()
    expected = [
        (json.loads(o), lines)
        for o, (_r, lines) in zip(outs, R.where(data.ref()["orders"], lambda r: r["okey"] % 4 == 1))
    ]
    _traced(
        lc,
        data,
        [json.loads(o) for o in outs],
        js.lineage(),
        expected,
        key=lambda o: o["okey"],
    )


def test_to_json_as_a_dataframe_under_sparks_setting(lc, spark, data):
    spark.conf.set("spark.sql.pyspark.toJSON.returnDataFrame", "true")
    try:
        t, v = tables(lc.read, data), tables(spark.read, data)
        js = t["orders"].where("okey < 3").toJSON()
        assert js.collect() == v["orders"].where("okey < 3").toJSON().collect()
        assert sorted(js.lineage().go_back_all().collect()) == sorted(data.lines["orders"][:3])
    finally:
        spark.conf.unset("spark.sql.pyspark.toJSON.returnDataFrame")


def test_to_json_types_as_vanilla(lc, spark):
    # Spark's writer, as vanilla's: nulls left out, dates, timestamps, decimals, nested.
    rows = [
        (1, None, "2024-01-02", "2024-01-02 03:04:05", "1.50", [1, 2], ("a", 2.5)),
        (2, 'x"y', None, None, None, None, None),
    ]
    schema = (
        "i INT, s STRING, d STRING, ts STRING, dec STRING, a ARRAY<INT>, "
        "st STRUCT<n: STRING, f: DOUBLE>"
    )

    def typed(df):
        return df.select(
            "i",
            "s",
            F.to_date("d").alias("d"),
            F.to_timestamp("ts").alias("ts"),
            F.col("dec").cast("decimal(5,2)").alias("dec"),
            "a",
            "st",
        )

    got = typed(lc.createDataFrame(rows, schema)).toJSON().collect()
    assert got == typed(spark.createDataFrame(rows, schema)).toJSON().collect()


def test_capture_off_gives_vanillas_rdd(spark, repo, data):
    from pyspark import RDD

    from agent import LineageContext

    lc = LineageContext(spark, repo, capture=False)
    t = tables(lc.read, data)
    rdd = t["orders"].rdd
    assert isinstance(rdd, RDD) and rdd.collect() == tables(spark.read, data)["orders"].collect()


def test_replay_refused_and_failures_name_the_row(spark, repo, data):
    from agent import LineageContext

    lc = LineageContext(spark, repo, on_error="skip")
    t = tables(lc.read, data)

    def ratio(r):
        return 100 // (r.okey % 7)  # raises on every seventh order

    out = t["orders"].rdd.map(ratio)
    got = out.collect()
    assert got == [100 // (r[0] % 7) for r in data.rows["orders"] if r[0] % 7]
    culprits = lc.culprits()
    bad = [line for r, line in zip(data.rows["orders"], data.lines["orders"]) if r[0] % 7 == 0]
    assert len(culprits) == len(bad)
    back = LineageRDD(lc.repo, lc.run_id, np.array([c.record_id for c in culprits]))
    assert sorted(back.go_back_all().collect()) == sorted(bad)
    traced = out.lineage().go_back_all()
    with pytest.raises(UnsupportedOperation, match="replay of an RDD made from a DataFrame"):
        lc.replay(traced)
    with pytest.raises(UnsupportedOperation, match="replay of an RDD made from a DataFrame"):
        lc.replay(out, exclude=traced)


def test_foreach_over_an_aggregate_records_each_row_and_its_culprits(spark, repo, data):
    # One action over the rows: any order will do (no cache asked). Each row f returned on
    # is an output made from its group; rows it raised on are culprits (skip: the job went on).
    from agent import LineageContext

    lc = LineageContext(spark, repo, on_error="skip")
    t = tables(lc.read, data)
    per_order = t["items"].groupBy("okey").agg(F.sum("qty").alias("q"))
    acc = spark.sparkContext.accumulator(0)

    def send(row):
        if row.q % 5 == 0:
            raise ValueError(f"cannot send {row.okey}")
        acc.add(row.q)

    per_order.foreach(send)
    T = data.ref()
    groups = R.group(
        T["items"],
        lambda r: (r["okey"],),
        lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs)},
    )
    sent = [(r, lines) for r, lines in groups if r["q"] % 5]
    assert acc.value == sum(r["q"] for r, _ in sent)
    lin = per_order.lineage()
    assert len(lin.record_ids) == len(sent)
    # Each output's sources are one group's lines; together, exactly the sent groups'.
    got = Counter(
        frozenset(LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect())
        for i in range(len(sent))
    )
    assert got == Counter(frozenset(line for _, line in lines) for _, lines in sent)
    culprits = lc.culprits()
    assert sorted(c.message for c in culprits) == sorted(
        f"cannot send {r['okey']}" for r, _ in groups if r["q"] % 5 == 0
    )


def test_foreach_partition_is_made_from_every_row_it_read(lc, spark, data):
    t = tables(lc.read, data)
    seen = spark.sparkContext.accumulator(0)

    def first_two(rows):
        for i, _ in enumerate(rows):  # reads two rows of each partition, then stops
            seen.add(1)
            if i == 1:
                break

    orders = t["orders"].repartition(3, "ckey")
    orders.foreachPartition(first_two)
    lin = orders.lineage()
    parts = [
        LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect()
        for i in range(len(lin.record_ids))
    ]
    nonempty = [p for p in parts if p]
    assert sum(len(p) for p in parts) == seen.value == 2 * len(nonempty)
    # The rows one call read share a hash partition (Spark's membership, from vanilla).
    vanilla = tables(spark.read, data)["orders"].repartition(3, "ckey").rdd.glom().collect()
    part_of = {row.ckey: i for i, rows in enumerate(vanilla) for row in rows}
    ckey = {line: r[1] for r, line in zip(data.rows["orders"], data.lines["orders"])}
    for p in nonempty:
        assert len({part_of[ckey[x]] for x in p}) == 1


def test_to_local_iterator_records_the_rows_handed_on(lc, spark, data):
    t = tables(lc.read, data)
    per_order = t["items"].groupBy("okey").agg(F.sum("qty").alias("q"))
    vanilla = list(
        tables(spark.read, data)["items"]
        .groupBy("okey")
        .agg(F.sum("qty").alias("q"))
        .toLocalIterator()
    )
    rows = list(per_order.toLocalIterator())
    assert rows == vanilla
    T = data.ref()
    expected = R.group(
        T["items"],
        lambda r: (r["okey"],),
        lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs)},
    )
    _traced(lc, data, rows, per_order.lineage(), expected, key=lambda o: (o["okey"], o["q"]))
    # Stopped after two rows: those two are the output.
    again = t["items"].groupBy("okey").agg(F.sum("qty").alias("q"))
    it = again.toLocalIterator(prefetchPartitions=True)
    read = [next(it), next(it)]
    it.close()
    lin = again.lineage()
    assert lin.collect() == read
    want = {(r["okey"], r["q"]): lines for r, lines in expected}
    for i, row in enumerate(read):
        back = LineageRDD(lc.repo, lc.run_id, lin.record_ids[i : i + 1]).go_back_all().collect()
        assert {("items", b) for b in back} == want[(row.okey, row.q)]
