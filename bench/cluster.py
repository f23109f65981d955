"""Capture on a 2-worker standalone cluster: journals through the driver's receiver against
journals written straight into shared containers, measured in one run.

    python bench/cluster.py [--size-mb 50] [--runs 3] [--no-namespaces]

Starts a master and two workers (1 core each) with pyspark's `spark-class` on loopback, each
worker in its own mount namespace where the directory holding the repositories is an empty
tmpfs (as `tests/test_cluster.py` does; needs root and `unshare`). This process is the
driver. Word count (the same as `bench/capture.py`'s) runs captured, alternating:

- shared:    the repository's containers sit in a directory the workers see (a shared
             filesystem): executors write and seal their journals there themselves;
- transport: the containers sit in the hidden directory: executors stream their journals to
             the driver's receiver, which seals each one before acknowledging it;
- vanilla:   plain PySpark, for scale.

Each figure is the median of --runs (the two captured variants swap order every run); the
goal is transport / shared <= 1.10x. Also printed:
lineage bytes shipped per second through the receiver during the transport runs (bytes
received / job seconds), and the receiver's own ceiling, measured with two clients in this
process streaming 8 MiB batches to it.
"""

from __future__ import annotations

import argparse
import operator
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The cluster launcher the tests use (bench/ and tests/ share it; neither is installed).
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)
from _cluster import StandaloneCluster, unshare_problem
from _common import median, report
from _data import zipf_text

from agent import LineageContext
from journals import EventType, JournalWriter, LineageBatch
from repository import ProvenanceRepository, RepositoryConfig

GOAL = 1.10


def wordcount(lines):
    return lines.flatMap(lambda line: line.split()).map(lambda w: (w, 1)).reduceByKey(operator.add)


def captured_run(
    spark, repo_dir: Path, containers: Path | None, text: str, transport: str = "auto"
) -> dict:
    config = RepositoryConfig(
        containers=(str(containers),) if containers else RepositoryConfig().containers,
        rollover_interval=3600,
    )
    with ProvenanceRepository.open(repo_dir, config) as repo:
        lc = LineageContext(spark, repo, transport=transport)
        out = wordcount(lc.textFile(text))
        t = time.perf_counter()
        result = out.collect()
        seconds = time.perf_counter() - t
        stats = repo.receiver_stats
    shutil.rmtree(repo_dir, ignore_errors=True)
    if containers:
        shutil.rmtree(containers, ignore_errors=True)
    return {
        "seconds": seconds,
        "words": len(result),
        "sealed": stats.journals_sealed if stats else 0,
        "bytes": stats.bytes_received if stats else 0,
    }


def receiver_ceiling(tmp: str, clients: int = 2, batches: int = 12) -> float:
    """MB/s the receiver takes from `clients` threads streaming 8 MiB batch frames."""
    n = 1 << 20
    parents = np.random.default_rng(0).integers(0, 2**62, n)
    batch = LineageBatch.build(
        event_time_ns=time.time_ns(),
        event_type=EventType.JOIN,
        run_id="bench",
        component_id="reduceByKey#1",
        component_type="reducer",
        partition=0,
        attempt=0,
        record_ids=range(n),
        parent_counts=np.ones(n, dtype=np.int64),
        parent_ids=parents,
    )
    config = RepositoryConfig(rollover_interval=3600)
    with ProvenanceRepository.open(os.path.join(tmp, "ceiling"), config, start_threads=False) as r:
        r.start_receiver("127.0.0.1")
        spec = r.writer_spec("socket")

        def client() -> None:
            w = JournalWriter.open(spec)
            for _ in range(batches):
                w.append_batch(batch)
            w.seal()

        threads = [threading.Thread(target=client) for _ in range(clients)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        seconds = time.perf_counter() - t
        received = r.receiver_stats.bytes_received
    shutil.rmtree(os.path.join(tmp, "ceiling"), ignore_errors=True)
    return received / seconds / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=50.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--no-namespaces",
        action="store_true",
        help="workers see every directory (no unshare needed); the transport variant is "
        "then forced (transport='socket')",
    )
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if not args.no_namespaces:
        problem = unshare_problem()
        if problem is not None:
            sys.exit(f"bench/cluster.py: {problem} (try --no-namespaces)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="provrepo-bench-cluster-"))
    hidden = tmp / "driver-only"
    hidden.mkdir()
    text = str(tmp / "text.txt")
    print(f"generating {args.size_mb:.0f} MB of Zipf text ...", flush=True)
    zipf_text(text, args.size_mb)
    cluster = StandaloneCluster(tmp / "spark", hidden=None if args.no_namespaces else hidden)
    spark = None
    try:
        cluster.start()
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(cluster.url)
            .appName("provrepo-bench-cluster")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.executor.memory", "1g")
            .config("spark.cores.max", "2")
            .getOrCreate()
        )
        sc = spark.sparkContext
        sc.setLogLevel("ERROR")
        while len(sc.statusTracker().getExecutorInfos()) < 3:  # two executors + the driver
            time.sleep(0.2)
        wordcount(sc.textFile(text)).count()  # warm up the executors' Python workers
        times: dict[str, list[float]] = {"vanilla": [], "shared": [], "transport": []}
        shipped = []
        # Without namespaces the workers see the containers: "auto" would write files.
        mode = "socket" if args.no_namespaces else "auto"
        for r in range(args.runs):
            t = time.perf_counter()
            vanilla = len(wordcount(sc.textFile(text)).collect())
            times["vanilla"].append(time.perf_counter() - t)
            variants = {
                "shared": lambda r=r: captured_run(
                    spark, hidden / f"shared-{r}", tmp / f"containers-{r}", text
                ),
                "transport": lambda r=r: captured_run(
                    spark, hidden / f"transport-{r}", None, text, mode
                ),
            }
            order = ["shared", "transport"] if r % 2 == 0 else ["transport", "shared"]
            done = {name: variants[name]() for name in order}  # alternating which goes first
            shared, transport = done["shared"], done["transport"]
            assert shared["words"] == transport["words"] == vanilla, "results differ"
            assert shared["sealed"] == 0, "shared run went through the receiver"
            assert transport["sealed"] > 0, "transport run did not stream"
            times["shared"].append(shared["seconds"])
            times["transport"].append(transport["seconds"])
            shipped.append((transport["bytes"], transport["seconds"]))
            print(
                f"    run {r + 1}: vanilla {times['vanilla'][-1]:.2f}s, shared "
                f"{shared['seconds']:.2f}s, transport {transport['seconds']:.2f}s "
                f"({transport['sealed']} journals, {transport['bytes'] / 1e6:.1f} MB shipped)",
                flush=True,
            )
        ceiling = receiver_ceiling(str(tmp))
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    v, s, x = (median(times[k]) for k in ("vanilla", "shared", "transport"))
    mb = median([b for b, _ in shipped]) / 1e6
    print(f"\nword count, {args.size_mb:.0f} MB, 2 workers x 1 core, medians of {args.runs}:")
    report("vanilla PySpark", v, "s")
    report("captured, shared containers", s, "s", ratio=f"{s / v:.2f}x vanilla")
    report("captured, through the transport", x, "s", ratio=f"{x / v:.2f}x vanilla")
    report(
        "transport / shared",
        x / s,
        "x",
        goal=f"goal <= {GOAL:.2f}x: {'met' if x / s <= GOAL else 'NOT met'}",
    )
    report("lineage shipped per run", mb, "MB")
    report("lineage shipped per second of job", median([b / t for b, t in shipped]) / 1e6, "MB/s")
    report("receiver ceiling (2 clients, 8 MiB frames)", ceiling, "MB/s")


if __name__ == "__main__":
    main()
