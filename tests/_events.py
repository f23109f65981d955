"""Test data in one place: rich events and lineage batches, spelling out only what a test is
about (the run, component, partition, attempt and time have defaults)."""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from journals import (
    EventType,
    JournalWriter,
    LineageBatch,
    Location,
    ProvenanceEvent,
    pack_record_id,
    record_id_base,
)
from repository import RUN_COMPONENT_TYPE


def make_event(i: int, run: str = "run-1", t: int | None = None) -> ProvenanceEvent:
    """A realistic rich event whose record id is `i` (so tests can check order and identity)."""
    return ProvenanceEvent(
        event_time_ns=time.time_ns() if t is None else t,
        event_type=EventType.RECEIVE if i % 3 else EventType.SEND,
        run_id=run,
        component_id=f"textFile#{i % 4}",
        component_type="textFile",
        partition=i % 7,
        attempt=0,
        record_id=i,
        parent_ids=[i - 1] if i else [],
        attributes={"host": f"w{i % 3}", "code": f"E{i % 50}"},
        location=Location(uri="file:///data/x.log", offset=i * 80, length=80),
        details=None,
    )


def lineage_batch(
    record_ids: range | Sequence[int] | np.ndarray,
    *,
    parents: Sequence[Sequence[int]] | None = None,
    parent_counts: np.ndarray | None = None,
    parent_ids: np.ndarray | None = None,
    run: str = "run-1",
    component: str = "c",
    component_type: str = "combiner",
    event_type: EventType | str = EventType.JOIN,
    partition: int = 0,
    attempt: int = 0,
    time_ns: int = 1,
    **columns: Any,
) -> LineageBatch:
    """A lineage batch of `record_ids`. Parents as one list per record (`parents`), or as
    CSR columns (`parent_counts`, `parent_ids`) for large batches; `columns`: offsets, values,
    attributes, location, details, as `LineageBatch.build` takes them."""
    if parents is not None:
        parent_counts = np.array([len(p) for p in parents], dtype=np.int64)
        parent_ids = np.array([x for p in parents for x in p], dtype=np.int64)
    return LineageBatch.build(
        event_time_ns=time_ns,
        event_type=EventType(event_type) if isinstance(event_type, str) else event_type,
        run_id=run,
        component_id=component,
        component_type=component_type,
        partition=partition,
        attempt=attempt,
        record_ids=record_ids if isinstance(record_ids, range) else np.asarray(record_ids),
        parent_counts=parent_counts,
        parent_ids=parent_ids,
        **columns,
    )


def run_descriptor(
    run: str, capture_points: list[dict[str, Any]], version: int = 1
) -> LineageBatch:
    """The batch a capture agent journals to describe its run (format: `agent._planner`)."""
    rid = pack_record_id(0, version, 0)
    desc = {"run_id": run, "version": version, "capture_points": capture_points}
    return LineageBatch.build(
        event_time_ns=time.time_ns(),
        event_type=EventType.CREATE,
        run_id=run,
        component_id="run",
        component_type=RUN_COMPONENT_TYPE,
        partition=version,
        attempt=0,
        record_ids=range(rid, rid + 1),
        details=json.dumps(desc),
    )


def cp(number, name, ctype, parents=(), dependency="narrow", event="FORK"):
    """A capture point of a hand-built run's descriptor."""
    return {
        "cp": number,
        "component_id": name,
        "component_type": ctype,
        "event_type": "RECEIVE" if dependency == "source" else event,
        "parents": list(parents),
        "dependency": dependency,
        "partitions": 0,
    }


def write_run(repo, run, cps, records, descriptor=True, values=None):
    """A hand-built run written through a journal: records: {(cp, partition): list of
    parent-id lists (sources: an int, the count)}; values: {(cp, partition): each record's
    value}, captured pickled as the agent does."""
    kinds = {c["cp"]: c for c in cps}
    with JournalWriter.open(repo.writer_spec()) as w:
        for (number, part), parents in sorted(records.items()):
            c = kinds[number]
            base = record_id_base(number, part)
            n = parents if isinstance(parents, int) else len(parents)
            if n == 0:
                continue  # the agent writes no batch for an empty partition
            kw = {}
            if values and (number, part) in values:
                kw["values"] = [pickle.dumps(v) for v in values[(number, part)]]
            w.append(
                lineage_batch(
                    range(base, base + n),
                    parents=None if isinstance(parents, int) else parents,
                    time_ns=time.time_ns(),
                    event_type=c["event_type"],
                    run=run,
                    component=c["component_id"],
                    component_type=c["component_type"],
                    partition=part,
                    **kw,
                )
            )
        if descriptor:
            w.append(run_descriptor(run, cps))
    repo.rollover()
