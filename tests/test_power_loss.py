"""Durable when acknowledged, under power loss: every state a crash can leave after any file
system call of a journal seal, a rollover (log + toc commit, id high-water mark, journal
deletion), or a cursor commit is opened and checked (see `_powerloss` for the model: what was
not fsynced is lost; directory changes persist, per directory and in order, only as far as a
directory fsync guarantees or the kernel happened to get to).

What each test pins: the file is fsynced before it is renamed into place, the rename is made
durable by a directory fsync before the call returns, and nothing is deleted before what
replaces it is durable.
"""

from __future__ import annotations

import os

import pytest
from _events import make_event
from _faults import lineage_batch
from _powerloss import PowerLoss, materialize

from journals import JournalWriter
from repository import ProvenanceRepository, RepositoryConfig
from repository._idgen import IdGenerator
from repository._layout import Layout

# sync="seal" is the default: fsync at seal, at commit, for state files.
CONFIG = RepositoryConfig(rollover_interval=3600, block_size="4KiB")
IGNORE = ("index",)  # derived and rebuildable: deleting it loses nothing


def each_crash(pl: PowerLoss, tmp_path, limit: int = 12):
    """(point, opened crash state) for every recorded call and several directory outcomes."""
    n = 0
    for upto in range(len(pl.log) + 1):
        for state in pl.crash_states(upto, limit=limit):
            n += 1
            yield upto, materialize(state, str(tmp_path / f"crash-{n}"))


def records(root: str) -> list[int]:
    """Record ids of every event a reopen (recovery, then the pending rollover) finds."""
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        events = repo.get_events(1, 1_000_000)
        assert [e.event_id for e in events] == list(range(1, len(events) + 1))
        return [e.record_id for e in events]


def assert_durable_order(log: list[tuple]) -> None:
    """The calls, in order: every file is fsynced before it is renamed into place, every
    rename is followed by an fsync of its directory, and nothing is deleted before every
    rename before it is durable (so a deleted journal's events are in a durable log)."""
    synced: set = set()
    undurable: dict[str, int] = {}  # directory -> renames into it not fsynced yet
    for i, entry in enumerate(log):
        if entry[0] == "data":
            synced.add(entry[1])
        elif entry[0] == "dir":
            undurable.pop(entry[1], None)
        elif entry[2] == "set":  # a rename, or a new directory
            is_dir = entry[4][2]
            assert is_dir or entry[4] in synced, f"call {i}: {entry[3]} renamed before its fsync"
            undurable[entry[1]] = i
        elif entry[2] == "del":
            assert not undurable, f"call {i}: {entry[3]} deleted before {undurable} is durable"
    assert not undurable, f"renames never made durable: {undurable}"


def test_a_sealed_journal_survives_power_loss(tmp_path):
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        spec = repo.writer_spec()
    want = [*range(100), *range(5000, 5300), *range(100, 150)]
    with PowerLoss(root, exclude=IGNORE) as pl:
        w = JournalWriter.open(spec, tag="task")
        w.append([make_event(i) for i in range(100)])
        w.append(lineage_batch(range(5000, 5300)))
        w.append([make_event(i) for i in range(100, 150)])
        w.seal()
        pl.mark("sealed")
    seen = set()
    for upto, crashed in each_crash(pl, tmp_path):
        got = records(crashed)
        assert got in ([], want), upto  # all or nothing: never a torn sealed journal
        if upto >= pl.marks["sealed"]:
            assert got == want, f"seal() returned, then power loss after call {upto} lost it"
        seen.add(len(got))
    assert seen == {0, len(want)}
    assert_durable_order(pl.log)


def test_a_rollover_survives_power_loss_at_every_step(tmp_path):
    """Committed events keep their ids, sealed ones are present exactly once, whatever the
    crash point; and once rollover() returned, the id high-water mark is durable."""
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(200)])
        assert repo.rollover() == 200
        spec = repo.writer_spec()
        pending = []
        for j in range(3):
            with JournalWriter.open(spec, tag=f"t{j}") as w:
                w.append([make_event(i) for i in range(1000 * (j + 1), 1000 * (j + 1) + 150)])
                w.append(lineage_batch(range(50_000 * (j + 1), 50_000 * (j + 1) + 400)))
            pending += [*range(1000 * (j + 1), 1000 * (j + 1) + 150)]
            pending += [*range(50_000 * (j + 1), 50_000 * (j + 1) + 400)]
        with PowerLoss(root, exclude=IGNORE) as pl:
            assert repo.rollover() == len(pending)
            pl.mark("rolled over")
    want = [*range(200), *pending]
    total = len(want)
    kinds = [(e[0], os.path.basename(e[1]) if e[0] == "dir" else None) for e in pl.log]
    assert ("dir", "logs") in kinds and ("dir", "state") in kinds
    assert_durable_order(pl.log[: pl.marks["rolled over"]])
    for upto, crashed in each_crash(pl, tmp_path, limit=10):
        assert records(crashed) == want, f"power loss after call {upto}"
        if upto >= pl.marks["rolled over"]:
            mark = IdGenerator.read_high_water(Layout(crashed))
            assert mark == total + 1, f"high-water mark not durable after call {upto}"


def test_the_id_high_water_mark_is_old_or_new_and_durable_once_raised(tmp_path):
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        layout = repo.layout
    ids = IdGenerator(layout)
    ids.load(1)
    ids.advance(500)
    with PowerLoss(root, exclude=IGNORE) as pl:
        ids.advance(900)
        pl.mark("raised")
    assert_durable_order(pl.log)
    for upto, crashed in each_crash(pl, tmp_path):
        with open(os.path.join(crashed, "state", "next_event_id"), encoding="ascii") as f:
            text = f.read()
        assert text in ("500\n", "900\n"), f"torn mark {text!r} after call {upto}"
        if upto >= pl.marks["raised"]:
            assert text == "900\n", f"advance() returned, then the mark was lost ({upto})"


@pytest.mark.parametrize("first", [True, False], ids=["first-commit", "later-commit"])
def test_a_cursor_commit_survives_power_loss(tmp_path, first):
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(300)])
        repo.rollover()
        cursor = repo.cursor("sink")
        if not first:
            cursor.commit(cursor.read(100))
        old = cursor.position
        with PowerLoss(root, exclude=IGNORE) as pl:
            cursor.commit(cursor.read(100))
            pl.mark("committed")
        assert_durable_order(pl.log)
        new = cursor.position
    assert (old, new) == ((1, 101) if first else (101, 201))
    for upto, crashed in each_crash(pl, tmp_path):
        with ProvenanceRepository.open(crashed, read_only=True) as ro:
            position = ro.cursor("sink").position
        assert position in (old, new), upto
        if upto >= pl.marks["committed"]:
            assert position == new, f"commit() returned, then power loss after {upto} lost it"


def test_a_new_repository_survives_power_loss_once_closed(tmp_path):
    """Its directories are new too: each is durable only once its parent is fsynced."""
    parent = tmp_path / "home"
    parent.mkdir()
    root = str(parent / "repo" / "nested")
    with PowerLoss(str(parent), exclude=("repo/nested/index",)) as pl:
        with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
            repo.register_events([make_event(i) for i in range(120)])
            with JournalWriter.open(repo.writer_spec(), tag="task") as w:
                w.append(lineage_batch(range(7000, 7200)))
        pl.mark("closed")
    assert_durable_order(pl.log)
    want = [*range(120), *range(7000, 7200)]
    for upto, crashed in each_crash(pl, tmp_path, limit=24):
        root_copy = os.path.join(crashed, "repo", "nested")
        if upto >= pl.marks["closed"]:
            assert records(root_copy) == want, f"closed, then power loss after call {upto}"
        elif os.path.exists(os.path.join(root_copy, "repository.json")):
            assert records(root_copy) in ([], want[:120], want[120:], want), upto
