"""Maps over partitions (`mapInPandas`) with lineage against vanilla, measured in one run.

    python bench/mapin.py [--sf 0.2] [--runs 5] [--driver-memory 2g]

TPC-H `lineitem` as Parquet (bench/out/tpch-sf<SF>/parquet, bench/dataframe.py's data:
1.2 M rows at SF 0.2), three maps, each vanilla (`spark.read`) and captured (`lc.read`,
fresh repository per run, rolled over after the timed part), alternating, each going first
in turn; medians of --runs wall times of `collect()`:

- `row, filtered`: a per-row computation (a "prediction" from price and discount) under
  lineage="row", then a filter that keeps ~1 % of the rows (so the driver's collect does not
  dominate): each kept row carries its own id;
- `partition, filtered`: the same map and filter under the default lineage="partition":
  each kept row names its partition's group record, whose parents are the partition's rows
  (journaled once per partition by the worker, after the whole output is held);
- `partition, one row each`: one row of statistics per partition, lineage="partition".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import load_text, local_spark, median, report, vanilla_and_captured


def _predict(batches):
    for pdf in batches:
        price = pdf["l_extendedprice"].astype(float) * (1 - pdf["l_discount"].astype(float))
        yield pdf[["l_orderkey", "l_linenumber"]].assign(pred=price)


def _stats(batches):
    import pandas as pd

    n, total = 0, 0.0
    for pdf in batches:
        n += len(pdf)
        total += float(pdf["l_quantity"].astype(float).sum())
    yield pd.DataFrame({"n": [n], "qty": [total]})


def _mapped(df, func, schema, lineage):
    from agent.dataframe import LineageDataFrame

    extra = {"lineage": lineage} if isinstance(df, LineageDataFrame) else {}
    return df.mapInPandas(func, schema, **extra)


PRED = "l_orderkey long, l_linenumber int, pred double"
QUERIES = {
    "row, filtered": lambda li: _mapped(li, _predict, PRED, "row").where("pred > 100000"),
    "partition, filtered": lambda li: _mapped(li, _predict, PRED, "partition").where(
        "pred > 100000"
    ),
    "partition, one row each": lambda li: _mapped(li, _stats, "n long, qty double", "partition"),
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
    spark = local_spark("bench-mapin", memory=args.driver_memory, shuffle_partitions=8)
    work = tempfile.mkdtemp(prefix="bench-mapin-")
    print(
        f"bench/mapin.py: TPC-H SF {args.sf} lineitem (Parquet), {args.runs} interleaved "
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
