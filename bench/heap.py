"""The driver JVM's heap after finished captured runs, with Python's cyclic GC left alone.

    python bench/heap.py [--sf 0.2] [--runs 8] [--queries q18,q3,q10,udf]
                         [--baseline-python /work/main/.venv/bin/python]

Each run is a fresh repository and LineageContext, the TPC-H queries through `lc.read`
(Parquet, the default `aggregates="auto"`), `collect()`, then the same query in vanilla
PySpark (`spark.read`). After each, the context and frames are dropped (no `gc.collect()`,
Python's collector at its default thresholds), the JVM is asked for a full GC (`System.gc()`
through py4j) and its used heap is printed. In a 1g driver heap, the size Spark starts with.
A finished run's JVM plans and broadcast relations are garbage only when nothing in Python
still points at them: what stays after the full GC is what the Python side keeps alive.

With --baseline-python, the same measurement runs first under that interpreter (e.g. another
checkout's venv, for the code before a change), then under this one, each in its own process
(one JVM each; not at the same time: the machine has 2 cores), and both series print.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median

VARIANTS = ("captured", "vanilla")


def heap_used_mb(spark) -> float:
    """The JVM's used heap after a full GC, in MB."""
    jvm = spark.sparkContext._jvm
    # Spark's ContextCleaner frees a broadcast's blocks after the GC that finds it
    # unreachable, in its own thread: collect again once it has.
    for _ in range(3):
        jvm.System.gc()
        time.sleep(0.5)
    rt = jvm.Runtime.getRuntime()
    return (rt.totalMemory() - rt.freeMemory()) / 2**20


def year(s):
    """The UDF query's function (dataframe.py's), defined here so that it is pickled by value:
    Python workers cannot import bench modules."""
    return int(s[:4])


def measure(args) -> dict:
    """This interpreter's series: heap after each run, and the cyclic collections that ran."""
    import gc

    import _tpch
    from dataframe import build
    from pyspark.sql import functions as F

    from agent import LineageContext
    from repository import ProvenanceRepository, RepositoryConfig

    spark = local_spark("bench-heap", memory="1g", shuffle_partitions=8)
    folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}", "parquet")
    work = tempfile.mkdtemp(prefix="bench-heap-")
    import agent

    out: dict = {"code": os.path.dirname(os.path.dirname(agent.__file__)), "runs": []}
    try:
        out["start_mb"] = heap_used_mb(spark)
        vanilla_udf = F.udf(year, "int")
        for run in range(args.runs):
            for name in args.queries.split(","):
                for variant in VARIANTS:
                    full_before = gc.get_stats()[2]["collections"]
                    if variant == "vanilla":
                        tables = _tpch.read(spark.read, folder, "parquet")
                        build(name, tables, vanilla_udf, spark.sql).collect()
                        del tables
                    else:
                        path = os.path.join(work, f"repo-{run}-{name}")
                        with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as r:
                            lc = LineageContext(spark, r)
                            udf = lc.udf.register("yr", year, "int")
                            tables = _tpch.read(lc.read, folder, "parquet")
                            build(name, tables, udf, lc.sql).collect()
                        del lc, udf, tables
                        shutil.rmtree(path, ignore_errors=True)
                    mb = heap_used_mb(spark)
                    full = gc.get_stats()[2]["collections"] - full_before
                    out["runs"].append(
                        {"run": run, "query": name, "variant": variant, "mb": mb, "full_gcs": full}
                    )
                    print(
                        f"    run {run} {name:<6} {variant:<8} heap {mb:7.1f} MB "
                        f"(Python full GCs during: {full})",
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return out


def summary(label: str, series: dict, variant: str) -> list[float]:
    mbs = [r["mb"] for r in series["runs"] if r["variant"] == variant]
    print(
        f"  {label:<9} {variant:<8} heap after runs: median {median(mbs):6.1f}, min "
        f"{min(mbs):6.1f}, max {max(mbs):6.1f} MB ({len(mbs)} runs; start "
        f"{series['start_mb']:.1f} MB; code {series['code']})"
    )
    return mbs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--queries", default="q18,q3,q10,udf")
    p.add_argument("--baseline-python", default="")
    p.add_argument("--json", default="", help=argparse.SUPPRESS)  # a child's output file
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(measure(args), f)
        return 0
    print(
        f"bench/heap.py: TPC-H SF {args.sf} Parquet, {args.runs} runs of {args.queries}, "
        f"1g driver heap, no gc.collect(); load {load_text()}",
        flush=True,
    )
    pythons = [("baseline", args.baseline_python)] if args.baseline_python else []
    pythons.append(("this", sys.executable))
    results = {}
    for label, python in pythons:
        print(f"  {label}: {python}", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            cmd = [python, __file__, "--sf", str(args.sf), "--runs", str(args.runs)]
            subprocess.run([*cmd, "--queries", args.queries, "--json", tmp.name], check=True)
            with open(tmp.name) as f:
                results[label] = json.load(f)
    print(f"  load {load_text()}")
    series = {(label, v): summary(label, r, v) for label, r in results.items() for v in VARIANTS}
    if "baseline" in results:
        for v in VARIANTS:
            b, t = series["baseline", v], series["this", v]
            print(
                f"  {v}, this / baseline: median {median(t) / median(b):.2f}x, "
                f"max {max(t) / max(b):.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
