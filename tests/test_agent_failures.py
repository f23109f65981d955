"""Task failures and retries: exactly one attempt's lineage survives; failing records are
recorded as FAIL events naming the input that raised."""

from __future__ import annotations

import operator
from collections import Counter

import numpy as np
import pytest

from agent import LineageRDD
from journals import EventType, unpack_record_ids

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("lc", ["shared", "socket"], indirect=True)
def test_a_retried_task_leaves_exactly_one_copy_of_lineage(lc):
    # Defined here so cloudpickle ships it by value (test modules are not importable by
    # Spark's Python workers).
    def flaky_on_first_attempt(x):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc.partitionId() == 0 and tc.attemptNumber() == 0:
            raise RuntimeError("transient failure on the first attempt")
        return x

    rows = [(i, f"k{i % 3}") for i in range(30)]
    counts = (
        lc.parallelize(rows, 3)
        .map(flaky_on_first_attempt)
        .map(lambda r: (r[1], 1))
        .reduceByKey(operator.add, 2)
    )
    assert sorted(counts.collect()) == [("k0", 10), ("k1", 10), ("k2", 10)]
    repo, run = lc.repo, lc.run_id
    lin = counts.lineage()
    info = repo.lineage.run_info(run)
    by_type = {c.component_type: c for c in info.capture_points.values()}
    assert by_type["parallelize"].records == 30  # not 30 + the failed attempt's 10
    assert by_type["combiner"].records == 9  # 3 keys x 3 map partitions
    assert by_type["reducer"].records == 3
    # Every event of a capture point's partition comes from one task attempt.
    attempts = Counter()
    for ev in repo.get_events(1, 10_000):
        if ev.event_type is not EventType.FAIL and ev.component_type != "lineage-run":
            attempts[(ev.component_id, ev.partition, ev.attempt)] += 1
    keys = Counter((c, p) for c, p, _ in attempts)
    assert all(n == 1 for n in keys.values())
    # Each output still traces to exactly the 10 rows of its key.
    for rid, (k, _) in zip(lin.record_ids.tolist(), lin.collect()):
        back = LineageRDD(repo, run, np.array([rid])).go_back_all().collect()
        assert sorted(r[0] for r in back) == [i for i in range(30) if f"k{i % 3}" == k]
    # The failed first attempt is on record, naming the input it was processing.
    fails = [e for e in repo.get_events(1, 10_000) if e.event_type is EventType.FAIL]
    assert len(fails) == 1
    assert fails[0].attributes["exception"] == "RuntimeError"
    _, part, pos = unpack_record_ids(np.array([fails[0].record_id]))
    assert (int(part[0]), int(pos[0])) == (0, 0)


def test_a_failing_job_records_the_culprit_and_fails(lc):
    def parse(line: str) -> int:
        return int(line)

    with pytest.raises(Exception, match="invalid literal"):
        lc.parallelize(["1", "2", "x3", "4"], 2).map(parse).collect()
    lc.repo.rollover()
    fails = [e for e in lc.repo.get_events(1, 1000) if e.event_type is EventType.FAIL]
    assert fails and fails[0].attributes["exception"] == "ValueError"
    assert "x3" in fails[0].attributes["message"]
    _, part, pos = unpack_record_ids(np.array([fails[0].record_id]))
    assert (int(part[0]), int(pos[0])) == (1, 0)  # "x3" is the first element of partition 1


def test_fail_policy_culprits_carry_their_raw_data(lc, tmp_path):
    """A job that fails (every attempt) journals no lineage, yet its culprits show the raw
    input: the failing text line re-read by offset, or a parallelized element's value."""
    path = tmp_path / "in.txt"
    lines = [f"{i},ok" for i in range(40)]
    lines[23] = "23,\u00e9bad"
    path.write_text("\n".join(lines) + "\n")

    def parse(line: str) -> int:
        n, flag = line.split(",")
        if flag != "ok":
            raise ValueError(f"bad flag in line {n}")
        return int(n)

    with pytest.raises(Exception, match="bad flag"):
        lc.textFile(str(path), 3).map(parse).collect()
    with pytest.raises(Exception, match="invalid literal"):
        lc.parallelize(["1", "2", "x3", "4"], 2).map(int).collect()
    culprits = lc.culprits()
    assert {c.exception for c in culprits} == {"ValueError"}
    assert sorted(map(str, (c.data for c in culprits))) == ["'x3'", "23,\u00e9bad"]
    text = next(c for c in culprits if c.component_id.startswith("textFile"))
    ev = lc.repo.get_event(text.event_ids[0])
    raw = path.read_bytes()
    assert raw[ev.location.offset : ev.location.offset + ev.location.length] == (
        "23,\u00e9bad\n".encode()
    )


@pytest.mark.parametrize("lc", ["socket"], indirect=True)
def test_a_task_whose_lineage_cannot_be_made_durable_fails(lc):
    """Guarantee 7 the other way round: when the receiver cannot take a task's journal, the
    task fails (Spark retries it, then fails the job) rather than succeeding without its
    lineage."""
    lc.repo.stop_receiver()
    with pytest.raises(Exception, match="cannot reach the journal receiver"):
        lc.parallelize(range(10), 2).map(lambda x: x + 1).collect()
    lc.repo.rollover()
    info = lc.repo.lineage.run_info(lc.run_id)  # the run descriptor, and no lineage
    assert info.capture_points and all(c.records == 0 for c in info.capture_points.values())


def test_a_map_partitions_function_that_is_no_generator_names_its_culprit(lc):
    # It runs, and raises, when the segment is set up, before any record is pulled by the
    # sink: the failure is still the segment's, recorded with the element it raised on.
    with pytest.raises(Exception, match="division"):
        lc.parallelize(list(range(10)), 2).mapPartitions(
            lambda it: [1 // (x - 7) for x in it]
        ).collect()
    culprits = lc.culprits()
    assert [(c.data, c.exception) for c in culprits] == [("7", "ZeroDivisionError")]
