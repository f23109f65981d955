"""Where a captured TPC-H query's extra time goes, phase by phase, against vanilla.

    python bench/action_cost.py [--sf 1] [--runs 9] [--queries q6] [--driver-memory 2g]

Vanilla (`spark.read`) and captured (`lc.read`, a fresh repository each run, sync="none" as
in `dataframe.py`) alternate, each first in turn, on one local[2] SparkSession over Parquet.
Each run is cut in three phases: reading TPC-H's eight tables (as `dataframe.py` does),
building the query, and `collect()`. For each phase and variant: the median wall time, CPU
seconds of the Spark JVM (all its threads: tasks, planning, GC) and of this driver process,
and py4j round trips (counted on the connection; deterministic, so they compare across
runs and code versions where times under load do not). The first run is a warm-up and left
out of the medians.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median, report

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig

PHASES = ("read", "build", "collect")


class RoundTrips:
    """Counts py4j commands sent from this process (every JVM call is one)."""

    def __init__(self) -> None:
        import py4j.clientserver as cs

        self.count = 0
        original = cs.ClientServerConnection.send_command

        def send(conn, command):
            self.count += 1
            return original(conn, command)

        cs.ClientServerConnection.send_command = send


def jvm_cpu(pid: int) -> float:
    """CPU seconds used so far by the JVM `pid` (utime + stime of all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--queries", default="q6")
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5")
    import _tpch

    trips = RoundTrips()
    spark = local_spark("bench-action-cost", memory=args.driver_memory, shuffle_partitions=8)
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", "parquet")
    if not os.path.exists(os.path.join(folder, "lineitem.parquet")):
        p.error(f"no TPC-H data at {folder}: run bench/dataframe.py --sf {args.sf} first")
    work = tempfile.mkdtemp(prefix="bench-cost-")
    print(
        f"bench/action_cost.py: TPC-H SF {args.sf} Parquet, {args.runs} interleaved runs, "
        f"local[2], load {load_text()}"
    )
    try:
        for name in args.queries.split(","):
            query = _tpch.QUERIES[int(name[1:])]
            # (variant, phase, measure) -> one value per run
            got: dict[tuple[str, str, str], list[float]] = defaultdict(list)
            for run in range(args.runs):
                for variant in ("vanilla", "captured") if run % 2 else ("captured", "vanilla"):
                    repo = None
                    if variant == "captured":
                        path = os.path.join(work, f"repo-{name}-{run}")
                        repo = ProvenanceRepository.open(path, RepositoryConfig(sync="none"))
                        reader = LineageContext(spark, repo).read
                    else:
                        reader = spark.read
                    gc.collect()

                    def mark():
                        return time.perf_counter(), jvm_cpu(pid), time.process_time(), trips.count

                    marks = [mark()]
                    tables = _tpch.read(reader, folder, "parquet")
                    marks.append(mark())
                    q = query(tables)
                    marks.append(mark())
                    q.collect()
                    marks.append(mark())
                    if repo is not None:
                        repo.rollover()
                        repo.close()
                    if run == 0:
                        continue
                    for i, phase in enumerate((*PHASES, "total")):
                        a, b = (marks[i], marks[i + 1]) if i < 3 else (marks[0], marks[3])
                        for k, measure in enumerate(("wall", "JVM CPU", "driver CPU", "py4j")):
                            got[(variant, phase, measure)].append(b[k] - a[k])
            print(f"parquet {name}: (load {load_text()})")
            for phase in (*PHASES, "total"):
                for measure in ("wall", "JVM CPU", "driver CPU", "py4j"):
                    v = median(got[("vanilla", phase, measure)])
                    c = median(got[("captured", phase, measure)])
                    unit = "calls" if measure == "py4j" else "ms"
                    scale = 1 if measure == "py4j" else 1000
                    ratio = f"{c / v:.2f}x vanilla" if v else ""
                    report(
                        f"{phase} {measure}: captured (vanilla {scale * v:,.1f})",
                        scale * c,
                        unit,
                        f"{scale * (c - v):+,.1f}",
                        ratio,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
