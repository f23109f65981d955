"""Scan settings changed after `lc.read`: Spark plans a file scan's partitions when it runs
a query, with the session's settings of that moment, so a row's id (partition, position) is
made under the plan of the action's moment, not of the read's. Each setting Spark's planning
reads is changed between the read and the action (and between two actions), for CSV and
Parquet sources, and every output row's backward trace and every source row's forward trace
are compared with the brute-force reference (`_dfref`)."""

from __future__ import annotations

import contextlib
from collections import Counter

import _dfref as R
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _dfcheck import SCHEMAS, Data, make_data
from pyspark.sql import functions as F

from agent import LineageRDD, UnsupportedInput
from agent.dataframe._scan import partitioned, scan_conf
from journals import pack_record_id, unpack_record_ids
from repository import BadInput
from repository.lineage._scans import SourceChanged

pytestmark = pytest.mark.spark

KEYS = (
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes",
    "spark.sql.files.minPartitionNum",
    "spark.sql.leafNodeDefaultParallelism",
    "spark.sql.files.maxPartitionNum",
)

# (settings when read, settings when the action runs): each changes one setting, to a value
# under which Spark splits the test files into other partitions (asserted by `_differs`).
CHANGES = {
    "maxPartitionBytes": (
        {"spark.sql.files.maxPartitionBytes": "700"},
        {"spark.sql.files.maxPartitionBytes": "400"},
    ),
    "openCostInBytes": (
        {"spark.sql.files.maxPartitionBytes": "100000", "spark.sql.files.minPartitionNum": "4"},
        {
            "spark.sql.files.maxPartitionBytes": "100000",
            "spark.sql.files.minPartitionNum": "4",
            "spark.sql.files.openCostInBytes": "0",
        },
    ),
    "minPartitionNum": (
        {"spark.sql.files.maxPartitionBytes": "100000", "spark.sql.files.openCostInBytes": "0"},
        {
            "spark.sql.files.maxPartitionBytes": "100000",
            "spark.sql.files.openCostInBytes": "0",
            "spark.sql.files.minPartitionNum": "5",
        },
    ),
    "leafNodeDefaultParallelism": (
        {
            "spark.sql.files.maxPartitionBytes": "100000",
            "spark.sql.files.openCostInBytes": "0",
            "spark.sql.leafNodeDefaultParallelism": "3",
        },
        {
            "spark.sql.files.maxPartitionBytes": "100000",
            "spark.sql.files.openCostInBytes": "0",
            "spark.sql.leafNodeDefaultParallelism": "7",
        },
    ),
    "maxPartitionNum": (
        {"spark.sql.files.maxPartitionBytes": "300", "spark.sql.files.openCostInBytes": "0"},
        {
            "spark.sql.files.maxPartitionBytes": "300",
            "spark.sql.files.openCostInBytes": "0",
            "spark.sql.files.maxPartitionNum": "2",
        },
    ),
}


@contextlib.contextmanager
def restored(spark):
    """The scan settings as they were, whatever the test set."""
    old = {k: spark.conf.get(k, None) for k in KEYS}
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def settle(spark, settings: dict) -> None:
    """Exactly `settings` (the other scan settings unset)."""
    for k in KEYS:
        if k in settings:
            spark.conf.set(k, settings[k])
        else:
            spark.conf.unset(k)


def _fmt(v) -> str:
    return "" if v is None else str(v)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    """_dfcheck's tables as CSV, and as Parquet (small row groups: several per partition)."""
    d = make_data(tmp_path_factory.mktemp("tables"))
    types = {"INT": pa.int32(), "DOUBLE": pa.float64(), "STRING": pa.string()}
    for name, schema in SCHEMAS.items():
        fields = [c.split() for c in schema.split(", ")]
        cols = {
            c: pa.array([r[i] for r in d.rows[name]], types[t]) for i, (c, t) in enumerate(fields)
        }
        pq.write_table(pa.table(cols), f"{d.dir}/{name}.parquet", row_group_size=8)
    return d


def read(reader, data: Data, fmt: str, name: str):
    if fmt == "csv":
        return reader.csv(data.path(name), header=True, schema=SCHEMAS[name])
    return reader.parquet(f"{data.dir}/{name}.parquet")


def joined(o, i):
    """A join: each output row's lineage is exactly one orders row and one items row."""
    return o.where(F.col("status") != "P").join(i, "okey").select("okey", "ckey", "price", "qty")


JOIN_COLS = ["okey", "ckey", "price", "qty"]


def ref_joined(T) -> R.Table:
    o = R.where(T["orders"], lambda r: r["status"] != "P")
    return R.select(
        R.join(o, T["items"], lambda a, b: a["okey"] == b["okey"]),
        lambda r: {c: r[c] for c in JOIN_COLS},
    )


def by_customer(o):
    return o.groupBy("ckey").agg(F.count("*").alias("n"))


def ref_by_customer(T) -> R.Table:
    return R.group(T["orders"], lambda r: (r["ckey"],), lambda k, rs: {"ckey": k[0], "n": len(rs)})


def _line(x) -> str:
    """A traced source row as its CSV line (CSV: the line itself; Parquet: its Row)."""
    return x if isinstance(x, str) else ",".join(_fmt(v) for v in x)


def _scans(lc) -> dict[int, dict]:
    desc = lc.repo.lineage.run_info(lc.run_id).descriptor or {}
    return {c["cp"]: c["scan"] for c in desc.get("capture_points", []) if c.get("scan")}


def source_rows(lc, data: Data, fmt: str) -> list[tuple[int, str]]:
    """Every source row's record id and the line it must read back as: CSV lines by their
    byte offsets, Parquet rows by position under the stored plan (a partition's pieces in
    order, each piece's row groups by midpoint, in file order)."""
    out = []
    if fmt == "csv":
        for name in ("orders", "items"):
            for line, offset in zip(data.lines[name], data.offsets[name]):
                for rid in lc.repo.lineage.records_at(lc.run_id, data.path(name), offset + 1):
                    out.append((rid, line))
        return out
    for cp, scan in _scans(lc).items():
        names = [f[0].rsplit("/", 1)[1].split(".")[0] for f in scan["files"]]
        groups = scan["row_groups"]
        for p, pieces in enumerate(scan["partitions"]):
            lines = []
            for fi, s, ln in pieces:
                first = 0
                for mid, k in groups[fi]:
                    if s <= mid < s + ln:
                        lines += data.lines[names[fi]][first : first + k]
                    first += k
            out += [(pack_record_id(cp, p, pos), line) for pos, line in enumerate(lines)]
    return out


def check_lineage(lc, data: Data, fmt: str, q, rows: list, ref, cols: list[str]) -> None:
    """`q`'s last action returned `rows`: each row's backward trace and each source row's
    forward trace equal the reference's."""
    expected = ref(data.ref())
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    ids = q.lineage().record_ids
    assert len(ids) == len(rows)
    got = Counter()
    for i, r in enumerate(rows):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        assert None not in back
        got[(R.key_of(r, cols), frozenset((owner[_line(b)], _line(b)) for b in back))] += 1
    assert got == Counter((R.key_of(r, cols), lin) for r, lin in expected)
    out_cp = int(unpack_record_ids(ids[:1])[0][0])
    src = source_rows(lc, data, fmt)
    assert len(src) >= len(data.lines["orders"])
    read_back = LineageRDD(lc.repo, lc.run_id, np.array([r for r, _ in src])).collect()
    assert [_line(x) for x in read_back] == [line for _, line in src]
    for rid, line in src:
        fwd = LineageRDD(lc.repo, lc.run_id, np.array([rid])).go_next_all().record_ids
        fwd = fwd[unpack_record_ids(fwd)[0] == out_cp]
        got_rows = Counter(R.key_of(rows[p], cols) for p in unpack_record_ids(fwd)[2].tolist())
        want = Counter(R.key_of(r, cols) for r, lin in expected if (owner[line], line) in lin)
        assert got_rows == want, line


def _differs(spark, lc, before: dict, after: dict) -> None:
    """The test is not vacuous: the two settings split the files into other partitions."""
    for scan in _scans(lc).values():
        settle(spark, before)
        a = partitioned(scan, scan_conf(spark))["partitions"]
        settle(spark, after)
        b = partitioned(scan, scan_conf(spark))["partitions"]
        if a != b:
            return
    raise AssertionError("the settings give the same partitions: the test checks nothing")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_settings_changed_after_read(lc, spark, data, fmt, change):
    before, after = CHANGES[change]
    with restored(spark):
        settle(spark, before)
        o, i = read(lc.read, data, fmt, "orders"), read(lc.read, data, fmt, "items")
        q = joined(o, i)  # built before the change too: Spark plans the scan when it runs
        settle(spark, after)
        rows = q.collect()
        vanilla = joined(*(read(spark.read, data, fmt, n) for n in ("orders", "items")))
        assert Counter(map(tuple, rows)) == Counter(map(tuple, vanilla.collect()))
        _differs(spark, lc, before, after)
    check_lineage(lc, data, fmt, q, rows, ref_joined, JOIN_COLS)


def cheap_items(i):
    return i.where(F.col("qty") > 2).select("okey", "price")


def ref_cheap_items(T) -> R.Table:
    return R.select(
        R.where(T["items"], lambda r: r["qty"] > 2),
        lambda r: {"okey": r["okey"], "price": r["price"]},
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_sources_numbered_under_other_settings(lc, spark, data, fmt):
    """Each source takes the settings of its first action: one read before a change but
    first used after it takes the new ones; two sources numbered under different settings
    are not read together (either settings would renumber one of them)."""
    before, after = CHANGES["maxPartitionBytes"]
    with restored(spark):
        settle(spark, before)
        o, i = read(lc.read, data, fmt, "orders"), read(lc.read, data, fmt, "items")
        q1 = by_customer(o)
        rows1 = q1.collect()
        settle(spark, after)
        q2 = cheap_items(i)
        rows2 = q2.collect()
        with pytest.raises(UnsupportedInput, match=r"orders.*maxPartitionBytes 700 -> 400"):
            joined(o, i).collect()
        settle(spark, before)
        with pytest.raises(UnsupportedInput, match=r"items.*maxPartitionBytes 400 -> 700"):
            joined(o, i).collect()
        _differs(spark, lc, before, after)
    check_lineage(lc, data, fmt, q1, rows1, ref_by_customer, ["ckey", "n"])
    check_lineage(lc, data, fmt, q2, rows2, ref_cheap_items, ["okey", "price"])


def test_sql_checks_the_sources_it_reads(lc, spark, data):
    """An `lc.sql` action checks the scans its rows come from, not every view's."""
    before, after = CHANGES["maxPartitionBytes"]
    with restored(spark):
        settle(spark, before)
        o, i = read(lc.read, data, "csv", "orders"), read(lc.read, data, "csv", "items")
        o.createOrReplaceTempView("o")
        i.createOrReplaceTempView("i")
        by_customer(o).collect()
        settle(spark, after)
        q = lc.sql("SELECT okey, price FROM i WHERE qty > 2")
        rows = q.collect()
        with pytest.raises(UnsupportedInput, match="orders"):
            lc.sql("SELECT ckey, count(*) AS n FROM o GROUP BY ckey").collect()
    check_lineage(lc, data, "csv", q, rows, ref_cheap_items, ["okey", "price"])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_settings_changed_between_actions_are_refused(lc, spark, data, fmt, change):
    """A source whose rows an action numbered under one plan refuses an action that would
    number them under another, naming the setting, before it runs; the first action's
    lineage stays exact, and the settings set back, actions run again."""
    before, after = CHANGES[change]
    with restored(spark):
        settle(spark, before)
        o = read(lc.read, data, fmt, "orders")
        q1 = by_customer(o)
        rows1 = q1.collect()
        _differs(spark, lc, before, after)
        settle(spark, after)
        key = next(k for k in KEYS if after.get(k) != before.get(k))
        with pytest.raises(UnsupportedInput, match=rf"{key}.*->.*lc\.read"):
            o.where(F.col("okey") > 3).count()
        settle(spark, before)
        assert o.where(F.col("okey") > 3).count() == 56
    check_lineage(lc, data, fmt, q1, rows1, ref_by_customer, ["ckey", "n"])


def test_other_settings_with_the_same_partitions_run(lc, spark, data):
    """Settings that change nothing for these files (splits larger than every file) do not
    refuse a second action."""
    with restored(spark):
        settle(spark, {"spark.sql.files.maxPartitionBytes": "100000"})
        o = read(lc.read, data, "csv", "orders")
        by_customer(o).collect()
        settle(spark, {"spark.sql.files.maxPartitionBytes": "200000"})
        q = by_customer(o.select("*"))
        rows = q.collect()
    check_lineage(lc, data, "csv", q, rows, ref_by_customer, ["ckey", "n"])


def test_actions_after_one_change(lc, spark, data):
    """Read under one setting, then three actions under another (a count, a write, a
    collect): all read the scans under the second plan, and every one traces exactly."""
    before, after = CHANGES["maxPartitionBytes"]
    expected = ref_joined(data.ref())
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    with restored(spark):
        settle(spark, before)
        o, i = read(lc.read, data, "csv", "orders"), read(lc.read, data, "csv", "items")
        settle(spark, after)
        q = joined(o, i)
        assert q.count() == len(expected)
        q.write.mode("overwrite").parquet(f"{data.dir}/out-{lc.run_id}")
        written = q.lineage().record_ids
        rows = q.collect()
    # The rows written: each traces back to its orders and items lines.
    got = Counter(
        frozenset(
            (owner[b], b)
            for b in LineageRDD(lc.repo, lc.run_id, written[k : k + 1]).go_back_all().collect()
        )
        for k in range(len(written))
    )
    assert got == Counter(lin for _, lin in expected)
    check_lineage(lc, data, "csv", q, rows, ref_joined, JOIN_COLS)


def test_replay_names_the_changed_setting(lc, spark, data):
    before, after = CHANGES["maxPartitionBytes"]
    with restored(spark):
        settle(spark, before)
        q = by_customer(read(lc.read, data, "csv", "orders"))
        q.collect()
        traced = q.lineage().go_back_all()
        settle(spark, after)
        with pytest.raises(BadInput, match="maxPartitionBytes 700 -> 400"):
            lc.replay(traced)
        settle(spark, before)
        assert sorted(lc.replay(traced)) == sorted(q.collect())


def test_file_changed_between_read_and_action(lc, spark, tmp_path):
    """Spark lists the files when a DataFrame is read and plans from that listing: the
    action reads as vanilla does (one more line than the listing held: the one starting
    where the listed file ended), and traces refuse the changed file."""
    path = tmp_path / "t.csv"
    path.write_text("k,v\n" + "".join(f"{n},{n * n}\n" for n in range(40)))
    with restored(spark):
        settle(spark, {"spark.sql.files.maxPartitionBytes": "100"})
        df = lc.read.csv(str(path), header=True, schema="k INT, v INT")
        vanilla = spark.read.csv(str(path), header=True, schema="k INT, v INT")
        with open(path, "a") as f:
            f.write("".join(f"{n},{n * n}\n" for n in range(40, 60)))
        rows = df.collect()
        assert sorted(rows) == sorted(vanilla.collect())
        assert len(rows) == 41
    with pytest.raises(SourceChanged):
        q = df.lineage()
        LineageRDD(lc.repo, lc.run_id, q.record_ids[:1]).go_back_all().collect()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_eager_checkpoint_numbers_rows_as_an_action(lc, spark, data, fmt):
    """`localCheckpoint()` runs a job that gives the rows their ids, under the settings of
    that moment: the scan takes that plan then. An action over the checkpointed rows under
    other settings later reads them from the checkpoint, ids and all, so it runs (its
    lineage exact); one that reads the scan again under them is refused, naming the
    checkpoint (its rows would get other ids)."""
    start, before, after = {}, *CHANGES["maxPartitionBytes"]
    with restored(spark):
        settle(spark, start)
        i = read(lc.read, data, fmt, "items")
        settle(spark, before)
        kept = cheap_items(i).localCheckpoint()
        settle(spark, after)
        rows = kept.collect()
        refused = r"items.*numbered by localCheckpoint.*700 -> 400"
        with pytest.raises(UnsupportedInput, match=refused):
            cheap_items(i).join(kept.select("okey"), "okey").collect()
        _differs(spark, lc, start, before)
    check_lineage(lc, data, fmt, kept, rows, ref_cheap_items, ["okey", "price"])
