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

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import lineitem_queries


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


if __name__ == "__main__":
    sys.exit(lineitem_queries("mapgroups", __doc__, QUERIES))
