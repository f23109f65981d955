"""Rows of big groups built in bulk (`repository/lineage/_arrowrows.py`) are exactly what
pyarrow's `to_pylist()` makes: the same values of the same Python types (ints, floats,
bools, Decimals with their exponent, dates, timestamps, strings, bytes, nested values),
nulls in every column, dictionary columns whose chunks have different dictionaries (or none);
and a big group traced through `ScanRows` over many row groups equals pyarrow reading the
whole file, in the order the positions were asked in (reversed, repeated)."""

from __future__ import annotations

import datetime
import decimal
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row

from agent.dataframe._scan import ScanFile, parquet_row_groups
from repository.lineage._arrowrows import column_values, rows_of
from repository.lineage._scans import ScanRows

N = 1000  # past the bulk paths' threshold
_FIRST = datetime.date(1, 1, 1)


def _nulls(values: list, every: int) -> list:
    return [None if i % every == 0 else v for i, v in enumerate(values)]


def _columns(n: int) -> dict[str, pa.Array]:
    """A column of each type, nulls in every one (at a different step each)."""
    rng = np.random.default_rng(3)
    ints = rng.integers(-(2**62), 2**62, n).tolist()
    day = datetime.date(1992, 1, 1)
    return {
        "i64": pa.array(_nulls(ints, 7), pa.int64()),
        "i8": pa.array(_nulls(rng.integers(-128, 128, n).tolist(), 5), pa.int8()),
        "u64": pa.array(_nulls([2**64 - 1 - i for i in range(n)], 9), pa.uint64()),
        "f64": pa.array(_nulls((rng.random(n) * 1e6 - 5e5).tolist(), 6), pa.float64()),
        "f32": pa.array(_nulls(rng.random(n).tolist(), 4), pa.float32()),
        "b": pa.array(_nulls((rng.random(n) < 0.5).tolist(), 3), pa.bool_()),
        "s": pa.array(_nulls([f"v{i}é" * (i % 4) for i in range(n)], 8)),
        "ls": pa.array(_nulls([f"w{i % 7}" for i in range(n)], 10), pa.large_string()),
        "bin": pa.array(_nulls([bytes([i % 256, 255]) for i in range(n)], 11), pa.binary()),
        "dec_few": pa.array(
            _nulls([decimal.Decimal(i % 50) / 100 for i in range(n)], 12), pa.decimal128(15, 2)
        ),
        "dec_many": pa.array(
            _nulls([decimal.Decimal(int(v)).scaleb(-2) for v in ints], 13), pa.decimal128(38, 2)
        ),
        "dec_int": pa.array(_nulls([decimal.Decimal(i) for i in range(n)], 5), pa.decimal128(9, 0)),
        "d_few": pa.array(
            _nulls([day + datetime.timedelta(days=i % 30) for i in range(n)], 14), pa.date32()
        ),
        "d_many": pa.array(
            _nulls([_FIRST + datetime.timedelta(days=i * 3653 % 3_650_000) for i in range(n)], 6),
            pa.date32(),
        ),
        "ts": pa.array(
            _nulls([datetime.datetime(2020, 1, 1, i % 24, i % 60) for i in range(n)], 15),
            pa.timestamp("us"),
        ),
        "tsz": pa.array(
            _nulls(
                [
                    datetime.datetime(2021, 3, 1, tzinfo=datetime.timezone.utc)
                    + datetime.timedelta(seconds=i * 7919)
                    for i in range(n)
                ],
                16,
            ),
            pa.timestamp("us", tz="UTC"),
        ),
        "dict_few": pa.array(_nulls([f"k{i % 5}" for i in range(n)], 17)).dictionary_encode(),
        "dict_many": pa.array(_nulls([f"u{i}" for i in range(n)], 18)).dictionary_encode(),
        "xs": pa.array(_nulls([[i, None] for i in range(n)], 19), pa.list_(pa.int32())),
        "st": pa.array(_nulls([{"a": i % 3, "b": f"b{i}"} for i in range(n)], 20)),
    }


def _same(got: list, want: list, name: str) -> None:
    assert len(got) == len(want), name
    assert [type(v) for v in got] == [type(v) for v in want], name
    assert [repr(v) for v in got] == [repr(v) for v in want], name  # decimals' exponents too


@pytest.mark.parametrize("name", list(_columns(N)))
def test_column_values_equal_to_pylist(name):
    col = _columns(N)[name]
    assert col.null_count > 0, name
    _same(column_values(col), col.to_pylist(), name)
    # A chunked column: chunks of different lengths (some below the bulk threshold).
    chunked = pa.chunked_array([col.slice(0, 10), col.slice(10, 700), col.slice(710)])
    _same(column_values(chunked), chunked.to_pylist(), name)
    # A taken (reordered, repeated) column, as a trace takes a row group's wanted rows.
    idx = np.concatenate([np.arange(N)[::-1], np.repeat(np.arange(0, N, 37), 3)])
    taken = col.take(pa.array(idx))
    _same(column_values(taken), taken.to_pylist(), name)


def test_dictionary_chunks_with_different_dictionaries_or_none():
    """Row groups of one file: one chunk dictionary-encoded, one with another dictionary,
    one plain (a writer that fell back from dictionary pages)."""
    a = pa.array(_nulls([f"x{i % 3}" for i in range(300)], 7)).dictionary_encode()
    b = pa.array([f"y{i % 4}" for i in range(200)]).dictionary_encode()
    c = pa.array(_nulls([f"z{i}" for i in range(100)], 5)).dictionary_encode()
    col = pa.chunked_array([a, b, c])
    _same(column_values(col), col.to_pylist(), "dictionaries")


def test_out_of_range_dates_raise_as_to_pylist_does():
    days = pa.array(np.arange(-719163, -719163 + N, dtype=np.int32)).view(pa.date32())
    with pytest.raises(OverflowError):
        days.to_pylist()
    with pytest.raises(OverflowError):
        column_values(days)


def test_rows_of_equal_rows_of_to_pylist():
    table = pa.table(_columns(N))
    got = rows_of(table)
    want = [Row(**r) for r in table.to_pylist()]
    assert got == want
    assert all(type(g) is Row and g.__fields__ == list(table.column_names) for g in got)
    _same([tuple(g) for g in got], [tuple(w) for w in want], "rows")
    assert got[3].asDict() == want[3].asDict() and got[5].s == want[5].s


def test_a_big_group_over_many_row_groups_equals_pyarrow(tmp_path):
    """Many row groups (some dictionary-encoded, some not), positions reversed and repeated:
    each row is the file's row at its position, as pyarrow reads the whole file."""
    n = 6000
    table = pa.table({k: v for k, v in _columns(n).items() if not k.startswith("dict")})
    table = table.append_column(
        "tag", pa.array(_nulls([f"t{i % 6}" for i in range(n)], 9), pa.string())
    )
    path = str(tmp_path / "big.parquet")
    pq.write_table(table, path, row_group_size=250, dictionary_pagesize_limit=300)
    scan = _one_file_scan(path)
    assert len(scan["row_groups"][0]) == 24
    whole = pq.read_table(path).to_pylist()
    rng = np.random.default_rng(21)
    cases = {
        "every row": np.arange(n),
        "reversed": np.arange(n)[::-1].copy(),
        "repeated": np.repeat(rng.choice(n, 900, replace=False), 2),
        "sample, past the end": np.append(np.sort(rng.choice(n, 2500, replace=False)), [n, n + 9]),
    }
    for name, pos in cases.items():
        got = ScanRows().data(("run", 1), scan, 0, pos.astype(np.int64))
        want = [Row(**whole[p]) if p < n else None for p in pos.tolist()]
        assert got == want, name
        _same(
            [None if g is None else tuple(g) for g in got],
            [None if w is None else tuple(w) for w in want],
            name,
        )


def _one_file_scan(path: str) -> dict:
    st = os.stat(path)
    return {
        "format": "parquet",
        "files": [[path, st.st_size, st.st_mtime_ns]],
        "partitions": [[[0, 0, st.st_size]]],
        "row_groups": parquet_row_groups([ScanFile(path, st.st_size, st.st_mtime_ns)]),
    }
