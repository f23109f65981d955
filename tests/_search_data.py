"""Sample provenance for the search and age-off tests, and a brute-force search to compare with.

Each rollover gets its own hour of event time (so shards and logs have distinct time spans),
holding rich events with mixed fields and lineage batches of several sizes; one rollover of
"late data" reaches back into earlier hours, so shard time spans overlap as well.
"""

from __future__ import annotations

import random

import numpy as np
from _events import lineage_batch

from journals import EventType, LineageBatch, Location, ProvenanceEvent

BASE = 1_700_000_000_000_000_000
HOUR = 3_600_000_000_000
RUNS = ["run-a", "run-b", "run-c"]
COMPONENTS = ["textFile#0", "map#1", "reduce#2", "sink#3"]
COMPONENT_TYPES = {"textFile#0": "textFile", "map#1": "map", "reduce#2": "combiner"}
TYPES = ["RECEIVE", "JOIN", "FAIL", "SEND", "DROP"]
HOSTS = ["w0", "w1", "w2"]


def rich_events(rng: random.Random, n: int, t0: int, t1: int) -> list[ProvenanceEvent]:
    out = []
    for i in range(n):
        comp = rng.choice(COMPONENTS)
        attrs = {"code": f"E{rng.randrange(5)}"}
        if rng.random() < 0.8:
            attrs["host"] = rng.choice(HOSTS)
        out.append(
            ProvenanceEvent(
                event_time_ns=rng.randrange(t0, t1),
                event_type=EventType(rng.choice(TYPES)),
                run_id=rng.choice(RUNS),
                component_id=comp,
                component_type=COMPONENT_TYPES.get(comp, "sink"),
                partition=rng.randrange(4),
                attempt=rng.choice((0, 0, 0, 1)),
                record_id=i,
                parent_ids=[i - 1] if i else [],
                attributes=attrs,
                location=Location("file:///data/in.txt", i * 10, 10),
            )
        )
    return out


def batch(rng: random.Random, t: int, n: int, partition: int) -> LineageBatch:
    comp = rng.choice(COMPONENTS)
    return lineage_batch(
        range(n),
        parent_counts=np.ones(n, dtype=np.int64),
        parent_ids=np.arange(n),
        time_ns=t,
        event_type=rng.choice(TYPES),
        run=rng.choice(RUNS),
        component=comp,
        component_type=COMPONENT_TYPES.get(comp, "sink"),
        partition=partition,
        attributes={"host": rng.choice(HOSTS), "code": f"E{rng.randrange(5)}"},
    )


def fill(repo, seed: int = 7, rollovers: int = 4, late: bool = True) -> list[tuple[int, int]]:
    """Roll over `rollovers` logs (hour r of event time each), plus a late-data one; returns
    each rollover's event-time window [t0, t1)."""
    rng = random.Random(seed)
    windows = []
    plan = [(BASE + r * HOUR, BASE + (r + 1) * HOUR) for r in range(rollovers)]
    if late:
        plan.append((BASE, BASE + rollovers * HOUR))
    for k, (t0, t1) in enumerate(plan):
        before = repo.max_event_id
        repo.register_events(rich_events(rng, rng.randrange(150, 400), t0, t1))
        for p in range(rng.randrange(2, 6)):
            repo.register_events(batch(rng, rng.randrange(t0, t1), rng.choice((1, 40, 700)), p))
            # A second batch at the same time: ties are broken by event id.
            if p == 0:
                repo.register_events(batch(rng, t0 + HOUR // 2, 30, 100 + k))
        repo.register_events(rich_events(rng, rng.randrange(20, 80), t0, t1))
        repo.rollover()  # (a rollover thread may have merged some of them first)
        assert repo.max_event_id > before
        windows.append((t0, t1))
    return windows


def brute(
    events: list[ProvenanceEvent],
    *,
    start=None,
    end=None,
    event_types=None,
    components=None,
    runs=None,
    attributes=None,
    test=None,
    limit=100,
    newest_first=True,
) -> list[int]:
    """The ids a search must return, by filtering every event."""
    sel = [
        e
        for e in events
        if (start is None or e.event_time_ns >= start)
        and (end is None or e.event_time_ns < end)
        and (event_types is None or e.event_type.value in event_types)
        and (components is None or e.component_id in components)
        and (runs is None or e.run_id in runs)
        and all(e.attributes.get(k) == v for k, v in (attributes or {}).items())
        and (test is None or test(e))
    ]
    sel.sort(key=lambda e: (e.event_time_ns, e.event_id), reverse=newest_first)
    return [e.event_id for e in sel[:limit]]
