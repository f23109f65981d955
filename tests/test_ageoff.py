"""Age-off by time and by size, with exact expectations of which files remain; searches and
exports running while logs and shards vanish; the CLI's lock and limits."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from _search_data import brute, rich_events

from journals import JournalWriter
from repository import BadInput, ProvenanceRepository, RepositoryConfig
from repository._ageoff import storage_bytes
from repository.cli import main

MIN = 60 * 10**9
CONFIG = RepositoryConfig(sync="none", rollover_interval=3600, indexed_attributes=("host",))


def roll(repo, t0: int, t1: int, n: int = 200, seed: int = 0) -> tuple[int, int]:
    """One rollover of n rich events with times in [t0, t1); its (first_id, next_id)."""
    repo.register_events(rich_events(random.Random(seed), n, t0, t1))
    first = repo.max_event_id + 1
    repo.rollover()
    return first, repo.max_event_id + 1


def logs_on_disk(repo) -> list[str]:
    return sorted(os.listdir(repo.layout.logs), key=lambda n: (int(n.split(".")[0]), n))


def shards_on_disk(repo) -> list[str]:
    return sorted(n for n in os.listdir(repo.layout.index) if n != "manifest.json")


def one_shard_per_log(repo) -> None:
    repo._index.shards.shard_size = 1  # every commit fills its shard


def test_by_time_deletes_logs_whose_newest_event_is_too_old(tmp_path):
    now = time.time_ns()
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        one_shard_per_log(repo)
        a = roll(repo, now - 180 * MIN, now - 120 * MIN, seed=1)
        b = roll(repo, now - 150 * MIN, now - 90 * MIN, seed=2)
        c = roll(repo, now - 30 * MIN, now, seed=3)
        d = roll(repo, now - 300 * MIN, now, seed=4)  # old events, but its newest is recent
        shards = shards_on_disk(repo)
        assert len(shards) == 4
        rep = repo.age_off(max_age="1h")
        assert rep.deleted_logs == [a, b]
        assert rep.events_deleted == (a[1] - a[0]) + (b[1] - b[0])
        assert logs_on_disk(repo) == [
            f"{x}.{ext}" for x in (c[0], d[0]) for ext in ("fwd", "prov", "toc")
        ]  # each log with its derived forward index
        assert sorted(rep.deleted_shards) == shards[:2]
        assert shards_on_disk(repo) == shards[2:]
        assert rep.bytes_after < rep.bytes_before and rep.unmet is None
        # What is left is exactly searchable and exportable; the gap is reported.
        events = repo.get_events(1, 10**6)
        assert [e.event_id for e in repo.search(limit=10**6)] == brute(events, limit=10**6)
        batch = repo.export(1, 10)
        assert batch.skipped == [(1, c[0])] and batch.events[0].event_id == c[0]
        assert repo.age_off(max_age="1h").deleted_logs == []  # nothing more to do


def test_a_shard_goes_only_when_every_log_it_points_into_is_gone(tmp_path):
    now = time.time_ns()
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        a = roll(repo, now - 300 * MIN, now - 200 * MIN, seed=1)
        b = roll(repo, now - 100 * MIN, now - 90 * MIN, seed=2)
        [shard] = shards_on_disk(repo)  # both logs in one shard
        rep = repo.age_off(max_age="150m")
        assert rep.deleted_logs == [a] and rep.deleted_shards == []
        assert shards_on_disk(repo) == [shard]
        rep = repo.age_off(max_age="1h")
        assert rep.deleted_logs == [b] and rep.deleted_shards == [shard]
        assert shards_on_disk(repo) == [] and logs_on_disk(repo) == []


def test_by_size_deletes_oldest_first_down_to_90_percent(tmp_path):
    now = time.time_ns()
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        one_shard_per_log(repo)
        ranges = [roll(repo, now - MIN, now, n=150, seed=i) for i in range(12)]
        shards = shards_on_disk(repo)
        layout = repo.layout

        def size(path):
            return sum(
                os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
            )

        per_log = [
            os.path.getsize(layout.log_path(f))
            + os.path.getsize(layout.toc_path(f))
            + os.path.getsize(os.path.join(layout.logs, f"{f}.fwd"))  # derived, goes with it
            + size(os.path.join(layout.index, s))
            for (f, _), s in zip(ranges, shards, strict=True)
        ]
        total = storage_bytes(layout)
        limit = total - per_log[0] // 2  # over the limit by half a log
        target = 0.9 * limit
        k, est = 0, total
        while est > target:
            est -= per_log[k]
            k += 1
        assert 1 < k < 12  # the 90 % low-water mark takes more than the one log over
        rep = repo.age_off(max_bytes=limit)
        assert rep.deleted_logs == ranges[:k] and rep.unmet is None
        assert sorted(rep.deleted_shards) == shards[:k]
        assert logs_on_disk(repo) == sorted(
            [f"{f}.{s}" for f, _ in ranges[k:] for s in ("fwd", "prov", "toc")],
            key=lambda n: (int(n.split(".")[0]), n),
        )
        assert shards_on_disk(repo) == shards[k:]
        assert storage_bytes(layout) <= target
        assert repo.age_off(max_bytes=limit).deleted_logs == []  # below the limit: no change


def test_unmeetable_limit_is_reported_not_spun_on(tmp_path):
    path = tmp_path / "r"
    with ProvenanceRepository.open(path, CONFIG, start_threads=False) as repo:
        roll(repo, 1, 1000, seed=1)
        roll(repo, 1000, 2000, seed=2)
        top = repo.max_event_id
        # A sealed journal not merged yet: age-off never touches it.
        with JournalWriter.open(repo.writer_spec()) as w:
            w.append(rich_events(random.Random(9), 50, 5000, 6000))
        [journal] = os.listdir(repo.containers[0])
        t = time.perf_counter()
        rep = repo.age_off(max_bytes=1)
        assert len(rep.deleted_logs) == 2 and rep.unmet and "cannot be met" in rep.unmet
        assert logs_on_disk(repo) == [] and shards_on_disk(repo) == []
        rep2 = repo.age_off(max_bytes=1)
        assert rep2.deleted_logs == [] and rep2.unmet
        assert time.perf_counter() - t < 5
        assert os.listdir(repo.containers[0]) == [journal]
        assert repo.search() == [] and repo.get_event(1) is None
    with ProvenanceRepository.open(path, start_threads=False) as repo:
        # close() merged the journal: its ids come after every id ever handed out.
        assert repo.min_event_id == top + 1
        roll(repo, 7000, 8000, seed=3)
        assert repo.max_event_id == top + 50 + 200
        assert len(repo.search(limit=1000)) == 250


def test_bad_limits_are_bad_input(tmp_path):
    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        for kwargs in (
            {"max_age": "soon"},
            {"max_age": 0},
            {"max_bytes": "lots"},
            {"max_bytes": 0},
        ):
            with pytest.raises(BadInput):
                repo.age_off(**kwargs)
    with ProvenanceRepository.open(tmp_path / "r", read_only=True) as ro, pytest.raises(BadInput):
        ro.age_off(max_age="1h")


def test_searches_and_exports_while_logs_vanish(tmp_path):
    """Age-off deletes logs and shards one by one under running searches (owner and read-only)
    and exports: none of them fails, exports account for every id, results stay exact."""
    now = time.time_ns()
    path = tmp_path / "r"
    with ProvenanceRepository.open(path, CONFIG, start_threads=False) as repo:
        one_shard_per_log(repo)
        for i in range(12):
            roll(repo, now - (13 - i) * 60 * MIN, now - (12 - i) * 60 * MIN, n=300, seed=i)
        ro = ProvenanceRepository.open(path, read_only=True)
        stop = threading.Event()
        errors: list[BaseException] = []
        counts = {"search": 0, "export": 0}

        def searching(r) -> None:
            try:
                while not stop.is_set():
                    got = r.search(limit=300, newest_first=bool(counts["search"] % 2))
                    ids = [e.event_id for e in got]
                    assert len(ids) == len(set(ids))
                    counts["search"] += 1
                    time.sleep(0.002)  # let age-off (many GIL-releasing syscalls) progress
            except BaseException as e:
                errors.append(e)

        def exporting() -> None:
            try:
                while not stop.is_set():
                    pos = 1
                    while True:
                        b = repo.export(pos, 250)
                        seen = {e.event_id for e in b.events}
                        for lo, hi in b.skipped:
                            assert not seen & set(range(lo, hi))
                            seen |= set(range(lo, hi))
                        assert seen == set(range(pos, b.next_id))  # every id accounted for
                        if b.next_id == pos:
                            break
                        pos = b.next_id
                    counts["export"] += 1
                    time.sleep(0.002)
            except BaseException as e:
                errors.append(e)

        threads = [
            threading.Thread(target=searching, args=(repo,)),
            threading.Thread(target=searching, args=(ro,)),
            threading.Thread(target=exporting),
        ]
        for t in threads:
            t.start()
        try:
            for i in range(11):
                time.sleep(0.03)
                rep = repo.age_off(max_age=(12 - i) * 3600 - 30)
                assert len(rep.deleted_logs) == 1
            time.sleep(0.05)
        finally:  # a failed assertion must not leave the threads running the session down
            stop.set()
            for t in threads:
                t.join()
            ro.close()
        assert not errors, errors
        assert counts["search"] > 0 and counts["export"] > 0
        assert len(repo.logs()) == 1 and len(shards_on_disk(repo)) == 1
        events = repo.get_events(1, 10**6)
        assert [e.event_id for e in repo.search(limit=10**6)] == brute(events, limit=10**6)


def test_age_off_thread_follows_rollovers(tmp_path):
    cfg = RepositoryConfig(sync="none", rollover_interval=3600, max_storage_time="1h")
    now = time.time_ns()
    with ProvenanceRepository.open(tmp_path / "r", cfg) as repo:
        old = roll(repo, now - 300 * MIN, now - 200 * MIN, seed=1)
        new = roll(repo, now - MIN, now, seed=2)
        deadline = time.monotonic() + 10
        while repo.min_event_id != new[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert repo.min_event_id == new[0] and repo.get_event(old[0]) is None


def test_cli_age_off(tmp_path, capsys):
    path = str(tmp_path / "r")
    now = time.time_ns()
    with ProvenanceRepository.open(path, CONFIG, start_threads=False) as repo:
        old = roll(repo, now - 300 * MIN, now - 200 * MIN, seed=1)
        roll(repo, now - MIN, now, seed=2)
        capsys.readouterr()
        # The owner holds the lock: the CLI refuses, in one line, and deletes nothing.
        assert main(["age-off", path, "--max-age", "1h"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "owned by another process" in err
        assert len(repo.logs()) == 2
    before = sorted(os.listdir(path))
    assert main(["age-off", path]) == 2  # no limit given or configured: nothing opened
    assert "no age-off limit" in capsys.readouterr().err
    assert sorted(os.listdir(path)) == before
    assert main(["age-off", path, "--max-age", "soon"]) == 2
    assert main(["age-off", str(tmp_path / "nope"), "--max-age", "1h"]) == 2
    assert not os.path.exists(tmp_path / "nope")
    assert main(["age-off", path, "--max-age", "1h"]) == 0
    assert f"ids {old[0]}..{old[1] - 1}" in capsys.readouterr().out
    assert main(["age-off", path, "--max-bytes", "1", "--json"]) == 1  # cannot be met
    out, err = capsys.readouterr()
    assert '"unmet"' in out and "cannot be met" in err


def test_removing_a_log_under_a_running_read(tmp_path, monkeypatch):
    """The interleaving age-off makes possible: a log leaves the store between a reader taking
    its descriptor and reading from it. The read completes (it used to fail with EBADF)."""
    import repository._eventlog as eventlog

    with ProvenanceRepository.open(tmp_path / "r", CONFIG, start_threads=False) as repo:
        first, _ = roll(repo, 1, 1000, seed=1)
        store = repo._store
        real = os.pread
        fired = []

        def pread(fd, n, off):
            if not fired:
                fired.append(1)
                store.remove(first)  # age-off, right now
            return real(fd, n, off)

        monkeypatch.setattr(eventlog.os, "pread", pread)
        batch = repo.export(1, 50)
        assert fired and [e.event_id for e in batch.events] == list(range(1, 51))
