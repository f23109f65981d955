"""Source rows re-read by position (`repository/lineage/_scans.py`) are exactly the files'
rows as read directly: Parquet rows as pyarrow reads them (values of every type: decimals,
dates and timestamps shared per distinct value, nulls, nested lists and structs; field names),
CSV lines as the file holds them, in the order positions were asked in (unsorted, repeated,
past the end)."""

from __future__ import annotations

import datetime
import decimal
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

from agent.dataframe._scan import ScanFile, parquet_row_groups, plan_scan
from repository.lineage._scans import ScanRows


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    dec = [
        None if i % 17 == 0 else decimal.Decimal(int(v)) / 100
        for i, v in enumerate(rng.integers(0, 900, n))
    ]
    day = datetime.date(1995, 1, 1)
    return pa.table(
        {
            "k": pa.array(range(n), pa.int64()),
            "price": pa.array(dec, pa.decimal128(15, 2)),
            "wide": pa.array(
                [
                    None if i % 29 == 0 else decimal.Decimal(i * 1000003).scaleb(-6)
                    for i in range(n)
                ],
                pa.decimal128(20, 6),
            ),
            "d": pa.array(
                [None if i % 11 == 0 else day + datetime.timedelta(days=i % 40) for i in range(n)],
                pa.date32(),
            ),
            "ts": pa.array(
                [
                    datetime.datetime(2020, 1, 1, i % 24, tzinfo=datetime.timezone.utc)
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "s": pa.array([None if i % 13 == 0 else f"s{i % 9}" for i in range(n)]),
            "xs": pa.array([[i, i + 1] if i % 5 else None for i in range(n)], pa.list_(pa.int32())),
            "st": pa.array([{"a": i % 3, "b": f"b{i}"} for i in range(n)]),
        }
    )


def _scan(path: str) -> dict:
    """A one-partition scan plan of one Parquet file, as the agent stores it."""
    st = os.stat(path)
    return {
        "format": "parquet",
        "files": [[path, st.st_size, st.st_mtime_ns]],
        "partitions": [[[0, 0, st.st_size]]],
        "row_groups": parquet_row_groups([ScanFile(path, st.st_size, st.st_mtime_ns)]),
    }


def _want(table: pa.Table, positions: list[int]) -> list:
    """pyarrow's own rows at `positions` (None past the end), as Rows."""
    rows = table.to_pylist()
    return [Row(**rows[p]) if 0 <= p < len(rows) else None for p in positions]


def test_parquet_rows_equal_pyarrow_reading_the_file(tmp_path):
    n = 3000
    table = _table(n)
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=400)
    scan = _scan(path)
    assert len(scan["row_groups"][0]) == 8
    rng = np.random.default_rng(9)
    cases = {
        "all, in order": list(range(n)),
        "sorted sample": sorted(rng.choice(n, 700, replace=False).tolist()),
        "unsorted, repeated, past the end": [*rng.integers(0, n, 500).tolist(), n, n + 7, 2, 2],
        "a permutation": rng.permutation(n).tolist(),
        "one row group": list(range(800, 1200)),
        "nothing there": [n, n + 1],
    }
    for name, positions in cases.items():
        got = ScanRows().data(("run", 1), scan, 0, np.array(positions, dtype=np.int64))
        want = _want(table, positions)
        assert got == want, name
        for g, w in zip(got, want):
            if w is None:
                assert g is None, name
                continue
            assert type(g) is Row and g.__fields__ == w.__fields__, name
            assert [type(v) for v in g] == [type(v) for v in w], name
            assert repr(g) == repr(w), name  # decimals: the same exponent too
            assert g.asDict() == w.asDict() and g.ts.tzinfo == w.ts.tzinfo, name


@pytest.mark.spark
def test_traced_parquet_rows_equal_pyarrow(lc, spark, tmp_path):
    """End to end over several scan partitions: a group's traced source rows are the file's
    rows (by the key column), in the order of their record ids."""
    n = 4000
    table = _table(n)
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(table.slice(0, 2500), d / "a.parquet", row_group_size=300)
    pq.write_table(table.slice(2500), d / "b.parquet", row_group_size=500)
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "20000")
    try:
        src = lc.read.parquet(str(d))
        assert len(plan_scan(spark, "parquet", [str(d)], {})["partitions"]) > 2
        q = src.groupBy((F.col("k") % 3).alias("g")).agg(F.count("*").alias("n"))
        q.collect()
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)
    traced = q.lineage().filter(lambda r: r["g"] == 1).go_back_all()
    got = traced.collect()
    assert sorted(traced.record_ids.tolist()) == traced.record_ids.tolist()
    rows = table.to_pylist()
    want = [Row(**rows[r.k]) for r in got]
    assert got == want and [r.__fields__ for r in got] == [w.__fields__ for w in want]
    assert sorted(r.k for r in got) == list(range(1, n, 3))


def test_csv_lines_at_positions_equal_the_files_lines(tmp_path):
    """A partition of two CSV files (headers, CRLF in one): lines at unsorted, repeated and
    out-of-range positions are the files' data lines, in the order asked."""
    texts = {
        "a.csv": "k,v\n" + "".join(f"{i},a{i}\n" for i in range(40)),
        "b.csv": "k,v\r\n" + "".join(f"{i},b{'x' * (i % 5)}\r\n" for i in range(25)),
    }
    files, pieces, lines = [], [], []
    for fi, (name, text) in enumerate(texts.items()):
        path = tmp_path / name
        path.write_bytes(text.encode())
        st = os.stat(path)
        files.append([str(path), st.st_size, st.st_mtime_ns])
        pieces.append([fi, 0, st.st_size])
        lines += text.replace("\r\n", "\n").splitlines()[1:]
    scan = {
        "format": "csv",
        "files": files,
        "partitions": [pieces],
        "options": {"header": True},
    }
    rng = np.random.default_rng(3)
    n = len(lines)
    for positions in (
        list(range(n)),
        rng.permutation(n).tolist(),
        [*rng.integers(0, n, 50).tolist(), -1, n, 3, 3, n + 5, 41],
    ):
        got = ScanRows().data(("run", 1), scan, 0, np.array(positions, dtype=np.int64))
        assert got == [lines[p] if 0 <= p < n else None for p in positions]
