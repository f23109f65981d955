"""Big-group backward traces to raw Parquet rows: bulk Row building against the per-row
baseline, measured in one run.

    python bench/trace_rows.py [--sf 0.2] [--runs 5]

TPC-H Q1 (DataFrame API) is captured once over Parquet (data from bench/out/, as
bench/dataframe.py makes it); then, on the repository reopened read-only, each of Q1's four
groups (0.3-0.6 M lineitem rows at SF 0.2, one of ~8 K) is traced back to its raw source
rows (`go_back_all().collect()`), alternating two ways of turning the re-read row groups into
pyspark Rows: "bulk" (the repository's: one pyarrow conversion per column, decimals and dates
made once per distinct value or parsed from text, the cyclic GC paused while the Rows are
made) and "per-row" (the previous code: `Row(**d)` for each dict of `table.to_pylist()`).
Both give the same rows (checked). Figures: median of --runs seconds per group, and the ratio.
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
from _common import local_spark, median, report

from agent import LineageContext, LineageRDD
from repository import ProvenanceRepository, RepositoryConfig
from repository.lineage import _scans


def per_row(table) -> list:
    """The baseline: the previous conversion, a dict then a Row(**dict) per row."""
    from pyspark.sql import Row

    return [Row(**values) for values in table.to_pylist()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    if args.runs < 3:
        p.error("--runs must be at least 3")
    import _tpch

    folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", "parquet")
    if not os.path.exists(os.path.join(folder, "lineitem.parquet")):
        _tpch.generate(args.sf, folder, "parquet", ("lineitem",))
    work = tempfile.mkdtemp(prefix="bench-trace-rows-")
    try:
        spark = local_spark("bench-trace-rows")
        spark.conf.set("spark.sql.shuffle.partitions", "8")
        path = os.path.join(work, "repo")
        with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as repo:
            lc = LineageContext(spark, repo)
            q = _tpch.q1(_tpch.read(lc.read, folder, "parquet"))
            q.collect()
            repo.rollover()
            run_id, cp = lc.run_id, q.last_output.number
        spark.stop()
        load = os.getloadavg()
        print(
            f"bench/trace_rows.py: TPC-H SF {args.sf} Q1 over Parquet, {args.runs} interleaved "
            f"runs, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
        )
        bulk = _scans._rows
        with ProvenanceRepository.open(path, read_only=True) as repo:
            for rid in repo.lineage.all_records(run_id, cp).tolist():
                times: dict[str, list[float]] = {"bulk": [], "per-row": []}
                got: dict[str, list] = {}
                size = 0
                for run in range(args.runs):
                    order = ["bulk", "per-row"] if run % 2 == 0 else ["per-row", "bulk"]
                    for name in order:
                        _scans._rows = bulk if name == "bulk" else per_row
                        t0 = time.perf_counter()
                        rows = LineageRDD(repo, run_id, np.array([rid])).go_back_all().collect()
                        times[name].append(time.perf_counter() - t0)
                        if run == 0:
                            got[name] = rows
                        del rows
                    if run == 0:  # checked, then dropped: held rows would slow the GC later
                        if got["bulk"] != got["per-row"]:
                            raise AssertionError("bulk and per-row conversions differ")
                        size = len(got["bulk"])
                        got.clear()
                _scans._rows = bulk
                print(f"  group of {size:,} source rows:")
                b, r = median(times["bulk"]), median(times["per-row"])
                report("per-row (previous)", r, "s")
                report("bulk", b, "s", "", f"{r / b:.2f}x faster")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
