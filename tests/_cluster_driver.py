"""A Spark driver for the cluster tests and `bench/cluster.py`, run as its own process (one
process has one SparkContext, and the tests' own is a local one).

    python tests/_cluster_driver.py '{"master": ..., "repo": ..., "scenario": ..., "out": ...}'

It opens the repository, runs one captured scenario on the standalone cluster, closes the
repository (its final rollover merges everything), and writes what the test needs to check
(the run id, the action's output, what the receiver and rollover did) as JSON to "out".
The test then opens the repository itself and checks the lineage against brute force.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cluster import EXECUTOR, children, cmdline

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig


def words_of(line: str) -> list[str]:
    return line.split("|", 1)[1].split()


def executor_pid(executor: str) -> int | None:
    """The executor JVM this Python worker runs under (an ancestor process), if any. Runs in
    Spark's Python workers, which cannot import the tests' modules: only os here."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if executor.encode() in f.read().replace(b"\0", b" "):
                return pid
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return None


class MarkingWords:
    """words_of, which also leaves a file named by its executor's pid in `markers`: the
    killer then picks an executor that really holds map outputs (Spark may place every map
    task on one executor, under load above all)."""

    def __init__(self, markers: str) -> None:
        self.markers = markers
        self.executor = EXECUTOR

    def __call__(self, line: str) -> list[str]:
        pid = executor_pid(self.executor)
        if pid is not None:
            open(os.path.join(self.markers, str(pid)), "a").close()
        return words_of(line)


def word_count(lc: LineageContext, cfg: dict):
    lines = lc.textFile(cfg["data"], cfg.get("partitions", 4))
    words = MarkingWords(cfg["markers"]) if cfg.get("markers") else words_of
    reducers = cfg.get("reducers", 3)
    counts = lines.flatMap(words).map(lambda w: (w, 1)).reduceByKey(operator.add, reducers)
    if cfg.get("slow_reduce"):
        pause = cfg["slow_reduce"]

        def slow(n: int) -> int:
            time.sleep(pause)
            return n

        counts = counts.mapValues(slow)
    return counts


def join_aggregate(lc: LineageContext, cfg: dict):
    users = lc.parallelize([tuple(r) for r in cfg["users"]], 3)
    visits = lc.parallelize([tuple(r) for r in cfg["visits"]], 4)
    names = users.map(lambda r: (r[0], r[1]))
    spend = visits.map(lambda r: (r[1], r[2]))
    return names.join(spend, 3).map(lambda kv: (kv[1][0], kv[1][1])).reduceByKey(operator.add, 2)


def dataframe_sql(lc: LineageContext, cfg: dict):
    """A join + aggregate over two CSV files through lc.read and lc.sql (its rows are
    collected; with "write", also written as Parquet through the executors' tap)."""
    spark = lc.spark
    for key, value in cfg.get("conf", {}).items():
        spark.conf.set(key, value)
    for name, schema in cfg["tables"].items():
        lc.read.csv(cfg["data"][name], header=True, schema=schema).createOrReplaceTempView(name)
    return lc.sql(cfg["query"])


SCENARIOS = {"wordcount": word_count, "join": join_aggregate, "dataframe": dataframe_sql}


def kill_when_reducing(
    sc, worker_pids: list[int], markers: str, done: threading.Event, killed: list
) -> None:
    """kill -9 one worker's executor once the job's first stage has finished and a later
    stage runs, choosing an executor that ran map tasks (it left a marker): map outputs (and
    their tasks' lineage) exist on it, so Spark must recompute tasks that had succeeded
    there."""
    tracker = sc.statusTracker()
    while not done.is_set():
        if any(_reducing(tracker, job) for job in tracker.getActiveJobsIds()):
            ran_maps = {int(name) for name in os.listdir(markers)}
            for worker in worker_pids:
                for pid in children(worker):
                    if pid in ran_maps and EXECUTOR in cmdline(pid):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
        time.sleep(0.05)


def _reducing(tracker, job: int) -> bool:
    """The job's first stage is done (no task running, some completed), a later one runs."""
    info = tracker.getJobInfo(job)
    if info is None or len(info.stageIds) < 2:
        return False
    first_id = min(info.stageIds)
    first = tracker.getStageInfo(first_id)
    if first is None or first.numActiveTasks or not first.numCompletedTasks:
        return False
    later = (tracker.getStageInfo(s) for s in info.stageIds if s != first_id)
    return any(s is not None and s.numActiveTasks for s in later)


def wait_for_executors(sc, n: int, timeout: float = 300.0) -> None:
    """Until `n` executors have registered, so every worker takes tasks from the start."""
    deadline = time.monotonic() + timeout
    while len(sc.statusTracker().getExecutorInfos()) < n + 1:  # the driver is listed too
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} executors did not register within {timeout:.0f}s")
        time.sleep(0.1)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(cfg["master"])
        .appName(f"provrepo-cluster-{cfg['scenario']}")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.driver.memory", "512m")
        .config("spark.cores.max", str(cfg.get("cores", 2)))
        .config("spark.task.maxFailures", "8")
        .config("spark.stage.maxConsecutiveAttempts", "8")
        # Every worker runs on this one host: without this, a reducer reads a lost executor's
        # shuffle files straight from its disk and nothing is recomputed (a real cluster
        # loses them with the host, or fetches them from the executor that died).
        .config("spark.shuffle.readHostLocalDisk", "false")
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    wait_for_executors(sc, cfg.get("executors", 2))
    config = RepositoryConfig(
        containers=tuple(cfg.get("containers") or RepositoryConfig().containers),
        sync=cfg.get("sync", "seal"),
        rollover_interval=3600,
    )
    out: dict = {}
    try:
        with ProvenanceRepository.open(cfg["repo"], config) as repo:
            lc = LineageContext(spark, repo, transport=cfg.get("transport"))
            rdd = SCENARIOS[cfg["scenario"]](lc, cfg)
            done, killed = threading.Event(), []
            killer = None
            if cfg.get("kill_worker_pids"):
                killer = threading.Thread(
                    target=kill_when_reducing,
                    args=(sc, cfg["kill_worker_pids"], cfg["markers"], done, killed),
                )
                killer.start()
            started = time.perf_counter()
            try:
                result = rdd.collect()
            finally:
                done.set()
                if killer is not None:
                    killer.join()
            out["seconds"] = time.perf_counter() - started
            if cfg.get("write"):
                rdd.write.parquet(cfg["write"])
            tracker = sc.statusTracker()
            stages = [
                s for job in tracker.getJobIdsForGroup() for s in tracker.getJobInfo(job).stageIds
            ]
            infos = (tracker.getStageInfo(s) for s in stages)
            # A stage resubmitted after the executor loss (its map outputs were lost) has a
            # later attempt: its tasks ran again.
            out["stage_attempts"] = sorted(i.currentAttemptId for i in infos if i is not None)
            out["run_id"] = lc.run_id
            out["output"] = result
            out["killed"] = killed
            out["spec_transport"] = lc.writer_spec.transport
            repo.rollover()
            stats = repo.receiver_stats
            out["receiver"] = None if stats is None else vars(stats).copy()
            out["records_skipped"] = repo.rollover_stats.records_skipped
    finally:
        spark.stop()
    with open(cfg["out"], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
