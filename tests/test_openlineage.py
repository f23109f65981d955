"""OpenLineage RunEvents from the planner's action hook, without Spark: what a front-end's
action knows becomes START then COMPLETE (or FAIL) with one run id, file datasets with their
record counts, and the provrepo facet; every event is valid against the vendored spec; a
transport that fails is logged once and never reaches the job; configuration is the client's
standard one, off when there is none. (A captured Spark run: test_openlineage_spark.py.)"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from _events import lineage_batch, make_event
from _openlineage_schema import file_client, read_events, validate_event
from jsonschema import ValidationError

from agent._openlineage import (
    FACET_NAME,
    SCHEMA_URL,
    OpenLineageEmitter,
    client_from_environment,
    openlineage_configured,
)
from agent._planner import Planner
from journals import EventType, Location, record_id_base
from repository import ProvenanceRepository

pytestmark = pytest.mark.usefixtures("no_openlineage_env")


def word_count_action(planner: Planner, repo: ProvenanceRepository, text: str, fail: bool = False):
    """What a front-end does for one action: a text source (2 files read as one input... here
    one file), a reducer, an output written to a directory; lineage journaled by "tasks"."""
    src = planner.capture_point(
        planner.node_name("textFile"), "textFile", "RECEIVE", [], "source", 1,
        path=text, files=[text],
    )  # fmt: skip
    red = planner.capture_point(
        planner.node_name("reduceByKey"), "reducer", "JOIN", [src.number], "shuffle", 1
    )
    out = planner.capture_point(
        "saveAsTextFile#9", "saveAsTextFile", "SEND", [red.number], "narrow", 1, path="/out/wc"
    )
    lines, reds, outs = (record_id_base(c.number, 0) for c in (src, red, out))
    with planner.action(out):
        repo.register_events(
            lineage_batch(
                range(lines, lines + 5),
                run=planner.run_id,
                component=src.component_id,
                component_type="textFile",
                event_type=EventType.RECEIVE,
                offsets=np.arange(6) * 4,
                location=Location("file://" + text),
            )
        )
        repo.register_events(
            lineage_batch(
                range(reds, reds + 2),
                parents=[[lines, lines + 1, lines + 2], [lines + 3, lines + 4]],
                run=planner.run_id,
                component=red.component_id,
            )
        )
        repo.register_events(
            lineage_batch(
                range(outs, outs + 2),
                parents=[[reds], [reds + 1]],
                run=planner.run_id,
                component=out.component_id,
                event_type=EventType.SEND,
            )
        )
        if fail:
            ev = make_event(lines + 2, run=planner.run_id)
            ev.event_type, ev.component_id = EventType.FAIL, src.component_id
            ev.attributes = {"exception": "ValueError", "message": "bad line"}
            repo.register_events([ev])
            raise ValueError("the job failed")
    return src, red, out


def test_start_then_complete_with_counts_and_the_facet(repo, tmp_path):
    events_file = tmp_path / "ol.jsonl"
    planner = Planner(repo, "run-ol", app="word count", spark_version="4")
    emitter = OpenLineageEmitter(file_client(events_file), repo, app="word count")
    planner.add_listener(emitter)
    text = str(tmp_path / "in.txt")
    src, red, out = word_count_action(planner, repo, text)
    assert emitter.flush(60)
    start, complete = events = read_events(events_file)
    for ev in events:
        validate_event(ev)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"] == start["job"]
    assert complete["job"]["namespace"] == "default"
    assert complete["job"]["name"] == "word_count.saveAsTextFile_9"
    assert complete["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    (inp,) = complete["inputs"]
    assert (inp["namespace"], inp["name"]) == ("file", text)
    assert inp["inputFacets"]["inputStatistics"]["rowCount"] == 5
    (outp,) = complete["outputs"]
    assert outp["name"] == "/out/wc" and outp["outputFacets"]["outputStatistics"]["rowCount"] == 2
    assert "inputStatistics" not in start["inputs"][0].get("inputFacets", {})
    facet = complete["run"]["facets"][FACET_NAME]
    assert facet["_schemaURL"] == SCHEMA_URL and facet["_producer"].startswith("urn:provrepo:")
    assert facet["repository"] == "file://" + repo.path and facet["runId"] == "run-ol"
    assert facet["action"] == "saveAsTextFile" and facet["outputCapturePoint"] == out.number
    assert {c["capturePoint"]: c["records"] for c in facet["capturePoints"]} == {
        src.number: 5,
        red.number: 2,
        out.number: 2,
    }
    info = repo.lineage.run_info("run-ol")
    assert facet["eventIds"] == {"first": info.first_event_id, "last": info.last_event_id}
    assert facet["culprits"] == 0
    assert facet["traceCommand"] == f"provrepo trace {repo.path} RECORD --run run-ol"
    parent = complete["run"]["facets"]["parent"]
    assert parent["run"]["runId"] == emitter.parent_run_id
    assert parent["job"]["name"] == "word_count"
    assert "records" not in start["run"]["facets"][FACET_NAME]["capturePoints"][0]


def test_fail_carries_the_error_and_the_culprits(repo, tmp_path):
    events_file = tmp_path / "ol.jsonl"
    planner = Planner(repo, "run-f", app="app")
    emitter = OpenLineageEmitter(
        file_client(events_file), repo, app="app", namespace="ns", job_name="nightly"
    )
    planner.add_listener(emitter)
    with pytest.raises(ValueError, match="the job failed"):
        word_count_action(planner, repo, str(tmp_path / "in.txt"), fail=True)
    assert emitter.flush(60)
    start, fail = events = read_events(events_file)
    for ev in events:
        validate_event(ev)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["run"]["runId"] == start["run"]["runId"]
    assert fail["job"]["namespace"] == "ns" and fail["job"]["name"] == "nightly.saveAsTextFile_9"
    err = fail["run"]["facets"]["errorMessage"]
    assert err["message"] == "ValueError: the job failed" and err["programmingLanguage"] == "python"
    assert "raise ValueError" in err["stackTrace"]
    assert fail["run"]["facets"][FACET_NAME]["culprits"] == 1


def test_the_facet_schema_rejects_what_it_should(repo, tmp_path):
    events_file = tmp_path / "ol.jsonl"
    planner = Planner(repo, "run-s", app="app")
    emitter = OpenLineageEmitter(file_client(events_file), repo, app="app")
    planner.add_listener(emitter)
    word_count_action(planner, repo, str(tmp_path / "in.txt"))
    assert emitter.flush(60)
    complete = read_events(events_file)[-1]
    facet = complete["run"]["facets"][FACET_NAME]
    for breaks in (
        lambda f: f.pop("traceCommand"),
        lambda f: f.update(culprits=-1),
        lambda f: f["capturePoints"][0].update(records="5"),
        lambda f: f["capturePoints"][0].update(dependency="sideways"),
        lambda f: f.update(eventIds={"first": 1}),
    ):
        bad = json.loads(json.dumps(complete))
        breaks(bad["run"]["facets"][FACET_NAME])
        with pytest.raises(ValidationError):
            validate_event(bad)
    broken = json.loads(json.dumps(complete))
    broken["eventType"] = "DONE"
    with pytest.raises(ValidationError):
        validate_event(broken)
    assert facet["capturePoints"]


class _Refusing:
    """A client whose transport is down."""

    def __init__(self) -> None:
        self.calls = 0

    def emit(self, event) -> None:
        self.calls += 1
        raise ConnectionRefusedError("connection refused")


def test_a_failing_transport_is_logged_once_and_never_fails_the_job(repo, tmp_path, caplog):
    planner = Planner(repo, "run-t", app="app")
    client = _Refusing()
    emitter = OpenLineageEmitter(client, repo, app="app")
    planner.add_listener(emitter)
    with caplog.at_level(logging.DEBUG, logger="provrepo.agent"):
        word_count_action(planner, repo, str(tmp_path / "a.txt"))
        word_count_action(planner, repo, str(tmp_path / "b.txt"))
        assert emitter.flush(60)
    assert client.calls == 4 and emitter.failed == 4 and emitter.emitted == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "not getting through" in warnings[0].getMessage()


def test_a_real_http_transport_to_a_closed_port(repo, tmp_path, monkeypatch, caplog):
    """OPENLINEAGE_URL pointing nowhere: the client's HTTP transport fails, the job does not."""
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    client = client_from_environment()
    assert client is not None and client.transport.kind == "http"
    planner = Planner(repo, "run-h", app="app")
    emitter = OpenLineageEmitter(client, repo, app="app")
    planner.add_listener(emitter)
    with caplog.at_level(logging.WARNING, logger="provrepo.agent"):
        word_count_action(planner, repo, str(tmp_path / "a.txt"))
        assert emitter.flush(60)
    assert emitter.failed == 2
    assert len([r for r in caplog.records if r.name == "provrepo.agent"]) == 1


def test_configuration_the_standard_way(tmp_path, monkeypatch):
    assert not openlineage_configured() and client_from_environment() is None
    config = tmp_path / "openlineage.yml"  # the working directory's
    config.write_text(f"transport:\n  type: file\n  log_file_path: {tmp_path / 'e.jsonl'}\n")
    client = client_from_environment()
    assert client is not None and client.transport.kind == "file"
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert client_from_environment() is None
    monkeypatch.delenv("OPENLINEAGE_DISABLED")
    config.unlink()
    other = tmp_path / "elsewhere.yml"
    other.write_text("transport:\n  type: console\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(other))
    assert client_from_environment().transport.kind == "console"
    monkeypatch.delenv("OPENLINEAGE_CONFIG")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "console")
    assert openlineage_configured()


def test_pending_events_are_sent_before_the_repository_closes(tmp_path):
    events_file = tmp_path / "ol.jsonl"
    with ProvenanceRepository.open(tmp_path / "r") as repo:
        planner = Planner(repo, "run-c", app="app")
        planner.add_listener(OpenLineageEmitter(file_client(events_file), repo, app="app"))
        word_count_action(planner, repo, str(tmp_path / "in.txt"))
    # close() waited for the COMPLETE event, counts included.
    complete = read_events(events_file)[-1]
    assert complete["eventType"] == "COMPLETE"
    assert complete["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 5
