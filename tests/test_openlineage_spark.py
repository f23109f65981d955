"""OpenLineage RunEvents of captured Spark actions (`LineageContext(..., openlineage=client)`):
one START and one COMPLETE or FAIL per action with one run id, the files read and written with
their record counts as provrepo stored them, every event valid against the vendored spec."""

from __future__ import annotations

import json
import operator

import pytest
from _openlineage_schema import file_client, read_events, validate_event

from agent import LineageContext
from repository import BadInput
from repository.cli import main as cli

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("no_openlineage_env")]

LINES = [f"{i} {'alpha beta' if i % 3 else 'beta gamma'}" for i in range(30)]


def test_each_action_emits_start_then_complete_or_fail(lc, tmp_path, capsys):
    events_file = tmp_path / "ol.jsonl"
    text = tmp_path / "in.txt"
    text.write_text("\n".join(LINES) + "\n")
    ctx = LineageContext(lc.sc, lc.repo, openlineage=file_client(events_file))
    counts = ctx.textFile(str(text), 2).flatMap(lambda x: x.split()[1:]).map(lambda w: (w, 1))
    counts = counts.reduceByKey(operator.add, 2)
    assert sorted(counts.collect()) == [("alpha", 20), ("beta", 30), ("gamma", 10)]
    counts.saveAsTextFile(str(tmp_path / "wc"))

    def boom(line: str) -> str:
        if line.startswith("7 "):
            raise ValueError("cannot parse line 7")
        return line

    with pytest.raises(Exception, match="cannot parse line 7"):
        ctx.textFile(str(text), 2).map(boom).count()
    assert ctx.openlineage.flush(120)
    events = read_events(events_file)
    for ev in events:
        validate_event(ev)
    assert [e["eventType"] for e in events] == [
        "START",
        "COMPLETE",
        "START",
        "COMPLETE",
        "START",
        "FAIL",
    ]
    runs = [e["run"]["runId"] for e in events]
    assert runs[0] == runs[1] != runs[2] == runs[3] != runs[4] == runs[5]
    collect, save, fail = events[1], events[3], events[5]
    app = lc.sc.appName
    assert collect["job"]["name"].startswith(f"{app}.collect_")
    for ev in (collect, save):
        (inp,) = ev["inputs"]
        assert (inp["namespace"], inp["name"]) == ("file", str(text))
        assert inp["inputFacets"]["inputStatistics"]["rowCount"] == 30
    assert collect["outputs"] == []
    (out,) = save["outputs"]
    assert out["name"] == str(tmp_path / "wc")
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 3
    facet = save["run"]["facets"]["provrepo_recordLineage"]
    assert facet["runId"] == ctx.run_id and facet["culprits"] == 0
    # The facet's counts are what `provrepo runs` reports for those capture points.
    capsys.readouterr()
    assert cli(["runs", str(ctx.repo.path), "--json"]) == 0
    (info,) = [
        r
        for r in map(json.loads, capsys.readouterr().out.splitlines())
        if r["run_id"] == ctx.run_id
    ]
    stored = {c["capture_point"]: c["records"] for c in info["capture_points"]}
    for c in facet["capturePoints"]:
        assert c["records"] == stored[c["capturePoint"]]
    err = fail["run"]["facets"]["errorMessage"]
    assert "cannot parse line 7" in err["message"]
    assert fail["run"]["facets"]["provrepo_recordLineage"]["culprits"] == 1
    assert ctx.openlineage.failed == 0 and ctx.openlineage.emitted == 6


def test_off_unless_configured(lc):
    assert LineageContext(lc.sc, lc.repo).openlineage is None
    assert LineageContext(lc.sc, lc.repo, openlineage=False).openlineage is None
    with pytest.raises(BadInput, match="OpenLineage client"):
        LineageContext(lc.sc, lc.repo, openlineage="http://marquez:5000")
