"""Traces as Spark jobs, executor side: what a task does with its part of a traced set.

A traced set on Spark is an RDD of (key, positions): key = a record id's (capture point,
partition) bits, positions = ascending uint32 positions in that partition. Sets are routed by
key (`route`), so each task holds whole partitions' records and reads only the batches (and
forward index blocks) that hold them: Titian-D's partition-routed join of the frontier with
the lineage, no shuffle of the lineage itself (only the frontier moves between hops).

Each worker process opens the repository's lineage read-only (`repository.lineage.open_index`:
the event logs and forward indexes, not the search index) once, and keeps it for the next
tasks. Nothing here imports pyspark, so workers stay as light as for capture.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import MAX_PARTITION, MAX_POSITION, unique_ids
from repository.lineage import equal_runs

if TYPE_CHECKING:
    from repository.lineage import LineageIndex

POSITION_BITS = MAX_POSITION.bit_length()
PARTITION_BITS = MAX_PARTITION.bit_length()
PAGE = 10_000  # records whose raw data a task holds at once

Part = tuple[int, np.ndarray]  # (key, positions ascending)
_INDEXES: dict[str, LineageIndex] = {}


def index_for(path: str) -> LineageIndex:
    """This process's read-only lineage index of the repository at `path`."""
    ix = _INDEXES.get(path)
    if ix is None:
        from repository.lineage import open_index

        ix = _INDEXES[path] = open_index(path)
    return ix


def route(key: int) -> int:
    """The partitioner hash of a key (a plain int: Spark takes it modulo the partitions)."""
    return int(key)


def split_ids(ids: np.ndarray) -> list[Part]:
    """Ascending record ids as (key, positions) parts."""
    keys = ids >> POSITION_BITS
    return [
        (int(keys[a]), (ids[a:b] & MAX_POSITION).astype(np.uint32)) for a, b in equal_runs(keys)
    ]


def join_parts(parts: Iterable[Part]) -> np.ndarray:
    """Record ids (ascending within each part) of parts."""
    chunks = [(np.int64(k) << POSITION_BITS) + p.astype(np.int64) for k, p in parts if len(p)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


class MergeParts:
    """After a shuffle: one part per key, positions distinct and ascending."""

    def __call__(self, parts: Iterable[Part]) -> Iterator[Part]:
        by_key: dict[int, list[np.ndarray]] = {}
        for k, p in parts:
            by_key.setdefault(k, []).append(p)
        for k in sorted(by_key):
            ps = by_key.pop(k)
            yield k, unique_ids(np.concatenate(ps)).astype(np.uint32) if len(ps) > 1 else ps[0]


class HopTask:
    """One hop of a trace over a task's parts: ("next", source cp, key, positions) for the
    records reached, ("stop", source cp, key, positions) for records where the trace ends
    (`LineageIndex.stop_or_move`), as `LineageIndex.trace` does; records that reach nothing
    elsewhere are dropped."""

    def __init__(self, path: str, run: str, forward: bool) -> None:
        self.path = path
        self.run = run
        self.forward = forward

    def __call__(self, parts: Iterable[Part]) -> Iterator[tuple[str, int, int, np.ndarray]]:
        ix = index_for(self.path)
        by_cp: dict[int, list[Part]] = {}
        for k, p in parts:
            by_cp.setdefault(k >> PARTITION_BITS, []).append((k, p))
        for cp, mine in sorted(by_cp.items()):
            end, moves = ix.stop_or_move(self.run, cp, self.forward)
            if end:
                for k, p in mine:
                    yield "stop", cp, k, p
            if not moves:
                continue
            ids = join_parts(sorted(mine, key=lambda kp: kp[0]))
            moved = ix.children(self.run, ids) if self.forward else ix.parents(self.run, ids)
            for k, p in split_ids(moved):
                yield "next", cp, k, p


class CountTask:
    def __call__(self, parts: Iterable[Part]) -> Iterator[int]:
        yield sum(len(p) for _k, p in parts)


class DataTask:
    """(record id, raw data) of a task's parts, read a page at a time: source lines re-read
    by offset from the input files, captured values from the event logs."""

    def __init__(self, path: str, run: str) -> None:
        self.path = path
        self.run = run

    def __call__(self, parts: Iterable[Part]) -> Iterator[tuple[int, Any]]:
        ix = index_for(self.path)
        for k, p in parts:
            ids = join_parts([(k, p)])
            for a in range(0, len(ids), PAGE):
                page = ids[a : a + PAGE]
                yield from zip(page.tolist(), ix.record_data(self.run, page))


class FilterTask:
    """The parts' records whose raw data satisfies `f`."""

    def __init__(self, path: str, run: str, f: Any) -> None:
        self.path = path
        self.run = run
        self.f = f

    def __call__(self, parts: Iterable[Part]) -> Iterator[Part]:
        ix = index_for(self.path)
        for k, p in parts:
            ids = join_parts([(k, p)])
            keep = np.zeros(len(ids), dtype=bool)
            for a in range(0, len(ids), PAGE):
                data = ix.record_data(self.run, ids[a : a + PAGE])
                keep[a : a + len(data)] = [bool(self.f(d)) for d in data]
            if keep.any():
                yield k, p[keep]


# -- small picklable functions the driver's RDD pipelines use (defined here, the light module)


def is_next(t: tuple[str, int, int, np.ndarray]) -> bool:
    return t[0] == "next"


def as_part(t: tuple[str, int, int, np.ndarray]) -> Part:
    return t[2], t[3]


def is_stop(t: tuple[str, int, int, np.ndarray]) -> bool:
    return t[0] == "stop"


class AtCapturePoints:
    """Parts at the given capture points."""

    def __init__(self, cps: set[int]) -> None:
        self.cps = cps

    def __call__(self, part: Part) -> bool:
        return (part[0] >> PARTITION_BITS) in self.cps


def as_row(item: tuple[int, Any]) -> tuple[int, int, int, int, str | None]:
    """(record id, capture point, partition, position, data as text) of a record: text lines
    as they are, other values by their repr, None where nothing was captured."""
    rid, value = item
    text = value if isinstance(value, str) or value is None else repr(value)
    key = rid >> POSITION_BITS
    return rid, key >> PARTITION_BITS, key & MAX_PARTITION, rid & MAX_POSITION, text


def value_of(item: tuple[int, Any]) -> Any:
    return item[1]
