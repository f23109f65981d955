"""Cold backward traces of big groups to their raw source rows: the repository's read path
against the one at BEFORE_COMMIT, measured in one run.

    python bench/bigtrace.py [--sf 1.0] [--formats parquet] [--queries q1,q6]
                             [--runs 5] [--keep DIR]

TPC-H Q1 (4 output rows, each from 0.04-2.9 M lineitem rows) and Q6 (one output row, from
~114 K rows at SF 1) are captured once per format (data from bench/out/, as
bench/dataframe.py makes it; --keep DIR keeps the repositories there and reuses them). The
traced group is Q1's first output row (1.48 M source rows at SF 1: "A", "F") and Q6's row.
Each measurement is one fresh Python process (so "cold": no cached footers, row groups,
line tables, and a heap holding nothing else) that imports the read path from a code tree,
opens the repository read-only and times one of, on `go_back_all()` of the output row:
`collect()` (every raw row), `count()` and `take(20)`. Two code trees alternate, each going
first in turn, --runs rounds: "new" (this checkout) and "before" (BEFORE_COMMIT, exported
from git). pyarrow, pandas and pyspark.sql are imported before the clock starts in both.
The first round checks that both give the same rows (a digest of every row's repr, which
names each value's type). Figures: p50 of each, and before / new, of wall time and of the
process's CPU time (all its threads: steadier than wall time when other work shares the
cores). The files stay in the OS page cache between runs (both paths alike): "cold" is the
process's state, not the disk's.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median, report

# The read path before this bench's work (big-group rows built per column by pyarrow's
# scalars, the per-id loops of record_data, the cyclic collector on during collect()).
BEFORE_COMMIT = "ecaef98"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OPS = ("collect", "count", "take20")


def worker(code: str, path: str, op: str) -> None:
    """One cold trace (run in a fresh process): prints seconds, rows and a digest as JSON."""
    import hashlib
    import time

    sys.path.insert(0, code)
    import importlib

    import numpy as np

    # Imported before the clock by both paths (pandas: a lazy import of pyarrow's).
    for module in ("pandas", "pyarrow.compute", "pyarrow.parquet", "pyspark.sql"):
        importlib.import_module(module)

    from agent import LineageRDD
    from repository import ProvenanceRepository

    with open(path + ".meta", "rb") as f:
        run_id, cp = pickle.load(f)
    with ProvenanceRepository.open(path, read_only=True) as repo:
        rid = int(repo.lineage.all_records(run_id, cp)[0])
    with ProvenanceRepository.open(path, read_only=True) as repo:
        t0, c0 = time.perf_counter(), time.process_time()
        lin = LineageRDD(repo, run_id, np.array([rid])).go_back_all()
        got = lin.collect() if op == "collect" else lin.count() if op == "count" else lin.take(20)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = hashlib.sha256()
    rows = got if isinstance(got, list) else [got]
    if os.environ.get("BIGTRACE_DIGEST"):
        for row in rows:
            digest.update(repr(row).encode())
            digest.update(b"\n")
    n = got if isinstance(got, int) else len(got)
    print(json.dumps({"seconds": seconds, "cpu": cpu, "n": n, "digest": digest.hexdigest()}))


def run_worker(code: str, path: str, op: str, digest: bool) -> dict:
    env = dict(os.environ, BIGTRACE_DIGEST="1" if digest else "")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", code, path, op],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def export_before() -> str:
    """BEFORE_COMMIT's code tree, exported from git into a temporary folder."""
    folder = tempfile.mkdtemp(prefix="bench-bigtrace-code-")
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", BEFORE_COMMIT, "agent", "repository", "indexer", "journals"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def measure(path: str, runs: int, codes: dict[str, str]) -> None:
    times: dict[tuple[str, str], list[float]] = {(n, op): [] for n in codes for op in OPS}
    cpus: dict[tuple[str, str], list[float]] = {(n, op): [] for n in codes for op in OPS}
    for run in range(runs):
        order = list(codes) if run % 2 == 0 else list(reversed(codes))
        for op in OPS:
            got = {}
            for name in order:
                r = run_worker(codes[name], path, op, digest=run == 0)
                times[name, op].append(r["seconds"])
                cpus[name, op].append(r["cpu"])
                got[name] = (r["n"], r["digest"])
            if run == 0 and len(set(got.values())) != 1:
                raise AssertionError(f"{op}: the read paths gave different rows: {got}")
            if run == 0 and op == "collect":
                rows = got["new"][0]
    print(f"    (traced group: {rows} source rows)", flush=True)
    for op in OPS:
        new, old = median(times["new", op]), median(times["before", op])
        report(f"cold big-group {op}(), p50 (new)", 1000 * new, "ms")
        report(
            f"cold big-group {op}(), p50 (before)",
            1000 * old,
            "ms",
            f"before / new {old / new:.2f}x",
        )
        new, old = median(cpus["new", op]), median(cpus["before", op])
        report(
            f"cold big-group {op}(), CPU p50 (new)",
            1000 * new,
            "ms",
            f"before / new {old / new:.2f}x (all threads of the process; steadier under load)",
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sf", default="1.0")
    p.add_argument("--formats", default="parquet")
    p.add_argument("--queries", default="q1,q6")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--keep", default="", help="keep (and reuse) the captured repositories here")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    if args.runs < 3:
        p.error("--runs must be at least 3")
    from raretrace import capture

    work = args.keep or tempfile.mkdtemp(prefix="bench-bigtrace-")
    os.makedirs(work, exist_ok=True)
    codes = {"new": ROOT, "before": export_before()}
    try:
        todo = []
        spark = None
        for fmt in args.formats.split(","):
            folder = os.path.join(ROOT, "bench", "out", f"tpch-sf{args.sf}", fmt)
            if not os.path.exists(os.path.join(folder, f"lineitem.{fmt}")):
                raise SystemExit(f"no TPC-H data in {folder}: see bench/dataframe.py")
            for query in args.queries.split(","):
                path = os.path.join(work, f"repo-{args.sf}-{fmt}-{query}")
                if spark is None and not os.path.exists(path + ".meta"):
                    spark = local_spark("bench-bigtrace", memory="2g", shuffle_partitions=8)
                capture(spark, path, folder, fmt, query)
                todo.append((fmt, query, path))
        if spark is not None:
            spark.stop()  # traces need no JVM
        print(
            f"bench/bigtrace.py: TPC-H SF {args.sf}, cold big-group traces, {args.runs} "
            f"interleaved rounds, before = {BEFORE_COMMIT}, load {load_text()}",
            flush=True,
        )
        for fmt, query, path in todo:
            print(f"{query} {fmt}:", flush=True)
            measure(path, args.runs, codes)
        print(f"    (load at the end {load_text()})", flush=True)
    finally:
        shutil.rmtree(codes["before"], ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
