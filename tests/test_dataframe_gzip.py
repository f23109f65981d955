"""gzip-compressed CSV / JSON lines / text inputs with lineage: Spark reads each .gz file
whole (one piece), and a row is re-read from the file's decompressed bytes; its
(file, offset) names a byte of those. Against brute force, backward and forward."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import _dfref as R
import numpy as np
import pytest
from _dfcheck import Data, check, make_data
from pyspark.sql import Row

from agent import LineageRDD, UnsupportedInput

pytestmark = pytest.mark.spark


class GzData(Data):
    """The tables of `make_data`, each file gzipped (`name.csv.gz`)."""

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}.csv.gz"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("gz")
    plain = make_data(d)
    for name in plain.rows:
        src = f"{d}/{name}.csv"
        with open(src, "rb") as f, gzip.open(src + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(src)
    return GzData(plain.dir, plain.rows, plain.lines, plain.offsets)


def test_a_join_and_aggregate_over_gzip_csv(lc, spark, data):
    """Each output row's trace and each line's forward trace (named by its offset in the
    decompressed file) against brute force; several gzip files packed into partitions."""
    from pyspark.sql import functions as F

    def build(t):
        joined = t["orders"].where("status != 'O'").join(t["items"], "okey")
        return joined.groupBy("ckey").agg(F.sum("qty").alias("q"))

    def ref(T):
        orders = R.where(T["orders"], lambda r: r["status"] != "O")
        j = R.join(orders, T["items"], lambda a, b: a["okey"] == b["okey"])
        return R.group(
            j, lambda r: (r["ckey"],), lambda k, rs: {"ckey": k[0], "q": sum(r["qty"] for r in rs)}
        )

    check(lc, spark, data, build, ref, ["ckey", "q"])


def _hash(i: int, j: int) -> str:
    return hashlib.sha256(f"{i}.{j}".encode()).hexdigest()[:24]


def _lines_file(path: str, lines: list[str], gz: bool) -> None:
    text = "".join(line + "\n" for line in lines).encode()
    if gz:
        with gzip.open(path, "wb") as g:
            g.write(text)
    else:
        with open(path, "wb") as f:
            f.write(text)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_directory_of_gzip_and_plain_files(lc, spark, tmp_path, fmt):
    """Plain and gzip files side by side (one empty), big enough that the plain ones are
    split: each row traces back to its own line, and each line forward to its row."""
    tmp_path = tmp_path / "in"
    tmp_path.mkdir()
    files = {}
    for i, gz in enumerate([True, False, True, True, False]):
        name = f"part-{i}.{'json' if fmt == 'json' else 'txt'}" + (".gz" if gz else "")
        n = 0 if i == 3 else 40 + 7 * i
        # Hashes: lines that compress poorly, so a gzip file is bigger than a split too.
        lines = [
            f'{{"k": {i}, "v": {j}, "h": "{_hash(i, j)}"}}'
            if fmt == "json"
            else f"{i}:{j}:{_hash(i, j)}"
            for j in range(n)
        ]
        _lines_file(str(tmp_path / name), lines, gz)
        files[name] = lines
    spark.conf.set("spark.sql.files.maxPartitionBytes", "300")
    try:
        if fmt == "json":
            df = lc.read.json(str(tmp_path), schema="k INT, v INT, h STRING")
            rows = df.collect()
            vanilla = spark.read.json(str(tmp_path), schema="k INT, v INT, h STRING").collect()
        else:
            df = lc.read.text(str(tmp_path))
            rows = df.collect()
            vanilla = spark.read.text(str(tmp_path)).collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert rows == vanilla
    assert len(rows) == sum(len(ls) for ls in files.values())
    lin = df.lineage()
    ids = lin.record_ids
    for i, row in enumerate(rows):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        want = f'{{"k": {row.k}, "v": {row.v}, "h": "{row.h}"}}' if fmt == "json" else row.value
        assert back == [want]
    for name, lines in files.items():
        offset = 0
        for line in lines:
            rids = lc.repo.lineage.records_at(lc.run_id, str(tmp_path / name), offset + 1)
            assert len(rids) == 1, (name, line)
            fwd = LineageRDD(lc.repo, lc.run_id, np.array(rids)).go_next_all().collect()
            want = Row(**json.loads(line)) if fmt == "json" else Row(value=line)
            assert fwd == [want], (name, line)
            offset += len(line) + 1


def test_other_compressed_inputs_are_refused(lc, tmp_path):
    import bz2

    path = tmp_path / "x.csv.bz2"
    path.write_bytes(bz2.compress(b"a,b\n1,2\n"))
    with pytest.raises(UnsupportedInput, match="gzip is supported"):
        lc.read.csv(str(path), header=True)
