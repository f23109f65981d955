"""Search times are [start, end): an event exactly at `start` is in, one exactly at `end` is
out, for rich-event spans (checked event by event) and lineage-batch spans (one event decides
for the whole batch)."""

from __future__ import annotations

import random

import pytest
from _search_data import BASE, batch, brute, rich_events

from repository import ProvenanceRepository, RepositoryConfig

CONFIG = RepositoryConfig(sync="none", rollover_interval=3600)
STEP = 1000


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """Rich events on a grid of times (several per time), and lineage batches at grid times
    between them; every event time is also the end of someone's range."""
    rng = random.Random(3)
    path = tmp_path_factory.mktemp("bounds") / "repo"
    repo = ProvenanceRepository.open(path, CONFIG, start_threads=False)
    rich = rich_events(rng, 300, 0, 1)
    for i, e in enumerate(rich):
        e.event_time_ns = BASE + (i % 40) * STEP  # 40 times, ~7 events each
    repo.register_events(rich)
    for k in range(6):
        repo.register_events(batch(rng, BASE + (5 * k + 2) * STEP, 50, k))
        repo.register_events(batch(rng, BASE + 1_000_000 + k * STEP, 80, 10 + k))  # own span
    assert repo.rollover() > 0
    assert repo.wait_for_index(10)
    events = repo.get_events(1, 100_000)
    yield repo, events
    repo.close()


def times_of(events, batches: bool) -> list[int]:
    """Event times of rich events (batches=False) or of lineage-batch records (True; the rich
    events here carry a location, the batches do not)."""
    return sorted({e.event_time_ns for e in events if (e.location is None) == batches})


@pytest.mark.parametrize("kind", ["rich", "batch"])
def test_an_event_at_start_is_in_and_one_at_end_is_out(bounded, kind):
    repo, events = bounded
    times = times_of(events, kind == "batch")
    assert len(times) >= 6
    for t in times:
        at_t = brute(events, start=t, end=t + 1, limit=10_000)
        assert at_t and all(repo.get_event(i).event_time_ns == t for i in at_t)
        for start, end in ((t, t + 1), (t - 1, t), (t - STEP, t), (t, t + STEP), (t, t)):
            for newest_first in (True, False):
                got = repo.search(start=start, end=end, limit=10_000, newest_first=newest_first)
                want = brute(events, start=start, end=end, limit=10_000, newest_first=newest_first)
                assert [e.event_id for e in got] == want, (kind, t, start, end)
        got_end = {e.event_id for e in repo.search(end=t, limit=10_000)}
        got_start = {e.event_id for e in repo.search(start=t, limit=10_000)}
        assert not got_end & set(at_t) and set(at_t) <= got_start
        assert repo.search(start=t, end=t) == []
        # A small limit reads only the nearest events of a uniform span: still exact.
        for newest_first in (True, False):
            got = repo.search(start=t, end=t + 1, limit=3, newest_first=newest_first)
            want = brute(events, start=t, end=t + 1, limit=3, newest_first=newest_first)
            assert [e.event_id for e in got] == want
