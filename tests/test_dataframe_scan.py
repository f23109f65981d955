"""DataFrame scans: the driver plans file partitions exactly as Spark does, and a scan row's
id (partition, position) re-reads exactly the line (or Parquet row) Spark read it from.

Spark's own layout is the reference: `spark_partition_id()`, `_metadata.file_path`,
`_metadata.file_block_start/length` and `monotonically_increasing_id()` of every row, over
many file-size and configuration shapes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil

import numpy as np
import pytest
from _dfcheck import explained
from pyspark.sql import functions as F

from agent import UnsupportedInput
from agent.dataframe._scan import plan_scan
from journals import pack_record_id

pytestmark = pytest.mark.spark

CONFS = [
    {},
    {"spark.sql.files.maxPartitionBytes": "3000"},
    {"spark.sql.files.maxPartitionBytes": "1k", "spark.sql.files.openCostInBytes": "700"},
    {"spark.sql.files.maxPartitionBytes": "5000", "spark.sql.files.minPartitionNum": "7"},
    {"spark.sql.files.maxPartitionBytes": "900", "spark.sql.files.maxPartitionNum": "3"},
    {"spark.sql.files.openCostInBytes": "0", "spark.sql.leafNodeDefaultParallelism": "5"},
]


@contextlib.contextmanager
def confs(spark, settings: dict):
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def write_csv(path, rng: random.Random, n: int, *, header=True, blanks=True, crlf=False):
    nl = "\r\n" if crlf else "\n"
    rows = []
    with open(path, "w", newline="") as f:
        if header:
            f.write("k,v,s" + nl)
        for i in range(n):
            if blanks and rng.random() < 0.05:
                f.write(rng.choice(["", "   ", "\t"]) + nl)
            row = f"{i},{rng.randint(0, 99)},{'x' * rng.randint(0, 40)}"
            rows.append(row)
            f.write(row + nl)
    return rows


def make_dir(tmp_path, name: str, sizes: list[int], seed: int, **kw) -> str:
    rng = random.Random(seed)
    d = tmp_path / name
    d.mkdir()
    for j, n in enumerate(sizes):
        write_csv(d / f"part-{j}.csv", rng, n, **kw)
    return str(d)


def spark_layout(df):
    """Spark's own (partition -> ordered distinct pieces) and each row's (mono id, path)."""
    rows = df.select(
        F.spark_partition_id().alias("p"),
        F.col("_metadata.file_path").alias("f"),
        F.col("_metadata.file_block_start").alias("s"),
        F.col("_metadata.file_block_length").alias("n"),
    ).collect()
    parts: dict[int, list] = {}
    for r in rows:
        piece = (r.f.replace("file://", "").replace("file:", ""), r.s, r.n)
        lst = parts.setdefault(r.p, [])
        if piece not in lst:
            lst.append(piece)
    return parts


def planned(scan: dict) -> dict[int, list]:
    files = scan["files"]
    return {
        p: [(files[fi][0], s, n) for fi, s, n in pieces]
        for p, pieces in enumerate(scan["partitions"])
    }


@pytest.mark.parametrize(
    "conf", CONFS, ids=lambda c: ",".join(f"{k[10:]}={v}" for k, v in c.items()) or "default"
)
def test_csv_partitions_match_spark(spark, tmp_path, conf):
    # Files of unequal and of equal sizes (ties keep listing order), one empty file.
    path = make_dir(tmp_path, "in", [40, 300, 120, 120, 7, 0, 260], seed=len(conf))
    with confs(spark, conf):
        df = spark.read.csv(path, header=True, schema="k INT, v INT, s STRING")
        scan = plan_scan(spark, "csv", [path], {"header": True})
        got = spark_layout(df)
    want = planned(scan)
    # Spark only shows pieces that produced rows; every one of them is where we say.
    for p, pieces in got.items():
        assert pieces == [x for x in want[p] if x in pieces], (p, pieces, want[p])
    assert len(want) >= max(got) + 1


def lines_of(lc, scan_df) -> tuple[list, list]:
    """(Spark's rows, the raw data our ids resolve to) for every row of a captured scan."""
    rows = scan_df.dataframe.collect()
    h = scan_df.lineage_columns.longs[0]
    ids = np.array([r[h] for r in rows], dtype=np.int64)
    scan_df.take(1)  # an action: the run's descriptor now holds the scan's plan
    lc.repo.rollover()
    return rows, lc.repo.lineage.record_data(lc.run_id, ids)


@pytest.mark.parametrize("conf", CONFS[:5], ids=range(5))
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_csv_rows_resolve_to_their_lines(lc, spark, tmp_path, conf, crlf):
    path = make_dir(tmp_path, "in", [90, 250, 30, 30], seed=7, crlf=crlf)
    with confs(spark, conf):
        df = lc.read.csv(path, header=True, schema="k INT, v INT, s STRING")
        rows, data = lines_of(lc, df)
    assert len(rows) == 400
    for r, line in zip(rows, data):
        assert line == f"{r.k},{r.v},{r.s or ''}", (r, line)


def test_json_and_text_rows_resolve(lc, spark, tmp_path):
    rng = random.Random(5)
    d = tmp_path / "j"
    d.mkdir()
    for j in range(3):
        with open(d / f"{j}.json", "w") as f:
            for i in range(150 + 40 * j):
                if rng.random() < 0.05:
                    f.write(rng.choice(["", "  ", "\t "]) + "\n")
                f.write(json.dumps({"k": i, "f": j, "s": "y" * rng.randint(0, 30)}) + "\n")
    with confs(spark, {"spark.sql.files.maxPartitionBytes": "2000"}):
        df = lc.read.json(str(d), schema="k INT, f INT, s STRING")
        rows, data = lines_of(lc, df)
        assert len(rows) == 3 * 150 + 40 + 80
        for r, line in zip(rows, data):
            assert json.loads(line) == {"k": r.k, "f": r.f, "s": r.s}, (r, line)
        t = lc.read.text(str(d))
        rows, data = lines_of(lc, t)
    assert len(rows) == sum(len((d / f"{j}.json").read_text().splitlines()) for j in range(3))
    for r, line in zip(rows, data):
        assert r.value == line


def test_parquet_rows_resolve(lc, spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "pq"
    d.mkdir()
    for j, n in enumerate([5000, 1200, 9000]):
        t = pa.table({"k": list(range(n)), "f": [j] * n, "s": [f"v{i % 97}" for i in range(n)]})
        pq.write_table(t, d / f"{j}.parquet", row_group_size=700)
    spark.range(3000).selectExpr("id AS k", "9 AS f", "CAST(id % 13 AS STRING) AS s").repartition(
        2
    ).write.parquet(str(d / "spark"))
    for name in os.listdir(d / "spark"):
        if name.endswith(".parquet"):
            os.replace(d / "spark" / name, d / f"spark-{name}")
    shutil.rmtree(d / "spark")
    with confs(spark, {"spark.sql.files.maxPartitionBytes": "9000"}):
        df = lc.read.parquet(str(d))
        rows, data = lines_of(lc, df)
    assert len(rows) == 18200
    h = df.lineage_columns.longs[0]
    for r, got in zip(rows, data):
        want = {k: v for k, v in r.asDict().items() if k != h}
        assert got is not None and dict(got.asDict()) == want


def test_record_at_names_csv_lines(lc, spark, tmp_path):
    path = make_dir(tmp_path, "in", [200], seed=3)
    with confs(spark, {"spark.sql.files.maxPartitionBytes": "1500"}):
        df = lc.read.csv(path, header=True, schema="k INT, v INT, s STRING")
        rows, data = lines_of(lc, df)
    f = os.path.join(path, "part-0.csv")
    with open(f, "rb") as fh:
        raw = fh.read()
    h = df.lineage_columns.longs[0]
    by_line = {line: r[h] for r, line in zip(rows, data)}
    offset = 0
    for line in raw.split(b"\n")[:-1]:
        text = line.decode()
        rid = lc.repo.lineage.record_at(lc.run_id, f, offset + len(line) // 2)
        if text in by_line:
            assert rid == by_line[text], text
        else:  # the header and blank lines are no rows
            assert rid is None or text.strip() == "" or text.startswith("k,v")
        offset += len(line) + 1
    assert lc.repo.lineage.is_scan_row(lc.run_id, next(iter(by_line.values())))
    assert not lc.repo.lineage.is_scan_row(lc.run_id, pack_record_id(1, 0, 10**6))


def test_changed_source_file_is_refused(lc, spark, tmp_path):
    from repository import BadInput

    path = make_dir(tmp_path, "in", [50], seed=1)
    df = lc.read.csv(path, header=True, schema="k INT, v INT, s STRING")
    rows = df.dataframe.collect()
    df.take(1)
    lc.repo.rollover()
    with open(os.path.join(path, "part-0.csv"), "a") as f:
        f.write("999,1,zz\n")
    h = df.lineage_columns.longs[0]
    with pytest.raises(BadInput, match="changed"):
        lc.repo.lineage.record_data(lc.run_id, np.array([rows[0][h]]))


@pytest.mark.parametrize(
    ("fmt", "options", "match"),
    [
        ("csv", {"multiLine": True}, "multiLine"),
        ("json", {"multiLine": "true"}, "multiline"),
        ("csv", {"mode": "DROPMALFORMED"}, "DROPMALFORMED"),
        ("text", {"wholetext": True}, "wholetext"),
        ("csv", {"lineSep": ";"}, "separator"),
        ("csv", {"encoding": "UTF-16"}, "encoding"),
    ],
)
def test_untraceable_readers_are_refused(lc, tmp_path, fmt, options, match):
    path = make_dir(tmp_path, "in", [5], seed=1)
    with pytest.raises(UnsupportedInput, match=match):
        lc.read.load(path, format=fmt, **options)


def test_compressed_and_nested_inputs_are_refused(lc, tmp_path):
    import bz2

    d = tmp_path / "bz"
    d.mkdir()
    (d / "a.csv.bz2").write_bytes(bz2.compress(b"1,2\n"))
    with pytest.raises(UnsupportedInput, match="compressed"):
        lc.read.csv(str(d))
    (tmp_path / "nest" / "k=1").mkdir(parents=True)
    (tmp_path / "nest" / "k=1" / "a.csv").write_text("1,2\n")
    with pytest.raises(UnsupportedInput, match="subdirectory"):
        lc.read.csv(str(tmp_path / "nest"))


def write_filter_input(d, fmt: str, seed: int) -> list[dict]:
    """Three files of unique rows for a filter test, with a header (CSV), blank lines and
    comment lines (CSV, `#`): every (k, v, s) with its raw line, in file order."""
    rng = random.Random(seed)
    d.mkdir()
    rows = []
    k = 0
    for j, n in enumerate([170, 60, 230]):
        with open(d / f"{j}.{fmt}", "w") as f:
            if fmt == "csv":
                f.write("k,v,s\n")
            for _ in range(n):
                if rng.random() < 0.06:
                    f.write(rng.choice(["", "  ", "\t"]) + "\n")
                if fmt == "csv" and rng.random() < 0.05:
                    f.write(f"#{rng.randint(0, 99)},0,comment\n")
                v, s = rng.randint(0, 99), "z" * rng.randint(0, 25)
                as_json = json.dumps({"k": k, "v": v, "s": s})
                line = f"{k},{v},{s}" if fmt == "csv" else as_json
                f.write(line + "\n")
                rows.append({"k": k, "v": v, "s": s, "line": line})
                k += 1
    return rows


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_filtered_scan_rows_resolve_to_their_lines(lc, spark, tmp_path, fmt):
    """A selective filter right over a captured scan (one Spark would push into the CSV or
    JSON parser, dropping rows before they are numbered): the surviving rows' ids still
    re-read exactly their own lines, over files split into several partitions."""
    d = tmp_path / fmt
    written = write_filter_input(d, fmt, seed=11)
    with confs(spark, {"spark.sql.files.maxPartitionBytes": "1500"}):
        if fmt == "csv":
            df = lc.read.csv(str(d), header=True, comment="#", schema="k INT, v INT, s STRING")
        else:
            df = lc.read.json(str(d), schema="k INT, v INT, s STRING")
        assert len(plan_scan(spark, fmt, [str(d)], {})["partitions"]) >= 4
        kept = df.where((F.col("v") < 20) & (F.col("k") % 3 != 0))
        rows, data = lines_of(lc, kept)
    want = sorted(r["line"] for r in written if r["v"] < 20 and r["k"] % 3 != 0)
    assert 40 < len(want) < len(written) // 2  # selective, not empty
    assert sorted(data) == want
    for r, line in zip(rows, data):
        if fmt == "csv":
            assert line == f"{r.k},{r.v},{r.s or ''}", (r, line)
        else:
            assert json.loads(line) == {"k": r.k, "v": r.v, "s": r.s}, (r, line)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_captured_scan_reads_only_the_columns_used(lc, spark, tmp_path, fmt):
    """The id projection over the scan keeps Spark's column pruning: the parser converts only
    the columns the query uses, as in vanilla (the filter itself is not pushed below the id:
    see the test above)."""
    d = tmp_path / fmt
    write_filter_input(d, fmt, seed=3)
    schema = "k INT, v INT, s STRING"
    if fmt == "csv":
        df = lc.read.csv(str(d), header=True, comment="#", schema=schema)
    else:
        df = lc.read.json(str(d), schema=schema)
    plan = explained(df.where(F.col("v") < 20).groupBy().agg(F.sum("k")).dataframe, "formatted")
    assert "ReadSchema: struct<k:int,v:int>" in plan, plan
    assert "PushedFilters" not in plan, plan
