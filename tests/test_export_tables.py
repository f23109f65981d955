"""`export_parquet` / `export_jsonl` / `provrepo export`: every stored event once, exactly as
`get_events` decodes it, in tables DuckDB reads; resumable after a kill; bad input changes
nothing. (Spark reading the tables, and DuckDB tracing a captured run: test_export_spark.py.)"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time

import duckdb
import msgspec
import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from _events import lineage_batch, make_event
from _faults import TESTS, tree_hash, wait_for_line
from hypothesis import given, settings
from hypothesis import strategies as st

import repository._tableexport as tx
from journals import EventType, LineageBatch, Location, ProvenanceEvent, record_id_base
from repository import BadInput, ProvenanceRepository, RepositoryConfig
from repository._richcolumns import decode_rich
from repository._tables import SCHEMA_VERSION
from repository.cli import main as cli

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600, block_size="8KiB")


# -- data ------------------------------------------------------------------------------------


def odd_events(n: int, seed: int, run: str = "run-1") -> list[ProvenanceEvent]:
    """Rich events of every shape the codec has: big and negative ints, long and non-ASCII
    strings, no location, many attributes and parents, FAIL events naming their own record."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ev = make_event(i, run=run)
        k = rng.randrange(6)
        if k == 0:
            ev.location = None
            ev.details = "Traceback: ValueError(" + "x" * rng.randrange(40) + ")"
        elif k == 1:
            ev.attributes = {f"a{j}": "é" * rng.randrange(20) for j in range(rng.randrange(90))}
        elif k == 2:
            ev.parent_ids = [rng.randrange(-(2**63), 2**63) for _ in range(rng.randrange(70))]
        elif k == 3:
            ev.event_type = EventType.FAIL
            ev.parent_ids = [ev.record_id]  # as the agent's FAIL events: not an edge
            ev.attributes = {"exception": "KeyError", "message": "日本" * 3}
        elif k == 4:
            ev.partition, ev.attempt, ev.record_id = 2**31 - 1, 2**40, -5
            ev.location = Location("file:///" + "d" * 300, -1, -1)
        out.append(ev)
    return out


def batches(run: str = "run-1") -> list[LineageBatch]:
    """Lineage batches: a source with offsets, a combiner with CSR parents, ids that are not a
    range, a batch with only a location, one with attributes and details."""
    src = record_id_base(1, 0)
    comb = record_id_base(2, 0)
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 6, 400)
    parents = np.concatenate([np.sort(rng.choice(3000, c, replace=False)) for c in counts]) + src
    t = 1_700_000_000_123_456_789
    return [
        lineage_batch(
            range(src, src + 3000),
            run=run,
            time_ns=t,
            event_type=EventType.RECEIVE,
            component="textFile#0",
            component_type="textFile",
            offsets=np.cumsum(np.r_[0, rng.integers(1, 90, 3000)]),
            location=Location("file:///data/in.txt"),
        ),
        lineage_batch(
            range(comb, comb + 400),
            run=run,
            time_ns=t,
            component="combineByKey#1",
            parent_counts=counts,
            parent_ids=parents,
        ),
        lineage_batch(
            np.array([5, 9, 7, 100]) + record_id_base(3, 1),
            run=run,
            time_ns=t,
            event_type=EventType.SEND,
            component="collect#2",
            component_type="collect",
            parents=[[comb], [], [comb + 1, comb + 2], [comb + 3]],
            location=Location("file:///out/part-0", 10, 20),
            attributes={"host": "w1", "stage": "3"},
            details="{'run': 'descriptor'}",
        ),
    ]


def fill(repo: ProvenanceRepository) -> None:
    """Two runs, rich events and batches interleaved, over several rollovers (logs)."""
    repo.register_events(odd_events(500, 1))
    for b in batches():
        repo.register_events(b)
    repo.rollover()
    repo.register_events(odd_events(300, 2, run="run/2 é"))
    for b in batches("run/2 é"):
        repo.register_events(b)
    repo.register_events(odd_events(200, 3))
    repo.rollover()


@pytest.fixture
def filled(tmp_path):
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        fill(repo)
        yield repo


# -- brute force -----------------------------------------------------------------------------


def expected(repo: ProvenanceRepository, run: str | None = None) -> tuple[list, list]:
    """(event rows, edge rows) from `get_events`, one Python object per event."""
    rows, edges = [], []
    for ev in repo.get_events(1, 10**9):
        if run is not None and ev.run_id != run:
            continue
        loc = ev.location
        rows.append(
            (
                ev.run_id,
                ev.event_id,
                ev.event_time_ns // 1000,
                ev.event_type.value,
                ev.component_id,
                ev.component_type,
                ev.partition,
                ev.attempt,
                ev.record_id,
                None if loc is None else loc.uri,
                None if loc is None else loc.offset,
                None if loc is None else loc.length,
                sorted(ev.attributes.items()),
                ev.details,
            )
        )
        edges += [(ev.run_id, ev.record_id, p) for p in ev.parent_ids if p != ev.record_id]
    return rows, edges


COLUMNS = (
    "run_id",
    "event_id",
    "event_time",
    "event_type",
    "component_id",
    "component_type",
    "partition",
    "attempt",
    "record_id",
    "uri",
    "offset",
    "length",
    "attributes",
    "details",
)


def row_of(r: dict, attributes: list) -> tuple:
    """An exported row as `expected` makes them (attributes as sorted items)."""
    return tuple(attributes if c == "attributes" else r[c] for c in COLUMNS)


def parquet_rows(out) -> tuple[list, list]:
    """The exported tables as rows, read with pyarrow's Hive partitioning (values decoded)."""
    if not os.path.isdir(os.path.join(out, "events")):
        return [], []
    ev = ds.dataset(os.path.join(out, "events"), format="parquet", partitioning="hive").to_table()
    rows = [row_of(r, sorted(r["attributes"])) for r in ev.to_pylist()]
    times = ev.column("event_time").cast("int64").to_pylist()
    rows = [(*r[:2], t, *r[3:]) for r, t in zip(rows, times)]
    if not os.path.isdir(os.path.join(out, "edges")):
        return rows, []
    ed = ds.dataset(os.path.join(out, "edges"), format="parquet", partitioning="hive").to_table()
    edges = [(r["run_id"], r["child_record_id"], r["parent_record_id"]) for r in ed.to_pylist()]
    return rows, edges


def by_id(rows: list) -> list:
    return sorted(rows, key=lambda r: r[1])


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("segment", [None, 150])
def test_parquet_holds_every_event_as_get_events_decodes_it(filled, tmp_path, monkeypatch, segment):
    """segment: a run's events of a chunk split into files of ~that many rows (written by two
    threads), in row groups of 64 rows, rich events parsed 50 at a time (the default sizes
    never split the test data)."""
    if segment is not None:
        monkeypatch.setattr(tx, "SEGMENT_ROWS", segment)
        monkeypatch.setattr(tx, "ROW_GROUP_ROWS", 64)
        monkeypatch.setattr(tx, "_RICH_GROUP", 50)
    out = tmp_path / "out"
    rep = filled.export_parquet(out, chunk_events=700)  # several chunks, files per chunk
    rows, edges = expected(filled)
    got_rows, got_edges = parquet_rows(out)
    assert by_id(got_rows) == rows
    assert sorted(got_edges) == sorted(edges)
    assert rep.events == len(rows) and rep.edges == len(edges)
    assert rep.first_id == 1 and rep.next_id == filled.max_event_id + 1
    assert rep.runs == ["run-1", "run/2 é"] and not rep.skipped
    # Hive directories percent-encode the run; every file is sorted by id, zstd, versioned,
    # and microsecond UTC timestamps (Spark rejects nanoseconds).
    assert os.path.isdir(out / "events" / "run_id=run%2F2%20%C3%A9")
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(out / "events") for f in fs)
    assert len(files) > 2 and all(os.path.basename(f).startswith("part-") for f in files)
    chunk_firsts = set(range(1, filled.max_event_id + 1, 700))
    ranges: dict[str, list[tuple[int, int]]] = {}
    for f in files:
        meta = pq.read_metadata(f)
        kv = meta.metadata
        assert kv[b"provrepo.schema_version"] == str(SCHEMA_VERSION).encode()
        assert kv[b"provrepo.table"] == b"events"
        ids = pq.read_table(f, columns=["event_id"]).column(0).to_pylist()
        assert ids == sorted(ids)
        first, stop = int(kv[b"provrepo.first_event_id"]), int(kv[b"provrepo.stop_event_id"])
        assert first <= ids[0] and ids[-1] < stop
        assert os.path.basename(f) == f"part-{first:020d}.parquet"
        ranges.setdefault(os.path.dirname(f), []).append((first, stop))
    # A run's files cover consecutive id ranges: a chunk's first file from the chunk's first
    # id, each next one from where the one before stops, the last to the chunk's end.
    for spans in ranges.values():
        for (a, b), (c, _) in itertools.pairwise(spans):
            assert a < b <= c and (b == c or c in chunk_firsts)
        assert all(a in chunk_firsts or any(b == a for _, b in spans) for a, _ in spans)
    if segment is not None:  # split: more files than chunks in a run
        assert max(len(v) for v in ranges.values()) > len(chunk_firsts)
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert (
            str(meta.schema.to_arrow_schema().field("event_time").type) == "timestamp[us, tz=UTC]"
        )


def test_lockstep_decoding_matches_msgspec_and_falls_back(filled):
    """The rich events above took both paths: the lockstep parser and msgspec's fallback."""
    evs = odd_events(400, 9)
    parts = [msgspec.msgpack.encode(e) for e in evs]
    ends = np.cumsum([len(p) for p in parts])
    cols = decode_rich(b"".join(parts), ends - [len(p) for p in parts], ends, np.arange(400))
    assert 0 < cols.fallback < 400  # >64 attributes or parents, uint64 beyond int64
    assert cols.strings("details").to_pylist() == [e.details for e in evs]
    assert cols.record_id.tolist() == [e.record_id for e in evs]


_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_text = st.text(max_size=40)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(
        st.builds(
            ProvenanceEvent,
            _ints,
            st.sampled_from(list(EventType)),
            _text,
            _text,
            _text,
            _ints,
            _ints,
            _ints,
            st.lists(_ints, max_size=5),
            st.dictionaries(_text, _text, max_size=4),
            st.none() | st.builds(Location, _text, _ints, _ints),
            st.none() | _text,
            _ints,
        ),
        min_size=1,
        max_size=30,
    ),
    st.data(),
)
def test_lockstep_decoding_equals_msgspec(events, data):
    parts = [msgspec.msgpack.encode(e) for e in events]
    lens = np.array([len(p) for p in parts])
    ends = np.cumsum(lens)
    cols = decode_rich(b"".join(parts), ends - lens, ends, np.arange(len(events)))
    keep = sorted(data.draw(st.sets(st.integers(0, len(events) - 1))))
    if keep:
        cols, events = cols.select(np.array(keep)), [events[k] for k in keep]
    assert_columns_equal(cols, events)


# msgpack's int and string encodings, by the range of values that take each one
_INT_KINDS = [
    (0, 127),  # positive fixint
    (-32, -1),  # negative fixint
    (128, 255),  # uint8
    (256, 2**16 - 1),  # uint16
    (2**16, 2**32 - 1),  # uint32
    (2**32, 2**63 - 1),  # uint64
    (-128, -33),  # int8
    (-(2**15), -129),  # int16
    (-(2**31), -(2**15) - 1),  # int32
    (-(2**63), -(2**31) - 1),  # int64
]
_STR_KINDS = [(0, 31), (32, 255), (256, 300)]  # fixstr, str8, str16 (lengths)


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_lockstep_fast_paths_equal_msgspec(data):
    """Events whose fields all take one msgpack encoding each (the usual case, read with
    whole-array steps), for every encoding, equal msgspec's decoding."""
    n = data.draw(st.integers(1, 40))

    def ints():
        lo, hi = data.draw(st.sampled_from(_INT_KINDS))
        return st.integers(lo, hi)

    def text():
        lo, hi = data.draw(st.sampled_from(_STR_KINDS))
        if hi < 32:  # fixstrs, some with 2-byte characters
            return st.text(st.sampled_from("ab\u00e9"), max_size=hi // 2)
        return st.text(st.sampled_from("ab"), min_size=lo, max_size=hi)

    f = {k: ints() for k in ("time", "part", "att", "rid", "par", "off", "len", "eid")}
    s = {k: text() for k in ("type_", "run", "comp", "ctype", "uri", "key", "val", "det")}
    npar, nattr = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    loc, det = data.draw(st.booleans()), data.draw(st.booleans())
    events = [
        ProvenanceEvent(
            data.draw(f["time"]),
            data.draw(st.sampled_from(list(EventType))),
            data.draw(s["run"]),
            data.draw(s["comp"]),
            data.draw(s["ctype"]),
            data.draw(f["part"]),
            data.draw(f["att"]),
            data.draw(f["rid"]),
            [data.draw(f["par"]) for _ in range(npar)],
            {f"{j}" + data.draw(s["key"]): data.draw(s["val"]) for j in range(nattr)},
            Location(data.draw(s["uri"]), data.draw(f["off"]), data.draw(f["len"]))
            if loc
            else None,
            data.draw(s["det"]) if det else None,
            data.draw(f["eid"]),
        )
        for _ in range(n)
    ]
    parts = [msgspec.msgpack.encode(e) for e in events]
    lens = np.array([len(p) for p in parts])
    ends = np.cumsum(lens)
    cols = decode_rich(b"".join(parts), ends - lens, ends, np.arange(n))
    assert_columns_equal(cols, events)


def assert_columns_equal(cols, events) -> None:
    """The decoded columns hold exactly the events' values."""
    names = ("event_type", "run_id", "component_id", "component_type", "uri", "details")
    s = {k: cols.strings(k).to_pylist() for k in (*names, "attr_keys", "attr_values")}
    pc = np.r_[0, np.cumsum(cols.parent_counts)]
    ac = np.r_[0, np.cumsum(cols.attr_counts)]
    for k, e in enumerate(events):
        loc = e.location
        assert (cols.time_ns[k], cols.partition[k], cols.attempt[k], cols.record_id[k]) == (
            e.event_time_ns,
            e.partition,
            e.attempt,
            e.record_id,
        )
        assert [s[n][k] for n in names] == [
            e.event_type.value,
            e.run_id,
            e.component_id,
            e.component_type,
            None if loc is None else loc.uri,
            e.details,
        ]
        assert bool(cols.has_location[k]) == (loc is not None)
        if loc is not None:
            assert (cols.offset[k], cols.length[k]) == (loc.offset, loc.length)
        assert cols.parents[pc[k] : pc[k + 1]].tolist() == e.parent_ids
        items = list(zip(s["attr_keys"][ac[k] : ac[k + 1]], s["attr_values"][ac[k] : ac[k + 1]]))
        assert items == list(e.attributes.items())


@pytest.mark.parametrize("size", [5, 8, 15, 16, 21])
def test_runs_named_alike_are_told_apart(tmp_path, size):
    """Rich events are split by run without hashing when a group holds one run: run ids of
    the same length that differ only in their last byte (within or at the end of a word)."""
    a, b = "r" * (size - 1) + "a", "r" * (size - 1) + "b"
    evs = [make_event(i, run=b if i % 7 == 3 else a) for i in range(2000)]
    parts = [msgspec.msgpack.encode(e) for e in evs]
    ends = np.cumsum([len(p) for p in parts])
    cols = decode_rich(b"".join(parts), ends - [len(p) for p in parts], ends, np.arange(2000))
    assert cols.same_string("run_id") is None
    assert cols.select(np.arange(0, 2000, 7)).same_string("run_id") == a
    assert cols.select(np.arange(3, 2000, 7)).same_string("run_id") == b
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        repo.register_events(evs)
        repo.rollover()
        out = tmp_path / "out"
        repo.export_parquet(out)
        rows, edges = expected(repo)
        got_rows, got_edges = parquet_rows(out)
        assert by_id(got_rows) == rows
        assert sorted(got_edges) == sorted(edges)
        assert sorted({r[0] for r in got_rows}) == [a, b]


def test_jsonl_holds_the_same_rows(filled, tmp_path):
    out = tmp_path / "out"
    filled.export_jsonl(out, chunk_events=900)
    rows, edges = expected(filled)
    got, got_edges = [], []
    for d, _, fs in os.walk(out / "events"):
        for f in fs:
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                for line in fh:
                    r = json.loads(line)
                    got.append(row_of(r, sorted(r["attributes"].items())))
    for d, _, fs in os.walk(out / "edges"):
        for f in fs:
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                got_edges += [
                    (r["run_id"], r["child_record_id"], r["parent_record_id"])
                    for r in map(json.loads, fh)
                ]
    # Times are RFC 3339 (UTC, microseconds): DuckDB reads them as timestamps.
    con = duckdb.connect()
    us = dict(
        con.execute(
            f"SELECT event_id, epoch_us(event_time::TIMESTAMPTZ) "
            f"FROM read_json('{out}/events/*/*.jsonl')"
        ).fetchall()
    )
    got = [(*r[:2], us[r[1]], *r[3:]) for r in got]
    assert by_id(got) == rows
    assert sorted(got_edges) == sorted(edges)


def test_run_filter_and_duckdb_reads_both_tables(filled, tmp_path):
    out = tmp_path / "out"
    rep = filled.export_parquet(out, run="run/2 é")
    rows, edges = expected(filled, "run/2 é")
    assert rep.runs == ["run/2 é"] and rep.events == len(rows)
    con = duckdb.connect()
    n, first, last, runs = con.execute(
        f"SELECT count(*), min(event_id), max(event_id), list(DISTINCT run_id) "
        f"FROM read_parquet('{out}/events/*/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert (n, first, last, runs) == (len(rows), rows[0][1], rows[-1][1], ["run/2 é"])
    got = con.execute(
        f"SELECT run_id, child_record_id, parent_record_id "
        f"FROM read_parquet('{out}/edges/*/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert sorted(got) == sorted(edges)
    attrs = con.execute(
        f"SELECT attributes['host'], \"offset\", length, details FROM read_parquet("
        f"'{out}/events/*/*.parquet', hive_partitioning = true) WHERE component_id = 'collect#2'"
    ).fetchall()
    assert attrs == [("w1", 10, 20, "{'run': 'descriptor'}")] * 4


def test_recursive_duckdb_query_finds_what_trace_finds(tmp_path):
    """A three-level lineage (lines -> combiner -> reducer -> output); from each output record a
    recursive query over `edges` reaches exactly the sources `repo.lineage.trace` reaches."""
    rng = np.random.default_rng(11)
    run = "wc"
    lines, combs, reds, outs = (record_id_base(cp, 0) for cp in (1, 2, 3, 4))

    def level(base: int, n: int, parent_base: int, parent_n: int, cid: str) -> LineageBatch:
        counts = rng.integers(1, 4, n)
        parents = np.concatenate([rng.choice(parent_n, c, replace=False) for c in counts])
        return lineage_batch(
            range(base, base + n),
            run=run,
            component=cid,
            parent_counts=counts,
            parent_ids=parents + parent_base,
        )

    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        repo.register_events(
            lineage_batch(
                range(lines, lines + 200),
                run=run,
                event_type=EventType.RECEIVE,
                component="textFile#1",
                component_type="textFile",
                offsets=np.arange(201) * 10,
                location=Location("file:///in.txt"),
            )
        )
        repo.register_events(level(combs, 80, lines, 200, "combiner#2"))
        repo.register_events(level(reds, 30, combs, 80, "reducer#3"))
        repo.register_events(level(outs, 30, reds, 30, "collect#4"))
        repo.rollover()
        out = tmp_path / "out"
        repo.export_parquet(out)
        con = duckdb.connect()
        for rid in range(outs, outs + 30):
            want, _ = repo.lineage.trace(run, np.array([rid]))
            got = con.execute(readme_trace_sql(out, run, rid)).fetchall()
            assert sorted(r[0] for r in got) == want.tolist()
            assert all(uri == "file:///in.txt" and length == 10 for _, uri, _, length in got)


README = os.path.join(os.path.dirname(TESTS), "README.md")


def readme_trace_sql(out, run: str, record_id: int) -> str:
    """The README's DuckDB example (the input lines behind one output record), for `out`,
    `run` and `record_id`: the docs' query is the one tested."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index("```sql\n", text.index("Which input lines made this output?")) + 7
    sql = text[start : text.index("```", start)]
    example = "(4::BIGINT << 49) | (0 << 31) | 17"
    assert example in sql and "'R'" in sql and "'out/" in sql
    return (
        sql.replace(example, str(record_id))
        .replace("'R'", "'" + run.replace("'", "''") + "'")
        .replace("'out/", f"'{out}/")
    )


def test_incremental_export_goes_on_from_the_cursor(filled, tmp_path):
    out = tmp_path / "out"
    first = filled.export_parquet(out)
    again = filled.export_parquet(out)
    assert again.resumed and again.events == 0 and again.first_id == first.next_id
    filled.register_events(odd_events(50, 7))
    filled.rollover()
    third = filled.export_parquet(out)
    assert third.first_id == first.next_id and third.events == 50
    rows, edges = expected(filled)
    got_rows, got_edges = parquet_rows(out)
    assert by_id(got_rows) == rows and sorted(got_edges) == sorted(edges)


def test_aged_off_ids_are_reported_skipped(tmp_path):
    old = time.time_ns() - 3 * 3600 * 10**9
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        repo.register_events([make_event(i, t=old) for i in range(100)])
        repo.rollover()
        repo.register_events([make_event(i) for i in range(100, 150)])
        repo.rollover()
        assert len(repo.age_off(max_age="1h").deleted_logs) == 1
        assert repo.min_event_id == 101
        rep = repo.export_parquet(tmp_path / "out", from_id=50)
        assert rep.skipped == [(50, 101)] and rep.events == 50
        got, _ = parquet_rows(tmp_path / "out")
        assert sorted(r[1] for r in got) == list(range(101, 151))


def test_cli_export_and_bad_input_change_nothing(filled, tmp_path, capsys):
    repo_path = filled.path
    filled.close()
    out = tmp_path / "cli"
    assert cli(["export", repo_path, str(out), "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["events"] == len(expected_from(repo_path)[0]) and summary["files"] >= 4
    before_repo, before_out = tree_hash(repo_path), tree_hash(str(out))
    cursor = out / "_provrepo_export.json"
    bad = [
        ["export", repo_path, str(out), "--format", "jsonl"],  # OUT holds a parquet export
        ["export", repo_path, str(out), "--run", "run-1"],  # ... of every run
        ["export", repo_path, str(out), "--from-id", "3"],  # ... up to another id
        ["export", repo_path, str(out), "--format", "csv"],
        ["export", repo_path, str(out), "--from-id", "0"],
        ["export", repo_path, str(cursor)],  # OUT is a file
        ["export", str(tmp_path / "nope"), str(tmp_path / "o2")],
        ["export", repo_path],
    ]
    for argv in bad:
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("provrepo: error:"), (argv, err)
    assert tree_hash(repo_path) == before_repo and tree_hash(str(out)) == before_out
    assert not os.path.exists(tmp_path / "o2")
    # A damaged cursor: one line, exit 2, nothing written.
    cursor.write_text("{not json")
    before_out = tree_hash(str(out))
    assert cli(["export", repo_path, str(out)]) == 2
    assert "damaged" in capsys.readouterr().err
    assert tree_hash(str(out)) == before_out
    # Without --quiet a progress bar counts the events (a fresh interpreter: real stderr).
    provrepo = os.path.join(os.path.dirname(sys.executable), "provrepo")
    run = subprocess.run(
        [provrepo, "export", repo_path, str(tmp_path / "bar")], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "export" in run.stderr and "100%" in run.stderr, run.stderr


def expected_from(path: str) -> tuple[list, list]:
    with ProvenanceRepository.open(path, read_only=True) as ro:
        return expected(ro)


# -- resuming after a kill -----------------------------------------------------------------------


def run_child(
    repo: str,
    out: str,
    point: str,
    kill_after: float | None = None,
    chunk: int = 1000,
    segment: int = 0,
) -> int:
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(TESTS, "_export_child.py"),
            *(repo, out, point, str(chunk), str(segment)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if kill_after is not None:
        wait_for_line(proc, "ready")  # imports done: the export is starting
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode


@pytest.mark.parametrize("point", ["rename:1", "rename:7", "commit:2", "random", "segments"])
def test_resume_after_kill_duplicates_and_loses_nothing(tmp_path, point):
    """Killed between a chunk's renames, after a cursor move, or anywhere; resumed in chunks
    of another size. rename:7 dies in the fourth chunk, the first holding both runs, once the
    second run's events file and the first run's edges file are in place (files are renamed
    events first, then edges, runs in order): resumed in smaller chunks, the second run's file
    name never comes back, so only the cleanup of uncommitted files keeps its rows from being
    doubled. segments: events split into files of ~150 rows (several per run and chunk), killed
    after the fifth file of a chunk is renamed, resumed in other chunks and files."""
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG) as repo:
        fill(repo)
        rows, edges = expected(repo)
    repo_path, out = str(tmp_path / "repo"), str(tmp_path / "out")
    if point == "random":  # killed at random moments (chunks pause), resumed until it ends
        rng = random.Random(7)
        kills = 0
        # (later attempts get longer: on a loaded machine a chunk can take a while)
        while run_child(repo_path, out, "slow", rng.uniform(0, 0.3) + 0.1 * kills) != 0:
            kills += 1
            assert kills < 40, "the export never finished"
        assert kills >= 1
    elif point == "segments":
        assert run_child(repo_path, out, "rename:5", segment=150) == -signal.SIGKILL
        killed, _ = parquet_rows(out)
        assert 0 < len(killed) < len(rows)
        assert run_child(repo_path, out, "none", chunk=700, segment=100) == 0
    else:
        assert run_child(repo_path, out, point) == -signal.SIGKILL
        killed, _ = parquet_rows(out)
        assert 0 < len(killed) < len(rows)  # it died mid-export, files on disk
        assert run_child(repo_path, out, "none", chunk=700) == 0
    got_rows, got_edges = parquet_rows(out)
    assert by_id(got_rows) == rows  # every event exactly once
    assert sorted(got_edges) == sorted(edges)
    assert not [f for _, _, fs in os.walk(out) for f in fs if f.endswith(".tmp")]


def test_bad_arguments_raise_bad_input(filled, tmp_path):
    assert filled.wait_for_index(60)  # the index thread is done writing
    before = tree_hash(filled.path)
    for kwargs in ({"run": ""}, {"from_id": 0}, {"from_id": "1"}, {"chunk_events": 0}):
        with pytest.raises(BadInput):
            filled.export_parquet(tmp_path / "x", **kwargs)
    assert not os.path.exists(tmp_path / "x")
    (tmp_path / "y" / "events").mkdir(parents=True)  # tables but no cursor: not ours
    with pytest.raises(BadInput, match="no export cursor"):
        filled.export_parquet(tmp_path / "y")
    assert tree_hash(filled.path) == before
