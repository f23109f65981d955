"""The repository facade: register, rollover, lookup, export, reopen."""

from __future__ import annotations

import numpy as np
import pytest
from _events import lineage_batch, make_event

from journals import JournalWriter
from repository import BadInput, ProvenanceRepository, RepositoryLocked


def test_register_rollover_lookup_export(repo):
    events = [make_event(i) for i in range(5000)]
    assert repo.register_events(events) == 5000
    assert repo.rollover() == 5000
    assert repo.max_event_id == 5000
    got = repo.get_event(7)
    assert got.event_id == 7 and got.record_id == 6
    page = repo.get_events(first_id=1, max_events=1000)
    assert [e.event_id for e in page] == list(range(1, 1001))
    assert [e.record_id for e in page] == list(range(1000))
    assert repo.get_event(5001) is None


def test_ids_are_one_up_across_rollovers_and_reopen(tmp_path, config):
    path = tmp_path / "r"
    with ProvenanceRepository.open(path, config) as repo:
        repo.register_events([make_event(i) for i in range(10)])
        repo.rollover()
        repo.register_events([make_event(i) for i in range(10, 15)])
    with ProvenanceRepository.open(path) as repo:  # config persisted in the directory
        assert repo.max_event_id == 15  # close() merged the last journal
        assert [e.record_id for e in repo.get_events(1, 100)] == list(range(15))


def test_lineage_batches_are_per_record_events(repo):
    n = 100_000
    batch = lineage_batch(
        range(n), parent_counts=np.full(n, 2), parent_ids=np.arange(2 * n), partition=3
    )
    with JournalWriter.open(repo.writer_spec()) as w:
        w.append(batch)
    assert repo.rollover() == n
    ev = repo.get_event(77_777)
    assert ev.record_id == 77_776 and ev.parent_ids == [155_552, 155_553]
    assert len(repo.get_events(1, n)) == n


def test_duplicate_task_attempts_keep_one(repo):
    def batch(attempt):
        return lineage_batch(range(10), attempt=attempt)

    for attempt in (0, 1):
        with JournalWriter.open(repo.writer_spec()) as w:
            w.append(batch(attempt))
    assert repo.rollover() == 10
    with JournalWriter.open(repo.writer_spec()) as w:  # a late speculative attempt
        w.append(batch(2))
    assert repo.rollover() == 0
    assert repo.max_event_id == 10


def test_second_owner_is_refused_with_pid(tmp_path, config):
    with ProvenanceRepository.open(tmp_path / "r", config):
        with pytest.raises(RepositoryLocked, match=r"pid \d+"):
            ProvenanceRepository.open(tmp_path / "r", config)
        ro = ProvenanceRepository.open(tmp_path / "r", read_only=True)
        assert ro.max_event_id == 0


def test_bad_ids_are_bad_input(repo):
    for bad in (-1, "7", 1.5):
        with pytest.raises(BadInput):
            repo.get_event(bad)
    with pytest.raises(BadInput):
        repo.get_events(1, -5)
