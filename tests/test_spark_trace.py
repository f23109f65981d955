"""Traces run as Spark jobs over the event logs give exactly the driver's answers: hops, whole
traces (asked for, or handed over when the frontier passes the threshold), counts, filters,
capture points, and the traced records' raw data as a DataFrame read on the executors."""

from __future__ import annotations

import operator

import numpy as np
import pytest

from agent import LineageContext, LineageRDD
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600)


@pytest.fixture(scope="module")
def text_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("spark-trace") / "lines.txt"
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    with open(path, "w") as f:
        for i in range(300):
            f.write(f"{i}|" + " ".join(words[(i * j + j) % 5] for j in range(1 + i % 4)) + "\n")
    return str(path)


@pytest.fixture(params=["eager", "deferred"])
def traced(request, spark, tmp_path, text_path, monkeypatch):
    """A word count's outputs, captured under each narrow policy (deferred: coarse groups)."""
    from agent import _deferred

    monkeypatch.setattr(_deferred, "EXACT", 2)
    monkeypatch.setattr(_deferred, "GROUP", 5)
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        lc = LineageContext(spark, repo, narrow=request.param, spark_threshold=None)
        counts = (
            lc.textFile(text_path, 3)
            .flatMap(lambda line: line.split("|")[1].split())
            .map(lambda w: (w, 1))
            .reduceByKey(operator.add, 2)
        )
        counts.collect()
        yield lc, counts.lineage()


def test_hops_and_traces_on_spark_equal_the_driver(traced):
    lc, lin = traced
    hot = lin.filter(lambda kv: kv[0] == "alpha")
    some = lin.filter(lambda kv: kv[0] in ("beta", "eps"))
    for sel in (hot, some, lin):
        back = sel.go_back_all(spark=True)
        assert back.on_spark
        assert np.array_equal(back.record_ids, sel.go_back_all().record_ids)
        assert back.count() == len(sel.go_back_all().record_ids)
        one = sel.go_back(spark=True)
        assert np.array_equal(one.record_ids, sel.go_back().record_ids)
    lines = lin.go_back_all()
    picks = LineageRDD(lc.repo, lc.run_id, lines.record_ids[::37], sc=lc.sc)
    fwd = picks.go_next_all(spark=True)
    assert np.array_equal(fwd.record_ids, picks.go_next_all().record_ids)
    assert np.array_equal(picks.go_next(spark=True).record_ids, picks.go_next().record_ids)


def test_a_set_on_spark_stays_there(traced):
    lc, lin = traced
    lines = lin.go_back_all(spark=True)
    driver = lin.go_back_all()
    # Filter, capture points, further hops: on the executors, same answers.
    longer = lines.filter(lambda line: len(line.split()) > 2)
    assert longer.on_spark
    assert sorted(longer.collect()) == sorted(x for x in driver.collect() if len(x.split()) > 2)
    again = longer.go_next_all()
    assert again.on_spark
    assert np.array_equal(
        again.record_ids, driver.filter(lambda x: len(x.split()) > 2).go_next_all().record_ids
    )
    both = lin.ancestors()
    assert np.array_equal(
        LineageRDD(lc.repo, lc.run_id, both.record_ids, sc=lc.sc).at("combiner").record_ids,
        both.at("combiner").record_ids,
    )
    assert sorted(lines.take(1000)) == sorted(driver.collect())


def test_to_df_reads_raw_data_on_the_executors(traced):
    _lc, lin = traced
    lines = lin.filter(lambda kv: kv[0] == "gamma").go_back_all()
    df = lines.toDF()
    assert df.columns == ["record_id", "capture_point", "partition", "position", "data"]
    rows = df.orderBy("record_id").collect()
    assert [r.record_id for r in rows] == lines.record_ids.tolist()
    assert [r.data for r in rows] == lines.collect()
    assert all("gamma" in r.data for r in rows)
    # The outputs' captured values come through as their repr.
    outs = lin.toDF().orderBy("record_id").collect()
    assert [r.data for r in outs] == [repr(v) for v in lin.collect()]
    # And a DataFrame is filtered and written as any other.
    n = df.filter(df.data.contains("alpha")).count()
    assert n == sum("alpha" in x for x in lines.collect())


def test_trace_hands_over_to_spark_past_the_threshold(traced):
    lc, lin = traced
    expected = lin.go_back_all().record_ids
    handed = LineageRDD(lc.repo, lc.run_id, lin.record_ids, sc=lc.sc, spark_threshold=3)
    back = handed.go_back_all()
    assert back.on_spark  # the combiner level has more than 3 records
    assert np.array_equal(back.record_ids, expected)
    stays = LineageRDD(lc.repo, lc.run_id, lin.record_ids, sc=lc.sc, spark_threshold=10**9)
    assert not stays.go_back_all().on_spark


def test_traces_end_at_sources_and_outputs_only(spark, tmp_path):
    """A line a filter dropped reaches no output: its forward trace is empty, on the driver
    and on Spark alike, whether traced alone or beside lines that move; a kept line reaches
    its one output. (Before, a record that moved nowhere stayed in the result as if it were
    an output, and only when no record of its capture point moved.)"""
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i} {'drop' if i % 3 == 0 else 'keep'}\n" for i in range(30)))
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        lc = LineageContext(spark, repo, spark_threshold=None)
        kept = lc.textFile(str(path), 2).filter(lambda s: s.endswith("keep")).map(str.upper)
        outs = kept.collect()
        out_cp = kept.lineage().at("collect")
        lines = LineageRDD(repo, lc.run_id, out_cp.go_back_all().record_ids, sc=lc.sc)
        assert sorted(lines.collect()) == sorted(s.lower() for s in outs)
        offsets = {i: sum(len(f"{j} keep\n") for j in range(i)) for i in range(30)}
        for i, off in offsets.items():
            (rid,) = repo.lineage.records_at(lc.run_id, str(path), off)
            one = LineageRDD(repo, lc.run_id, np.array([rid]), sc=lc.sc)
            for fwd in (one.go_next_all(), one.go_next_all(spark=True)):
                assert fwd.collect() == ([] if i % 3 == 0 else [f"{i} KEEP"]), i
        dropped = [repo.lineage.records_at(lc.run_id, str(path), offsets[i])[0] for i in (0, 3)]
        mixed = LineageRDD(repo, lc.run_id, np.array(sorted([*dropped, rid])), sc=lc.sc)
        for fwd in (mixed.go_next_all(), mixed.go_next_all(spark=True)):
            assert fwd.collect() == ["29 KEEP"]
