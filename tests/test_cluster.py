"""Capture on a real Spark standalone cluster (issue 14): a master and two workers started with
pyspark's `spark-class` on loopback, each worker in its own mount namespace where the
directory holding the test repositories is an empty tmpfs, so executors cannot see the
journal containers and hand their journals to the driver's receiver. Traces are compared
with brute force; an executor is killed mid-job; the shared-filesystem mode is checked too.

The scenarios run in a driver process of their own (`_cluster_driver.py`); each test then
opens the repository and checks the lineage. More cases and the timing: `bench/cluster.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import _dfref as R
import numpy as np
import pytest
from _cluster import StandaloneCluster, unshare_problem
from _reference import Ref

from agent import LineageRDD
from journals import EventType, unpack_record_ids
from repository import RUN_COMPONENT_TYPE, ProvenanceRepository

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

DRIVER = str(Path(__file__).with_name("_cluster_driver.py"))
VOCAB = [f"w{i:02d}" for i in range(40)]
USERS = [(i, f"user{i % 5}", i % 3) for i in range(20)]
VISITS = [(100 + i, i % 23, (i * 37) % 100) for i in range(120)]  # uids 20-22: no user


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    problem = unshare_problem()
    if problem is not None:
        pytest.skip(f"cluster tests need private mount namespaces: {problem}")
    base = tmp_path_factory.mktemp("cluster")
    hidden = base / "driver-only"  # the executors see an empty tmpfs here
    hidden.mkdir()
    data = base / "data"  # inputs: on the "shared filesystem", seen by everyone
    data.mkdir()
    c = StandaloneCluster(base / "spark", hidden=hidden)
    c.start()
    c.hidden_dir, c.data_dir = hidden, data  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def text(cluster) -> Path:
    path = cluster.data_dir / "lines.txt"
    with open(path, "w") as f:
        for i in range(400):
            words = " ".join(VOCAB[(i * 7 + j * 13) % len(VOCAB)] for j in range(1 + i % 6))
            f.write(f"{i}|{words}\n")
    return path


def run_driver(cluster, scenario: str, repo: Path, **cfg) -> dict:
    out = repo.parent / f"{repo.name}.json"
    cfg = {"master": cluster.url, "repo": str(repo), "scenario": scenario, "out": str(out), **cfg}
    done = subprocess.run(
        [sys.executable, DRIVER, json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def line_id(line: str) -> int:
    return int(line.split("|", 1)[0])


def check_exact(repo_path: Path, result: dict, ref: Ref, source_id) -> None:
    """The run's output equals brute force, every output traces back to exactly the inputs
    brute force says, every input forward to exactly its outputs; each (capture point,
    partition) holds one task attempt's lineage and no record twice."""
    expected = Counter((tuple(v), lin) for v, lin in ref.records())
    assert Counter(tuple(v) for v in result["output"]) == Counter(v for v, _ in expected)
    run = result["run_id"]
    with ProvenanceRepository.open(repo_path, read_only=True) as repo:
        info = repo.lineage.run_info(run)
        out_cp = next(c for c in info.capture_points.values() if c.component_type == "collect")
        ids = repo.lineage.all_records(run, out_cp.number)
        traced = Counter()
        for rid, value in zip(ids.tolist(), LineageRDD(repo, run, ids).collect()):
            back = LineageRDD(repo, run, np.array([rid])).go_back_all().collect()
            traced[(tuple(value), frozenset(source_id(d) for d in back))] += 1
        assert traced == expected
        outputs_of: dict = {}
        for v, lin in ref.records():
            for s in lin:
                outputs_of.setdefault(s, Counter())[tuple(v)] += 1
        sources = [c.number for c in info.capture_points.values() if c.dependency == "source"]
        inputs = np.concatenate([repo.lineage.all_records(run, cp) for cp in sources])
        for rid, datum in zip(inputs.tolist(), LineageRDD(repo, run, inputs).collect()):
            fwd = LineageRDD(repo, run, np.array([rid])).go_next_all()
            got = Counter(tuple(v) for v in fwd.at(out_cp.component_id).collect())
            assert got == outputs_of.get(source_id(datum), Counter()), datum
        assert_one_attempt(repo, run)


def assert_one_attempt(repo: ProvenanceRepository, run: str) -> None:
    """Each (capture point, partition) holds one task attempt's lineage and no record twice."""
    attempts: dict = {}
    seen: Counter = Counter()
    for ev in repo.get_events(1, 10_000_000):
        if ev.run_id != run or ev.event_type is EventType.FAIL:
            continue
        if ev.component_type == RUN_COMPONENT_TYPE:
            continue
        attempts.setdefault((ev.component_id, ev.partition), set()).add(ev.attempt)
        seen[ev.record_id] += 1
    assert all(len(a) == 1 for a in attempts.values()), attempts
    assert max(seen.values()) == 1


def word_count_ref(path: Path) -> Ref:
    lines = path.read_text().splitlines()
    return (
        Ref.source([lines], line_id)
        .flatMap(lambda line: line.split("|", 1)[1].split())
        .map(lambda w: (w, 1))
        .reduceByKey(lambda a, b: a + b, 3)
    )


def test_word_count_through_the_transport(cluster, text):
    repo = cluster.hidden_dir / "wc"
    result = run_driver(cluster, "wordcount", repo, data=str(text))
    rx = result["receiver"]
    # Every task's journal came through the receiver: the executors could not see the repo.
    assert result["spec_transport"] == "auto"
    assert rx["journals_sealed"] >= 4 + 3 and rx["refused"] == 0
    check_exact(repo, result, word_count_ref(text), line_id)


def test_join_and_aggregate_through_the_transport(cluster):
    repo = cluster.hidden_dir / "join"
    result = run_driver(cluster, "join", repo, users=USERS, visits=VISITS)
    assert result["receiver"]["journals_sealed"] > 0
    ref_users = Ref.source([USERS], lambda r: r[0])
    ref_visits = Ref.source([VISITS], lambda r: r[0])
    ref = (
        ref_users.map(lambda r: (r[0], r[1]))
        .join(ref_visits.map(lambda r: (r[1], r[2])))
        .map(lambda kv: (kv[1][0], kv[1][1]))
        .reduceByKey(lambda a, b: a + b, 2)
    )
    check_exact(repo, result, ref, lambda r: r[0])


def test_executor_loss_keeps_exact_lineage(cluster, text, tmp_path):
    """kill -9 one worker's executor once the map stage is done and the reduce stage runs:
    the map tasks that had succeeded there lose their shuffle output and are recomputed, the
    running tasks there die. Lineage stays exact, one attempt per partition."""
    repo = cluster.hidden_dir / "loss"
    markers = tmp_path / "map-executors"  # outside the hidden directory: workers write here
    markers.mkdir()
    result = run_driver(
        cluster,
        "wordcount",
        repo,
        data=str(text),
        partitions=6,
        slow_reduce=0.15,
        reducers=6,  # more than the 2 cores: reducers still to start must fetch lost outputs
        kill_worker_pids=[w.pid for w in cluster.workers],
        markers=str(markers),
    )
    assert result["killed"], "the executor was not killed while the job ran"
    # A map task that had succeeded on the lost executor ran again, and sealed its lineage
    # again: the second copy was dropped at rollover.
    assert max(result["stage_attempts"]) > 0, "no stage ran again after the loss"
    assert result["records_skipped"] > 0
    check_exact(repo, result, word_count_ref(text), line_id)


def test_shared_filesystem_mode(cluster, text):
    """Containers the executors see (a shared filesystem): they write journals there
    directly, the receiver gets nothing, and the lineage is the same."""
    repo = cluster.hidden_dir / "shared"
    containers = cluster.data_dir / "shared-containers"
    result = run_driver(
        cluster, "wordcount", repo, data=str(text), containers=[str(containers / "0")]
    )
    assert result["receiver"]["journals_sealed"] == 0
    assert result["receiver"]["connections"] == 0
    check_exact(repo, result, word_count_ref(text), line_id)


DF_TABLES = {
    "users": ("uid INT, name STRING, grp INT", USERS),
    "visits": ("vid INT, uid INT, amount INT", VISITS),
}
DF_QUERY = """SELECT u.name, sum(v.amount) AS spent, count(*) AS n
              FROM users u JOIN visits v ON u.uid = v.uid
              WHERE v.amount >= 10 GROUP BY u.name"""


def test_dataframe_sql_join_aggregate_through_the_transport(cluster, tmp_path):
    """lc.read.csv + lc.sql (a join and an aggregate) on the cluster: the rows collected
    (journaled by the driver) and the same rows written as Parquet (journaled by the
    executors' write taps, through the receiver) trace back to exactly the CSV lines brute
    force says, and every line forward to exactly the rows that depend on it."""
    paths, lines, offsets, ref = {}, {}, {}, {}
    for name, (schema, rows) in DF_TABLES.items():
        header = ",".join(c.split()[0] for c in schema.split(", "))
        lines[name] = [",".join(map(str, r)) for r in rows]
        offsets[name] = list(np.cumsum([len(header) + 1] + [len(x) + 1 for x in lines[name]]))
        paths[name] = cluster.data_dir / f"{name}.csv"
        paths[name].write_text("\n".join([header, *lines[name]]) + "\n")
        ref[name] = R.source(name, header.split(","), rows, lines[name])
    joined = R.join(
        ref["users"],
        R.where(ref["visits"], lambda r: r["amount"] >= 10),
        lambda a, b: a["uid"] == b["uid"],
    )
    expected = Counter(
        ((r["name"], r["spent"], r["n"]), lin)
        for r, lin in R.group(
            joined,
            lambda r: (r["name"],),
            lambda k, rs: {"name": k[0], "spent": sum(r["amount"] for r in rs), "n": len(rs)},
        )
    )
    repo_path = cluster.hidden_dir / "dataframe"
    written = tmp_path / "spent.parquet"  # outside the hidden directory: workers write here
    result = run_driver(
        cluster,
        "dataframe",
        repo_path,
        data={n: str(p) for n, p in paths.items()},
        tables={n: schema for n, (schema, _) in DF_TABLES.items()},
        query=DF_QUERY,
        # Several scan partitions per file and several write tasks: positions are not trivial.
        conf={"spark.sql.files.maxPartitionBytes": "400", "spark.sql.shuffle.partitions": "3"},
        write=str(written),
    )
    assert Counter(tuple(v) for v in result["output"]) == Counter(v for v, _ in expected)
    # The write's lineage came through the receiver: the executors could not see the repo.
    assert result["receiver"]["journals_sealed"] > 0 and result["receiver"]["refused"] == 0
    owner = {line: name for name, ls in lines.items() for line in ls}
    import pyarrow.parquet as pq

    parts = {
        int(f.name.split("-")[1]): pq.read_table(f).to_pylist() for f in written.glob("part-*")
    }
    run = result["run_id"]
    with ProvenanceRepository.open(repo_path, read_only=True) as repo:
        info = repo.lineage.run_info(run)
        outputs = {c.component_type: c for c in info.capture_points.values()}
        assert {"collect", "write"} <= set(outputs)

        def values(kind: str, ids: np.ndarray) -> list[tuple]:
            if kind == "collect":
                return [tuple(v) for v in LineageRDD(repo, run, ids).collect()]
            _, part, pos = unpack_record_ids(ids)
            return [tuple(parts[p][i].values()) for p, i in zip(part.tolist(), pos.tolist())]

        for kind in ("collect", "write"):
            ids = repo.lineage.all_records(run, outputs[kind].number)
            traced = Counter()
            for rid, value in zip(ids.tolist(), values(kind, ids)):
                back = LineageRDD(repo, run, np.array([rid])).go_back_all().collect()
                traced[(value, frozenset((owner[b], b) for b in back))] += 1
            assert traced == expected, kind
        for name in DF_TABLES:
            for line, offset in zip(lines[name], offsets[name]):
                rid = repo.lineage.record_at(run, str(paths[name]), int(offset) + 1)
                assert rid is not None, (name, line)
                fwd = LineageRDD(repo, run, np.array([rid])).go_next_all().record_ids
                want = Counter(v for v, lin in expected.elements() if (name, line) in lin)
                for kind in ("collect", "write"):
                    cp = unpack_record_ids(fwd)[0] == outputs[kind].number
                    assert Counter(values(kind, fwd[cp])) == want, (kind, name, line)
        assert_one_attempt(repo, run)
