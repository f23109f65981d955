"""TPC-H 22/22 at a tiny scale factor, through the DataFrame API and through `lc.sql` with
the standard query texts: captured results equal vanilla Spark's, and a sampled output row
of each query is reproduced by running the query on its traced source rows alone (the
Cui-Widom property, wherever negation does not void it: see `_tpch.NOT_REEXECUTABLE`).
Data comes from DuckDB's tpch extension, generated at test time."""

from __future__ import annotations

import numpy as np
import pytest

from agent import LineageRDD
from journals import unpack_record_ids

pytestmark = pytest.mark.spark

tpch = pytest.importorskip("_tpch")
pytest.importorskip("duckdb_ext", reason="duckdb-ext-tpch (test extra) generates TPC-H data")

SF = 0.01


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tpch.generate(SF, str(tmp_path_factory.mktemp("tpch")))


def run_query(api: str, n: int, tables: dict, spark, lc=None):
    if api == "dataframe":
        return tpch.QUERIES[n](tables)
    for name, df in tables.items():
        df.createOrReplaceTempView(name)
    text = tpch.sql_queries_cache[n]
    return lc.sql(text) if lc is not None else spark.sql(text)


@pytest.mark.parametrize("api", ["dataframe", "sql"])
def test_tpch_all_queries(lc, spark, folder, api):
    tpch.sql_queries_cache = getattr(tpch, "sql_queries_cache", None) or tpch.sql_queries()
    captured = tpch.read(lc.read, folder)
    vanilla = tpch.read(spark.read, folder)
    table_of = {cp: name for name, df in captured.items() for cp in df.lineage_columns.cps}
    schemas = {name: df.schema for name, df in vanilla.items()}
    failures = []
    for n in range(1, 23):
        q = run_query(api, n, captured, spark, lc)
        rows = q.collect()
        want = run_query(api, n, vanilla, spark).collect()
        if rows != want:
            failures.append(f"Q{n}: {len(rows)} rows differ from vanilla's {len(want)}")
            continue
        if n in tpch.NOT_REEXECUTABLE or not rows:
            continue
        lin = q.lineage()
        k = len(rows) // 2
        out = lin.record_ids[k : k + 1]
        traced = LineageRDD(lc.repo, lc.run_id, out).go_back_all()
        ids = traced.record_ids
        if np.array_equal(ids, out):  # no source row contributed (e.g. a sum over none)
            ids = ids[:0]
        data = LineageRDD(lc.repo, lc.run_id, ids).collect()
        cps = unpack_record_ids(ids)[0]
        assert set(np.unique(cps).tolist()) <= set(table_of), f"Q{n} traced to a non-source"
        subset = {}
        for name in captured:
            mine = [d for d, cp in zip(data, cps.tolist()) if table_of.get(cp) == name]
            subset[name] = spark.createDataFrame(mine, schemas[name])
        again = run_query(api, n, subset, spark).collect()
        if rows[k] not in again:
            failures.append(f"Q{n}: row {rows[k]} not reproduced from its {len(ids)} sources")
    assert not failures, failures
