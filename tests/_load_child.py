"""A journal writer process for the concurrency test: N rich events, sealed every few thousand.

    _load_child.py SPEC_JSON WRITER EVENTS SEAL_EVERY FRAME

Event `seq` of writer `w` has record id w * 10**7 + seq and attributes {"w", "seq"}, so the
parent can check that every event arrived exactly once and in order.
"""

from __future__ import annotations

import json
import sys
import time

from journals import EventType, JournalWriter, ProvenanceEvent, WriterSpec

STRIDE = 10**7


def event(writer: int, seq: int, now: int) -> ProvenanceEvent:
    return ProvenanceEvent(
        event_time_ns=now,
        event_type=EventType.RECEIVE,
        run_id="load",
        component_id=f"writer#{writer}",
        component_type="load",
        partition=writer,
        attempt=0,
        record_id=writer * STRIDE + seq,
        parent_ids=[],
        attributes={"w": str(writer), "seq": str(seq)},
    )


def main(spec: WriterSpec, writer: int, n: int, seal_every: int, frame: int) -> None:
    journals = 0
    for start in range(0, n, seal_every):
        stop = min(n, start + seal_every)
        with JournalWriter.open(spec, tag=f"load{writer}") as w:
            for f in range(start, stop, frame):
                now = time.time_ns()
                w.append([event(writer, s, now) for s in range(f, min(stop, f + frame))])
        journals += 1
    print(f"sealed {journals}", flush=True)


if __name__ == "__main__":
    main(WriterSpec(**json.loads(sys.argv[1])), *map(int, sys.argv[2:6]))
