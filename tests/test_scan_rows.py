"""Source rows re-read by position (`repository/lineage/_scans.py`) are exactly the files'
rows as read directly: Parquet rows as pyarrow reads them (values of every type: decimals,
dates and timestamps shared per distinct value, nulls, nested lists and structs; field names),
CSV lines as the file holds them, in the order positions were asked in (unsorted, repeated,
past the end)."""

from __future__ import annotations

import datetime
import decimal
import gc
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _lines import EOLS, join_lines, split_lines
from pyspark.sql import Row
from pyspark.sql import functions as F

from agent.dataframe._scan import ScanFile, parquet_row_groups, plan_scan
from repository.lineage import _scans
from repository.lineage._scans import ScanRows, SourceChanged


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
    assert gc.isenabled()  # collect() turns the cyclic collector off only while it runs
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


def _parquet_scan(paths: list[str], parts: list[list[int]]) -> dict:
    """A scan plan of whole Parquet files, `parts[p]` the file indexes of partition p."""
    files = [ScanFile(p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]
    return {
        "format": "parquet",
        "files": [[f.path, f.size, f.mtime_ns] for f in files],
        "partitions": [[[fi, 0, files[fi].size] for fi in part] for part in parts],
        "row_groups": parquet_row_groups(files),
    }


def test_rows_of_several_partitions_and_files_read_together(tmp_path):
    """`data_of_partitions` (one trace's rows of several partitions, row groups read
    concurrently and only up to their last wanted row) gives each partition's rows as
    `data` does alone and as pyarrow reads them: rows spread over row groups of three files,
    dictionary-encoded strings in some row groups and not in others, then rows further into
    row groups already read in part."""
    n = 2400
    table = _table(n)
    paths = [str(tmp_path / f"{k}.parquet") for k in range(3)]
    pq.write_table(table.slice(0, 1000), paths[0], row_group_size=300)
    pq.write_table(table.slice(1000, 900), paths[1], row_group_size=200, use_dictionary=False)
    # A tiny dictionary page limit: row groups fall back from dictionary to plain pages.
    pq.write_table(table.slice(1900), paths[2], row_group_size=128, dictionary_pagesize_limit=40)
    scan = _parquet_scan(paths, [[0], [1, 2]])
    offsets = [0, 1000]  # each partition's first row in `table`
    rng = np.random.default_rng(11)
    asks = [
        {0: [5, 301, 650, 2], 1: [0, 899, 1200, 450, 1400]},  # early rows of each group
        {0: [299, 999, 998, 3], 1: [199, 1399, 1000, 1001, 0]},  # the groups' last rows
        {0: rng.integers(0, 1000, 50).tolist(), 1: [*rng.integers(0, 1400, 80).tolist(), 1400]},
    ]
    rows = ScanRows()  # one cache across the asks: prefixes read first are extended later
    for ask in asks:
        got = rows.data_of_partitions(
            ("run", 1), scan, {p: np.array(v, dtype=np.int64) for p, v in ask.items()}
        )
        for part, positions in ask.items():
            want = _want(table.slice(offsets[part]), positions)
            want = [w if p < (1000, 1400)[part] else None for w, p in zip(want, positions)]
            assert got[part] == want, (part, positions)
            assert [repr(g) for g in got[part]] == [repr(w) for w in want]
            alone = ScanRows().data(("run", 1), scan, part, np.array(positions, dtype=np.int64))
            assert alone == want
    # One partition at a time on one cache: a group's prefix read for row 5 is read further
    # for row 290, and for the last rows of every group.
    rows = ScanRows()
    for positions in ([5], [290], [5, 290], [299, 599, 899, 999]):
        got = rows.data(("run", 1), scan, 0, np.array(positions, dtype=np.int64))
        assert got == _want(table, positions), positions


def test_rows_of_several_scans_are_read_together(tmp_path, monkeypatch):
    """`data_of_scans` (one trace's rows of several scans: a join's tables) gives each scan's
    rows as it gives them alone, reading the row groups of all the scans in one go (both
    cores busy, not one scan's groups after another's); past `_PREFETCH_ALL` groups, the
    other scans' are read when their rows are taken, and the rows stay the same."""
    table = _table(1200)
    paths = [str(tmp_path / f"{k}.parquet") for k in range(3)]
    for k, path in enumerate(paths):
        pq.write_table(table.slice(400 * k, 400), path, row_group_size=100)
    scans = [_parquet_scan([path], [[0]]) for path in paths]
    asks = [[5, 150, 399], [0, 210], [120, 330, 301, 7]]
    reads: list[list] = []
    real = ScanRows._read_row_groups

    def spy(self, jobs):
        reads.append(sorted((key, fi, rg) for key, _, wanted in jobs for fi, rg in wanted))
        return real(self, jobs)

    monkeypatch.setattr(ScanRows, "_read_row_groups", spy)

    def run(rows: ScanRows) -> list[dict[int, list]]:
        return rows.data_of_scans(
            [
                (("run", k), scan, {0: np.array(ask, dtype=np.int64)})
                for k, (scan, ask) in enumerate(zip(scans, asks))
            ]
        )

    got = run(ScanRows())
    for k, ask in enumerate(asks):
        want = _want(table.slice(400 * k, 400), ask)
        assert got[k] == {0: want}
        assert ScanRows().data(("run", k), scans[k], 0, np.array(ask)) == want
    assert reads[0] == [
        (("run", 0), 0, 0), (("run", 0), 0, 1), (("run", 0), 0, 3),
        (("run", 1), 0, 0), (("run", 1), 0, 2),
        (("run", 2), 0, 0), (("run", 2), 0, 1), (("run", 2), 0, 3),
    ]  # fmt: skip
    # Room for the first two scans' groups only: the third's are read on their own.
    monkeypatch.setattr(_scans, "_PREFETCH_ALL", 6)
    reads.clear()
    assert run(ScanRows()) == got
    assert [len(r) for r in reads] == [5, 3]


def test_a_changed_parquet_file_is_refused(tmp_path):
    """Rows of a file rewritten since the run read it are refused (SourceChanged), whether
    its size or mtime tell (checked once per scan) or only its row groups do (the file was
    rewritten with the same size and mtime)."""
    table = _table(900)
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=300)
    scan = _parquet_scan([path], [[0]])
    st = os.stat(path)
    pq.write_table(table.slice(0, 850), path, row_group_size=300)
    with pytest.raises(SourceChanged, match="changed since the run read it"):
        ScanRows().data(("run", 1), scan, 0, np.array([5]))
    # Rewritten keeping the size and mtime the run saw (the plan made to say so): the row
    # groups differ, and the footer tells.
    pq.write_table(table, path, row_group_size=250)
    st = os.stat(path)
    scan["files"][0][1:] = [st.st_size, st.st_mtime_ns]
    with pytest.raises(SourceChanged, match="row groups differ"):
        ScanRows().data_of_partitions(("run", 1), scan, {0: np.array([5, 700])})
    # Cut short in place, the same size and mtime again: no footer to read.
    with open(path, "r+b") as f:
        f.seek(st.st_size - 8)
        f.write(b"\0" * 8)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SourceChanged, match="cannot be read as Parquet"):
        ScanRows().data(("run", 1), scan, 0, np.array([5]))
    os.remove(path)
    with pytest.raises(SourceChanged, match="is gone"):
        ScanRows().data(("run", 2), scan, 0, np.array([5]))


@pytest.mark.parametrize("blank_lines", [0.001, 1.0])
def test_csv_blank_comment_and_header_lines_are_not_rows(tmp_path, blank_lines):
    """CSV pieces with a header, empty and whitespace-only lines (few, and more than are
    looked at one by one), comment lines, lines starting with spaces that hold data, with
    and without CR, and with lines ending at a lone CR: rows at positions are the data
    lines, in every piece of the split."""
    rng = np.random.default_rng(int(blank_lines * 1000))
    data, body = [], ["k,v"]
    for i in range(9000):
        if rng.random() < blank_lines:
            body.append(rng.choice(["", " ", "\t ", "  \t"]))
        if i % 97 == 0:
            body.append("#note")
        line = f"  {i},x{i}" if i % 7 == 0 else f"{i},y{'z' * (i % 4)}"
        body.append(line)
        data.append(line)
    for name, eol in zip(("lf.csv", "crlf.csv", "mixed.csv"), EOLS):
        path = tmp_path / name
        path.write_bytes(join_lines(body, eol))
        st = os.stat(path)
        step = st.st_size // 3 + 1
        scan = {
            "format": "csv",
            "files": [[str(path), st.st_size, st.st_mtime_ns]],
            "partitions": [[[0, a, min(step, st.st_size - a)]] for a in range(0, st.st_size, step)],
            "options": {"header": True, "comment": "#"},
        }
        rows = ScanRows()
        got, spans = [], []
        for part in range(len(scan["partitions"])):
            count = rows.count(("run", 1), scan, part)
            got += rows.data(("run", 1), scan, part, np.arange(count))
            spans += rows.spans(("run", 1), scan, part, np.arange(count))
        assert got == data, name
        raw = path.read_bytes()
        assert [raw[o : o + n].decode() for _, o, n in spans] == data, name


@pytest.mark.parametrize("fmt", ["csv", "text"])
def test_a_lone_carriage_return_ends_a_line_as_in_spark(tmp_path, fmt):
    """A "\r" not followed by "\n" ends a line (Hadoop's line reader, Spark's without
    `lineSep`), also in a piece's first line and at a piece's end, and a "\r\n" split
    between two pieces is one terminator: every split of the file gives `_lines`' rows (CSV:
    no header, no blank lines; text: every line, empty ones too)."""
    raw = b"k,v\n1,a\n2,b\r3,c\r\n4,d\r\r5,e\n\r6,f\r\n\r\n7,g\r"
    path = tmp_path / "cr.txt"
    path.write_bytes(raw)
    st = os.stat(path)
    csv = fmt == "csv"

    def rows_of(a: int, n: int) -> list[str]:
        lines = split_lines(raw, a, n)[1 if csv and a == 0 else 0 :]  # the header
        return [x for x in lines if x or not csv]

    want = ["1,a", "2,b", "3,c", "4,d", "", "5,e", "", "6,f", "", "7,g"]
    assert rows_of(0, len(raw)) == ([x for x in want if x] if csv else ["k,v", *want])
    for step in range(1, len(raw) + 1):
        scan = {
            "format": fmt,
            "files": [[str(path), st.st_size, st.st_mtime_ns]],
            "partitions": [[[0, a, min(step, len(raw) - a)]] for a in range(0, len(raw), step)],
            "options": {"header": True} if csv else {},
        }
        rows = ScanRows()
        got = []
        for part, (_, a, n) in enumerate(p[0] for p in scan["partitions"]):
            count = rows.count(("run", 1), scan, part)
            mine = rows_of(a, n)
            assert rows.data(("run", 1), scan, part, np.arange(count)) == mine, (step, part)
            got += mine
        assert got == rows_of(0, len(raw)), step


@pytest.mark.parametrize("eol", EOLS)
def test_csv_rows_found_scanning_only_the_lines_before_them(tmp_path, monkeypatch, eol):
    """A row is found by scanning a partition's lines up to it only (in steps, made tiny
    here): early rows first, then rows further on, on one cache, give the data lines, across
    header, blank and comment lines and two files in a partition; a step boundary in
    the middle of a line, a CR or a run of dropped lines changes nothing."""
    monkeypatch.setattr(_scans, "_STEP", 37)
    rng = np.random.default_rng(len(eol))
    files, pieces, data = [], [], []
    for fi in range(2):
        body = ["k,v"]
        for i in range(300):
            if rng.random() < 0.2:
                body.extend([""] * int(rng.integers(1, 90)) + ["  ", "#c"])  # > a step of drops
            line = f"{fi}-{i}," + "w" * int(rng.integers(0, 30))
            body.append(line)
            data.append(line)
        path = tmp_path / f"{fi}.csv"
        path.write_bytes(join_lines(body, eol, fi))
        st = os.stat(path)
        files.append([str(path), st.st_size, st.st_mtime_ns])
        pieces.append([fi, 0, st.st_size])
    scan = {
        "format": "csv",
        "files": files,
        "partitions": [pieces],
        "options": {"header": True, "comment": "#"},
    }
    n = len(data)
    rows = ScanRows()
    for positions in ([0], [2], [1, 40], [299], [300, 5], [*rng.integers(0, n, 30).tolist()], [n]):
        got = rows.data(("run", 1), scan, 0, np.array(positions, dtype=np.int64))
        assert got == [data[p] if p < n else None for p in positions], positions
    assert rows.count(("run", 1), scan, 0) == n
    fresh = ScanRows()
    assert fresh.data(("run", 1), scan, 0, np.array([n - 1, n, n + 3])) == [data[-1], None, None]
    spans = fresh.spans(("run", 1), scan, 0, np.arange(n))
    full = fresh.lines(("run", 1), scan, 0)
    assert full.complete and len(full.starts) == n
    growing = ScanRows()  # partial tables extended step by step, as batches of a big group
    for need in (1, 5, 150, 301, 302, 450, n):  # are the whole one's first rows, exactly
        part = growing.lines(("run", 1), scan, 0, need)
        k = len(part.starts)
        assert need <= k and part.complete == (k == n)
        assert (part.starts == full.starts[:k]).all() and (part.ends == full.ends[:k]).all()
        assert (part.file == full.file[:k]).all()
    for need in (1, 5, 150, 301):
        part = ScanRows().lines(("run", 1), scan, 0, need)
        assert not part.complete and need <= len(part.starts) < n
        k = len(part.starts)
        assert (part.starts == full.starts[:k]).all() and (part.ends == full.ends[:k]).all()
        assert (part.file == full.file[:k]).all()
    texts = {f[0]: Path(f[0]).read_bytes() for f in files}
    assert [texts[p][o : o + k].decode() for p, o, k in spans] == data
