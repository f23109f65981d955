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

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import lineitem_queries


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


if __name__ == "__main__":
    sys.exit(lineitem_queries("mapin", __doc__, QUERIES))
