"""`provrepo demo` (storage only): a synthetic web-log workload journaled by two processes.

Each worker process plays a Spark task: it reads its share of a web server log, journals one
RECEIVE record per line (with the line's byte offset), a JOIN record per status code with the
lines behind it (columnar lineage), and rich FAIL events for malformed lines. The driver then
rolls over and shows export and lookup by id.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time

import numpy as np

from journals import (
    EventType,
    JournalWriter,
    LineageBatch,
    Location,
    ProvenanceEvent,
    WriterSpec,
    pack_record_id,
    record_id_base,
)

from ._repository import ProvenanceRepository

_CODES = [200] * 40 + [304] * 6 + [404] * 3 + [500, 503]
_PATHS = ["/", "/index.html", "/api/orders", "/api/users", "/static/app.js", "/login"]


def _make_log(path: str, lines: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            if rng.random() < 0.001:
                f.write("### garbled line ###\n")
                continue
            ip = f"10.0.{rng.randrange(256)}.{rng.randrange(256)}"
            size = rng.randrange(100, 90000)
            f.write(f"{ip} GET {rng.choice(_PATHS)} {rng.choice(_CODES)} {size} t={i}\n")


def _task(spec: WriterSpec, path: str, partition: int, run_id: str) -> tuple[int, int]:
    """One 'task': journal the lineage of counting status codes in one half of the log."""
    size = os.path.getsize(path)
    lo, hi = (0, size // 2) if partition == 0 else (size // 2, size)
    offsets, codes, fails = [], [], []
    with open(path, "rb") as f:
        f.seek(lo)
        if lo:
            f.readline()
        pos = f.tell()
        while pos <= hi:
            line = f.readline()
            if not line:
                break
            parts = line.split()
            if len(parts) >= 4 and parts[3].isdigit():
                offsets.append(pos)
                codes.append(int(parts[3]))
            else:
                fails.append((pos, len(line)))
            pos += len(line)
        end = pos
    uri = "file://" + os.path.abspath(path)
    now = time.time_ns()
    src = record_id_base(0, partition)
    with JournalWriter.open(spec, tag=f"demo-p{partition}") as w:
        n = len(offsets)
        w.append(
            LineageBatch.build(
                event_time_ns=now,
                event_type=EventType.RECEIVE,
                run_id=run_id,
                component_id="textFile#0",
                component_type="textFile",
                partition=partition,
                attempt=0,
                record_ids=range(src, src + n),
                offsets=np.array([*offsets, end], dtype=np.int64),
                location=Location(uri, lo, hi - lo),
            )
        )
        arr = np.array(codes)
        keys, inverse = np.unique(arr, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        out = record_id_base(1, partition)
        w.append(
            LineageBatch.build(
                event_time_ns=time.time_ns(),
                event_type=EventType.JOIN,
                run_id=run_id,
                component_id="reduceByKey#1",
                component_type="combiner",
                partition=partition,
                attempt=0,
                record_ids=range(out, out + len(keys)),
                parent_counts=np.bincount(inverse, minlength=len(keys)),
                parent_ids=src + order,
                attributes={"key": "status"},
            )
        )
        w.append(
            [
                ProvenanceEvent(
                    event_time_ns=time.time_ns(),
                    event_type=EventType.FAIL,
                    run_id=run_id,
                    component_id="map#2",
                    component_type="map",
                    partition=partition,
                    attempt=0,
                    record_id=pack_record_id(0, partition, 0),
                    parent_ids=[],
                    attributes={"error": "ValueError", "message": "malformed line"},
                    location=Location(uri, off, length),
                )
                for off, length in fails
            ]
        )
    return len(offsets) + len(keys) + len(fails), len(fails)


def run_demo(repo_path: str, lines: int = 200_000) -> int:
    t0 = time.perf_counter()
    os.makedirs(repo_path, exist_ok=True)
    data = os.path.join(repo_path, "access.log")
    _make_log(data, lines, seed=7)
    run_id = f"demo-{time.strftime('%Y%m%dT%H%M%S')}"
    with ProvenanceRepository.open(repo_path) as repo:
        spec = repo.writer_spec()
        ctx = mp.get_context("spawn")
        with ctx.Pool(2) as pool:
            results = pool.starmap(_task, [(spec, data, p, run_id) for p in (0, 1)])
        written = sum(r[0] for r in results)
        t1 = time.perf_counter()
        merged = repo.rollover()
        t2 = time.perf_counter()
        first = repo.max_event_id - merged + 1
        print(
            f"wrote {written:,} provenance records from 2 worker processes; merged {merged:,} "
            f"into event ids {first}..{repo.max_event_id} in {t2 - t1:.2f}s"
        )
        print("\nfirst 3 events of this run (export by id):")
        for ev in repo.get_events(first, 3):
            loc = (
                f" {ev.location.uri}@{ev.location.offset}+{ev.location.length}"
                if ev.location
                else ""
            )
            print(f"  #{ev.event_id} {ev.event_type.value} {ev.component_id} p{ev.partition}{loc}")
        joins = [e for e in repo.get_events(first, merged) if e.event_type == EventType.JOIN]
        top = max(joins, key=lambda e: len(e.parent_ids))
        t3 = time.perf_counter()
        again = repo.get_event(top.event_id)
        t4 = time.perf_counter()
        print(
            f"\nlookup of event #{top.event_id} ({again.component_id} p{again.partition}): "
            f"{len(again.parent_ids):,} input lines behind it, found in {(t4 - t3) * 1e3:.2f} ms"
        )
        line = repo.get_event(first + again.parent_ids[0] - record_id_base(0, again.partition))
        if line is not None and line.location is not None:
            with open(data, "rb") as f:
                f.seek(line.location.offset)
                raw = f.read(line.location.length).decode().rstrip()
            print(f"  its first input line, re-read by offset {line.location.offset}: {raw!r}")
        stats = repo.stats()
    print(
        f"\nrepository {os.path.abspath(repo_path)}: {stats['events']:,} events in "
        f"{stats['logs']} logs, {stats['log_bytes'] / 1e6:.1f} MB; "
        f"demo took {time.perf_counter() - t0:.1f}s"
    )
    print(f"try: provrepo stats {repo_path}")
    print(f"     provrepo events {repo_path} --limit 5")
    print(f"     provrepo verify {repo_path}")
    return 0
