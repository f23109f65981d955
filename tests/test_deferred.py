"""The deferred narrow policy: combiners keep keys and coarse input groups, traces re-derive the
exact associations by re-running the narrow chain. (Exactness for every operation is checked by
tests/test_agent_lineage.py, which runs under both policies.) Here: its lineage is smaller,
it is traced from a fresh process and from the CLI, `skip` failures re-derive as captured,
mining sees the same associations, and missing pieces fail loud."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys

import numpy as np
import pytest
from _lineage_graphs import COMBINE, RUN, Graph

from agent import LineageContext, LineageRDD
from journals import unique_ids, unpack_record_ids
from repository import ProvenanceRepository, RepositoryConfig
from repository.cli import main as cli
from repository.lineage import DeferredError, _forward

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600)
WORDS = [f"w{i}" for i in range(40)]


@pytest.fixture(scope="module")
def zipf_path(tmp_path_factory):
    """~4,000 lines of Zipf-ish words: some words on most lines (coarse groups), some rare."""
    rng = np.random.default_rng(3)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    path = tmp_path_factory.mktemp("deferred") / "words.txt"
    with open(path, "w") as f:
        for i in range(4000):
            f.write(f"{i}|" + " ".join(rng.choice(WORDS, 6, p=p)) + "\n")
    return str(path)


def word_count(lc, path):
    return (
        lc.textFile(path, 2)
        .flatMap(lambda line: line.split("|")[1].split())
        .map(lambda w: (w, 1))
        .reduceByKey(operator.add, 2)
    )


def lineage_bytes(repo) -> int:
    logs = repo.layout.logs
    return sum(os.path.getsize(os.path.join(logs, n)) for n in os.listdir(logs) if ".prov" in n)


def traces(repo, run) -> dict:
    """Every output's source line numbers, and one line's outputs (as values)."""
    ix = repo.lineage
    info = ix.run_info(run)
    out_cp = max(info.capture_points)
    outs = ix.all_records(run, out_cp)
    back = {}
    for rid, value in zip(outs.tolist(), ix.record_data(run, outs)):
        lines = LineageRDD(repo, run, np.array([rid])).go_back_all().collect()
        back[value[0]] = sorted(int(x.split("|")[0]) for x in lines)
    src = next(c.number for c in info.capture_points.values() if c.dependency == "source")
    line = ix.all_records(run, src)[17:18]
    fwd = LineageRDD(repo, run, line).go_next_all()
    ends = fwd.record_ids[unpack_record_ids(fwd.record_ids)[0] == out_cp]
    # The UI's edges between lines and combiner records (named by the word of the output
    # each feeds: eager combiners keep no value), forward and backward.
    lines = ix.all_records(run, src)[:60]
    parents, kids = ix.child_pairs(run, lines)
    word = {}
    for kid in unique_ids(kids).tolist():
        out = LineageRDD(repo, run, np.array([kid])).go_next_all().record_ids
        (value,) = ix.record_data(run, out[unpack_record_ids(out)[0] == out_cp])
        word[kid] = value[0]
    forward = sorted((p, word[k]) for p, k in zip(parents.tolist(), kids.tolist()))
    kids, parents = ix.parent_pairs(run, np.array(sorted(word)))
    backward = sorted((word[k], p) for k, p in zip(kids.tolist(), parents.tolist()))
    return {
        "back": back,
        "fwd": sorted(v[0] for v in ix.record_data(run, ends)),
        "edges": (forward, backward),
    }


@pytest.mark.spark
def test_deferred_is_smaller_and_traces_as_eager(spark, zipf_path, tmp_path):
    got = {}
    for narrow in ("eager", "deferred"):
        with ProvenanceRepository.open(tmp_path / narrow, CONFIG) as repo:
            lc = LineageContext(spark, repo, narrow=narrow, run_id=narrow)
            word_count(lc, zipf_path).collect()
            repo.rollover()
            got[narrow] = (traces(repo, narrow), lineage_bytes(repo))
            info = repo.lineage.run_info(narrow)
            combiner = next(
                c for c in info.capture_points.values() if c.component_type == "combiner"
            )
            assert (combiner.deferred is not None) == (narrow == "deferred")
    assert got["deferred"][0] == got["eager"][0]
    assert all(got["eager"][0]["edges"])  # edges were compared, not two empty lists
    assert got["deferred"][1] < 0.6 * got["eager"][1]
    # A fresh process (the CLI, read-only) re-derives the same: the chain is in the repository.
    for args in (["1:0:5", "--forward", "--data"], ["4:0:0", "--data"]):
        rows = {}
        for narrow in ("eager", "deferred"):
            out = subprocess.run(
                [sys.executable, "-m", "repository.cli", "trace", str(tmp_path / narrow), *args],
                capture_output=True,
                text=True,
                check=False,
            )
            assert out.returncode == 0, out.stderr
            rows[narrow] = [
                {k: v for k, v in json.loads(x).items() if k not in ("run_id", "event_id")}
                for x in out.stdout.splitlines()
            ]
        assert rows["deferred"] == rows["eager"] and rows["eager"], args
    assert cli(["verify", str(tmp_path / "deferred")]) == 0


@pytest.mark.spark
def test_skip_failures_re_derive_as_captured(spark, tmp_path, monkeypatch):
    """on_error="skip": a line whose flatMap raises midway emits nothing (materialized, then
    dropped); a map that raises on one word drops that word only. Re-running the chain at
    trace time follows the same rules, so every output traces to the lines that made it."""
    from agent import _deferred

    monkeypatch.setattr(_deferred, "EXACT", 1)
    monkeypatch.setattr(_deferred, "GROUP", 4)
    rows = [(i, f"a b{'' if i % 7 else ' boom'} c{i % 3}") for i in range(60)]

    def words(r):
        for w in r[1].split():
            if w == "boom" and r[0] % 2:
                raise ValueError("boom")
            yield w

    def pair(w):
        if w == "boom":
            raise KeyError(w)
        return (w, 1)

    with ProvenanceRepository.open(tmp_path / "r", CONFIG) as repo:
        lc = LineageContext(spark, repo, narrow="deferred", on_error="skip")
        counts = lc.parallelize(rows, 3).flatMap(words).map(pair).reduceByKey(operator.add, 2)
        result = dict(counts.collect())
        lin = counts.lineage()
        expect: dict[str, set[int]] = {}
        for i, text in rows:
            ws = text.split()
            if "boom" in ws and i % 2:
                continue  # the flatMap raised: the line emitted nothing
            for w in ws:
                if w != "boom":
                    expect.setdefault(w, set()).add(i)
        assert result == {w: len(s) for w, s in expect.items()}
        for rid, (w, _n) in zip(lin.record_ids.tolist(), lin.collect()):
            back = LineageRDD(repo, lc.run_id, np.array([rid])).go_back_all().collect()
            assert {r[0] for r in back} == expect[w], w


@pytest.mark.spark
def test_mining_sees_the_same_associations(spark, zipf_path, tmp_path):
    reports = {}
    for narrow in ("eager", "deferred"):
        with ProvenanceRepository.open(tmp_path / narrow, CONFIG) as repo:
            lc = LineageContext(spark, repo, narrow=narrow, run_id="m")
            word_count(lc, zipf_path).collect()
            rep = repo.mine("m")
            reports[narrow] = sorted(
                (i.component_id, i.partition, i.inputs, i.associations, i.max_out_degree)
                for i in rep.instances
            )
    assert reports["deferred"] == reports["eager"]


# -- without Spark ------------------------------------------------------------------------------


def _deferred_batches(graph: Graph):
    import msgspec

    out = []
    for b in graph.batches():
        if b.component_id.endswith(".combine"):
            b = msgspec.structs.replace(b, attributes={"narrow": "deferred"})
        out.append(b)
    return out


def test_deferred_lineage_without_its_descriptor_fails_loud(tmp_path):
    """Coarse stored parents must never be read as exact: a descriptor without the deferred
    fields (here: the graph's own) makes every hop through them a clear error."""
    graph = Graph(21)
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        for b in _deferred_batches(graph):
            repo.register_events(b)
        repo.rollover()
        ix = repo.lineage
        combiner = graph.records[(COMBINE, 0)][:2]
        with pytest.raises(DeferredError, match="run descriptor"):
            ix.parents(RUN, np.array(combiner))
        line = graph.parents[combiner[0]][:1]
        with pytest.raises(DeferredError, match="run descriptor"):
            ix.children(RUN, np.array(line))
        assert repo.verify().ok  # the forward index lists those batches as deferred


def test_verify_catches_a_forward_index_that_wrongly_skips_a_batch(tmp_path):
    graph = Graph(22)
    root = tmp_path / "r"
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        for b in graph.batches():
            repo.register_events(b)
        repo.rollover()
        (reader,) = repo.logs()
        victim = next(b for b in reader.toc.batches if b.component_id.endswith(".combine"))
        # Rebuild the file as if that (eager) batch were deferred.
        from repository.lineage._forward_store import batch_columns

        builder = _forward.ForwardBuilder(repo.layout.logs, reader.first_id, 4096, 1)
        for c in batch_columns(reader):
            if c.ref.first_event_id == victim.first_event_id:
                builder.skip_deferred(c.ref.first_event_id)
            elif c.ref.associations:
                builder.add_pairs(c.ref.first_event_id, c.counts, c.parents)
        builder.commit(reader.toc)
    rep = ProvenanceRepository.open(root, read_only=True).verify()
    assert any("as deferred; it is not" in p for p in rep.problems), rep.problems
