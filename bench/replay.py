"""Replay cost against the original job, measured in one run.

    python bench/replay.py [--size-mb 200] [--picks 5]

A captured word count over a generated Zipf text (local[2]) is the original job. Then:
- selective replay of 1 random output record, and of 100 random output records, each from a
  backward trace to the input lines (median over --picks; Newt: 0.3 % of the original for a
  single record; goal <= 5 % including Spark's job overhead), both as provrepo runs it by
  default (small traced inputs replay in the driver) and forced onto a Spark job. Every
  replay's result is checked to equal the traced outputs.
- exclusive replay without the input lines of one random output, against a full re-run of the
  same pipeline (vanilla PySpark, and captured) in the same session.
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
from _common import local_spark, median, report
from _data import zipf_text

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig


def word_count(src):
    return src.flatMap(lambda line: line.split()).map(lambda w: (w, 1)).reduceByKey(operator.add)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--picks", type=int, default=5)
    ap.add_argument("--data-dir", default=None, help="reuse generated data here")
    args = ap.parse_args()
    data = args.data_dir or tempfile.mkdtemp(prefix="provrepo-bench-data-")
    os.makedirs(data, exist_ok=True)
    text = os.path.join(data, f"zipf-{args.size_mb:g}mb.txt")
    if not os.path.exists(text):
        print(f"generating {args.size_mb:g} MB of Zipf text ...", flush=True)
        zipf_text(text, args.size_mb)
    spark = local_spark("provrepo-bench-replay")
    sc = spark.sparkContext
    tmp = tempfile.mkdtemp(prefix="provrepo-bench-")
    rng = np.random.default_rng(5)
    try:
        sc.parallelize(range(1000), 2).map(lambda x: x * 2).count()  # warm up, untimed
        repo = ProvenanceRepository.open(os.path.join(tmp, "repo"), RepositoryConfig())
        lc = LineageContext(spark, repo)
        counts = word_count(lc.textFile(text))
        t = time.perf_counter()
        full = dict(counts.collect())
        original = time.perf_counter() - t
        lin = counts.lineage()
        outputs = lin.record_ids
        print(f"original captured job: {original:.2f}s, {len(outputs):,} output records")

        def selective(n: int) -> tuple[float, float]:
            """(in the driver, as a Spark job) seconds for one pick, backward trace included."""
            ids = rng.choice(outputs, n, replace=False)
            traced = lin._with(ids, origin=(lin.origin[0], ids))
            expected = sorted(traced.collect())
            took = []
            for local in (None, False):
                t = time.perf_counter()
                got = lc.replay(traced.go_back_all(), local=local)
                took.append(time.perf_counter() - t)
                assert sorted(got) == expected, "replay did not reproduce the traced outputs"
            return took[0], took[1]

        one = [selective(1) for _ in range(args.picks)]
        hundred = [selective(100) for _ in range(args.picks)]

        # Exclusive replay without one output's input lines vs full re-runs.
        victim = lin._with(rng.choice(outputs, 1), origin=None)
        lines = victim.go_back_all()
        t = time.perf_counter()
        cleaned = dict(lc.replay(counts, exclude=lines))
        ex = time.perf_counter() - t
        ((word, _),) = victim.collect()
        assert word not in cleaned and len(cleaned) < len(full)
        t = time.perf_counter()
        word_count(sc.textFile(text)).collect()
        vanilla = time.perf_counter() - t
        t = time.perf_counter()
        word_count(LineageContext(spark, repo).textFile(text)).collect()
        rerun = time.perf_counter() - t
        repo.close()
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if args.data_dir is None:
            shutil.rmtree(data, ignore_errors=True)

    print(f"\nreplay ({args.size_mb:g} MB word count, local[2], median of {args.picks} picks)")
    report("original captured job", original, "s")
    for n, picks in ((1, one), (100, hundred)):
        for mode, xs in (("", [a for a, _ in picks]), (", Spark job", [b for _, b in picks])):
            m = median(xs)
            report(
                f"replay of {n} output record{'s' if n > 1 else ''}{mode}",
                m,
                "s",
                goal="goal <= 5 %",
                ratio=f"{m / original:.1%} of original (max {max(xs) / original:.1%})",
            )
    report(
        f"ex-replay without {lines.count():,} lines",
        ex,
        "s",
        ratio=f"{ex / vanilla:.2f}x vanilla re-run",
    )
    report("full re-run, vanilla PySpark", vanilla, "s")
    report("full re-run, captured", rerun, "s", ratio=f"ex-replay {ex / rerun:.2f}x of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
