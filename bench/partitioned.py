"""Capture over Parquet under partitioned directories against vanilla, measured in one run.

    python bench/partitioned.py [--sf 1] [--runs 5] [--files 16] [--driver-memory 2g]

TPC-H `lineitem` (bench/out/tpch-sf<SF>/parquet, bench/dataframe.py's data) written once by
Spark partitioned by `l_shipmode` (7 directories, --files files each). A captured row's id is
(file, `_metadata.row_index`), so Spark keeps pruning the partitions a filter excludes and
pushing filters into the scan. Queries, each vanilla (`spark.read`) and captured (`lc.read`,
fresh repository per run, rolled over after the timed part), alternating, each going first
in turn; medians of --runs wall times of `collect()` (the DataFrames built, and the files
listed, before the timed part, for both):

- `q6 AIR`: TPC-H Q6 restricted to one ship mode (a partition filter: 1/7 of the files);
- `q1 by mode`: TPC-H Q1's aggregate grouped by ship mode too (every file, every row);
- `rare`: the rows of one order key in one ship mode (a handful of rows, Parquet's row-group
  statistics skip most of the data).

Then one output row of each captured query is traced back to its source rows, the
repository reopened read-only for each trace (cold), and the p50 printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median, report, vanilla_and_captured

from agent import LineageRDD
from repository import ProvenanceRepository


def q6_air(li):
    from pyspark.sql import functions as F

    col = F.col
    return li.where(
        (col("l_shipmode") == "AIR")
        & (col("l_shipdate") >= F.lit("1994-01-01").cast("date"))
        & (col("l_shipdate") < F.lit("1995-01-01").cast("date"))
        & col("l_discount").between(0.05, 0.07)
        & (col("l_quantity") < 24)
    ).agg(F.sum(col("l_extendedprice") * col("l_discount")).alias("revenue"))


def q1_by_mode(li):
    from pyspark.sql import functions as F

    col = F.col
    return (
        li.where(col("l_shipdate") <= F.lit("1998-09-02").cast("date"))
        .groupBy("l_shipmode", "l_returnflag", "l_linestatus")
        .agg(
            F.sum("l_quantity").alias("sum_qty"),
            F.sum(col("l_extendedprice") * (1 - col("l_discount"))).alias("sum_disc_price"),
            F.avg("l_discount").alias("avg_disc"),
            F.count("*").alias("count_order"),
        )
    )


def rare(li):
    from pyspark.sql import functions as F

    return li.where((F.col("l_shipmode") == "MAIL") & (F.col("l_orderkey") == 1)).select(
        "l_orderkey", "l_linenumber", "l_quantity"
    )


QUERIES = {"q6 AIR": q6_air, "q1 by mode": q1_by_mode, "rare": rare}


def dataset(sf: float, files: int, spark) -> str:
    root = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{sf}")
    out = os.path.join(root, f"lineitem-by-shipmode-{files}")
    if not os.path.exists(out):
        src = os.path.join(root, "parquet", "lineitem.parquet")
        if not os.path.exists(src):
            raise SystemExit(f"{src} is missing: run bench/dataframe.py --sf {sf} first")
        t0 = time.time()
        li = spark.read.parquet(src).repartition(files)
        li.write.partitionBy("l_shipmode").parquet(out + ".tmp")
        os.replace(out + ".tmp", out)
        print(f"  wrote {out} in {time.time() - t0:.0f} s")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5 (medians of fewer runs are noise here)")
    spark = local_spark("bench-partitioned", memory=args.driver_memory, shuffle_partitions=8)
    path = dataset(args.sf, args.files, spark)
    work = tempfile.mkdtemp(prefix="bench-part-")
    n_files = len(spark.read.parquet(path).inputFiles())
    print(
        f"bench/partitioned.py: TPC-H SF {args.sf} lineitem by l_shipmode ({n_files} files), "
        f"{args.runs} interleaved runs, local[2], load {load_text()}"
    )
    try:
        for name, query in QUERIES.items():
            repos: list[tuple[str, str, int]] = []  # (path, run, first output row's id)

            def kept(repo_path, lc, q, repos=repos):
                repos.append((repo_path, lc.run_id, int(q.lineage().record_ids[0])))
                return True

            times = vanilla_and_captured(
                spark, lambda reader, q=query: q(reader.parquet(path)), args.runs, work, kept
            )
            v, c = median(times["vanilla"]), median(times["captured"])
            print(f"{name}:")
            report("vanilla", v, "s")
            report("captured", c, "s", ratio=f"{c / v:.2f}x vanilla")
            traces, sizes = [], set()
            for repo_path, run_id, rid in repos:
                with ProvenanceRepository.open(repo_path, read_only=True) as r:
                    t0 = time.perf_counter()
                    rows = LineageRDD(r, run_id, np.array([rid])).go_back_all().collect()
                    traces.append(time.perf_counter() - t0)
                    sizes.add(len(rows))
                shutil.rmtree(repo_path, ignore_errors=True)
            report(
                f"backward trace of its first row ({'/'.join(map(str, sorted(sizes)))} rows), "
                "cold p50",
                median(traces) * 1e3,
                "ms",
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
