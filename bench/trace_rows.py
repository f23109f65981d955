"""Big-group backward traces to raw Parquet rows: bulk Row building against the per-row
baseline, measured in one run.

    python bench/trace_rows.py [--sf 0.2] [--runs 5] [--formats parquet,csv]

TPC-H Q1 (DataFrame API) is captured once per format (data from bench/out/, as
bench/dataframe.py makes it); then, on the repository reopened read-only, each of Q1's four
groups (0.3-0.6 M lineitem rows at SF 0.2, one of ~8 K) is traced back to its raw source
rows (`go_back_all().collect()`), alternating two ways of turning the re-read row groups into
pyspark Rows: "bulk" (the repository's: one pyarrow conversion per column, decimals and dates
made once per distinct value or parsed from text, the cyclic GC paused while the Rows are
made) and "per-row" (the previous code: `Row(**d)` for each dict of `table.to_pylist()`).
Both give the same rows (checked). CSV: "bulk" (each file's lines sliced in offset order from
numpy arrays) against "per-row" (the previous loop: a (start, end, index) tuple per line, then
sorted). Figures: median of --runs seconds per group, and the ratio.
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
from _common import load_text, local_spark, median, report

from agent import LineageContext, LineageRDD
from repository import ProvenanceRepository, RepositoryConfig
from repository.lineage import _scans


def per_row(table) -> list:
    """The baseline: the previous conversion, a dict then a Row(**dict) per row."""
    from pyspark.sql import Row

    return [Row(**values) for values in table.to_pylist()]


def per_line(self, key, scan, partition, positions) -> list:
    """The CSV / JSON / text baseline: the previous `ScanRows.data` loop for line formats."""
    import mmap

    if scan["format"] == "parquet":
        return bulk_data(self, key, scan, partition, positions)
    lines = self.lines(key, scan, partition)
    files = scan["files"]
    out: list = [None] * len(positions)
    by_file: dict[int, list[tuple[int, int, int]]] = {}
    for k, pos in enumerate(np.asarray(positions, dtype=np.int64).tolist()):
        if 0 <= pos < len(lines.starts):
            fi = int(lines.file[pos])
            by_file.setdefault(fi, []).append((int(lines.starts[pos]), int(lines.ends[pos]), k))
    for fi, spans in by_file.items():
        spans.sort()
        with open(files[fi][0], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for start, end, k in spans:
                raw = mm[start:end]
                out[k] = (raw[:-1] if raw.endswith(b"\r") else raw).decode("utf-8", "replace")
    return out


bulk_data = _scans.ScanRows.data


def use(name: str, bulk_rows) -> None:
    """Switch the repository's row building to the bulk (current) or per-row baseline."""
    _scans.rows_of = bulk_rows if name == "bulk" else per_row
    _scans.ScanRows.data = bulk_data if name == "bulk" else per_line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--formats", default="parquet,csv")
    args = p.parse_args()
    if args.runs < 3:
        p.error("--runs must be at least 3")
    import _tpch

    work = tempfile.mkdtemp(prefix="bench-trace-rows-")
    bulk_rows = _scans.rows_of
    try:
        for fmt in args.formats.split(","):
            folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", fmt)
            if not os.path.exists(os.path.join(folder, f"lineitem.{fmt}")):
                _tpch.generate(args.sf, folder, fmt, ("lineitem",))
            path, run_id, cp = capture(work, folder, fmt)
            print(
                f"bench/trace_rows.py: TPC-H SF {args.sf} Q1 over {fmt}, {args.runs} "
                f"interleaved runs, load {load_text()}"
            )
            with ProvenanceRepository.open(path, read_only=True) as repo:
                for rid in repo.lineage.all_records(run_id, cp).tolist():
                    trace_group(repo, run_id, rid, args.runs, bulk_rows)
    finally:
        use("bulk", bulk_rows)
        shutil.rmtree(work, ignore_errors=True)
    return 0


def capture(work: str, folder: str, fmt: str) -> tuple[str, str, int]:
    """Q1 captured into a fresh repository: (its path, the run, the output capture point)."""
    import _tpch

    spark = local_spark("bench-trace-rows", shuffle_partitions=8)
    path = os.path.join(work, f"repo-{fmt}")
    try:
        with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as repo:
            lc = LineageContext(spark, repo)
            q = _tpch.q1(_tpch.read(lc.read, folder, fmt))
            q.collect()
            repo.rollover()
            return path, lc.run_id, q.last_output.number
    finally:
        spark.stop()


def trace_group(repo, run_id: str, rid: int, runs: int, bulk_rows) -> None:
    times: dict[str, list[float]] = {"bulk": [], "per-row": []}
    got: dict[str, list] = {}
    size = 0
    for run in range(runs):
        for name in ["bulk", "per-row"] if run % 2 == 0 else ["per-row", "bulk"]:
            use(name, bulk_rows)
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
    use("bulk", bulk_rows)
    b, r = median(times["bulk"]), median(times["per-row"])
    print(f"  group of {size:,} source rows:")
    report("per-row (previous)", r, "s")
    report("bulk", b, "s", "", f"{r / b:.2f}x faster")


if __name__ == "__main__":
    sys.exit(main())
