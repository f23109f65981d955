"""DataFrame rows handed to RDD code (`df.rdd`) with lineage against vanilla, measured in
one run.

    python bench/dfrdd.py [--sf 0.2] [--runs 5] [--driver-memory 2g]

TPC-H `lineitem` as Parquet (bench/out/tpch-sf<SF>/parquet, bench/dataframe.py's data:
1.2 M rows at SF 0.2), each query vanilla (`spark.read`) and captured (`lc.read`, fresh
repository per run, rolled over after the timed part), alternating, each going first in
turn; medians of --runs wall times of `collect()`:

- `rdd, reduceByKey`: a projection and a filter keeping ~half the rows as a DataFrame, then
  `.rdd.map(...).reduceByKey(add)` (revenue per ship mode): every row becomes a record of
  the RDD agent whose parent is its scan id, then the RDD agent's combiner and reducer;
- `rdd, filter`: `.rdd.filter(...)` keeping ~1 % of the rows, then a `map`: the rows' own
  records, few outputs (the per-row cost of the change to RDDs).
"""

from __future__ import annotations

import os
import sys
from operator import add

sys.path.insert(0, os.path.dirname(__file__))
from _common import lineitem_queries


def _revenue(li):
    kept = li.select("l_shipmode", "l_extendedprice", "l_discount").where("l_discount > 0.05")
    return kept.rdd.map(
        lambda r: (r.l_shipmode, float(r.l_extendedprice) * (1 - float(r.l_discount)))
    ).reduceByKey(add)


def _rare(li):
    rows = li.select("l_orderkey", "l_quantity", "l_discount").rdd
    return rows.filter(lambda r: r.l_quantity == 50 and float(r.l_discount) == 0.1).map(
        lambda r: r.l_orderkey
    )


QUERIES = {"rdd, reduceByKey": _revenue, "rdd, filter": _rare}


if __name__ == "__main__":
    sys.exit(lineitem_queries("dfrdd", __doc__, QUERIES))
