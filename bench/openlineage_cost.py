"""What OpenLineage emission adds to a captured word count, measured in one run.

    python bench/openlineage_cost.py [--size-mb 100] [--runs 5]

Two variants alternate on one local[2] SparkSession: the captured word count
(`LineageContext(..., openlineage=False)`) and the same with OpenLineage on, sending through
the official client's file transport (`openlineage=client`). Each run writes into a fresh
repository; after each one, untimed, the rollover and (when on) the OpenLineage events are
waited for, so no background work overlaps the next timed job. Figures, medians of --runs:

- the action's wall time with OpenLineage on over off (goal: at most 1.01);
- the time the action itself spends in the emitter's hooks (snapshot and hand-over);
- the CPU time the sender thread spends building and sending the events (off the action's
  path), both as shares of the action's wall time: these are what emission costs, measured
  directly, free of the noise of whole Spark jobs.
"""

from __future__ import annotations

import argparse
import operator
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import local_spark, median, report
from _data import zipf_text

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig


def wordcount(lc: LineageContext, path: str):
    lines = lc.textFile(path)
    return lines.flatMap(lambda line: line.split()).map(lambda w: (w, 1)).reduceByKey(operator.add)


def timed_hooks(emitter) -> list[float]:
    """Wrap the emitter's hooks to add the seconds the action spends in them."""
    spent: list[float] = []
    for name in ("action_started", "action_ended"):
        real = getattr(emitter, name)

        def hook(info, real=real) -> None:
            t = time.perf_counter()
            real(info)
            spent.append(time.perf_counter() - t)

        setattr(emitter, name, hook)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=100.0, help="input text, MB")
    ap.add_argument("--runs", type=int, default=5, help="runs per variant (median); >= 3")
    ap.add_argument("--dir", default=None, help="parent of the temporary data directory")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be at least 3 (figures are medians of interleaved runs)")
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.file import FileConfig, FileTransport

    tmp = tempfile.mkdtemp(prefix="provrepo-bench-ol-", dir=args.dir)
    text = os.path.join(tmp, "words.txt")
    zipf_text(text, args.size_mb)
    spark = local_spark("bench-openlineage")
    print(
        f"bench/openlineage_cost.py: captured word count over {args.size_mb:g} MB, local[2], "
        f"median of {args.runs} interleaved runs; load {os.getloadavg()[0]:.1f}; data in {tmp}"
    )
    times: dict[str, list[float]] = {"off": [], "on": []}
    on_path: list[float] = []
    sender_cpu: list[float] = []
    events_file = os.path.join(tmp, "events.jsonl")
    client = OpenLineageClient(transport=FileTransport(FileConfig(events_file, append=True)))
    try:
        for r in range(args.runs):
            for variant in ("off", "on"):
                repo_dir = os.path.join(tmp, f"repo-{variant}-{r}")
                with ProvenanceRepository.open(
                    repo_dir, RepositoryConfig(rollover_interval=3600)
                ) as repo:
                    lc = LineageContext(
                        spark, repo, openlineage=client if variant == "on" else False
                    )
                    spent = timed_hooks(lc.openlineage) if lc.openlineage else []
                    counts = wordcount(lc, text)
                    t = time.perf_counter()
                    counts.collect()
                    elapsed = time.perf_counter() - t
                    times[variant].append(elapsed)
                    repo.rollover()  # untimed: nothing left over for the next run
                    if lc.openlineage is not None:
                        assert lc.openlineage.flush(120), "events not sent in 120 s"
                        assert lc.openlineage.failed == 0
                        on_path.append(sum(spent) / elapsed)
                        sender_cpu.append(lc.openlineage.cpu_seconds / elapsed)
                print(f"    run {r + 1} {variant}: {elapsed:.2f} s", flush=True)
                shutil.rmtree(repo_dir, ignore_errors=True)
        off, on = median(times["off"]), median(times["on"])
        print(f"  {'figure':<44} {'value':>12} {'unit':<10} goal")
        report("captured word count, OpenLineage off", off, "s")
        report("captured word count, OpenLineage on", on, "s")
        report("  on / off (action wall time)", on / off, "x", "goal <= 1.01x")
        report("  spread of off runs (max/min)", max(times["off"]) / min(times["off"]), "x")
        report("  in the emitter's hooks, on the action path", 100 * median(on_path), "%")
        report("  sender thread CPU (build + send), off path", 100 * median(sender_cpu), "%")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
