"""Capture overhead and trace latency against vanilla PySpark, measured in one run.

    python bench/capture.py [--size-mb 200] [--runs 5] [--workloads wordcount,grep,join]

For each workload, three variants alternate on one local[2] SparkSession (vanilla, capture
off, captured, vanilla, ...); each figure is the median of --runs. "Capture off" is provrepo's
engine running the same user functions without recording lineage: the captured/off ratio is
what capture itself costs, the captured/vanilla ratio is the goal's figure. Captured runs each
write into a fresh repository and wait for its rollover before the next run starts, so
background merging never overlaps the next timed job. Then, on the last captured run of each
workload: lineage bytes on disk as a share of the input, seconds from the action's end to a
first successful trace, and p50/p99 of 20 random backward traces (an output to its input
lines, with raw data) and 20 forward traces (an input line to the outputs).
"""

from __future__ import annotations

import argparse
import operator
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import local_spark, median, percentile, report
from _data import KEYWORD, page_views, zipf_text

from agent import LineageContext, LineageRDD
from journals import unpack_record_ids
from repository import ProvenanceRepository, RepositoryConfig

GOALS = {"wordcount": 1.10, "grep": 1.05, "join": 1.25}


# -- workloads (the same user code for vanilla and captured) ---------------------------------


def wordcount(src):
    return src(0).flatMap(lambda line: line.split()).map(lambda w: (w, 1)).reduceByKey(operator.add)


def grep(src):
    return src(0).filter(lambda line: KEYWORD in line)


def join(src):
    views = src(0).map(lambda line: line.split("\t")).map(lambda r: (r[0], int(r[2])))
    users = src(1).map(lambda line: (line.split("\t", 1)[0], line))
    return views.join(users).map(lambda kv: (kv[0], kv[1][0])).reduceByKey(operator.add)


WORKLOADS = {"wordcount": wordcount, "grep": grep, "join": join}


# -- measuring -------------------------------------------------------------------------------


def dir_bytes(path: str, skip: str = "") -> int:
    total = 0
    for root, _, files in os.walk(path):
        if skip and skip in root:
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def run_workload(spark, name: str, inputs: list[str], runs: int, tmp: str) -> dict:
    sc = spark.sparkContext
    build = WORKLOADS[name]
    times: dict[str, list[float]] = {"vanilla": [], "captured": [], "uncaptured": []}
    last = None
    for r in range(runs):
        t = time.perf_counter()
        vanilla_out = build(lambda i: sc.textFile(inputs[i])).collect()
        times["vanilla"].append(time.perf_counter() - t)

        # The same engine with capture off: what capture itself costs.
        off = LineageContext(
            spark, ProvenanceRepository.open(os.path.join(tmp, f"off-{r}")), capture=False
        )
        t = time.perf_counter()
        build(lambda i, off=off: off.textFile(inputs[i])).collect()
        times["uncaptured"].append(time.perf_counter() - t)
        off.repo.close()
        shutil.rmtree(os.path.join(tmp, f"off-{r}"), ignore_errors=True)

        repo_dir = os.path.join(tmp, f"repo-{name}-{r}")
        shutil.rmtree(repo_dir, ignore_errors=True)
        repo = ProvenanceRepository.open(repo_dir, RepositoryConfig(rollover_interval=3600))
        lc = LineageContext(spark, repo)
        out = build(lambda i, lc=lc: lc.textFile(inputs[i]))
        t = time.perf_counter()
        captured_out = out.collect()
        t_end = time.perf_counter()
        times["captured"].append(t_end - t)
        if r == 0:
            assert sorted(captured_out) == sorted(vanilla_out), f"{name}: results differ"
        if last is not None:
            last[1].close()
            shutil.rmtree(last[2], ignore_errors=True)
        # Time to a first successful trace: rollover of this action's journals included.
        lin = out.lineage()
        first = LineageRDD(repo, lc.run_id, lin.record_ids[:1]).go_back_all().collect()
        t_trace = time.perf_counter() - t_end
        assert first, f"{name}: the first trace found no input"
        last = (lc, repo, repo_dir, out, t_trace)
        print(
            f"    run {r + 1}: vanilla {times['vanilla'][-1]:.2f}s, capture off "
            f"{times['uncaptured'][-1]:.2f}s, captured {times['captured'][-1]:.2f}s, "
            f"first trace after {t_trace:.2f}s",
            flush=True,
        )
    lc, repo, repo_dir, out, t_trace = last
    result = {
        "vanilla": median(times["vanilla"]),
        "uncaptured": median(times["uncaptured"]),
        "captured": median(times["captured"]),
        "first_trace": t_trace,
        "input_bytes": sum(os.path.getsize(p) for p in inputs),
        "lineage_bytes": dir_bytes(repo_dir),
        "log_bytes": repo.stats().log_bytes + repo.stats().toc_bytes,
    }
    result.update(trace_latency(lc, repo, out))
    repo.close()
    shutil.rmtree(repo_dir, ignore_errors=True)
    return result


def trace_latency(lc, repo, out, picks: int = 20) -> dict:
    rng = np.random.default_rng(3)
    lin = out.lineage()
    outputs = lin.record_ids
    info = repo.lineage.run_info(lc.run_id)
    sources = [c.number for c in info.capture_points.values() if c.dependency == "source"]
    inputs = np.concatenate([repo.lineage.all_records(lc.run_id, cp) for cp in sources[:1]])
    back, fwd = [], []
    for rid in rng.choice(outputs, min(picks, len(outputs)), replace=False):
        t = time.perf_counter()
        lines = LineageRDD(repo, lc.run_id, np.array([rid])).go_back_all()
        lines.take(10)  # with raw data, re-read by offset
        back.append(time.perf_counter() - t)
    for rid in rng.choice(inputs, picks, replace=False):
        t = time.perf_counter()
        reached = LineageRDD(repo, lc.run_id, np.array([rid])).go_next_all()
        reached.collect()
        fwd.append(time.perf_counter() - t)
    cps = unpack_record_ids(inputs[:1])[0]
    return {
        "back_p50": percentile(back, 50),
        "back_p99": percentile(back, 99),
        "back_first": back[0],
        "fwd_p50": percentile(fwd, 50),
        "fwd_p99": percentile(fwd, 99),
        "fwd_first": fwd[0],
        "source_cp": int(cps[0]) if len(cps) else -1,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workloads", default="wordcount,grep,join")
    ap.add_argument("--data-dir", default=None, help="reuse generated data here")
    args = ap.parse_args()
    names = [w for w in args.workloads.split(",") if w]
    for w in names:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r} (have {', '.join(WORKLOADS)})")
    data = args.data_dir or tempfile.mkdtemp(prefix="provrepo-bench-data-")
    os.makedirs(data, exist_ok=True)
    text = os.path.join(data, f"zipf-{args.size_mb:g}mb.txt")
    views = os.path.join(data, f"page_views-{args.size_mb:g}mb.tsv")
    users = os.path.join(data, "power_users.tsv")
    if not os.path.exists(text):
        print(f"generating {args.size_mb:g} MB of Zipf text ...", flush=True)
        zipf_text(text, args.size_mb)
    if "join" in names and not os.path.exists(views):
        print(f"generating {args.size_mb:g} MB of page views ...", flush=True)
        page_views(views, users, args.size_mb)
    spark = local_spark("provrepo-bench-capture")
    tmp = tempfile.mkdtemp(prefix="provrepo-bench-")
    inputs = {"wordcount": [text], "grep": [text], "join": [views, users]}
    results = {}
    try:
        # Warm up the JVM and the Python workers once, untimed.
        spark.sparkContext.parallelize(range(1000), 2).map(lambda x: x * 2).count()
        for name in names:
            print(f"\n{name}: {args.runs} interleaved runs of vanilla and captured", flush=True)
            results[name] = run_workload(spark, name, inputs[name], args.runs, tmp)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if args.data_dir is None:
            shutil.rmtree(data, ignore_errors=True)
    print(f"\ncapture (median of {args.runs}, local[2], {args.size_mb:g} MB inputs)")
    for name, r in results.items():
        ratio = r["captured"] / r["vanilla"]
        report(f"{name}: vanilla PySpark", r["vanilla"], "s")
        report(
            f"{name}: provrepo engine, capture off",
            r["uncaptured"],
            "s",
            ratio=f"{r['uncaptured'] / r['vanilla']:.3f}x vanilla",
        )
        report(
            f"{name}: captured",
            r["captured"],
            "s",
            goal=f"goal <= {GOALS[name]:.2f}x",
            ratio=f"{ratio:.3f}x vanilla, {r['captured'] / r['uncaptured']:.3f}x off",
        )
        report(
            f"{name}: lineage on disk (logs + tocs)",
            r["log_bytes"] / 1e6,
            "MB",
            goal="goal <= 15 %",
            ratio=f"{r['log_bytes'] / r['input_bytes']:.1%} of input",
        )
        report(
            f"{name}: whole repository (+ search index)",
            r["lineage_bytes"] / 1e6,
            "MB",
            ratio=f"{r['lineage_bytes'] / r['input_bytes']:.1%} of input",
        )
        report(f"{name}: action end -> first trace", r["first_trace"], "s", goal="goal <= 2 s")
        report(
            f"{name}: backward trace p50 (p99)",
            r["back_p50"] * 1e3,
            "ms",
            goal="goal <= 50 ms",
            ratio=f"p99 {r['back_p99'] * 1e3:.1f} ms, first {r['back_first'] * 1e3:.1f} ms",
        )
        report(
            f"{name}: forward trace p50 (p99)",
            r["fwd_p50"] * 1e3,
            "ms",
            goal="goal <= 50 ms",
            ratio=f"p99 {r['fwd_p99'] * 1e3:.1f} ms, first {r['fwd_first'] * 1e3:.1f} ms",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
