"""Exported tables of a captured Spark run: Spark and DuckDB read both, and a recursive DuckDB
query over `edges` from each output record finds exactly the sources `provrepo trace` finds."""

from __future__ import annotations

import json
import operator

import duckdb
import pytest
from test_export_tables import readme_trace_sql

from agent import LineageContext
from repository.cli import main as cli

pytestmark = pytest.mark.spark

LINES = [
    f"{i} {'alpha beta' if i % 3 else 'beta gamma'} {'oops' if i == 7 else ''}" for i in range(40)
]


@pytest.fixture
def exported(lc, tmp_path):
    """A word count joined with a parallelized table (two kinds of sources; line 7 raises and
    is skipped: a FAIL event), exported as Parquet."""
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n")
    ctx = LineageContext(lc.sc, lc.repo, on_error="skip")

    def words(line: str) -> list[str]:
        if "oops" in line:
            raise ValueError("cannot parse " + line.split()[0])
        return line.split()[1:]

    counts = ctx.textFile(str(path), 2).flatMap(words).map(lambda w: (w, 1))
    counts = counts.reduceByKey(operator.add, 2)
    names = ctx.parallelize([("alpha", "A"), ("beta", "B"), ("delta", "D")], 2)
    joined = counts.join(names, 2)
    assert sorted(joined.collect()) == [("alpha", (25, "A")), ("beta", (39, "B"))]
    ctx.repo.rollover()
    out = tmp_path / "out"
    rep = ctx.repo.export_parquet(out)
    assert rep.runs == [ctx.run_id] and rep.events == ctx.repo.max_event_id
    return ctx, joined, out


def test_duckdb_trace_equals_provrepo_trace(exported, capsys):
    ctx, joined, out = exported
    outputs = joined.lineage().record_ids.tolist()
    assert len(outputs) == 2
    con = duckdb.connect()
    for rid in outputs:
        capsys.readouterr()
        assert cli(["trace", str(ctx.repo.path), str(rid), "--run", ctx.run_id]) == 0
        rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        want = {(r["record_id"], *_loc(r.get("location"))) for r in rows}
        got = set(con.execute(readme_trace_sql(out, ctx.run_id, rid)).fetchall())
        assert got == want
        assert any(uri for _, uri, _, _ in got) and any(uri is None for _, uri, _, _ in got)


def _loc(loc: dict | None) -> tuple:
    return (None, None, None) if loc is None else (loc["uri"], loc["offset"], loc["length"])


def test_spark_reads_both_tables(exported, spark):
    ctx, _, out = exported
    con = duckdb.connect()
    events = spark.read.parquet(str(out / "events"))
    edges = spark.read.parquet(str(out / "edges"))
    types = dict(events.dtypes)
    assert types["event_time"] == "timestamp" and types["run_id"] == "string"
    assert types["attributes"] == "map<string,string>" and types["offset"] == "bigint"
    assert dict(edges.dtypes) == {
        "child_record_id": "bigint",
        "parent_record_id": "bigint",
        "run_id": "string",
    }
    scan = f"read_parquet('{out}/{{}}/*/*.parquet', hive_partitioning = true)"
    want = con.execute(
        "SELECT count(*), sum(record_id), count(DISTINCT event_type), "
        f"max(epoch_us(event_time)) FROM {scan.format('events')}"
    ).fetchall()[0]
    row = events.selectExpr(
        "count(*)", "sum(record_id)", "count(DISTINCT event_type)", "max(unix_micros(event_time))"
    ).collect()[0]
    assert tuple(row) == want
    fails = events.where("event_type = 'FAIL'").select("attributes").collect()
    assert [r.attributes["message"] for r in fails] == ["cannot parse 7"]
    want = con.execute(
        f"SELECT count(*), sum(child_record_id), sum(parent_record_id) FROM {scan.format('edges')}"
    ).fetchall()[0]
    got = edges.selectExpr("count(*)", "sum(child_record_id)", "sum(parent_record_id)").collect()
    assert tuple(got[0]) == want
    assert edges.select("run_id").distinct().collect()[0].run_id == ctx.run_id
