"""Where captured CSV / JSON-lines scans lose time against vanilla, measured in one run.

    python bench/scan_pushdown.py [--sf 0.2] [--runs 5] [--formats csv,json]
                                  [--queries q6,q1] [--driver-memory 2g]

A captured scan row's id is `monotonically_increasing_id()` projected directly over the scan
(its row index in the scan partition). Spark cannot push a filter below that nondeterministic
projection, so the CSV / JSON parser's filter pushdown (`spark.sql.csv.filterPushdown.enabled`,
`spark.sql.json.filterPushdown.enabled`: a row failing a pushed filter is dropped as soon as
the fields it needs are converted, before the rest are) is lost; column pruning is kept (the
scan's ReadSchema holds only the columns used). Pushing the filter into the scan would drop rows
before they are numbered, and the ids would no longer be positions in the file.

For each format and query, these variants alternate on one local[2] SparkSession (each goes
first in turn), medians of --runs wall times of `collect()`, and of the CPU seconds the run
cost the Spark JVM and this Python process together (steadier than wall time when other work
shares the cores):

- vanilla: `spark.read`, Spark's defaults;
- no pushdown: vanilla with the parser's filter pushdown switched off (what the id costs
  the scan and nothing else);
- ids only (Q6): vanilla plus the scan id projected over the scan and kept alive by a
  `max()` beside the query's sum: the id and the lost pushdown, no lineage aggregate;
- captured: `lc.read`, lineage on (fresh repository per run, opened before and rolled over
  after the timed part, as in bench/dataframe.py).

TPC-H `lineitem` comes from bench/out/tpch-sf<SF>/csv (bench/dataframe.py's data) and, as
JSON lines, json/lineitem.json beside it; DuckDB writes either on first use.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median, report

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig

PUSHDOWN = {
    "csv": "spark.sql.csv.filterPushdown.enabled",
    "json": "spark.sql.json.filterPushdown.enabled",
}


def lineitem_json(folder: str, sf: float) -> str:
    """`lineitem` as JSON lines (generated once; dates as ISO strings, decimals as numbers)."""
    import _tpch

    path = os.path.join(folder, "lineitem.json")
    if not os.path.exists(path):
        t0 = time.time()
        os.makedirs(folder, exist_ok=True)
        con = _tpch.duckdb_with()
        con.execute(f"CALL dbgen(sf={sf})")
        con.execute(f"COPY lineitem TO '{path}.tmp' (FORMAT JSON)")
        os.replace(f"{path}.tmp", path)
        print(f"  generated {path} in {time.time() - t0:.0f} s")
    return path


def tables(reader, fmt: str, path: str) -> dict:
    import _tpch

    schema = _tpch.CSV_SCHEMAS["lineitem"]
    if fmt == "csv":
        return {"lineitem": reader.csv(path, header=True, schema=schema)}
    return {"lineitem": reader.json(path, schema=schema)}


def q6_with_ids(t):
    """TPC-H Q6 with a row id projected over the scan and used (`max`), so that the optimizer
    neither prunes it nor pushes the filter below it (the captured id is this one's bits
    rearranged: `agent.dataframe._columns.scan_id_sql`)."""
    import _tpch
    from pyspark.sql import functions as F

    col, D = _tpch.col, _tpch.D
    li = t["lineitem"].select("*", F.monotonically_increasing_id().alias("__id"))
    return li.where(
        (col("l_shipdate") >= D("1994-01-01"))
        & (col("l_shipdate") < D("1995-01-01"))
        & col("l_discount").between(0.05, 0.07)
        & (col("l_quantity") < 24)
    ).agg(F.sum(col("l_extendedprice") * col("l_discount")).alias("revenue"), F.max("__id"))


def cpu_seconds(jvm_pid: int) -> float:
    """CPU seconds used so far by the Spark JVM (all its threads) and this process."""
    with open(f"/proc/{jvm_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return jvm + time.process_time()


def run_query(spark, fmt: str, path: str, name: str, runs: int, work: str) -> None:
    import _tpch

    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    query = _tpch.QUERIES[int(name[1:])]
    n_repos = [0]

    def vanilla():
        query(tables(spark.read, fmt, path)).collect()

    def no_pushdown():
        spark.conf.set(PUSHDOWN[fmt], "false")
        try:
            query(tables(spark.read, fmt, path)).collect()
        finally:
            spark.conf.unset(PUSHDOWN[fmt])

    def ids_only():
        q6_with_ids(tables(spark.read, fmt, path)).collect()

    variants = {"vanilla": vanilla, "no pushdown": no_pushdown}
    if name == "q6":
        variants["ids only"] = ids_only
    variants["captured"] = None  # timed around collect() only, below
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    for run in range(runs):
        k = run % len(order)
        for variant in order[k:] + order[:k]:
            fn = variants[variant]
            if fn is not None:
                c0, t0 = cpu_seconds(jvm_pid), time.perf_counter()
                fn()
                times[variant].append(time.perf_counter() - t0)
                cpu[variant].append(cpu_seconds(jvm_pid) - c0)
                continue
            n_repos[0] += 1
            repo_path = os.path.join(work, f"repo-{fmt}-{name}-{n_repos[0]}")
            with ProvenanceRepository.open(repo_path, RepositoryConfig(sync="none")) as repo:
                lc = LineageContext(spark, repo)
                c0, t0 = cpu_seconds(jvm_pid), time.perf_counter()
                query(tables(lc.read, fmt, path)).collect()
                times[variant].append(time.perf_counter() - t0)
                cpu[variant].append(cpu_seconds(jvm_pid) - c0)
                repo.rollover()
            shutil.rmtree(repo_path, ignore_errors=True)
    labels = {
        "vanilla": "vanilla",
        "no pushdown": "vanilla, parser filter pushdown off",
        "ids only": "vanilla + scan ids (no lineage aggregate)",
        "captured": "captured",
    }
    print(f"{fmt} {name}:")
    for unit, measured in (("s wall", times), ("s CPU", cpu)):
        v, npd = median(measured["vanilla"]), median(measured["no pushdown"])
        for k, ts in measured.items():
            m = median(ts)
            ratio = "" if k == "vanilla" else f"{m / v:.2f}x vanilla"
            if k not in ("vanilla", "no pushdown"):
                ratio += f", {m / npd:.2f}x no-pd"
            report(labels[k], m, unit, ratio=ratio)
        spread = ", ".join(f"{k} {min(ts):.2f}-{max(ts):.2f}" for k, ts in measured.items())
        print(f"    (runs, {unit}: {spread})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--formats", default="csv,json")
    p.add_argument("--queries", default="q6,q1")
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args()
    if args.runs < 5:
        p.error("--runs must be at least 5 (medians of fewer runs are noise here)")
    for name in args.queries.split(","):
        if name not in ("q1", "q6"):
            p.error(f"--queries: q1 and q6 read lineitem only; not {name}")
    import _tpch

    root = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{args.sf}")
    csv_path = os.path.join(root, "csv", "lineitem.csv")
    spark = local_spark("bench-scan-pushdown", memory=args.driver_memory, shuffle_partitions=8)
    work = tempfile.mkdtemp(prefix="bench-scan-")
    print(
        f"bench/scan_pushdown.py: TPC-H SF {args.sf} lineitem, {args.runs} interleaved runs, "
        f"local[2], load {load_text()}"
    )
    try:
        for fmt in args.formats.split(","):
            if fmt == "csv":
                if not os.path.exists(csv_path):
                    t0 = time.time()
                    _tpch.generate(args.sf, os.path.dirname(csv_path), "csv", ("lineitem",))
                    print(f"  generated {csv_path} in {time.time() - t0:.0f} s")
                path = csv_path
            elif fmt == "json":
                path = lineitem_json(os.path.join(root, "json"), args.sf)
            else:
                p.error(f"--formats: csv or json, not {fmt}")
            for name in args.queries.split(","):
                run_query(spark, fmt, path, name, args.runs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    print(f"  (load at the end {load_text()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
