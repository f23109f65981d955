"""Crash culprits: the input records whose processing raised, from FAIL events.

The capture agent records a FAIL event when a user function raises inside a captured segment
(BigDebug's crash culprit): the record id of the segment input that was being processed, the
capture point it sits at, and the exception. A task retried by Spark records its failure once
per attempt; culprits are reported once per (record, exception).

Raw data comes from the run's lineage when a completed attempt journaled the record (the
skip policy, or a retry that succeeded); otherwise from the FAIL event itself, which names
the failing line's bytes (text inputs) or carries its value's repr (captured values), since a
failing attempt's lineage is never merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from indexer import Predicates
from journals import EventType, ProvenanceEvent, unpack_record_ids

from .._indexing import RepositoryIndex
from .._store import LogStore
from ._index import LineageIndex
from ._raw import read_range


@dataclass
class Culprit:
    """One input record that made a user function raise."""

    run_id: str
    record_id: int
    capture_point: int
    component_id: str  # the capture point of the record (its source or shuffle)
    partition: int
    exception: str
    message: str
    event_ids: list[int] = field(default_factory=list)  # one FAIL event per attempt
    attempts: list[int] = field(default_factory=list)
    first_seen_ns: int = 0
    data: Any = None  # the record's raw data, when asked for

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "record_id": self.record_id,
            "capture_point": self.capture_point,
            "component_id": self.component_id,
            "partition": self.partition,
            "exception": self.exception,
            "message": self.message,
            "event_ids": self.event_ids,
            "attempts": self.attempts,
            "first_seen_ns": self.first_seen_ns,
            "data": self.data,
        }


def find_culprits(
    store: LogStore,
    index: RepositoryIndex,
    lineage: LineageIndex,
    run: str | None = None,
    with_data: bool = False,
) -> list[Culprit]:
    """Culprits of one run (default: every run), oldest first: FAIL events found through the
    search `index`, and past its checkpoint read from the `store`; data from `lineage`."""
    index.wait(timeout=30)
    # The index may lag (a read-only open beside a busy owner does not wait for it): search
    # what is indexed, and read the rest of the log, so no culprit is missed or repeated.
    indexed = index.indexed_next_id()
    fails = Predicates(
        event_types=frozenset([EventType.FAIL.value]),
        runs=frozenset([run]) if run is not None else None,
    )
    events = [
        ev
        for ev in index.search(fails, limit=1_000_000, newest_first=False)
        if ev.event_id < indexed
    ]
    events.extend(_fails_from(store, indexed, run))
    found: dict[tuple, Culprit] = {}
    first_event: dict[tuple, ProvenanceEvent] = {}
    for ev in events:
        exc = ev.attributes.get("exception", "")
        msg = ev.attributes.get("message", "")
        key = (ev.run_id, ev.record_id, exc, msg)
        c = found.get(key)
        if c is None:
            cp = int(unpack_record_ids(np.array([max(ev.record_id, 0)]))[0][0])
            c = found[key] = Culprit(
                ev.run_id,
                ev.record_id,
                cp,
                ev.component_id,
                ev.partition,
                exc,
                msg,
                first_seen_ns=ev.event_time_ns,
            )
            first_event[key] = ev
        c.event_ids.append(ev.event_id)
        c.attempts.append(ev.attempt)
    culprits = list(found.values())
    if with_data:
        by_run: dict[str, list[Culprit]] = {}
        for c in culprits:
            if c.record_id >= 0:
                by_run.setdefault(c.run_id, []).append(c)
        for run_id, cs in by_run.items():
            data = lineage.record_data(run_id, np.array([c.record_id for c in cs]))
            for c, d in zip(cs, data):
                c.data = d
        for key, c in found.items():
            if c.data is None:
                c.data = _data_in_event(first_event[key])
    return culprits


def _fails_from(store: LogStore, first_id: int, run: str | None) -> list[ProvenanceEvent]:
    """FAIL events of `run` (any run if None) with ids from `first_id`, read from the log."""
    return [
        ev
        for chunk in store.chunks_from(first_id)
        for ev in chunk
        if ev.event_type is EventType.FAIL and (run is None or ev.run_id == run)
    ]


def event_data(index: LineageIndex, ev: ProvenanceEvent) -> Any:
    """The raw data of an event's record: from the run's lineage when it stores the record
    (re-read by offset, or the captured value), else as the event itself names it."""
    if ev.record_id >= 0:
        rid = np.array([ev.record_id], dtype=np.int64)
        if index.event_ids(ev.run_id, rid)[0]:
            return index.record_data(ev.run_id, rid)[0]
    return _data_in_event(ev)


def _data_in_event(ev: ProvenanceEvent) -> Any:
    """The culprit's raw data as its FAIL event names it: the line re-read by offset, or the
    repr of its value; None when the event carries neither."""
    loc = ev.location
    if loc is not None and loc.length >= 0:
        return read_range(loc.uri, loc.offset, loc.length)
    return ev.attributes.get("value")
