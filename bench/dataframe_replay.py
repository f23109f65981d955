"""Exclusive replay of DataFrame queries against a vanilla re-run, measured in one run.

    python bench/dataframe_replay.py [--sf 0.2] [--runs 5] [--format parquet]
                                     [--queries q1,q3,q10]

TPC-H data (DuckDB's tpch extension, under bench/out/ as bench/dataframe.py keeps it). For
each query: one captured run (`lc.read`); the source rows of one output row are traced back
(`q.lineage()` row 0, `go_back_all()`); then, alternating, a vanilla PySpark re-run of the
query (`spark.read`, `collect()`) and `lc.replay(q, exclude=traced)` (the same query rebuilt
over its sources minus those rows, capture off). Each figure is the median of --runs wall
times; the replay's answer is checked to lose that output row. (The baseline builds the
query anew, as a re-run does: `collect()` again of one built DataFrame would reuse its
shuffle files and skip every stage but the last.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import interleaved, load_text, local_spark, median, report
from dataframe import build, year

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--format", default="parquet")
    p.add_argument("--queries", default="q1,q3,q10")
    args = p.parse_args()
    if args.runs < 3:
        p.error("--runs must be at least 3")
    import _tpch
    from pyspark.sql import functions as F

    spark = local_spark("bench-dataframe-replay", shuffle_partitions=8)
    folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", args.format)
    if not os.path.exists(os.path.join(folder, f"region.{args.format}")):
        _tpch.generate(args.sf, folder, args.format)
    work = tempfile.mkdtemp(prefix="bench-df-replay-")
    print(
        f"bench/dataframe_replay.py: TPC-H SF {args.sf} {args.format}, {args.runs} interleaved "
        f"runs, local[2], load {load_text()}"
    )
    vanilla_udf = F.udf(year, "int")
    try:
        with ProvenanceRepository.open(os.path.join(work, "repo"), RepositoryConfig()) as repo:
            lc = LineageContext(spark, repo)
            for name in args.queries.split(","):
                q = build(name, _tpch.read(lc.read, folder, args.format), vanilla_udf)
                rows = q.collect()
                t0 = time.perf_counter()
                traced = q.lineage().filter(lambda r, first=rows[0]: r == first).go_back_all()
                n = traced.count()
                trace_s = time.perf_counter() - t0

                def vanilla(name=name):
                    tables = _tpch.read(spark.read, folder, args.format)
                    return build(name, tables, vanilla_udf).collect()

                def replay(q=q, traced=traced):
                    return lc.replay(q, exclude=traced)

                full, again = vanilla(), replay()  # warm up, untimed; and check
                assert full == rows and rows[0] not in again and len(again) <= len(rows)
                times = interleaved({"vanilla": vanilla, "replay": replay}, args.runs)
                v, r = median(times["vanilla"]), median(times["replay"])
                print(f"{args.format} {name}: excluding {n:,} source rows of output row 0")
                report("trace of the row to its source rows", trace_s, "s")
                report("vanilla re-run", v, "s")
                report("exclusive replay", r, "s", ratio=f"{r / v:.2f}x vanilla re-run")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
