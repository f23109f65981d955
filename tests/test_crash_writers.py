"""kill -9 of journal writer processes in the middle of appending: what they sealed is merged
exactly, the journal they were writing contributes nothing and is removed once they are dead."""

from __future__ import annotations

import json
import os
import signal
import time

from _crash_child import writer_records
from _faults import child, wait_for_line

from journals import JournalReader
from repository import ProvenanceRepository, RepositoryConfig

WRITERS, SEALED = 3, 3


def expected_records(writer: int) -> list[int]:
    """A writer child's sealed records in merge order: its journals in order, frames in order."""
    out: list[int] = []
    for j in range(SEALED):
        rich, batch = writer_records(writer, j)
        out += rich[:20] + batch + rich[20:]
    return out


def open_journals(containers: list[str]) -> list[str]:
    return sorted(
        os.path.join(c, n) for c in containers for n in os.listdir(c) if n.endswith(".open")
    )


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_kill_writers_mid_append(tmp_path):
    root = str(tmp_path / "repo")
    config = RepositoryConfig(containers=("c0", "c1"), rollover_interval=3600)
    repo = ProvenanceRepository.open(root, config, start_threads=False)
    containers = repo.containers
    procs = [
        child("_crash_child.py", "writer", json.dumps(containers), str(w), str(SEALED))
        for w in range(WRITERS)
    ]
    try:
        for p in procs:
            wait_for_line(p, "appending")
        # Let each unsealed journal pass the 1 MiB write buffer, so its file ends mid-frame.
        wait_until(
            lambda: (
                len(opened := open_journals(containers)) == WRITERS
                and all(os.path.getsize(j) > 1 << 20 for j in opened)
            )
        )
        # While they are alive and appending, a rollover merges exactly the sealed journals.
        merged = repo.rollover()
        events = repo.get_events(1, 100_000)
        assert merged == len(events) == WRITERS * SEALED * 100
        assert [e.event_id for e in events] == list(range(1, merged + 1))
        for w in range(WRITERS):
            mine = [e.record_id for e in events if e.record_id // 1_000_000 == w]
            assert mine == expected_records(w)
        assert len(open_journals(containers)) == WRITERS  # live writers' journals untouched
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.communicate(timeout=30)  # reaped: a zombie's pid would still look alive
        assert p.returncode == -signal.SIGKILL
    unsealed = open_journals(containers)
    assert len(unsealed) == WRITERS
    for path in unsealed:
        reader = JournalReader(path)
        frames = reader.scan()
        assert frames, path  # complete frames are on disk, and still must never be merged
        assert all(
            r >= 900_000 for f in frames for r in (e.record_id % 1_000_000 for e in f.events())
        )
    assert repo.rollover() == 0
    repo.close()

    with ProvenanceRepository.open(root, start_threads=False) as repo:
        assert sorted(repo.recovery.abandoned_journals_removed) == unsealed
        assert open_journals(containers) == []
        assert repo.max_event_id == WRITERS * SEALED * 100
        events = repo.get_events(1, 100_000)
        assert [e.event_id for e in events] == list(range(1, WRITERS * SEALED * 100 + 1))
        assert all(e.record_id % 1_000_000 < 900_000 for e in events)


def test_kill_writer_before_seal_leaves_nothing(tmp_path):
    # The smallest case: a killed writer whose only journal was never sealed adds no event.
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, start_threads=False) as repo:
        containers = repo.containers
    p = child("_crash_child.py", "writer", json.dumps(containers), "7", "0")
    wait_for_line(p, "appending")
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    assert len(open_journals(containers)) == 1
    with ProvenanceRepository.open(root, start_threads=False) as repo:
        assert len(repo.recovery.abandoned_journals_removed) == 1
        assert repo.max_event_id == 0 and repo.get_events(1, 10) == []
