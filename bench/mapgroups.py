"""Grouped maps (`applyInPandas`) with lineage against vanilla, measured in one run.

    python bench/mapgroups.py [--sf 0.2] [--runs 5] [--driver-memory 2g]

TPC-H `lineitem` as Parquet (bench/out/tpch-sf<SF>/parquet, bench/dataframe.py's data), a
fifth of its orders (`l_orderkey % 5 = 0`: 240 K rows at SF 0.2; a Python call per group is
slow in vanilla too), three grouped maps, each vanilla (`spark.read`) and captured
(`lc.read`, fresh repository per run, rolled over after the timed part), alternating, each
going first in turn; medians of --runs wall times of `collect()`:

- `one row per group`: per supplier (~120 rows a group at SF 0.2), one row of statistics;
- `rows per small group`: per (supplier, line number) (~17 rows), every row back with its
  quantity centred;
- `rows per bigger group`: per supplier (~120 rows), every row back centred. Each returned
  row is made from its whole group (the function saw all of them); the group's ids are
  stored once, as its group record, which each row names (the tap after the map passes
  every returned row through one more Python worker).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import load_text, local_spark, median, report, vanilla_and_captured


def _fifth(li):
    return li.where("l_orderkey % 5 = 0")


def one_row(li):
    import pandas as pd

    def stats(pdf):
        return pd.DataFrame(
            {
                "l_suppkey": [pdf["l_suppkey"].iloc[0]],
                "n": [len(pdf)],
                "qty": [float(pdf["l_quantity"].astype(float).mean())],
            }
        )

    schema = "l_suppkey long, n long, qty double"
    return _fifth(li).groupBy("l_suppkey").applyInPandas(stats, schema)


def _centred(pdf):
    q = pdf["l_quantity"].astype(float)
    return pdf[["l_suppkey", "l_linenumber"]].assign(dq=q - q.mean())


def small_groups(li):
    schema = "l_suppkey long, l_linenumber long, dq double"
    return _fifth(li).groupBy("l_suppkey", "l_linenumber").applyInPandas(_centred, schema)


def bigger_groups(li):
    schema = "l_suppkey long, l_linenumber long, dq double"
    return _fifth(li).groupBy("l_suppkey").applyInPandas(_centred, schema)


QUERIES = {
    "one row per group": one_row,
    "rows per small group": small_groups,
    "rows per bigger group": bigger_groups,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5 (medians of fewer runs are noise here)")
    path = os.path.join(
        os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", "parquet", "lineitem.parquet"
    )
    if not os.path.exists(path):
        p.error(f"{path} is missing: run bench/dataframe.py --sf {args.sf} first")
    spark = local_spark("bench-mapgroups", memory=args.driver_memory, shuffle_partitions=8)
    work = tempfile.mkdtemp(prefix="bench-mapgroups-")
    print(
        f"bench/mapgroups.py: TPC-H SF {args.sf} lineitem (Parquet), {args.runs} interleaved "
        f"runs, local[2], load {load_text()}"
    )
    try:
        for name, query in QUERIES.items():
            build = lambda reader, q=query: q(reader.parquet(path))  # noqa: E731
            times = vanilla_and_captured(spark, build, args.runs, work)
            v, c = median(times["vanilla"]), median(times["captured"])
            print(f"{name}:")
            report("vanilla", v, "s")
            report("captured", c, "s", ratio=f"{c / v:.2f}x vanilla")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
