"""Line ends as Spark reads them: without `lineSep`, Hadoop's line reader ends a line at
`\\n`, at `\\r\\n` and at a lone `\\r`, and a split (start, start + length) reads the lines
that start in (start, start + length] (from 0 for the first split). `_lines` states that
rule; the first test checks it against Spark's own layout, the
second that rows of a file with lone `\\r`s trace back to their lines (the repository's line
reader follows the rule)."""

from __future__ import annotations

import random

import pytest
from _lines import line_at, line_starts, split_lines
from pyspark.sql import functions as F

from agent import LineageRDD

pytestmark = pytest.mark.spark

ENDS = ["\n", "\r\n", "\r", "\r", "\n\r", "\r\r"]


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_ends_lines_at_a_lone_cr(spark, tmp_path, seed):
    rng = random.Random(seed)
    for trial in range(4):
        lines = [f"r{i}" + "x" * rng.randint(0, 12) for i in range(rng.randint(20, 60))]
        text = "".join(line + rng.choice(ENDS) for line in lines)
        if trial % 2:
            text = text.rstrip("\r\n")  # no terminator at the end
        data = text.encode()
        path = tmp_path / f"t{trial}.txt"
        path.write_bytes(data)
        split = rng.randint(8, 60)
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
        spark.conf.set("spark.sql.files.openCostInBytes", "0")
        try:
            rows = (
                spark.read.text(str(path))
                .select(
                    "value",
                    F.col("_metadata.file_block_start").alias("s"),
                    F.col("_metadata.file_block_length").alias("n"),
                )
                .collect()
            )
        finally:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
            spark.conf.unset("spark.sql.files.openCostInBytes")
        got: dict[tuple[int, int], list[str]] = {}
        for r in rows:
            got.setdefault((r.s, r.n), []).append(r.value)
        assert len(rows) == len(line_starts(data)), (trial, split)
        for (s, n), values in got.items():
            assert values == split_lines(data, s, n), (trial, split, s, n)


def test_lone_cr_rows_trace_to_their_lines(lc, spark, tmp_path):
    path = tmp_path / "cr.csv"
    body = "".join(f"{i},n{i}" + ("\rz" if i in (3, 7) else "") + "\n" for i in range(12))
    path.write_bytes(("id,name\n" + body).encode())
    spark.conf.set("spark.sql.files.maxPartitionBytes", "40")
    try:
        df = lc.read.csv(str(path), header=True, schema="id INT, name STRING")
        rows = df.collect()
        vanilla = spark.read.csv(str(path), header=True, schema="id INT, name STRING").collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert rows == vanilla and len(rows) == 14  # "z" is a row of its own, as in Spark
    ids = df.lineage().record_ids
    data = path.read_bytes()
    lines = [line_at(data, p) for p in line_starts(data)[1:]]  # the header is no row
    got = [
        LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect() for i in range(14)
    ]
    assert sorted(b for back in got for b in back) == sorted(lines)
    for r, back in zip(rows, got):
        assert back == [f"{r.id},{r.name}" if r.id is not None else "z"]
