"""The driver's parents step for rows that carry group ids, against the general path.

    python bench/dataframe_parents.py [--ids 6000000] [--runs 7]

An aggregate's rows come back as an Arrow table whose one list<int64> column holds each
group's ids, as the partial lists of the aggregate's map tasks bring them (sorted runs, in
shuffled order). `arrow_parents` turns them into each row's sorted distinct ids (CSR). The
baseline is the general path it takes for many rows or several id columns: (row, id) pairs
read from the Arrow buffers (`arrow_pairs`) sorted and deduplicated as one key (`csr`).
Shapes: TPC-H Q1 at SF 1 (4 groups, 6 M ids over 8 map tasks) and the UDF query's (35
groups, a quarter of the ids). Both results are checked equal; each figure is the median
of --runs interleaved runs.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import interleaved, load_text, median, report

from agent.dataframe._columns import Lineage, arrow_pairs, arrow_parents, csr

CP = 1 << 49  # a scan's capture point in a record id (cp << CP_SHIFT)


def table(n_ids: int, groups: int, tasks: int, seed: int = 0):
    """`groups` rows whose ids (`n_ids` scan rows over 2 scan partitions, each in one group)
    arrive as `tasks` sorted runs each, in shuffled order."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    half = n_ids // 2
    ids = CP | (np.repeat([0, 1], [half, n_ids - half]).astype(np.int64) << 31)
    ids |= np.concatenate([np.arange(half), np.arange(n_ids - half)])
    group = rng.integers(0, groups, n_ids)
    lists = []
    for g in range(groups):
        runs = np.array_split(ids[group == g], tasks)
        rng.shuffle(runs)
        lists.append(np.concatenate(runs))
    return pa.table({"__prov_ids": pa.array(lists, type=pa.list_(pa.int64()))})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ids", type=int, default=6_000_000)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5")
    print(f"bench/dataframe_parents.py: {args.ids:,} ids, load {load_text()}")
    lin = Lineage((), ("__prov_ids",))
    # TPC-H SF 1: Q1 groups lineitem's 6 M rows in 4 groups, the UDF query orders' 1.5 M in 35.
    for name, groups, n_ids in (("Q1 shape", 4, args.ids), ("UDF query shape", 35, args.ids // 4)):
        t = table(n_ids, groups, tasks=8)

        def general(t=t):
            rows, ids = arrow_pairs(lambda n: t.column(n).combine_chunks(), (), lin.arrays)
            return csr(t.num_rows, rows, ids)

        def current(t=t):
            return arrow_parents(t, lin)

        a, b = general(), current()
        if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
            raise SystemExit(f"{name}: the two paths disagree")
        times = interleaved({"general": general, "arrow_parents": current}, args.runs)
        g, c = median(times["general"]), median(times["arrow_parents"])
        print(f"{name} ({groups} groups, {n_ids:,} ids):")
        report("general path (arrow_pairs + csr)", g, "s")
        report("arrow_parents", c, "s", "", f"{c / g:.2f}x the general path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
