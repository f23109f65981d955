"""Shared by the DataFrame and SQL lineage tests: small generated CSV tables (with their
lines and byte offsets), and `check`, which compares a captured query's rows with vanilla
PySpark's and every row's backward trace and every line's forward trace with the
brute-force reference (`_dfref`)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _dfref as R
import numpy as np
from pyspark.sql import functions as F

from agent import LineageRDD
from journals import unpack_record_ids

SCHEMAS = {
    "orders": "okey INT, ckey INT, odate STRING, status STRING, tags STRING",
    "items": "okey INT, price DOUBLE, qty INT",
    "customers": "ckey INT, name STRING, nation STRING",
}


@dataclass
class Data:
    dir: str
    rows: dict[str, list[tuple]]
    lines: dict[str, list[str]]
    offsets: dict[str, list[int]]

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}.csv"

    def ref(self) -> dict[str, R.Table]:
        return {
            n: R.source(n, [c.split()[0] for c in SCHEMAS[n].split(", ")], rows, self.lines[n])
            for n, rows in self.rows.items()
        }


def _fmt(v) -> str:
    return "" if v is None else str(v)


def make_data(d) -> Data:
    rng = random.Random(11)
    rows = {
        "orders": [
            (
                i,
                rng.randint(1, 9),
                f"2024-{rng.randint(1, 4):02d}-{rng.randint(1, 28):02d}",
                rng.choice("FOP"),
                "|".join(rng.sample("abcd", rng.randint(0, 3))),
            )
            for i in range(60)
        ],
        "items": [
            (
                rng.choice([None, *range(70)]) if rng.random() < 0.1 else rng.randint(0, 69),
                float(rng.randint(100, 9999)) / 100,
                rng.randint(1, 5),
            )
            for _ in range(150)
        ],
        "customers": [(c, f"cust{c}", rng.choice(["FR", "DE", "JP"])) for c in range(0, 12)],
    }
    # Empty tags parse as null in CSV: keep the reference's rows as Spark reads them.
    rows["orders"] = [(*r[:4], r[4] or None) for r in rows["orders"]]
    lines: dict[str, list[str]] = {}
    offsets: dict[str, list[int]] = {}
    for name, rs in rows.items():
        header = ",".join(c.split()[0] for c in SCHEMAS[name].split(", "))
        lines[name] = [",".join(_fmt(v) for v in r) for r in rs]
        offsets[name] = []
        pos = len(header) + 1
        with open(d / f"{name}.csv", "w") as f:
            f.write(header + "\n")
            for line in lines[name]:
                offsets[name].append(pos)
                f.write(line + "\n")
                pos += len(line) + 1
    return Data(str(d), rows, lines, offsets)


def tables(reader, data: Data, again: tuple[str, ...] = ()) -> dict:
    """The tables read through `reader`; each of `again` read a second time too (as
    `<name>@2`: another scan of the same file)."""
    out = {n: reader.csv(data.path(n), header=True, schema=SCHEMAS[n]) for n in SCHEMAS}
    for n in again:
        out[f"{n}@2"] = reader.csv(data.path(n), header=True, schema=SCHEMAS[n])
    return out


def check(
    lc,
    spark,
    data: Data,
    build: Callable[[dict], object],
    ref: Callable[[dict], R.Table],
    cols: list[str],
    ordered: bool = False,
    again: tuple[str, ...] = (),
) -> Any:
    """Rows equal vanilla's; each row's backward trace and each line's forward trace equal
    the brute-force reference's (`again`: tables also read a second time, see `tables`).
    Returns the captured query (its plan, as it ran)."""
    # Few scan partitions, several pieces each: positions are not trivial.
    spark.conf.set("spark.sql.files.maxPartitionBytes", "700")
    try:
        q = build(tables(lc.read, data, again))
        rows = q.collect()
        vanilla = build(tables(spark.read, data, again)).collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert q.columns == (vanilla[0].__fields__ if vanilla else q.columns)
    if ordered:
        assert [R.key_of(r, cols) for r in rows] == [R.key_of(r, cols) for r in vanilla]
    else:
        assert Counter(R.key_of(r, cols) for r in rows) == Counter(
            R.key_of(r, cols) for r in vanilla
        )
    expected = ref(data.ref())
    owner = {line: name for name, ls in data.lines.items() for line in ls}
    lin = q.lineage()
    ids = lin.record_ids
    # One action per test: a source line names one record of the run (record_at).
    assert len(ids) == len(rows)
    got = Counter()
    for i, r in enumerate(rows):
        back = LineageRDD(lc.repo, lc.run_id, ids[i : i + 1]).go_back_all().collect()
        assert None not in back
        got[(R.key_of(r, cols), frozenset((owner[b], b) for b in back))] += 1
    want = Counter((R.key_of(r, cols), lin_) for r, lin_ in expected)
    assert got == want
    # Forward: every source line reaches exactly the output rows that depend on it.
    out_cp = int(unpack_record_ids(ids[:1])[0][0]) if len(ids) else None
    index = lc.repo.lineage
    for name in SCHEMAS:
        for line, offset in zip(data.lines[name], data.offsets[name]):
            # The line at each read of its file (`again`: two).
            rids = index.records_at(lc.run_id, data.path(name), offset + 1)
            assert len(rids) == 1 + (name in again), (name, line)
            fwd = LineageRDD(lc.repo, lc.run_id, np.array(rids)).go_next_all().record_ids
            # Outputs only: a line no output depends on reaches nothing (not itself).
            assert (unpack_record_ids(fwd)[0] == out_cp).all(), (name, line)
            positions = unpack_record_ids(fwd)[2].tolist()
            got_rows = Counter(R.key_of(rows[p], cols) for p in positions)
            want_rows = Counter(R.key_of(r, cols) for r, l2 in expected if (name, line) in l2)
            assert got_rows == want_rows, (name, line)
    return q


def explained(df, mode: Any = None) -> str:
    """What `df.explain(mode)` prints."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(mode)
    return out.getvalue()


def plan_shape(df) -> str:
    """`df`'s plans (`explain(True)`) without expression and plan ids, which differ between
    two analyses of equal plans."""
    import re

    return re.sub(r"#\d+L?|plan_id=\d+", "#", explained(df, True))


def nulled(t):
    """items with the order key of every fifth order null (the generated data has none)."""
    okey = F.col("okey")
    return t["items"].withColumn("okey", F.when(okey % 5 == 0, None).otherwise(okey))


def ref_nulled(T):
    return R.select(T["items"], lambda r: {**r, "okey": None if r["okey"] % 5 == 0 else r["okey"]})


def qty_by_order(t):
    """items' quantity per order (null keys: one group), the aggregate a test filters."""
    return nulled(t).groupBy("okey").agg(F.sum("qty").alias("q"), F.count("*").alias("n"))


def ref_qty_by_order(T):
    return R.group(
        ref_nulled(T),
        lambda r: (r["okey"],),
        lambda k, rs: {"okey": k[0], "q": sum(r["qty"] for r in rs), "n": len(rs)},
    )
