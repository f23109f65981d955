"""Shared fixtures: small repositories, the Spark session, a LineageContext (test data:
`_events.py`)."""

from __future__ import annotations

import pytest

from repository import ProvenanceRepository, RepositoryConfig


@pytest.fixture
def config() -> RepositoryConfig:
    # No fsync in unit tests (crash tests use the default "seal" policy); no timed rollover.
    return RepositoryConfig(sync="none", rollover_interval=3600)


@pytest.fixture
def repo(tmp_path, config):
    with ProvenanceRepository.open(tmp_path / "repo", config) as r:
        yield r


@pytest.fixture
def no_openlineage_env(monkeypatch, tmp_path):
    """No OpenLineage configuration from the machine running the tests (environment, the
    working directory's or the home directory's openlineage.yml)."""
    import os

    for k in list(os.environ):
        if k.startswith("OPENLINEAGE"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    """Every test on Spark (marked, or using the session) is marked `spark`, and skips with
    the reason when PySpark could not start Java, rather than failing."""
    on_spark = [
        item
        for item in items
        if item.get_closest_marker("spark") or "spark" in getattr(item, "fixturenames", ())
    ]
    for item in on_spark:
        if item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
    if on_spark:
        from agent import java_problem

        problem = java_problem()
        if problem is not None:
            skip = pytest.mark.skip(reason=f"needs Spark: {problem}")
            for item in on_spark:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session (local[2], up to 4 task attempts so
    retry tests can fail a task once). Workers run this interpreter, which has provrepo."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("provrepo-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def lc(spark, tmp_path, request):
    """A LineageContext over a fresh repository (rollover thread on, no fsync). Parametrize
    it indirectly with a transport ("socket": journals through the driver's receiver)."""
    from agent import LineageContext

    with ProvenanceRepository.open(
        tmp_path / "lineage-repo", RepositoryConfig(sync="none", rollover_interval=3600)
    ) as r:
        yield LineageContext(spark, r, transport=getattr(request, "param", None))
