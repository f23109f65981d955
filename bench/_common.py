"""Shared helpers for benchmarks: interleaved runs, medians, ratio printing.

Every figure is a median of several runs, and every ratio compares two things measured in the
same process, interleaved (A, B, A, B, ...), so machine noise hits both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def interleaved(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Run each function `runs` times, interleaved; seconds per run for each name."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            times[name].append(timed(fn)[0])
    return times


def vanilla_and_captured(
    spark, build: Callable, runs: int, work: str, kept: Callable | None = None
) -> dict[str, list[float]]:
    """Wall seconds of `build(reader).collect()` with `spark.read` ("vanilla") and with
    `lc.read` ("captured": a fresh repository per run, rolled over after the timed part),
    alternating, each going first in turn; the DataFrames are built before the timer starts.
    `kept(repo_path, lc, frame)` is called after each captured run, the repository still
    open; the repository is deleted after it unless it returns True."""
    import os
    import shutil

    from agent import LineageContext
    from repository import ProvenanceRepository, RepositoryConfig

    times: dict[str, list[float]] = {"vanilla": [], "captured": []}
    for run in range(runs):
        order = ["vanilla", "captured"][run % 2 :] + ["vanilla", "captured"][: run % 2]
        for variant in order:
            if variant == "vanilla":
                q = build(spark.read)
                t0 = time.perf_counter()
                q.collect()
                times[variant].append(time.perf_counter() - t0)
                continue
            repo_path = os.path.join(work, f"repo-{len(times[variant])}-{time.time_ns()}")
            with ProvenanceRepository.open(repo_path, RepositoryConfig(sync="none")) as r:
                lc = LineageContext(spark, r)
                q = build(lc.read)
                t0 = time.perf_counter()
                q.collect()
                times[variant].append(time.perf_counter() - t0)
                r.rollover()
                keep = kept(repo_path, lc, q) if kept is not None else False
            if not keep:
                shutil.rmtree(repo_path, ignore_errors=True)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def report(name: str, value: float, unit: str, goal: str = "", ratio: str = "") -> None:
    """One aligned line of a benchmark report."""
    print(f"  {name:<44} {value:>12,.3f} {unit:<10} {ratio:<28} {goal}", flush=True)


def load_text() -> str:
    """The machine's load averages (1, 5, 15 min), as benchmark reports print them."""
    import os

    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def local_spark(
    app: str,
    master: str = "local[2]",
    log_level: str = "ERROR",
    memory: str = "",
    shuffle_partitions: int | None = None,
):
    """A quiet local SparkSession whose Python workers run this interpreter (`memory`: the
    driver JVM's heap, where Spark's default 1g is too small; `shuffle_partitions`: Spark's
    200 default is per-task overhead on small local data)."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if memory:
        builder = builder.config("spark.driver.memory", memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    return spark


def lineitem_queries(script: str, doc: str, queries: dict[str, Callable]) -> int:
    """The main of a bench of `queries` over TPC-H `lineitem` as Parquet (bench/dataframe.py's
    data), each `query(df)` built over `spark.read` and `lc.read` and collected, interleaved
    (`vanilla_and_captured`); prints each query's medians and their ratio. Arguments: --sf,
    --runs (>= 5), --driver-memory."""
    import argparse
    import os
    import shutil
    import tempfile

    p = argparse.ArgumentParser(description=doc.split("\n")[0])
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
    spark = local_spark(f"bench-{script}", memory=args.driver_memory, shuffle_partitions=8)
    work = tempfile.mkdtemp(prefix=f"bench-{script}-")
    print(
        f"bench/{script}.py: TPC-H SF {args.sf} lineitem (Parquet), {args.runs} interleaved "
        f"runs, local[2], load {load_text()}"
    )
    try:
        for name, query in queries.items():
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
