"""Cold backward traces of rare output rows to their raw source rows, at two scale factors:
the repository's read path against the previous one, measured in one run.

    python bench/raretrace.py [--sfs 0.2,1.0] [--formats parquet,csv] [--query q10]
                              [--rows 10] [--runs 5] [--keep DIR]

TPC-H Q10 (DataFrame API; 20 output rows, each from ~20 source rows of lineitem, orders,
customer and nation) is captured once per scale factor and format (data from bench/out/, as
bench/dataframe.py makes it; --keep DIR keeps the repositories there and reuses them). Then,
for each of --rows output rows, a cold trace: the repository opened read-only afresh (no
cached footers, row groups or line tables), `go_back_all().collect()` timed, the repository
closed. Two read paths alternate, each going first in turn, --runs rounds: "new" (the
repository's: CSV rows read from the stored line marks before them) and "before" (the code
at BEFORE_COMMIT, loaded from git: a CSV partition's lines scanned up to the row; for Parquet
the code at PARQUET_BEFORE_COMMIT: each scan's row groups read on the threads in turn, not all
the trace's scans' at once, costliest first). Both give the same rows (checked). Figures: p50
and p99 of all cold traces per path, and before / new. The files stay in the OS page cache
between traces (both paths alike): "cold" is the repository's state, not the disk's.

Line marks are made by the repository's owner (read-only opens never write). Owner traces
first, --runs interleaved rounds of three paths: "new", "before", and "marks1" (the code at
MARKS1_COMMIT, loaded from git: a partition's first trace makes its whole marks); each round
traces each of the --rows rows alone from no marks (p50 of these first traces), then,
from no marks again, all of them in turn, starting at a row that rotates (p50 of their
sum: what the partitions' marks cost until those rows are traced); each trace on an owner
open afresh. Then `lineage.mark_scan_lines(run)` completes the marks (timed) for the cold
rounds.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from _common import load_text, local_spark, median, percentile, report

from agent import LineageContext, LineageRDD
from repository import ProvenanceRepository, RepositoryConfig
from repository.lineage import _index

# The read path before line marks, loaded from git as it was at that commit.
BEFORE_COMMIT = "b2244ad"
# The Parquet read path before a trace's scans were read together.
PARQUET_BEFORE_COMMIT = "ffdbcc2"
# Line marks of whole partitions, made at a partition's first trace (its marks module is
# today's: the same file format, whole-partition marks being the complete ones).
MARKS1_COMMIT = "e34b931"


def load_scans(commit: str, name: str):
    """The repository's `_scans` module at `commit`, as a module of its own."""
    import importlib.util
    import subprocess

    root = os.path.join(os.path.dirname(__file__), "..")
    text = subprocess.run(
        ["git", "-C", root, "show", f"{commit}:repository/lineage/_scans.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="bench-raretrace-code-"), f"_scans_{name}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"repository.lineage._scans_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_scan_at_a_time(cls):
    """`cls` (a former `ScanRows`) reading a trace's scans one after another, as `_index`
    asked it to before `data_of_scans`."""

    class OneAtATime(cls):
        def data_of_scans(self, asks):
            return [self.data_of_partitions(key, scan, pos) for key, scan, pos in asks]

    return OneAtATime


def load_before(commit: str):
    """`ScanRows` at `commit`, taking (and ignoring) the line marks store `_index` gives it
    now."""

    class Before(one_scan_at_a_time(load_scans(commit, f"before_{commit}").ScanRows)):
        def __init__(self, marks=None):
            super().__init__()

    return Before


PATHS = {"new": _index.ScanRows}


def use(name: str) -> None:
    """Repositories opened from now on read source rows the `name` way."""
    _index.ScanRows = PATHS[name]


def capture(spark, path: str, folder: str, fmt: str, query: str) -> tuple[str, int]:
    """The query captured into a repository at `path` (reused if --keep left one there)."""
    import _tpch

    meta = path + ".meta"
    if os.path.exists(meta):
        with open(meta, "rb") as f:
            return pickle.load(f)
    with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as repo:
        lc = LineageContext(spark, repo)
        q = _tpch.QUERIES[int(query[1:])](_tpch.read(lc.read, folder, fmt))
        q.collect()
        repo.rollover()
        out = (lc.run_id, q.last_output.number)
    with open(meta, "wb") as f:
        pickle.dump(out, f)
    return out


def cold_trace(path: str, run_id: str, rid: int) -> tuple[float, list]:
    with ProvenanceRepository.open(path, read_only=True) as repo:
        t0 = time.perf_counter()
        rows = LineageRDD(repo, run_id, np.array([rid])).go_back_all().collect()
        return time.perf_counter() - t0, rows


def owner_trace(path: str, run_id: str, rid: int) -> tuple[float, list]:
    with ProvenanceRepository.open(path, start_threads=False) as repo:
        t0 = time.perf_counter()
        rows = LineageRDD(repo, run_id, np.array([rid])).go_back_all().collect()
        return time.perf_counter() - t0, rows


def owner_traces(path: str, run_id: str, picks: list[int], runs: int) -> None:
    """Owner traces from no marks, in interleaved rounds of the three paths (each round
    starting with another): every row traced alone as a first trace (its marks deleted
    before), then all the rows in turn (from a rotating first one); each on an owner open."""
    names = ["new", "before", "marks1"]
    first: dict[str, list[float]] = {n: [] for n in names}
    total: dict[str, list[float]] = {n: [] for n in names}
    scans = os.path.join(path, "scans")
    for run in range(runs):
        order = picks[run % len(picks) :] + picks[: run % len(picks)]
        got = {}
        for name in names[run % 3 :] + names[: run % 3]:
            use(name)
            for rid in picks:
                shutil.rmtree(scans, ignore_errors=True)
                first[name].append(owner_trace(path, run_id, rid)[0])
            shutil.rmtree(scans, ignore_errors=True)
            seconds = []
            got[name] = []
            for rid in order:
                t, rows = owner_trace(path, run_id, rid)
                seconds.append(t)
                got[name].append(rows)
            total[name].append(sum(seconds))
        if not got["new"] == got["before"] == got["marks1"]:
            raise AssertionError("the owner paths gave different rows")
    use("new")
    new_first, new_total = median(first["new"]), median(total["new"])
    report("owner's first trace, p50 (new: marks of a prefix)", 1000 * new_first, "ms")
    for name, what in (("before", "no marks"), ("marks1", "whole marks")):
        f = median(first[name])
        report(
            f"owner's first trace, p50 ({name}: {what})",
            1000 * f,
            "ms",
            f"/ new {f / new_first:.2f}x",
        )
    report(f"owner's {len(picks)} traces from no marks, p50 (new)", 1000 * new_total, "ms")
    for name in ("before", "marks1"):
        t = median(total[name])
        report(
            f"owner's {len(picks)} traces from no marks, p50 ({name})",
            1000 * t,
            "ms",
            f"/ new {t / new_total:.2f}x",
        )


def complete_marks(path: str, run_id: str) -> None:
    """The run's marks completed by an owner (those the traces left are prefixes)."""
    with ProvenanceRepository.open(path, start_threads=False) as repo:
        t0 = time.perf_counter()
        parts = repo.lineage.mark_scan_lines(run_id)
        t1 = time.perf_counter()
    report(f"completing the run's marks ({parts} partitions)", 1000 * (t1 - t0), "ms")


def measure(path: str, fmt: str, run_id: str, cp: int, rows: int, runs: int) -> None:
    with ProvenanceRepository.open(path, read_only=True) as repo:
        picks = repo.lineage.all_records(run_id, cp)[:rows].tolist()
    if fmt != "parquet":
        owner_traces(path, run_id, picks, runs)
        use("new")
        complete_marks(path, run_id)
    times: dict[str, list[float]] = {"new": [], "before": []}
    got: dict[str, list] = {"new": [], "before": []}
    for run in range(runs):
        for name in ["new", "before"] if run % 2 == 0 else ["before", "new"]:
            use("parquet-before" if name == "before" and fmt == "parquet" else name)
            for rid in picks:
                seconds, rows = cold_trace(path, run_id, rid)
                times[name].append(seconds)
                if run == 0:
                    got[name].append(rows)
    if got["new"] != got["before"]:
        raise AssertionError("the two read paths gave different rows")
    sizes = [len(rows) for rows in got["new"]]
    use("new")
    new, old = median(times["new"]), median(times["before"])
    report(
        "cold backward trace, p50 (new)",
        1000 * new,
        "ms",
        "goal <= 100 ms",
        f"p99 {1000 * percentile(times['new'], 99):.0f} ms",
    )
    report(
        "cold backward trace, p50 (before)",
        1000 * old,
        "ms",
        f"before / new {old / new:.2f}x",
        f"p99 {1000 * percentile(times['before'], 99):.0f} ms",
    )
    print(f"    (source rows per traced output: {sizes})", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sfs", default="0.2,1.0")
    p.add_argument("--formats", default="parquet,csv")
    p.add_argument("--query", default="q10")
    p.add_argument("--rows", type=int, default=10, help="output rows traced (cold) per round")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--keep", default="", help="keep (and reuse) the captured repositories here")
    args = p.parse_args()
    if args.runs < 3:
        p.error("--runs must be at least 3")
    PATHS["before"] = load_before(BEFORE_COMMIT)
    PATHS["parquet-before"] = load_before(PARQUET_BEFORE_COMMIT)
    PATHS["marks1"] = one_scan_at_a_time(load_scans(MARKS1_COMMIT, "marks1").ScanRows)
    work = args.keep or tempfile.mkdtemp(prefix="bench-raretrace-")
    os.makedirs(work, exist_ok=True)
    try:
        todo = []
        spark = None
        for sf in args.sfs.split(","):
            for fmt in args.formats.split(","):
                folder = os.path.join(os.path.dirname(__file__), "out", f"tpch-sf{sf}", fmt)
                if not os.path.exists(os.path.join(folder, f"lineitem.{fmt}")):
                    raise SystemExit(f"no TPC-H data in {folder}: run bench/dataframe.py --sf {sf}")
                path = os.path.join(work, f"repo-{sf}-{fmt}-{args.query}")
                if spark is None and not os.path.exists(path + ".meta"):
                    spark = local_spark("bench-raretrace", memory="2g", shuffle_partitions=8)
                todo.append((sf, fmt, path, *capture(spark, path, folder, fmt, args.query)))
        if spark is not None:
            spark.stop()  # traces need no JVM
        print(
            f"bench/raretrace.py: TPC-H {args.query}, {args.rows} cold traces x {args.runs} "
            f"interleaved rounds, load {load_text()}",
            flush=True,
        )
        for sf, fmt, path, run_id, cp in todo:
            print(f"SF {sf} {fmt}:", flush=True)
            measure(path, fmt, run_id, cp, args.rows, args.runs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
