"""Invariant 6 across restarts: the attempt that won a (run, capture point, partition) keeps
winning after the repository is reopened, also when the log holding its lineage was aged off
before the reopen, so a late attempt sealed afterwards is never merged as a second copy."""

from __future__ import annotations

import time

import pytest

from journals import EventType, JournalWriter, LineageBatch
from repository import ProvenanceRepository, RepositoryConfig

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600)
HOUR = 3600 * 10**9


def seal(repo, *, partition: int, attempt: int, t: int, n: int = 10, first: int = 0) -> None:
    """One task attempt's journal: n records of (run r, capture point c, partition)."""
    batch = LineageBatch.build(
        event_time_ns=t,
        event_type=EventType.JOIN,
        run_id="r",
        component_id="c",
        component_type="reducer",
        partition=partition,
        attempt=attempt,
        record_ids=range(partition * 1000 + first, partition * 1000 + first + n),
    )
    with JournalWriter.open(repo.writer_spec(), tag=f"p{partition}a{attempt}") as w:
        w.append(batch)


def stored(repo) -> list[tuple[int, int, int]]:
    """(partition, attempt, record id) of every stored event."""
    return [(e.partition, e.attempt, e.record_id) for e in repo.get_events(1, 10_000)]


def open_repo(root):
    return ProvenanceRepository.open(root, CONFIG, start_threads=False)


@pytest.mark.parametrize("aged_off", [False, True], ids=["winner-kept", "winner-aged-off"])
def test_a_late_attempt_after_a_reopen_is_not_merged(tmp_path, aged_off):
    root = tmp_path / "repo"
    now = time.time_ns()
    with open_repo(root) as repo:
        seal(repo, partition=0, attempt=0, t=now - 5 * HOUR)  # the winner of partition 0
        assert repo.rollover() == 10
        seal(repo, partition=1, attempt=2, t=now)
        assert repo.rollover() == 10
        if aged_off:
            rep = repo.age_off(max_age="1h")
            assert rep.deleted_logs == [(1, 11)]
        before = stored(repo)
    with open_repo(root) as repo:
        seal(repo, partition=0, attempt=1, t=now)  # late: a retry or speculative copy
        seal(repo, partition=1, attempt=0, t=now)
        seal(repo, partition=0, attempt=0, t=now, first=10)  # the winner's own later batch
        seal(repo, partition=2, attempt=1, t=now)  # a key never merged: its first attempt wins
        merged = repo.rollover()
        assert repo.rollover_stats.records_skipped == 20
        assert merged == 20
        after = stored(repo)
        assert after[: len(before)] == before
        assert after[len(before) :] == [(0, 0, 10 + i) for i in range(10)] + [
            (2, 1, 2000 + i) for i in range(10)
        ]
    with open_repo(root) as repo:  # and again after a second reopen
        seal(repo, partition=0, attempt=3, t=now)
        seal(repo, partition=2, attempt=0, t=now)
        assert repo.rollover() == 0
