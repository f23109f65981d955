"""The forward lineage index (`<log>.fwd`) is exact and never trusted when it is not intact.

Forward hops and traces are compared with brute force over the same synthetic graph: right
after rollover, over several logs, after age-off, after a crash mid-rollover, and with the
forward file missing, torn, damaged or belonging to another log (the owner rebuilds it; a
read-only process scans instead; `verify` reports it). The caches of decoded lineage honour
their byte limits."""

from __future__ import annotations

import errno
import os
import shutil
import signal

import numpy as np
import pytest
from _faults import child
from _lineage_graphs import COMBINE, JOIN, OUTPUT, REDUCE, RUN, SOURCE, Graph

from journals import IntColumn, prefetch_ranges, record_id_base, unpack_record_id
from repository import ProvenanceRepository, RepositoryConfig
from repository._eventlog import LogReader
from repository.cli import main as cli
from repository.lineage import ByteLRU, _forward, _raw

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600, block_size="4KiB")


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    # Small slices so long rows (hot keys) span several slices and blocks.
    monkeypatch.setattr(_forward, "SLICE_PAIRS", 16)
    monkeypatch.setattr(_forward, "ROUTE_PAIRS", 8)
    monkeypatch.setattr(_forward, "ROUTE_TABLE_PAIRS", 8)


def store(root, graph: Graph, logs: int = 1, split: bool = True, config=CONFIG) -> None:
    """Write the graph's batches, spread over `logs` rollovers."""
    batches = graph.batches(split=split)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        for k in range(logs):
            for b in batches[k::logs]:
                repo.register_events(b)
            repo.rollover()


def check_exact(repo, graph: Graph, alive: set[int] | None = None, samples: int = 40) -> None:
    """Every record's children, random sets' children, and forward traces, as brute force."""
    ix = repo.lineage
    ids = graph.all_ids() if alive is None else sorted(alive)
    for rid in ids:
        got = set(ix.children(RUN, np.array([rid])).tolist())
        assert got == graph.children_of([rid], alive), f"children of {unpack_record_id(rid)}"
    rng = np.random.default_rng(5)
    for _ in range(samples):
        pick = rng.choice(ids, int(rng.integers(2, 40)), replace=False)
        got = set(ix.children(RUN, pick).tolist())
        assert got == graph.children_of(pick.tolist(), alive)
        # The UI's edges: one (parent, child) per association, forward and backward.
        parents, children = ix.child_pairs(RUN, pick)
        assert sorted(zip(parents.tolist(), children.tolist())) == graph.edges_from(pick, alive)
        children, parents = ix.parent_pairs(RUN, pick)
        want = sorted((c, p) for c in pick.tolist() for p in graph.parents.get(c, []))
        assert sorted(zip(children.tolist(), parents.tolist())) == want
    for rid in rng.choice(ids, samples, replace=False).tolist():
        got = set(ix.trace(RUN, np.array([rid]), forward=True)[0].tolist())
        assert got == graph.forward_trace(rid, alive), f"forward trace of {unpack_record_id(rid)}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forward_hops_are_exact(tmp_path, seed):
    graph = Graph(seed, hot=2)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    names = sorted(os.listdir(root / "logs"))
    assert len([n for n in names if n.endswith(".fwd")]) == 2  # one beside each log
    with ProvenanceRepository.open(root, read_only=True) as repo:
        check_exact(repo, graph)
        assert repo.verify().ok


def record_block_reads(monkeypatch) -> list[tuple[int, list]]:
    """(block, its decoded entries) of every forward index block read from now on."""
    reads: list[tuple[int, list]] = []
    real = _forward.ForwardFile.read_block

    def read_block(ff, b):
        reads.append((b, real(ff, b)))
        return reads[-1][1]

    monkeypatch.setattr(_forward.ForwardFile, "read_block", read_block)
    return reads


def test_forward_hop_reads_only_the_blocks_of_its_answer(tmp_path, monkeypatch):
    graph = Graph(4, parts=6, lines=3000)
    root = tmp_path / "repo"
    store(root, graph, split=False)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ix = repo.lineage
        fwd = repo._forward
        reads = record_block_reads(monkeypatch)
        line = graph.records[(SOURCE, 2)][7]
        ix.children(RUN, np.array([line]))
        total = sum(len(ff.directory.block_offsets) for ff in fwd._files.values() if ff)
        assert 0 < len(reads) <= 4 and total > 20, (reads, total)  # combiner + join slices


def test_reduce_side_hop_reads_only_the_routing_table(tmp_path, monkeypatch):
    # A shuffle's reduce side gives each parent one child: the routing table names it, so
    # the hop from combiner records reads routing blocks only, never the reduce sections.
    graph = Graph(4, parts=6, lines=300)
    root = tmp_path / "repo"
    store(root, graph, split=False)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ix = repo.lineage
        read = record_block_reads(monkeypatch)
        combiners = np.array(graph.records[(COMBINE, 1)][:3] + graph.records[(COMBINE, 4)][:2])
        got = set(ix.children(RUN, combiners).tolist())
        assert got == graph.children_of(combiners.tolist())
        assert read and all(isinstance(e, _forward.RouteEntry) for _, es in read for e in es)


def test_identity_sections_answer_without_a_read(tmp_path, monkeypatch):
    # An action's output of a reduce partition gives reduce record i its output record i:
    # the directory says so, and the hop from reduce records computes the outputs.
    graph = Graph(4, parts=6, lines=300)
    root = tmp_path / "repo"
    store(root, graph)  # split: the second half's batch starts mid-partition
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ff = repo._forward.file(repo._forward.store.readers()[0].first_id)
        assert ff is not None
        outputs = {
            b.first_event_id
            for b in repo._forward.store.readers()[0].toc.batches
            if b.component_id == "collect#2"
        }
        claimed = {s.first_event_id for s in ff.directory.sections if s.identity}
        assert claimed == outputs
        read = record_block_reads(monkeypatch)
        reducers = [r for p in range(2) for r in graph.records[(REDUCE, p)]]
        for rid in reducers:
            got = set(repo.lineage.children(RUN, np.array([rid])).tolist())
            assert got == graph.children_of([rid])
        picks = np.array(reducers[::3] + reducers[1:2])
        parents, children = repo.lineage.child_pairs(RUN, np.sort(picks))
        assert sorted(zip(parents.tolist(), children.tolist())) == graph.edges_from(picks)
        assert not read


def test_narrow_one_to_one_sections_that_are_not_the_identity(tmp_path):
    # Outputs made from their partition's reduce records one each, but in another order (a
    # sort inside the partition) or from some of them (a filter): no identity, still exact.
    graph = Graph(13, parts=4, lines=200)
    reds = graph.records[(REDUCE, 0)]
    for out, red in zip(graph.records[(OUTPUT, 0)], reversed(reds), strict=True):
        graph.parents[out] = [red]
    kept = graph.records[(OUTPUT, 1)][::2]
    for out in graph.records[(OUTPUT, 1)][1::2]:
        del graph.parents[out]
    graph.records[(OUTPUT, 1)] = [
        kept[0] + i for i in range(len(kept))
    ]  # positions stay consecutive: renumber
    for new, old in zip(graph.records[(OUTPUT, 1)], kept, strict=True):
        if new != old:
            graph.parents[new] = graph.parents.pop(old)
    del graph.records[(JOIN, 0)], graph.records[(JOIN, 1)]  # it named dropped outputs
    graph.parents = {c: p for c, p in graph.parents.items() if unpack_record_id(c)[0] != JOIN}
    root = tmp_path / "repo"
    store(root, graph, split=False)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ff = repo._forward.file(repo._forward.store.readers()[0].first_id)
        assert ff is not None and not any(s.identity for s in ff.directory.sections)
        check_exact(repo, graph)
        assert repo.verify().ok


def test_hops_see_the_batches_of_logs_committed_after_them(tmp_path):
    # A hop's landing batches and hop plans are kept between hops; a log committed
    # meanwhile (more of the run's batches) starts them afresh.
    graph = Graph(17, parts=4)
    batches = graph.batches(split=True)
    first = [b for b in batches if not b.component_id.startswith(("collect", "join"))]
    with ProvenanceRepository.open(tmp_path / "repo", CONFIG, start_threads=False) as repo:
        for b in first:
            repo.register_events(b)
        repo.rollover()
        ix = repo.lineage
        reducers = np.array(graph.records[(REDUCE, 0)] + graph.records[(REDUCE, 1)])
        assert not len(ix.children(RUN, reducers))  # no outputs yet
        for b in batches:
            if b not in first:
                repo.register_events(b)
        repo.rollover()
        check_exact(repo, graph)


def test_two_runs_in_one_log_never_mix(tmp_path):
    # Record ids name (capture point, partition, position), not the run: two runs' batches
    # in one log share ids, and each run's hops land in its own batches only.
    a, b = Graph(14, parts=4), Graph(15, parts=4)
    root = tmp_path / "repo"
    other = [_renamed(x, "other-run") for x in b.batches(split=True)]
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        for x in a.batches(split=True) + other:
            repo.register_events(x)
        repo.rollover()
    with ProvenanceRepository.open(root, read_only=True) as repo:
        check_exact(repo, a)
        ix = repo.lineage
        for rid in b.all_ids()[::7]:
            got = set(ix.children("other-run", np.array([rid])).tolist())
            assert got == b.children_of([rid])


def _renamed(batch, run: str):
    import msgspec

    details = batch.details.replace(RUN, run) if batch.details else batch.details
    return msgspec.structs.replace(batch, run_id=run, details=details)


def test_two_identity_outputs_of_one_partition(tmp_path, monkeypatch):
    # Two actions over the same reduce records: two identity sections over one range of
    # parents; a hop finds the children in both.
    from _lineage_graphs import CPS

    monkeypatch.setitem(CPS, 6, ("count#4", "count", "SEND", [REDUCE], "narrow"))
    graph = Graph(16, parts=3)
    for rp in range(2):
        for k, red in enumerate(graph.records[(REDUCE, rp)]):
            out = record_id_base(6, rp) + k
            graph.parents[out] = [red]
            graph.records[(6, rp)].append(out)
    root = tmp_path / "repo"
    store(root, graph)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        check_exact(repo, graph)
        assert repo.verify().ok


def test_files_without_identity_sections_read_the_sections(tmp_path, monkeypatch):
    # Forward files written before sections could say they are the identity decode with
    # False: their hops read the sections, as exactly (and verify accepts them).
    real = _forward.FwdSection
    monkeypatch.setattr(_forward, "FwdSection", lambda *a: real(*a[:6]))
    graph = Graph(12, hot=1)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    monkeypatch.setattr(_forward, "FwdSection", real)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        for r in repo._forward.store.readers():
            ff = repo._forward.file(r.first_id)
            assert ff is not None and not any(s.identity for s in ff.directory.sections)
        check_exact(repo, graph)
        assert repo.verify().ok
    assert cli(["reindex", str(root), "--quiet"]) == 0  # upgrades them
    with ProvenanceRepository.open(root, read_only=True) as repo:
        assert any(
            s.identity
            for r in repo._forward.store.readers()
            for s in repo._forward.file(r.first_id).directory.sections
        )
        check_exact(repo, graph)


def test_verify_finds_a_section_claiming_identity_falsely(tmp_path, monkeypatch):
    real = _forward.FwdSection
    monkeypatch.setattr(
        _forward, "FwdSection", lambda *a: real(*a[:6], a[2] >= 0)
    )  # every narrow section, the combiners' too
    root = tmp_path / "repo"
    store(root, Graph(3))
    monkeypatch.setattr(_forward, "FwdSection", real)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        assert any("not the identity it claims" in p for p in repo.verify().problems)


def test_routing_without_children_reads_the_sections(tmp_path, monkeypatch):
    # Files written before the routing table named children (or entries whose section has
    # several children for a parent, -1) are answered from the sections, as exactly.
    graph = Graph(9, hot=2)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    real = _forward.RouteEntry.arrays
    monkeypatch.setattr(_forward.RouteEntry, "arrays", lambda rt: (*real(rt)[:2], None))
    looked = _forward.RouteEntry.lookup
    monkeypatch.setattr(_forward.RouteEntry, "lookup", lambda rt, ps: (*looked(rt, ps)[:2], None))
    with ProvenanceRepository.open(root, read_only=True) as repo:
        check_exact(repo, graph)


def test_verify_finds_a_routing_entry_naming_a_child_outside_its_batch(tmp_path, monkeypatch):
    real = _forward.RouteSlice

    def shifted(parents, sections, children):
        return real(parents, sections, IntColumn.stored(children.to_array() + 1_000_000))

    monkeypatch.setattr(_forward, "RouteSlice", shifted)
    root = tmp_path / "repo"
    store(root, Graph(3))
    monkeypatch.setattr(_forward, "RouteSlice", real)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        assert any("child outside its batch" in p for p in repo.verify().problems)


def test_forward_index_after_age_off(tmp_path):
    graph = Graph(6)
    root = tmp_path / "repo"
    batches = graph.batches(split=True)
    old = [b for b in batches if b.component_id.startswith("reduceByKey#1.combine")][:2]
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        for b in old:  # an old log: two combiner batches, event time 1970
            repo.register_events(_with_time(b, 1_000))
        repo.rollover()
        for b in batches:
            if b not in old:
                repo.register_events(_with_time(b, None))
        repo.rollover()
        first_log = repo.logs()[0].first_id
        rep = repo.age_off(max_age="1d")
        assert rep.deleted_logs and rep.deleted_logs[0][0] == first_log
        assert not os.path.exists(root / "logs" / f"{first_log}.fwd")
        gone = {int(r) for b in old for r in range(b.record_ids.base, b.record_ids.base + len(b))}
        alive = set(graph.all_ids()) - gone
        check_exact(repo, graph, alive)
        assert repo.verify().ok


def _with_time(batch, t):
    import time

    import msgspec

    return msgspec.structs.replace(batch, event_time_ns=time.time_ns() if t is None else t)


def test_missing_or_torn_forward_file_is_rebuilt_by_the_owner(tmp_path):
    graph = Graph(7, hot=1)
    root = tmp_path / "repo"
    store(root, graph, logs=3)
    fwds = sorted(n for n in os.listdir(root / "logs") if n.endswith(".fwd"))
    os.unlink(root / "logs" / fwds[0])  # missing
    with open(root / "logs" / fwds[1], "r+b") as f:  # torn: the footer gone
        f.truncate(os.path.getsize(root / "logs" / fwds[1]) - 7)
    rep = ProvenanceRepository.open(root, read_only=True).verify()
    assert any("missing" in p for p in rep.problems) and any("torn" in p for p in rep.problems)
    assert cli(["verify", str(root)]) == 1
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        assert sorted(repo._forward.rebuilt) == sorted(int(n[:-4]) for n in fwds[:2])
        check_exact(repo, graph)
    assert cli(["verify", str(root)]) == 0


def _damage_a_block(path) -> None:
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data[40] ^= 0xFF  # inside the first block's compressed bytes (after 8 + 8 header)
        f.seek(0)
        f.write(data)


def test_damaged_forward_block_is_never_trusted(tmp_path):
    graph = Graph(8, hot=2)
    root = tmp_path / "repo"
    store(root, graph)
    (fwd,) = [n for n in os.listdir(root / "logs") if n.endswith(".fwd")]
    _damage_a_block(root / "logs" / fwd)
    before = (root / "logs" / fwd).read_bytes()
    with ProvenanceRepository.open(root, read_only=True) as repo:
        assert any("crc32" in p for p in repo.verify().problems)
        check_exact(repo, graph)  # scans the log's batches instead
    assert (root / "logs" / fwd).read_bytes() == before  # a reader changes nothing
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        check_exact(repo, graph)  # the owner hits the damage and rebuilds the file
        assert repo._forward.rebuilt == [int(fwd[:-4])]
        assert repo.verify().ok


def test_forward_file_of_another_log_is_not_used(tmp_path):
    graph = Graph(9)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    a, b = sorted(n for n in os.listdir(root / "logs") if n.endswith(".fwd"))
    shutil.copy(root / "logs" / a, root / "logs" / b)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        assert any("not the one of this event log" in p for p in repo.verify().problems)
        check_exact(repo, graph, samples=10)


def test_reindex_rebuilds_forward_files(tmp_path):
    graph = Graph(10)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    for n in os.listdir(root / "logs"):
        if n.endswith(".fwd"):
            os.unlink(root / "logs" / n)
    assert cli(["reindex", str(root), "--quiet"]) == 0
    assert len([n for n in os.listdir(root / "logs") if n.endswith(".fwd")]) == 2
    assert cli(["verify", str(root)]) == 0


@pytest.mark.parametrize("point", ["before-forward-rename", "forward-torn"])
def test_crash_while_writing_the_forward_index(tmp_path, point):
    """The log is committed, its forward file not (or torn): the next owner rebuilds it."""
    graph = Graph(11, hot=1)
    root = tmp_path / "repo"
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        spec = repo.writer_spec()
    from journals import JournalWriter

    with JournalWriter.open(spec, tag="pending") as w:
        for b in graph.batches(split=True):
            w.append(b)
    proc = child("_crash_child.py", "rollover", str(root), point)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"child did not die at {point}: {out} {err}"
    logs = os.listdir(root / "logs")
    assert any(n.endswith(".prov") for n in logs)  # the log was committed
    assert any(n.endswith(".fwd") for n in logs) == (point == "forward-torn")
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        assert len(repo._forward.rebuilt) == 1
        assert not any(n.endswith(".tmp") for n in os.listdir(root / "logs"))
        check_exact(repo, graph)
    assert cli(["verify", str(root)]) == 0


# -- bounded memory ------------------------------------------------------------------------


def test_byte_lru_holds_its_limit():
    cache: ByteLRU[int] = ByteLRU(1000)
    for i in range(500):
        assert cache.put(i, i, 1 + i % 200) == i
        assert cache.nbytes <= 1000
    assert cache.get(499) == 499 and cache.get(0) is None  # least recently used went first
    cache.put("huge", -1, 251)  # more than a quarter of the budget: returned, not kept
    assert cache.get("huge") is None
    cache.get(498)
    for i in range(500, 510):
        cache.put(i, i, 90)
    assert cache.get(498) == 498  # used recently: kept over older entries


def test_trace_caches_honour_their_byte_limits(tmp_path, monkeypatch):
    graph = Graph(12, parts=4, lines=300, hot=3)
    root = tmp_path / "repo"
    store(root, graph, logs=2)
    limit = 24 * 1024
    seen: list[tuple[int, int]] = []
    real_put = ByteLRU.put

    def put(self, key, value, nbytes):
        out = real_put(self, key, value, nbytes)
        seen.append((self.nbytes, self.limit))
        return out

    monkeypatch.setattr(ByteLRU, "put", put)
    config = RepositoryConfig(sync="none", rollover_interval=3600, lineage_cache_size=limit)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        check_exact(repo, graph, samples=20)
        ix = repo.lineage
        outs = [r for (cp, _), recs in graph.records.items() if cp in (OUTPUT, JOIN) for r in recs]
        back = ix.trace(RUN, np.array(outs))[0]
        assert len(back)
        assert sum(c.limit for c in ix.caches) <= limit
    assert seen and all(n <= lim for n, lim in seen)
    assert max(n for n, _ in seen) > 0  # the caches were used


class _FullFile:
    """A file whose writes fail with ENOSPC after `room` bytes."""

    def __init__(self, path, room: int) -> None:
        self._f = open(path, "wb")  # noqa: SIM115 - closed by the builder
        self._room = room

    def write(self, data: bytes) -> int:
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.mark.parametrize("room", [None, 0, 300])
def test_full_disk_for_the_forward_index_never_fails_a_rollover(tmp_path, monkeypatch, room):
    graph = Graph(13, hot=1)
    root = tmp_path / "repo"

    def full_open(path, mode="r", *args, **kw):
        if str(path).endswith(".fwd.tmp"):
            if room is None:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return _FullFile(path, room)
        return open(path, mode, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(_forward, "open", full_open, raising=False)
        store(root, graph)  # the log is committed; its forward index could not be written
        assert not [n for n in os.listdir(root / "logs") if ".fwd" in n]
        with ProvenanceRepository.open(root, read_only=True) as repo:
            check_exact(repo, graph, samples=10)  # hops scan the log instead
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        assert len(repo._forward.rebuilt) == 1  # space is back: the owner rebuilds it
        check_exact(repo, graph, samples=10)


def test_text_lines_are_re_read_through_sampled_offsets(tmp_path, monkeypatch):
    """A traced line is read from its sampled group's bytes: the same text as by its own
    offsets, whatever the line endings (\\r\\n, none at the end, empty lines, UTF-8)."""

    from journals import EventType, LineageBatch, Location, record_id_base

    monkeypatch.setattr(_forward, "LINE_STRIDE", 4)
    lines = [f"line {i} é" for i in range(41)]
    lines[5] = ""
    raw = "".join(x + ("\r\n" if i % 3 else "\n") for i, x in enumerate(lines))[:-1]  # last: none
    data = raw.encode()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")] + [len(data)]
    offsets = np.array([0, *ends])
    base = record_id_base(1, 0)
    batch = LineageBatch.build(
        event_time_ns=1,
        event_type=EventType.RECEIVE,
        run_id=RUN,
        component_id="textFile#0",
        component_type="textFile",
        partition=0,
        attempt=0,
        record_ids=range(base, base + len(lines)),
        offsets=offsets,
        location=Location("file://" + str(path)),
    )
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        repo.register_events(batch)
        repo.rollover()
        ix = repo.lineage
        (ff,) = [repo._forward.file(r.first_id) for r in repo.logs()]
        assert ff is not None and len(ff.lines) == 1  # the batch's offsets are sampled
        ids = base + np.array([0, 3, 4, 5, 17, 39, 40])
        asked: list[tuple[int, int]] = []
        real = _raw.prefetch_ranges
        monkeypatch.setattr(
            _raw, "prefetch_ranges", lambda fd, spans: real(fd, asked.extend(spans) or asked)
        )
        assert ix.record_data(RUN, ids) == [lines[int(i - base)] for i in ids]
        # Every group read was asked for at once, before the reads (a cold file's reads queue).
        offs = ff.lines[next(iter(ff.lines))][2].tolist()
        groups = [int(i - base) // 4 for i in ids]  # each line's group of 4 (the stride)
        assert asked == [(offs[g], offs[g + 1]) for g in groups]
        # ... and the same as read through the log's own offsets column
        monkeypatch.setattr(ff, "lines", {})
        ix2 = type(ix)(repo._store, None, repo._forward)
        assert ix2.record_data(RUN, ids) == [lines[int(i - base)] for i in ids]


def test_prefetch_ranges_asks_the_kernel_for_every_range(tmp_path, monkeypatch):
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, o, n, advice: calls.append((o, n, advice)))
    with open(tmp_path / "f", "wb") as f:
        prefetch_ranges(f.fileno(), [(0, 10), (20, 25)])
        assert calls == []  # a couple of reads: not worth a syscall each
        prefetch_ranges(f.fileno(), [(0, 10), (20, 25), (40, 41), (50, 50), (60, 70)])
        will = os.POSIX_FADV_WILLNEED
        assert calls == [
            (0, 0, os.POSIX_FADV_RANDOM),
            (0, 10, will),
            (20, 5, will),
            (40, 1, will),
            (60, 10, will),
        ]


def test_a_rare_keys_point_lookups_prefetch_their_blocks(tmp_path, monkeypatch):
    graph = Graph(7, parts=8, lines=400)
    root = tmp_path / "repo"
    store(root, graph, split=False)
    prefetched: list[list[int]] = []
    real = LogReader.prefetch
    monkeypatch.setattr(
        LogReader, "prefetch", lambda r, blocks: real(r, prefetched.append(list(blocks)) or [])
    )
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ix = repo.lineage
        # One combiner record from each partition: a point lookup in a block of each.
        combiners = np.array([graph.records[(COMBINE, p)][-1] for p in range(graph.parts)])
        got = ix.parents(RUN, combiners)
        want = sorted({x for c in combiners.tolist() for x in graph.parents[c]})
        assert got.tolist() == want
        (reader,) = repo._store.readers()
        evs = ix.event_ids(RUN, combiners)
        assert prefetched == [sorted(set(reader.block_indexes(np.sort(evs)).tolist()))]
        assert len(prefetched[0]) > 1


def test_without_a_forward_index_forward_hops_scan(tmp_path):
    graph = Graph(14, hot=1)
    root = tmp_path / "repo"
    config = RepositoryConfig(sync="none", rollover_interval=3600, forward_index=False)
    store(root, graph, logs=2, config=config)
    assert not [n for n in os.listdir(root / "logs") if n.endswith(".fwd")]
    with ProvenanceRepository.open(root, read_only=True) as repo:
        check_exact(repo, graph, samples=10)
        assert repo.verify().ok
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        assert repo._forward.rebuilt == []  # off: nothing built at open either


@pytest.mark.parametrize("span", [50, 70_000, 5_000_000, 1 << 40])
def test_invert_orders_pairs_by_parent_then_child(span):
    """The transposition behind every section, on the ranges its code paths take: one radix
    pass, two (more than 2**16 positions), sparse parents, ids spanning partitions."""
    rng = np.random.default_rng(span % 1000)
    counts = rng.integers(0, 30, 2000)
    rows = [np.sort(rng.choice(span, min(c, span), replace=False)) for c in counts]
    counts = np.array([len(r) for r in rows])
    parents = 7 + np.concatenate(rows).astype(np.int64)
    child = np.repeat(np.arange(len(counts)), counts)
    order = np.lexsort((child, parents))
    p, c = _forward.invert(counts, parents)
    assert np.array_equal(p, parents[order]) and np.array_equal(c, child[order])


def test_count_reads_no_raw_data_and_data_is_read_in_pages(tmp_path, monkeypatch):
    """A hot key's count() computes ids only; collect/filter/take read raw data a page at a
    time (here pages of 7), never the whole set at once."""
    from agent import _trace
    from agent._trace import LineageRDD

    graph = Graph(15, hot=3)
    root = tmp_path / "repo"
    store(root, graph)
    outs = [r for (cp, _), recs in graph.records.items() if cp == OUTPUT for r in recs]
    with ProvenanceRepository.open(root, read_only=True) as repo:
        ix = repo.lineage
        expected = ix.trace(RUN, np.array(outs))[0]
        asked: list[int] = []
        real = type(ix).record_data

        def counting(self, run, ids):
            asked.append(len(ids))
            return real(self, run, ids)

        monkeypatch.setattr(type(ix), "record_data", counting)
        lin = LineageRDD(repo, RUN, np.array(outs)).go_back_all()
        assert lin.count() == len(expected) > 7
        assert asked == []  # ids only
        monkeypatch.setattr(_trace, "PAGE", 7)
        data = lin.collect()
        assert len(data) == len(expected) and max(asked) <= 7
        asked.clear()
        assert lin.filter(lambda d: d is None).count() == len(expected)  # no such input file
        assert asked and max(asked) <= 7


def test_large_sections_have_blocks_of_their_own(tmp_path, monkeypatch):
    # A lookup decompresses its slice's whole block, and a hop pays one block per partition
    # it reaches: a small section (one partition's outputs) must not share its block with a
    # large section's slices, nor a large section with anyone (and hops stay exact).
    monkeypatch.setattr(_forward, "SECTION_PAIRS", 40)
    graph = Graph(6, parts=4, lines=400)
    root = tmp_path / "repo"
    store(root, graph, split=False)
    with ProvenanceRepository.open(root, read_only=True) as repo:
        fwd = repo._forward
        ff = fwd.file(next(r.first_id for r in fwd.store.readers()))
        assert ff is not None
        pairs = [s.pairs for s in ff.directory.sections]
        assert min(pairs) < 40 <= max(pairs), pairs  # both kinds are there
        kinds = set()
        for b in range(len(ff.directory.block_offsets)):
            secs = {e.section for e in ff.read_block(b) if isinstance(e, _forward.Decoded)}
            large = [k for k in secs if pairs[k] >= 40]
            assert not large or len(secs) == 1, (b, sorted(secs), [pairs[k] for k in secs])
            kinds.add((bool(large), len(secs) > 1))
        assert (False, True) in kinds  # small sections do share blocks
        check_exact(repo, graph)
