"""Anomaly mining (Newt's `mine`): unit tests on hand-built lineage, then Newt's §7.3.1
experiment on a real PySpark pipeline (three joins over four tables, spurious records
injected by one map task in each of two stages)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from _events import cp, write_run

from journals import record_id_base
from repository import (
    BadInput,
    MineReport,
    NotFound,
    ProvenanceRepository,
    RepositoryConfig,
)
from repository.cli import main

# -- hand-built runs ------------------------------------------------------------------------------


def src(part, i):
    return record_id_base(1, part) + i


def map_run(repo, run, degree, parts=4, n=50, descriptor=True):
    """source cp 1 -> map/collect cp 2 (narrow); input i of partition p has degree(p, i)
    children."""
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "map#1", "collect", [1]),
    ]
    records = {}
    for p in range(parts):
        records[(1, p)] = n
        records[(2, p)] = [[src(p, i)] for i in range(n) for _ in range(degree(p, i))]
    write_run(repo, run, cps, records, descriptor)


def noisy(seed):
    """Out-degree 0, 1 or 2, like a flatMap over messy input."""
    rng = random.Random(seed)
    table = {}

    def degree(p, i):
        if (p, i) not in table:
            table[(p, i)] = rng.choice((0, 1, 1, 1, 1, 1, 2))
        return table[(p, i)]

    return degree


def test_spurious_children_rank_their_instance_first(repo):
    base = noisy(1)
    spurious = {5, 17, 33}
    map_run(repo, "r", lambda p, i: 25 if (p == 3 and i in spurious) else base(p, i))
    report = repo.mine("r")
    assert isinstance(report, MineReport) and report.mode == "all"
    assert report.run_instances == 4 and len(report.instances) == 4
    top = report.instances[0]
    assert top.key == (2, 1, 3) and top.suspect
    assert [i.key for i in report.suspects] == [(2, 1, 3)]
    # The evidence is exact: counts from the directory, the outlying inputs by id.
    expected = [25 if i in spurious else base(3, i) for i in range(50)]
    assert top.inputs == 50 and top.associations == sum(expected)
    assert top.multiplicity == pytest.approx(sum(expected) / 50)
    assert top.selectivity == pytest.approx(sum(1 for d in expected if d) / 50)
    assert top.outlying_inputs == 3 and top.max_out_degree == 25
    assert set(top.outlier_examples) == {src(3, i) for i in spurious}
    assert top.z_multiplicity > 3.5 and top.siblings == 3
    assert (top.component_id, top.parent_component_id) == ("map#1", "parallelize#0")


def test_inputs_with_no_children_count(repo):
    base = noisy(2)
    # Partition 1 fails to parse 40 % of its input; partition 2 emits nothing at all (no batch).
    map_run(
        repo,
        "r",
        lambda p, i: 0 if (p == 1 and i % 5 < 2) or p == 2 else max(base(p, i), 1),
        parts=6,
    )
    report = repo.mine("r")
    by_key = {i.key: i for i in report.instances}
    assert set(by_key) == {(2, 1, p) for p in range(6)}  # p2 is there without a batch
    assert by_key[(2, 1, 2)].inputs == 50 and by_key[(2, 1, 2)].selectivity == 0
    assert by_key[(2, 1, 1)].selectivity == pytest.approx(0.6)
    assert {i.key for i in report.suspects} == {(2, 1, 1), (2, 1, 2)}
    assert report.instances[0].key == (2, 1, 2)
    assert by_key[(2, 1, 1)].z_selectivity < -3.5
    assert by_key[(2, 1, 0)].z_selectivity > -3.5


def test_a_whole_partition_shifted_is_caught_by_its_siblings(repo):
    # Every input of partition 0 emits 3 records where the others emit 1: no input is odd
    # within the partition, but the instance is, against its siblings.
    map_run(repo, "r", lambda p, i: 3 if p == 0 else 1, parts=3)
    report = repo.mine("r")
    assert [i.key for i in report.suspects] == [(2, 1, 0)]
    assert report.instances[0].z_multiplicity > 3.5


def test_two_faulty_siblings_do_not_mask_each_other(repo):
    base = noisy(3)
    faults = {2: {4, 9, 30}, 5: {1, 40, 41}}

    def degree(only):
        return lambda p, i: 15 if p in only and i in faults[p] else base(p, i)

    scores = {}
    for only in ({2}, {5}, {2, 5}):
        run = "r" + "".join(map(str, sorted(only)))
        map_run(repo, run, degree(only), parts=8)
        report = repo.mine(run)
        assert {i.key for i in report.suspects} == {(2, 1, p) for p in only}, only
        scores[tuple(sorted(only))] = {i.partition: i.score for i in report.suspects}
    # Each fault still scores well beside the other (a mean and sd would let one hide the
    # other; the MAD grows a little with a second outlier).
    for p in (2, 5):
        assert scores[(2, 5)][p] > 0.5 * scores[(p,)][p]


def test_no_anomaly_no_suspect(repo):
    for seed in range(8):
        map_run(repo, f"r{seed}", noisy(100 + seed), parts=6, n=80)
        report = repo.mine(f"r{seed}")
        assert report.suspects == [], (seed, report.instances[0])


def shuffle_run(repo, run, extra):
    """source cp 1 (4 partitions x 40) -> reducer cp 2 (shuffle: input i of partition p goes
    to child partition i % 4, one child per input) -> collect cp 3 (narrow); `extra[(p, i)]`
    more children, spread over all child partitions."""
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "reduceByKey#1", "reducer", [1], "shuffle", "JOIN"),
        cp(3, "collect#2", "collect", [2], "narrow", "SEND"),
    ]
    children = {q: [] for q in range(4)}
    for p in range(4):
        for i in range(40):
            children[i % 4].append([src(p, i)])
            for j in range(extra.get((p, i), 0)):
                children[j % 4].append([src(p, i)])
    records = {(1, p): 40 for p in range(4)}
    for q in range(4):
        records[(2, q)] = children[q]
        records[(3, q)] = [[record_id_base(2, q) + k] for k in range(len(children[q]))]
    write_run(repo, run, cps, records)


def test_shuffle_instances_are_the_map_side_tasks(repo):
    shuffle_run(repo, "r", {(2, 0): 30, (2, 7): 30})
    report = repo.mine("r")
    # The reducer's associations are grouped by where their parents were emitted: the
    # spurious children land in every reducer partition, the map-side task is partition 2.
    top = report.instances[0]
    assert top.key == (2, 1, 2) and top.suspect
    assert top.inputs == 40 and top.associations == 40 + 60
    assert set(top.outlier_examples) == {src(2, 0), src(2, 7)}
    assert [i.key for i in report.suspects] == [(2, 1, 2)]
    assert report.actor_types == 2 and report.run_instances == 8


def test_bad_outputs_winnow_to_their_trace(repo):
    shuffle_run(repo, "r", {(2, 0): 30, (2, 7): 30})
    everything = repo.mine("r")
    # An output made from a spurious child (reducer partition 1 holds children of src(2, 0)).
    index = repo.lineage
    spurious_child = index.children("r", np.array([src(2, 0)]))
    out = index.children("r", spurious_child[:1])
    report = repo.mine("r", bad_outputs=out)
    assert report.mode == "bad" and report.bad_outputs == tuple(out.tolist())
    keys = [i.key for i in report.instances]
    assert len(keys) == 2 and keys[0] == (2, 1, 2)  # every hop: collect <- reducer <- source
    assert {k[:2] for k in keys} == {(2, 1), (3, 2)}
    assert len(report.instances) < len(everything.instances)
    assert report.instances[0].trace_examples == (src(2, 0),)
    assert report.instances[0].bad_inputs == 1 and report.instances[0].bad_multiplicity == 31
    # Scored against all its siblings: the same score as without the bad output.
    assert report.instances[0].score == pytest.approx(everything.instances[0].score)
    # A bad output whose lineage avoids the faulty task: the faulty instance is not a suspect.
    clean = index.children("r", index.children("r", np.array([src(0, 3)])))
    assert all(i.key != (2, 1, 2) for i in repo.mine("r", bad_outputs=clean).instances)


def test_good_outputs_rank_by_the_contrast(repo):
    shuffle_run(repo, "r", {(2, 0): 30, (2, 7): 30})
    index = repo.lineage
    bad = index.children("r", index.children("r", np.array([src(2, 0)])))[:1]
    good = index.children("r", index.children("r", np.array([src(0, 1), src(1, 2), src(3, 3)])))
    report = repo.mine("r", bad, good)
    assert report.mode == "bad+good"
    top = report.instances[0]
    assert top.key == (2, 1, 2) and top.suspect
    assert top.good_inputs == 3 and top.good_out_degree == 1.0 and top.bad_multiplicity == 31
    assert top.contrast == pytest.approx(top.score) and top.contrast > 20
    # The collect actor behaves on the bad trace as on the good one.
    assert [i.key for i in report.suspects] == [(2, 1, 2)]


def test_join_sides_are_separate_actor_types(repo):
    # A fact table (1 child per record) joined with a dimension table (about 5 children per
    # record): pooled, every dimension instance would look like an outlier.
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "parallelize#1", "parallelize", dependency="source"),
        cp(3, "join#2", "join", [1, 2], "shuffle", "JOIN"),
    ]
    rng = random.Random(5)
    records = {(1, p): 50 for p in range(4)}
    records.update({(2, p): 10 for p in range(4)})
    rows = [[src(p, i), record_id_base(2, rng.randrange(4)) + rng.randrange(10)] for p in range(4)
            for i in range(50)]  # fmt: skip
    for q in range(4):
        records[(3, q)] = rows[q::4]
    write_run(repo, "r", cps, records)
    report = repo.mine("r")
    assert report.actor_types == 2 and len(report.instances) == 8
    assert {i.parent_capture_point for i in report.instances} == {1, 2}
    assert report.suspects == []


def test_one_instance_types_rely_on_phase_one(repo):
    base = noisy(4)
    map_run(repo, "r", lambda p, i: 40 if i < 8 else max(base(p, i), 1), parts=1, n=200)
    report = repo.mine("r")
    (only,) = report.instances
    assert only.siblings == 0 and only.typical_multiplicity is None and only.z_multiplicity == 0
    assert only.outlying_inputs == 8 and only.suspect
    assert any("one instance" in n for n in report.notes)


def test_without_a_descriptor_parents_come_from_the_batches(repo):
    base = noisy(6)
    map_run(repo, "r", lambda p, i: 30 if (p, i) == (1, 3) else base(p, i), descriptor=False)
    report = repo.mine("r")
    assert report.instances[0].key == (2, 1, 1) and report.instances[0].suspect


def test_take_is_judged_on_the_partitions_it_read(repo):
    # take(5) read partition 0 only: the others' inputs are no evidence of emitting nothing.
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "take#1", "take", [1], "narrow", "SEND"),
    ]
    records = {(1, p): 50 for p in range(4)}
    records[(2, 0)] = [[src(0, i)] for i in range(5)]
    write_run(repo, "r", cps, records)
    report = repo.mine("r")
    assert [i.key for i in report.instances] == [(2, 1, 0)] and report.run_instances == 1


def test_union_instances_follow_their_parents_partitions(repo):
    # union of two 3-partition sources into 6 partitions, then collect: collect's partition
    # 4 reads source 2's partition 1, which is where the spurious children come from.
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "parallelize#1", "parallelize", dependency="source"),
        cp(3, "collect#3", "collect", [1, 2], "union", "SEND"),
    ]
    base = noisy(9)
    records = {(c, p): 60 for c in (1, 2) for p in range(3)}
    for q in range(6):
        c, p = (1, q) if q < 3 else (2, q - 3)
        deg = [20 if (c, p, i) in {(2, 1, 7), (2, 1, 8)} else base(q, i) for i in range(60)]
        records[(3, q)] = [[record_id_base(c, p) + i] for i in range(60) for _ in range(deg[i])]
    write_run(repo, "r", cps, records)
    report = repo.mine("r")
    assert {i.key for i in report.instances} == {(3, c, p) for c in (1, 2) for p in range(3)}
    assert [i.key for i in report.suspects] == [(3, 2, 1)]


def test_bad_input_is_refused_with_one_line(repo):
    map_run(repo, "r", noisy(7))
    out = record_id_base(2, 0)
    cases = [
        (lambda: repo.mine("nope"), NotFound, "no lineage run 'nope'"),
        (lambda: repo.mine("r", [record_id_base(2, 0) + 10_000]), NotFound, "not a record"),
        (lambda: repo.mine("r", [-1]), BadInput, "negative"),
        (lambda: repo.mine("r", []), BadInput, "no bad outputs given"),
        (lambda: repo.mine("r", ["x"]), BadInput, "record ids"),
        (lambda: repo.mine("r", None, [out]), BadInput, "give bad outputs too"),
        (lambda: repo.mine("r", [out], [out]), BadInput, "both a bad and a good"),
        (lambda: repo.mine("r", threshold=0), BadInput, "threshold"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind, match=text) as e:
            call()
        assert "\n" not in str(e.value)


def test_cli(tmp_path, capsys):
    path = tmp_path / "r"
    with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as repo:
        base = noisy(8)
        map_run(repo, "run-1", lambda p, i: 25 if (p, i) in {(3, 1), (3, 2)} else base(p, i))
    assert main(["mine", str(path)]) == 0
    text = capsys.readouterr().out
    assert "1 suspect(s)" in text and "map#1 <- parallelize#0 [3]" in text
    assert "outlying inputs: 1:3:1 1:3:2" in text
    assert main(["mine", str(path), "--json", "--all"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["considered"] == 4 and doc["suspects"] == 1
    assert [i["rank"] for i in doc["instances"]] == [1, 2, 3, 4]
    assert doc["instances"][0]["partition"] == 3
    assert main(["mine", str(path), "--bad", "2:3:0", "--good", "2:0:0"]) == 0
    assert "ranked against 1 good one(s)" in capsys.readouterr().out
    for argv in (
        ["mine", str(path), "--run", "nope"],
        ["mine", str(path), "--bad", "2:0:9999"],
        ["mine", str(path), "--good", "2:0:0"],
        ["mine", str(path), "--threshold", "0"],
        ["mine", str(tmp_path / "missing")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("provrepo: error: ") and err.count("\n") == 1, err


# -- Newt §7.3.1 on PySpark ----------------------------------------------------------------------

N_KEYS, PARTS = 120, 4
MAGNITUDES = (0, 50)  # no fault, and the error magnitude past which Newt found faults


def tables(seed: int = 7):
    """Four tables of (key, value): keys 0..119 with 1-3, 0-2, 1-2 and 1 rows each, shuffled
    (so joins have varied, honest multiplicities and some keys find no partner)."""
    rng = random.Random(seed)

    def table(lo, hi):
        rows = [(k, rng.randint(1, 9)) for k in range(N_KEYS) for _ in range(rng.randint(lo, hi))]
        rng.shuffle(rows)
        return rows

    return table(1, 3), table(0, 2), table(1, 2), table(1, 1)


def run_pipeline(spark, repo, magnitude: int) -> dict:
    """A.join(B) -> map -> flatMap -> join(C) -> map -> flatMap -> join(D) -> collect. The
    flatMap run by the task of partition 0 (stage 2) and of partition 1 (stage 3) emits, for
    three keys, `magnitude` spurious records per record, with keys spread over the domain."""
    from agent import LineageContext

    lc = LineageContext(spark, repo, run_id=f"newt-{magnitude}")
    bad2 = [k for k in range(N_KEYS) if k % PARTS == 0][:3]  # ints hash to themselves
    bad3 = [k for k in range(N_KEYS) if k % PARTS == 1][:3]

    def fault(partition, keys, tag):
        n_keys, m = N_KEYS, magnitude

        def emit(kv):
            from pyspark import TaskContext

            yield kv
            if kv[0] in keys and TaskContext.get().partitionId() == partition:
                for j in range(m):
                    yield ((kv[0] * 31 + 17 * j + 1) % n_keys, (tag, kv[1][1]))

        return emit

    a, b, c, d = (lc.parallelize(t, PARTS) for t in tables())
    j1 = a.join(b, PARTS).map(lambda kv: (kv[0], ("ok", kv[1][0] + kv[1][1])))
    j2 = (
        j1.flatMap(fault(0, bad2, "bad2"))
        .join(c, PARTS)
        .map(lambda kv: (kv[0], (kv[1][0][0], kv[1][0][1] + kv[1][1])))
    )
    j3 = (
        j2.flatMap(fault(1, bad3, "bad3"))
        .join(d, PARTS)
        .map(lambda kv: (kv[0], kv[1][0][0], kv[1][0][1] + kv[1][1]))
    )
    j3.collect()
    lin = j3.lineage()
    ids, values = lin.record_ids.tolist(), lin.collect()
    info = repo.lineage.run_info(lc.run_id)
    joins = sorted(c.number for c in info.capture_points.values() if c.component_type == "join")
    # A bad output made by the stage-2 fault whose record in stage 3 was not in the faulty
    # task of stage 3 (so its trace meets one fault only); good outputs: keys never touched.
    bad = [r for r, v in zip(ids, values) if v[1] == "bad2" and v[0] % PARTS != 1]
    clean = [r for r, v in zip(ids, values) if v[1] == "ok" and v[0] not in bad2 + bad3]
    return {
        "run": lc.run_id,
        "faults": {(joins[1], joins[0], 0), (joins[2], joins[1], 1)},
        "stage2": (joins[1], joins[0], 0),
        "stage3": (joins[2], joins[1], 1),
        "bad": bad[:1],
        "good": clean[:: max(len(clean) // 5, 1)][:5],
    }


@pytest.fixture(scope="module")
def newt(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("newt") / "repo"
    with ProvenanceRepository.open(
        path, RepositoryConfig(sync="none", rollover_interval=3600)
    ) as r:
        yield r, {m: run_pipeline(spark, r, m) for m in MAGNITUDES}


@pytest.mark.spark
def test_newt_faulty_actors_rank_first(newt):
    repo, runs = newt
    for magnitude in MAGNITUDES[1:]:
        e = runs[magnitude]
        report = repo.mine(e["run"])
        assert report.run_instances == 28  # 7 actor types x 4 partitions
        assert {i.key for i in report.instances[:2]} == e["faults"], magnitude
        assert {i.key for i in report.suspects} == e["faults"], magnitude
        # The stage-2 fault: its inputs of the three keys (a few records each) are outlying.
        s2 = next(i for i in report.instances if i.key == e["stage2"])
        assert s2.outlying_inputs >= 3 and s2.z_multiplicity > 3.5


@pytest.mark.spark
def test_newt_magnitude_zero_flags_nothing(newt):
    repo, runs = newt
    report = repo.mine(runs[0]["run"])
    assert len(report.instances) == 28 and report.suspects == []
    assert report.instances[0].score < 3.0


@pytest.mark.spark
def test_newt_bad_output_winnows_and_good_outputs_rank(newt):
    repo, runs = newt
    for magnitude in MAGNITUDES[1:]:
        e = runs[magnitude]
        everything = repo.mine(e["run"])
        with_bad = repo.mine(e["run"], e["bad"])
        # Only the trace: 7 instances (one per hop and side), the stage-3 fault not among them.
        assert len(with_bad.instances) < len(everything.instances)
        assert with_bad.instances[0].key == e["stage2"]
        assert [i.key for i in with_bad.suspects] == [e["stage2"]]
        assert len(with_bad.suspects) < len(everything.suspects)
        assert e["stage3"] not in {i.key for i in with_bad.instances}
        with_good = repo.mine(e["run"], e["bad"], e["good"])
        assert with_good.instances[0].key == e["stage2"]
        assert [i.key for i in with_good.suspects] == [e["stage2"]]
        assert with_good.instances[0].contrast > 3.5
        assert all(abs(i.contrast) < 3.5 for i in with_good.instances[1:])


@pytest.mark.spark
def test_newt_cli(newt, capsys):
    repo, runs = newt
    e = runs[MAGNITUDES[-1]]
    argv = ["mine", str(repo.path), "--run", e["run"], "--bad", str(e["bad"][0])]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "1 suspect(s)" in out and "join#" in out
