"""Search: results equal a brute-force filter over every event, for random predicates and time
ranges; only shards overlapping the range are opened; the index is rebuildable from the logs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from _search_data import BASE, HOUR, brute, fill
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repository import BadInput, ProvenanceRepository, RepositoryConfig

CONFIG = RepositoryConfig(
    sync="none", rollover_interval=3600, block_size="4KiB", indexed_attributes=("host",)
)

# (query, the same predicate written by hand)
QUERIES = [
    (None, None),
    ("type:FAIL", lambda e: e.event_type.value == "FAIL"),
    ("FAIL", lambda e: e.event_type.value == "FAIL"),
    (
        "-type:JOIN AND partition:[1 TO 2]",
        lambda e: e.event_type.value != "JOIN" and 1 <= e.partition <= 2,
    ),
    (
        "attrs.host:w1 OR run:run-b",
        lambda e: e.attributes.get("host") == "w1" or e.run_id == "run-b",
    ),
    (
        "component_type:combiner AND NOT partition:2",
        lambda e: e.component_type == "combiner" and e.partition != 2,
    ),
    ("type:IN [SEND DROP]", lambda e: e.event_type.value in ("SEND", "DROP")),
    ('component:"map#1" AND attempt:1', lambda e: e.component_id == "map#1" and e.attempt == 1),
    ("run:[run-a TO run-b]", lambda e: "run-a" <= e.run_id <= "run-b"),
    (
        "(type:RECEIVE AND attrs.host:w0) OR (type:JOIN AND partition:>=2)",
        lambda e: (
            (e.event_type.value == "RECEIVE" and e.attributes.get("host") == "w0")
            or (e.event_type.value == "JOIN" and e.partition >= 2)
        ),
    ),
    (
        f"time:[{BASE + HOUR} TO {BASE + 2 * HOUR}}}",
        lambda e: BASE + HOUR <= e.event_time_ns < BASE + 2 * HOUR,
    ),
    (
        "id:[100 TO 2000] AND NOT type:JOIN",
        lambda e: 100 <= e.event_id <= 2000 and e.event_type.value != "JOIN",
    ),
]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A repository of 5 logs in 5 shards (one per rollover), all indexed; its events."""
    path = tmp_path_factory.mktemp("search") / "repo"
    repo = ProvenanceRepository.open(path, CONFIG, start_threads=False)
    repo._index.shards.shard_size = 1  # every commit fills its shard: one shard per rollover
    fill(repo)
    assert repo.wait_for_index(10)
    events = repo.get_events(1, 1_000_000)
    assert len(repo._index.shards.shards()) == 5
    yield _Data(repo, events)
    repo.close()


class _Data(tuple):
    def __new__(cls, repo, events):
        return super().__new__(cls, (repo, events))

    def __repr__(self) -> str:  # hypothesis prints arguments of failing examples
        return "<searched repository>"


# A bound is none, any time, or an event's time -1, +0 or +1 (resolved against the events):
# [start, end) is only tested where a bound can equal an event time.
times = st.one_of(
    st.none(),
    st.integers(BASE - HOUR, BASE + 5 * HOUR),
    st.tuples(st.integers(0, 1 << 30), st.sampled_from((-1, 0, 1))),
)


def at_event(bound, events):
    if isinstance(bound, tuple):
        i, delta = bound
        return events[i % len(events)].event_time_ns + delta
    return bound


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=times,
    end=times,
    types=st.one_of(st.none(), st.sets(st.sampled_from(["RECEIVE", "JOIN", "FAIL", "SEND"]))),
    comps=st.one_of(
        st.none(), st.sets(st.sampled_from(["textFile#0", "map#1", "sink#3"]), min_size=1)
    ),
    runs=st.one_of(st.none(), st.sets(st.sampled_from(["run-a", "run-b", "run-c"]), min_size=1)),
    attrs=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["host", "code"]), st.sampled_from(["w0", "w1", "E1", "E3"])
        ),
    ),
    query=st.sampled_from(QUERIES),
    limit=st.sampled_from([0, 1, 7, 100, 5000]),
    newest_first=st.booleans(),
)
def test_search_equals_brute_force(
    searched, start, end, types, comps, runs, attrs, query, limit, newest_first
):
    repo, events = searched
    text, test = query
    start, end = at_event(start, events), at_event(end, events)
    got = repo.search(
        start=start,
        end=end,
        event_types=types,
        components=comps,
        runs=runs,
        attributes=attrs,
        query=text,
        limit=limit,
        newest_first=newest_first,
    )
    want = brute(
        events,
        start=start,
        end=end,
        event_types=types,
        components=comps,
        runs=runs,
        attributes=attrs,
        test=test,
        limit=limit,
        newest_first=newest_first,
    )
    assert [e.event_id for e in got] == want
    assert all(e == repo.get_event(e.event_id) for e in got[:3])


def test_time_range_opens_only_overlapping_shards(searched):
    repo, _ = searched
    with ProvenanceRepository.open(repo.path, read_only=True) as ro:
        shards = ro._index.shards
        infos = shards.shards()
        # Hour 2 lies in the shard of rollover 2 and in the late-data shard (all hours).
        got = ro.search(start=BASE + 2 * HOUR + 1, end=BASE + 3 * HOUR - 1, limit=10_000)
        overlapping = [s for s in infos if s.overlaps(BASE + 2 * HOUR + 1, BASE + 3 * HOUR - 1)]
        assert len(overlapping) == 2 and len(infos) == 5
        assert shards.opened == 2
        assert got and all(BASE + 2 * HOUR < e.event_time_ns < BASE + 3 * HOUR for e in got)
        # The newest 10 events of everything: the newest shard's bound already beats the rest
        # once 10 events are found, so older shards are never opened.
        ro2 = ProvenanceRepository.open(repo.path, read_only=True)
        ro2.search(limit=10)
        assert ro2._index.shards.opened < len(infos)
        ro2.close()
        # Outside every shard: nothing opened at all.
        before = shards.opened
        assert ro.search(start=BASE + 10 * HOUR) == []
        assert shards.opened == before


def _all_results(repo) -> list[list[int]]:
    out = []
    for text, _ in QUERIES:
        for newest_first in (True, False):
            out.append(
                [
                    e.event_id
                    for e in repo.search(query=text, limit=10_000, newest_first=newest_first)
                ]
            )
    out.append([e.event_id for e in repo.search(start=BASE + HOUR, end=BASE + 2 * HOUR, limit=50)])
    return out


def test_deleting_the_index_loses_nothing(tmp_path):
    path = tmp_path / "repo"
    with ProvenanceRepository.open(path, CONFIG, start_threads=False) as repo:
        fill(repo, seed=3, rollovers=3)
        before = _all_results(repo)
    assert any(before)
    shutil.rmtree(path / "index")
    with ProvenanceRepository.open(path) as repo:  # threaded: catches up in the background
        assert repo.wait_for_index(30)
        assert _all_results(repo) == before
        assert repo.reindex() == repo.stats().events
        assert _all_results(repo) == before
    assert not os.path.exists(str(path / "index") + ".rebuild")
    # The CLI rebuilds too, and a read-only search sees it.
    from repository.cli import main

    shutil.rmtree(path / "index")
    assert main(["reindex", str(path), "--quiet"]) == 0
    with ProvenanceRepository.open(path, read_only=True) as ro:
        assert _all_results(ro) == before
    # Without --quiet, a progress bar counts every event on stderr (a fresh interpreter, so
    # tqdm writes to the real stderr).
    shutil.rmtree(path / "index")
    provrepo = os.path.join(os.path.dirname(sys.executable), "provrepo")
    run = subprocess.run([provrepo, "reindex", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "reindex" in run.stderr and "100%" in run.stderr, run.stderr
    with ProvenanceRepository.open(path, read_only=True) as ro:
        assert _all_results(ro) == before


def test_rollovers_are_indexed_by_the_thread(tmp_path):
    with ProvenanceRepository.open(tmp_path / "r", CONFIG) as repo:
        fill(repo, seed=5, rollovers=2, late=False)
        assert repo.wait_for_index(30)
        st_ = repo.stats()
        assert st_.events_not_indexed == 0 and st_.index_bytes > 0
        assert st_.index_lag_seconds is not None and st_.index_lag_seconds < 2
        n = len(repo.search(limit=100_000))
        assert n == st_.events
    # close() indexed the final rollover: a read-only search sees everything.
    with ProvenanceRepository.open(tmp_path / "r", read_only=True) as ro:
        assert ro.stats().events_not_indexed == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"query": "type:("}, "malformed query"),
        ({"query": "-type:FAIL"}, "malformed query"),
        ({"query": "nofield:x"}, "malformed query"),
        ({"query": "partition:x"}, "malformed query"),
        ({"query": "attrs.code:E1"}, "not indexed"),
        ({"query": "type:/F.*/"}, "malformed query"),
        ({"query": ""}, "empty"),
        ({"start": "yesterday"}, "not a time"),
        ({"end": 1.5}, "expected a time"),
        ({"event_types": ["NOPE"]}, "unknown event type"),
        ({"components": [3]}, "expected strings"),
        ({"attributes": {"host": 1}}, "must be strings"),
        ({"limit": -1}, "non-negative"),
        ({"limit": True}, "non-negative"),
        ({"newest_first": "yes"}, "newest_first"),
    ],
)
def test_bad_input_is_bad_input(searched, kwargs, match):
    repo, _ = searched
    with pytest.raises(BadInput, match=match):
        repo.search(**kwargs)


def test_time_forms(searched):
    import datetime as dt

    repo, events = searched
    t = events[10].event_time_ns
    iso = dt.datetime.fromtimestamp(t // 10**9, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    a = [e.event_id for e in repo.search(start=iso, limit=10_000)]
    b = [e.event_id for e in repo.search(start=(t // 10**9) * 10**9, limit=10_000)]
    assert a == b and a
    # Relative times are relative to now: these events are from 2023.
    assert repo.search(start="-1h") == []
    assert len(repo.search(end="now", limit=10)) == 10
    assert repo.search(start="-100000000h", limit=3) == repo.search(limit=3)


def test_cli_search(searched, capsys):
    import json

    from repository.cli import main

    repo, events = searched
    path = repo.path
    capsys.readouterr()
    assert main(["search", path, "--type", "FAIL", "--type", "SEND", "--limit", "5"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["event_id"] for d in out] == brute(events, event_types={"FAIL", "SEND"}, limit=5)
    args = ["search", path, "--attr", "host=w1", "--run", "run-a", "--oldest-first"]
    assert (
        main([*args, "--query", "partition:[0 TO 2]", "--from", "-100000000h", "--to", "now"]) == 0
    )
    out = [json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()]
    assert out == brute(
        events,
        attributes={"host": "w1"},
        runs={"run-a"},
        test=lambda e: e.partition <= 2,
        newest_first=False,
    )
    assert main(["search", path, "--limit", "0"]) == 0
    assert capsys.readouterr().out == ""
    for bad in (
        ["--query", "type:("],
        ["--query", "-type:FAIL"],
        ["--from", "yesterday"],
        ["--to", "-15q"],
        ["--type", "NOPE"],
        ["--attr", "novalue"],
        ["--limit", "-1"],
    ):
        assert main(["search", path, *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("provrepo: error:") and err.count("\n") == 1, err
    assert main(["search", path + "-missing"]) == 2


def test_deep_queries_in_a_small_thread(searched):
    """Parsing happens on a large stack; what is accepted is shallow enough for any thread."""
    import threading

    repo, events = searched
    text = "(type:FAIL OR " * 14 + "run:run-a" + ")" * 14
    out: list = []

    def run() -> None:
        try:
            out.append(repo.search(query=text, limit=10_000))
            repo.search(query="(" * 9_000)
        except BadInput as e:
            out.append(e)

    old = threading.stack_size(128 * 1024)  # musl's default thread stack
    try:
        t = threading.Thread(target=run)
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    want = brute(
        events, test=lambda e: e.event_type.value == "FAIL" or e.run_id == "run-a", limit=10_000
    )
    assert [e.event_id for e in out[0]] == want
    assert isinstance(out[1], BadInput)


def test_opaque_rich_spans_stay_exact(tmp_path, monkeypatch):
    """Past the per-log budget of decoded rich events, runs are indexed by time only; searches
    over them are still exact."""
    import repository._indexing as indexing

    monkeypatch.setattr(indexing, "RICH_EVENTS_READ_PER_LOG", 50)
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        fill(repo, seed=9, rollovers=2)
        events = repo.get_events(1, 10**6)
        assert any(s.opaque for t in repo._store.tocs() for s in repo._index._summarize(t).spans)
        for text, test in QUERIES:
            for kwargs in ({}, {"event_types": ["FAIL", "SEND"], "start": BASE + HOUR // 3}):
                got = repo.search(query=text, limit=10_000, **kwargs)
                want = brute(events, test=test, limit=10_000, **kwargs)
                assert [e.event_id for e in got] == want, (text, kwargs)


def test_an_index_of_another_version_is_rebuilt(tmp_path):
    import json

    path = tmp_path / "r"
    with ProvenanceRepository.open(path, CONFIG, start_threads=False) as repo:
        fill(repo, seed=4, rollovers=2, late=False)
        before = _all_results(repo)
    manifest = path / "index" / "manifest.json"
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**m, "version": 1}))
    with ProvenanceRepository.open(path, read_only=True) as ro:
        assert ro.search() == [] and ro.stats().events_not_indexed > 0
    with ProvenanceRepository.open(path, start_threads=False) as repo:
        assert _all_results(repo) == before
