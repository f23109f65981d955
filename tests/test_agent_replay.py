"""Debugging with lineage: selective replay, exclusive replay (Newt's telecom scenario),
crash culprits."""

from __future__ import annotations

import operator
import re

import pytest

from agent import LineageContext
from repository import BadInput

pytestmark = pytest.mark.spark


def word_count(lc, lines):
    rdd = lc.parallelize(lines, 3)
    return rdd.flatMap(lambda line: line.split()).map(lambda w: (w, 1)).reduceByKey(operator.add)


LINES = [f"line{i} {'ERROR' if i % 7 == 0 else 'ok'} code{i % 5} code{i % 5}" for i in range(90)]


def test_selective_replay_reproduces_traced_outputs_exactly(lc):
    counts = word_count(lc, LINES)
    full = dict(counts.collect())
    traced = counts.lineage().filter(lambda kv: kv[0] in ("ERROR", "code3"))
    expected = sorted((k, full[k]) for k in ("ERROR", "code3"))
    # From the sources, and from each intermediate capture point: the same outputs, exactly
    # (a count per key is non-monotonic: the replay filters at every capture point).
    level = traced
    for _ in range(3):
        level = level.go_back()
        # In the driver (small replays) and as a Spark job: the same records.
        assert sorted(lc.replay(level, local=True)) == expected
        assert sorted(lc.replay(level, local=False)) == expected
    assert sorted(lc.replay(traced.go_back_all())) == expected


def test_selective_replay_of_a_monotonic_pipeline(lc):
    rdd = lc.parallelize(list(range(60)), 4)
    evens = rdd.filter(lambda x: x % 2 == 0).map(lambda x: x * 10)
    evens.collect()
    picked = evens.lineage().filter(lambda v: v in (40, 300, 580))
    for local in (True, False):
        assert sorted(lc.replay(picked.go_back_all(), local=local)) == [40, 300, 580]


def test_replay_after_a_partition_lineage_map_partitions_runs_on_spark(lc):
    rdd = lc.parallelize([(i % 4, i) for i in range(40)], 4)
    sums = rdd.reduceByKey(operator.add, 2).mapPartitions(lambda it: [sorted(it)])
    full = sums.collect()
    picked = sums.lineage().filter(lambda v: bool(v))
    assert sorted(lc.replay(picked.go_back_all())) == sorted(v for v in full if v)
    with pytest.raises(BadInput, match="driver"):
        lc.replay(picked.go_back_all(), local=True)


def test_selective_replay_through_a_join(lc):
    left = lc.parallelize([(i, f"k{i % 3}") for i in range(12)], 2).map(lambda r: (r[1], r[0]))
    right = lc.parallelize([(100 + i, f"k{i % 3}") for i in range(6)], 2).map(
        lambda r: (r[1], r[0])
    )
    joined = left.join(right).map(lambda kv: (kv[0], kv[1][0] + kv[1][1])).reduceByKey(max)
    full = dict(joined.collect())
    traced = joined.lineage().filter(lambda kv: kv[0] == "k1")
    for local in (True, False):
        assert lc.replay(traced.go_back_all(), local=local) == [("k1", full["k1"])]


def test_replay_needs_a_backward_trace(lc):
    counts = word_count(lc, LINES)
    counts.collect()
    forward = counts.lineage().go_back_all().go_next()
    with pytest.raises(BadInput, match="traced back"):
        lc.replay(forward)


AGENTS = ["Mozilla/5.0", "Dalvik/2.1", "okhttp/4.9"]


def telecom_rows():
    """(uid, agent, bytes): user 5 tethers through a new agent spelling the filter misses."""
    rows = []
    for i in range(200):
        uid = i % 10
        agent = AGENTS[uid % 3]
        nbytes = 10 + (i * 7) % 40
        if uid == 5:
            agent, nbytes = "badAgent-tether/1.0", 900
        rows.append(f"{uid},{agent},{nbytes}")
    return rows


TETHERING = re.compile(r"Tether", re.IGNORECASE)


def telecom_pipeline(lc, rows, tether=TETHERING):
    logs = lc.parallelize(rows, 3).map(lambda line: line.split(","))
    parsed = logs.map(lambda r: (int(r[0]), r[1], int(r[2])))
    agents = parsed.filter(lambda r: not tether.search(r[1])).map(lambda r: (r[0], r[1]))
    users = agents.distinct()
    per_user = parsed.map(lambda r: (r[0], r[2]))
    return users.join(per_user).map(lambda kv: (kv[0], kv[1][1])).reduceByKey(operator.add)


def test_telecom_exclusive_replay_cleans_the_totals(lc, spark):
    # The regex lets the new agent spelling through.
    weak = re.compile(r"(?<!bad)Tether-?$|Android-Tether")
    rows = telecom_rows()
    totals = telecom_pipeline(lc, rows, weak)
    out = dict(totals.collect())
    assert out[5] == 20 * 900  # user 5's download total is an outlier
    # What a correct filter would have produced: no tethering user 5 at all.
    correct = dict(telecom_pipeline(LineageContext(spark, lc.repo), rows).collect())
    assert 5 not in correct
    median = sorted(out.values())[len(out) // 2]
    bad = totals.lineage().filter(lambda kv: kv[1] > 5 * median)
    assert bad.collect() == [(5, 18000)]
    inputs = bad.go_back_all()
    assert {line.split(",")[1] for line in inputs.collect()} == {"badAgent-tether/1.0"}
    # Ex-replay without those inputs (at the source): the totals are right.
    assert dict(lc.replay(totals, exclude=inputs)) == correct
    # Or remove the polluted (uid, agent) record at an intermediate point, the distinct.
    polluted = bad.ancestors().at("distinct")
    assert polluted.collect() == [((5, "badAgent-tether/1.0"), None)]
    assert dict(lc.replay(totals, exclude=polluted)) == correct


def test_exclusive_replay_refuses_records_on_one_path(lc):
    counts = word_count(lc, LINES)
    counts.collect()
    both = counts.lineage().filter(lambda kv: kv[0] == "ERROR")
    mixed = both.ancestors()
    with pytest.raises(BadInput, match="one stage"):
        lc.replay(counts, exclude=mixed)


def test_exclusive_replay_refuses_a_partition_lineage_point(lc):
    sums = lc.parallelize(list(range(12)), 3).mapPartitions(lambda it: [sum(it)]).map(str)
    sums.collect()
    groups = sums.lineage().go_back()
    assert {
        c.component_type
        for c in lc.repo.lineage.run_info(lc.run_id).capture_points.values()
        if c.number in set(groups.capture_points())
    } == {"mapPartitions"}
    with pytest.raises(BadInput, match="mapPartitions"):
        lc.replay(sums, exclude=groups)
    # At its inputs it works: the partition without its first element.
    first = groups.go_back().filter(lambda x: x == 0)
    assert sorted(lc.replay(sums, exclude=first)) == ["22", "38", "6"]


def test_crash_culprits_skip_policy(spark, lc):
    skipping = LineageContext(spark, lc.repo, on_error="skip")
    rows = ["1", "2", "x3", "4", "five", "6"]
    nums = skipping.parallelize(rows, 2).map(int)
    assert sorted(nums.collect()) == [1, 2, 4, 6]
    culprits = skipping.culprits()
    assert sorted(c.data for c in culprits) == ["five", "x3"]
    assert {c.exception for c in culprits} == {"ValueError"}
    assert all("invalid literal" in c.message for c in culprits)


def test_skip_policy_goes_on_after_a_flat_mapping_function_raised(spark, lc):
    # itertools.chain gives up when its source raises: each record must be guarded.
    skipping = LineageContext(spark, lc.repo, on_error="skip")
    pairs = skipping.parallelize([(k, f"{k},{k + 1}" if k % 4 else "bad") for k in range(12)], 2)

    def lazy(text: str):
        for x in text.split(","):
            yield int(x)  # raises on "bad" while being iterated

    def eager(text: str):
        return [int(x) for x in text.split(",")]  # raises when called

    expected = sorted((k, x) for k in range(12) if k % 4 for x in (k, k + 1))
    for parts in (lazy, eager):
        assert sorted(pairs.flatMapValues(parts).collect()) == expected, parts
        flat = pairs.flatMap(lambda kv, f=parts: f(kv[1])).collect()
        assert sorted(flat) == sorted(x for _, x in expected), parts
    culprits = skipping.culprits()
    assert sorted({c.data for c in culprits}) == [(0, "bad"), (4, "bad"), (8, "bad")]


def test_skip_policy_cannot_skip_inside_map_partitions(spark, lc):
    """A mapPartitions generator is ended by an exception: the task fails, the culprit is
    recorded, and the error is the user's, not a misleading StopIteration."""
    skipping = LineageContext(spark, lc.repo, on_error="skip")

    def parse(it):
        for x in it:
            yield int(x)

    with pytest.raises(Exception, match="invalid literal") as err:
        skipping.parallelize(["1", "x", "3"], 1).mapPartitions(parse).collect()
    assert "StopIteration" not in str(err.value)
    assert [c.data for c in skipping.culprits()] == ["'x'"]
