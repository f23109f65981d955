"""A finished captured run keeps no JVM object alive through Python reference cycles: with
Python's cyclic GC off, once the user drops the context and the frames, the output frame
and the context are freed and py4j's count of live proxies (each one pins a JVM object:
Datasets with their plans and broadcast relations) is back to its level before the run
(`agent._py4j`, `FrameAgent.release`)."""

from __future__ import annotations

import gc
import weakref

import pytest
from pyspark.sql import functions as F

from agent import LineageContext
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("cycles")
    spark.range(120).selectExpr("id AS k", "id % 7 AS g", "id * 1.5 AS v").write.parquet(
        str(d / "t")
    )
    spark.range(30).selectExpr("id % 7 AS g", "CAST(id AS STRING) AS name").write.parquet(
        str(d / "u")
    )
    return d


def _join(lc, d):
    t, u = lc.read.parquet(str(d / "t")), lc.read.parquet(str(d / "u"))
    return t.join(u, "g").groupBy("name").agg(F.sum("v").alias("s"))


def _lazy(lc, d):  # survivors held in the plan as local rows
    t = lc.read.parquet(str(d / "t"))
    return t.groupBy("g").agg(F.sum("v").alias("s")).where(F.col("s") > 1000)


def _sql(lc, d):
    lc.read.parquet(str(d / "t")).createOrReplaceTempView("cyc_t")
    lc.read.parquet(str(d / "u")).createOrReplaceTempView("cyc_u")
    return lc.sql(
        "SELECT u.name, sum(t.v) AS s FROM cyc_t t JOIN cyc_u u ON t.g = u.g "
        "GROUP BY u.name HAVING sum(t.v) > 10"
    )


def _udf(lc, d):
    plus1 = lc.udf.register("cyc_plus1", lambda x: x + 1, "long")
    t = lc.read.parquet(str(d / "t"))
    return t.select(plus1(F.col("k")).alias("k1"), "g").groupBy("g").count()


def _proxies() -> int:
    """py4j's live proxies of JVM objects (each registers a finalizer that frees its JVM
    object), but Java collections: lists, arrays, maps of converted values (column names,
    arguments), not plans, which stay in py4j's own cycles (see `agent._py4j`)."""
    from py4j.finalizer import ThreadSafeFinalizer
    from py4j.java_collections import JavaArray, JavaIterator, JavaList, JavaMap, JavaSet

    collections = (JavaArray, JavaIterator, JavaList, JavaMap, JavaSet)
    live = [ref() for ref in list(ThreadSafeFinalizer.finalizers.values())]
    return sum(1 for o in live if o is not None and not isinstance(o, collections))


def _run(spark, path, build, d):
    """One captured run in its own context; weak references to the context and the output."""
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(path, config) as r:
        lc = LineageContext(spark, r, aggregates="auto")
        q = build(lc, d)
        rows = q.collect()
        assert rows or build is _lazy
        return weakref.ref(lc), weakref.ref(q)


@pytest.mark.parametrize("build", [_join, _lazy, _sql, _udf], ids=["join", "lazy", "sql", "udf"])
def test_a_dropped_run_frees_its_frames_and_jvm_objects(spark, tables, tmp_path, build):
    _run(spark, tmp_path / "warm", build, tables)  # first-use caches of Spark and py4j
    gc.collect()
    before = _proxies()
    gc.disable()
    try:
        lc_ref, frame_ref = _run(spark, tmp_path / "run", build, tables)
        assert lc_ref() is None, "the LineageContext is in a reference cycle"
        assert frame_ref() is None, "the output frame is in a reference cycle"
        assert _proxies() == before
    finally:
        gc.enable()
        gc.collect()


def test_a_held_frame_still_runs_after_its_context_is_dropped(spark, tables, tmp_path):
    """What the user holds stays usable: the frames keep the agent's parts they need."""
    with ProvenanceRepository.open(
        tmp_path / "r", RepositoryConfig(sync="none", rollover_interval=3600)
    ) as r:
        lc = LineageContext(spark, r)
        q = _join(lc, tables)
        first = sorted(q.collect())
        del lc
        assert sorted(q.collect()) == first
        assert q.lineage().count() == len(first)
