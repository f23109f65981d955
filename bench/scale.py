"""Traces at scale: what a trace costs as the input grows (issue 13's table), measured per size.

    python bench/scale.py [--sizes 50,400,2000] [--workloads wordcount,join]
                          [--narrow eager,deferred] [--picks 20] [--data DIR] [--keep]

For each input size (MB) and workload, the input is generated first (not timed; kept in
--data for the next run), captured on a local[2] SparkSession into a fresh repository
(rollover timed on its own: records merged per second), then traced in a *fresh process*
that reopens the repository read-only, so caches are cold and the process's peak RSS is what
tracing costs the driver. Per size it prints:

- forward trace of one input line to the final outputs, p50 / p99 over --picks random lines;
- backward trace of one rare output (the --picks outputs with the smallest values: the
  rarest words, the users with the least time) to its input lines *with raw data*, p50 / p99;
- with --cold-pages, the same rare traces again with the input files and the repository's
  logs dropped from the OS page cache before each (not timed): the disk-bound worst case
  of a repository larger than memory;
- the hottest output's backward trace, ids only: records reached per second;
- the tracing process's peak RSS;
- lineage bytes (logs + tocs) and forward index bytes, as a share of the input;
- rollover records per second.

Workloads: word count over Zipf text (vocabulary 8,000, 10 words a line, s = 1.1), and a join
+ aggregate (PigMix L2-like page views joined with power users, time spent summed per user).
--narrow deferred captures with `LineageContext(narrow="deferred")` (combiner associations
re-derived at trace time) for the bytes-vs-latency trade. Goals (issue 13): forward p50 <= 20
ms at 2 GB and <= 1.5x its 50 MB figure; backward rare p50 <= 50 ms at 2 GB; hot-key >= 5 M
records/s; tracing RSS <= 1 GB at 2 GB; deferred lineage <= 5 % with backward p50 <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import local_spark, percentile
from _data import page_views, zipf_lines

HERE = os.path.abspath(__file__)


# -- workloads ---------------------------------------------------------------------------------


def wordcount(lc, inputs):
    return (
        lc.textFile(inputs[0])
        .flatMap(lambda line: line.split())
        .map(lambda w: (w, 1))
        .reduceByKey(operator.add)
    )


def join(lc, inputs):
    views = lc.textFile(inputs[0]).map(lambda line: line.split("\t"))
    views = views.map(lambda r: (r[0], int(r[2])))
    users = lc.textFile(inputs[1]).map(lambda line: (line.split("\t", 1)[0], line))
    return views.join(users).map(lambda kv: (kv[0], kv[1][0])).reduceByKey(operator.add)


WORKLOADS = {"wordcount": wordcount, "join": join}


def inputs_for(data_dir: str, workload: str, mb: float) -> list[str]:
    """The workload's input files at this size, generated once and kept in `data_dir`."""
    os.makedirs(data_dir, exist_ok=True)
    if workload == "wordcount":
        path = os.path.join(data_dir, f"zipf-8k-{mb:g}MB.txt")
        if not os.path.exists(path):
            print(f"  generating {path} ...", flush=True)
            zipf_lines(path + ".part", mb)
            os.rename(path + ".part", path)
        return [path]
    views = os.path.join(data_dir, f"views-{mb:g}MB.tsv")
    users = os.path.join(data_dir, f"users-{mb:g}MB.tsv")
    if not (os.path.exists(views) and os.path.exists(users)):
        print(f"  generating {views} ...", flush=True)
        page_views(views + ".part", users, mb)
        os.rename(views + ".part", views)
    return [views, users]


# -- capture (this process, with Spark) --------------------------------------------------------


def capture(spark, workload: str, inputs: list[str], repo_dir: str, narrow: str) -> dict:
    from agent import LineageContext
    from repository import ProvenanceRepository, RepositoryConfig

    shutil.rmtree(repo_dir, ignore_errors=True)
    config = RepositoryConfig(rollover_interval=3600, rollover_debounce=3600)
    repo = ProvenanceRepository.open(repo_dir, config, start_threads=False)
    try:
        kw = {} if narrow == "eager" else {"narrow": narrow}
        lc = LineageContext(spark, repo, run_id=f"{workload}-{narrow}", **kw)
        out = WORKLOADS[workload](lc, inputs)
        t = time.perf_counter()
        out.collect()
        t_capture = time.perf_counter() - t
        t = time.perf_counter()
        merged = repo.rollover()
        t_roll = time.perf_counter() - t
    finally:
        repo.close()
    return {
        "run": lc.run_id,
        "capture_s": t_capture,
        "rollover_records_per_s": merged / t_roll if t_roll else float("nan"),
        "merged": merged,
    }


def disk_bytes(repo_dir: str) -> tuple[int, int]:
    logs = os.path.join(repo_dir, "logs")
    lineage = fwd = 0
    for n in os.listdir(logs):
        size = os.path.getsize(os.path.join(logs, n))
        if n.endswith((".prov", ".toc")):
            lineage += size
        elif n.endswith(".fwd"):
            fwd += size
    return lineage, fwd


# -- tracing (a fresh process: cold caches, its own peak RSS) ---------------------------------


def drop_pages(paths: list[str]) -> None:
    """Drop these files' clean pages from the OS page cache (the next reads go to disk)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def trace_child(
    repo_dir: str, run: str, picks: int, hot: bool = True, cold_pages: bool = False
) -> dict:
    from journals import record_id_base
    from repository import ProvenanceRepository

    repo = ProvenanceRepository.open(repo_dir, read_only=True)
    ix = repo.lineage
    info = ix.run_info(run)
    sources = [c.number for c in info.capture_points.values() if c.dependency == "source"]
    out_cp = max(info.capture_points)
    rng = np.random.default_rng(3)
    clock = time.perf_counter

    # Forward: one input line (of the first, largest source) to the final outputs, picked
    # uniformly by (partition, position) without listing every line.
    n_lines = ix.count_records(run, sources[0])
    parts = ix.partitions(run, sources[0])
    sizes = np.array([ix.count_partition(run, sources[0], p) for p in parts])
    which = np.searchsorted(np.cumsum(sizes), rng.integers(0, n_lines, picks), side="right")
    chosen = [record_id_base(sources[0], parts[w]) + int(rng.integers(0, sizes[w])) for w in which]
    fwd, fwd_sizes = [], []
    for rid in chosen:
        t = clock()
        got, _ = ix.trace(run, np.array([rid]), forward=True)
        fwd.append(clock() - t)
        fwd_sizes.append(len(got))

    # Outputs and their values (small: one per key).
    outs = ix.all_records(run, out_cp)
    values = [v[1] if isinstance(v, tuple) else 0 for v in ix.record_data(run, outs)]
    order = np.argsort(np.asarray(values), kind="stable")
    rare = outs[order[:picks]]
    hot_id = outs[order[-1]]

    back, back_sizes = [], []
    for rid in rare.tolist():
        t = clock()
        ids, _ = ix.trace(run, np.array([rid]))
        data = ix.record_data(run, ids)
        back.append(clock() - t)
        back_sizes.append(len(data))

    n_hot, t_hot = 0, float("nan")
    if hot:
        t = clock()
        n_hot = len(ix.trace(run, np.array([hot_id]))[0])
        t_hot = clock() - t
    cold = []  # last: the pages it drops would slow what follows
    if cold_pages:
        logs = os.path.join(repo_dir, "logs")
        files = [os.path.join(logs, n) for n in os.listdir(logs)]
        cps = (ix.descriptor(run) or {}).get("capture_points", [])
        files += [f.removeprefix("file://") for c in cps for f in c.get("files", [])]
        for rid in rare.tolist():
            for cache in ix.caches:  # nothing decoded is reused (the open files stay open)
                cache.clear()
            drop_pages(files)
            t = clock()
            ids, _ = ix.trace(run, np.array([rid]))
            ix.record_data(run, ids)
            cold.append(clock() - t)

    rss = peak_rss()
    return {
        "forward_p50_ms": 1e3 * percentile(fwd, 50),
        "forward_p99_ms": 1e3 * percentile(fwd, 99),
        "forward_answer": int(np.median(fwd_sizes)),
        "back_p50_ms": 1e3 * percentile(back, 50),
        "back_p99_ms": 1e3 * percentile(back, 99),
        "back_answer": int(np.median(back_sizes)),
        "cold": f"{1e3 * percentile(cold, 50):.1f}" if cold else "-",
        "hot_id": int(hot_id),
        "hot_records": n_hot,
        "hot_records_per_s": n_hot / t_hot,
        "rss": rss,
        "lines": n_lines,
    }


def spark_hot(spark, repo_dir: str, run: str, hot_id: int) -> float:
    """The hot key's backward trace as Spark jobs (ids counted on the executors): records/s."""
    from agent import LineageRDD
    from repository import ProvenanceRepository

    with ProvenanceRepository.open(repo_dir, read_only=True) as repo:
        lin = LineageRDD(repo, run, np.array([hot_id]), sc=spark.sparkContext)
        t = time.perf_counter()
        n = lin.go_back_all(spark=True).count()
        return n / (time.perf_counter() - t)


def peak_rss() -> int:
    """This process's peak resident set, bytes. /proc's VmHWM (Linux) is this program's own:
    getrusage's ru_maxrss also counts the parent's RSS at fork (kept across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_trace_child(repo_dir: str, run: str, picks: int, hot: bool, cold: bool) -> dict:
    args = [repo_dir, run, str(picks), str(int(hot)), str(int(cold))]
    out = subprocess.run(
        [sys.executable, HERE, "--trace-child", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"trace child failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- report ------------------------------------------------------------------------------------

COLUMNS = (
    ("input", "{mb:g} MB"),
    ("fwd p50/p99 ms", "{forward_p50_ms:.1f} / {forward_p99_ms:.1f}"),
    ("back rare +data p50/p99 ms", "{back_p50_ms:.1f} / {back_p99_ms:.1f} ({back_answer:,} rec)"),
    ("back, cold pages p50 ms", "{cold}"),
    ("hot-key ids M rec/s", "{hot_mrps:.2f} ({hot_records:,} rec)"),
    ("on Spark", "{spark_mrps}"),
    ("trace RSS MB", "{rss_mb:,.0f}"),
    ("lineage / input", "{lineage_pct:.1f} %"),
    ("fwd index / input", "{fwd_pct:.1f} %"),
    ("rollover M rec/s", "{roll_mrps:.2f}"),
)


def print_table(rows: list[dict]) -> None:
    cells = [[c.format(**r) for _, c in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _) in enumerate(COLUMNS)]
    line = " | ".join(h.ljust(w) for (h, _), w in zip(COLUMNS, widths))
    print("  " + line)
    print("  " + "-+-".join("-" * w for w in widths))
    for c in cells:
        print("  " + " | ".join(x.ljust(w) for x, w in zip(c, widths)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="50,400,2000", help="input sizes in MB")
    ap.add_argument("--workloads", default="wordcount,join")
    ap.add_argument("--narrow", default="eager", help="narrow lineage policies: eager,deferred")
    ap.add_argument("--picks", type=int, default=20, help="traces per latency figure")
    ap.add_argument("--data", default=None, help="where generated inputs are kept")
    ap.add_argument("--keep", action="store_true", help="keep the repositories")
    ap.add_argument(
        "--spark",
        action="store_true",
        help="also trace the hot key as Spark jobs (what the spark_threshold is chosen from)",
    )
    ap.add_argument(
        "--deferred-hot-mb",
        type=float,
        default=50,
        help="deferred: trace the hot key up to this input size only (it re-runs every line)",
    )
    ap.add_argument(
        "--cold-pages",
        action="store_true",
        help="also time the rare traces with the input and logs dropped from the page cache",
    )
    ap.add_argument("--trace-child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trace_child:
        repo_dir, run, picks, hot, cold = args.trace_child
        print(json.dumps(trace_child(repo_dir, run, int(picks), hot == "1", cold == "1")))
        return
    if args.picks < 5:
        ap.error("--picks must be at least 5 (p99 of fewer is meaningless)")
    data_dir = args.data or os.path.join(tempfile.gettempdir(), "provrepo-scale-data")
    work = tempfile.mkdtemp(prefix="provrepo-scale-")
    print(
        f"bench/scale.py: sizes {args.sizes} MB, {args.picks} picks per latency; load "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus; data in {data_dir}",
        flush=True,
    )
    spark = local_spark("provrepo-scale")
    try:
        for workload in args.workloads.split(","):
            for narrow in args.narrow.split(","):
                rows = []
                print(f"\n{workload}, narrow={narrow}", flush=True)
                for mb in (float(x) for x in args.sizes.split(",")):
                    inputs = inputs_for(data_dir, workload, mb)
                    in_bytes = sum(os.path.getsize(p) for p in inputs)
                    repo_dir = os.path.join(work, f"{workload}-{narrow}-{mb:g}")
                    load = os.getloadavg()[0]
                    cap = capture(spark, workload, inputs, repo_dir, narrow)
                    hot = narrow == "eager" or mb <= args.deferred_hot_mb
                    tr = run_trace_child(repo_dir, cap["run"], args.picks, hot, args.cold_pages)
                    if args.spark and hot:
                        tr["spark_hot_records_per_s"] = spark_hot(
                            spark, repo_dir, cap["run"], tr["hot_id"]
                        )
                    lineage, fwd = disk_bytes(repo_dir)
                    row = {
                        "mb": mb,
                        **tr,
                        "hot_mrps": tr["hot_records_per_s"] / 1e6,
                        "spark_mrps": (
                            f"{tr['spark_hot_records_per_s'] / 1e6:.2f}"
                            if "spark_hot_records_per_s" in tr
                            else "-"
                        ),
                        "rss_mb": tr["rss"] / 2**20,
                        "lineage_pct": 100 * lineage / in_bytes,
                        "fwd_pct": 100 * fwd / in_bytes,
                        "roll_mrps": cap["rollover_records_per_s"] / 1e6,
                    }
                    rows.append(row)
                    print(
                        f"  {mb:g} MB: captured in {cap['capture_s']:.1f} s, {cap['merged']:,} "
                        f"records, {tr['lines']:,} input lines; load {load:.1f} -> "
                        f"{os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
                    if not args.keep:
                        shutil.rmtree(repo_dir, ignore_errors=True)
                print_table(rows)
                if len(rows) > 1:
                    ratio = rows[-1]["forward_p50_ms"] / rows[0]["forward_p50_ms"]
                    print(f"  forward p50, largest / smallest size: {ratio:.2f}x (goal <= 1.5x)")
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
