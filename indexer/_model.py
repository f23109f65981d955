"""What the indexer stores and returns: spans, per-log span lists, shard records, hits."""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import tantivy

from ._schema import SPAN_ATTR_FIELD, attr_term

INDEX_VERSION = 3  # of the span schema and manifest; another version is rebuilt


class Span(msgspec.Struct, frozen=True, gc=False):
    """Consecutive event ids [first_id, first_id + count) of one log, summarized.

    Every value any event of the span has is listed, so a span document matches a query
    whenever one of its events might. `uniform` says every event has the same value of every
    indexed field (a lineage batch: one time, type, run, component, partition, attributes),
    so checking one event decides for all of them. `opaque` says the field values were not
    read (only the time bounds are known): it matches any field predicate.
    """

    log_id: int
    first_id: int
    count: int
    min_time_ns: int
    max_time_ns: int
    types: tuple[str, ...]
    runs: tuple[str, ...]
    components: tuple[str, ...]
    component_types: tuple[str, ...]
    partitions: tuple[int, ...]
    attempts: tuple[int, ...]
    attributes: dict[str, tuple[str, ...]] = {}
    uniform: bool = False
    opaque: bool = False

    @property
    def stop_id(self) -> int:
        return self.first_id + self.count

    def document(self) -> tantivy.Document:
        doc = tantivy.Document()
        add_int, add_text = doc.add_integer, doc.add_text
        add_int("log", self.log_id)
        add_int("first_id", self.first_id)
        add_int("last_id", self.first_id + self.count - 1)
        add_int("min_time", self.min_time_ns)
        add_int("max_time", self.max_time_ns)
        add_int("uniform", int(self.uniform))
        add_int("opaque", int(self.opaque))
        for field, values in (
            ("type", self.types),
            ("run", self.runs),
            ("component", self.components),
            ("component_type", self.component_types),
        ):
            for v in values:
                add_text(field, v)
        for field, ints in (("partition", self.partitions), ("attempt", self.attempts)):
            for n in ints:
                add_int(field, n)
        for k, vs in self.attributes.items():
            for v in vs:
                add_text(SPAN_ATTR_FIELD, attr_term(k, v))
        return doc


class LogSpans(msgspec.Struct, gc=False):
    """Everything one event log contributes to the index: ids [log_id, next_id)."""

    log_id: int
    next_id: int
    spans: list[Span]

    @property
    def events(self) -> int:
        return self.next_id - self.log_id


class ShardInfo(msgspec.Struct, gc=False):
    """One shard as the manifest records it (times and logs of what it holds)."""

    name: str  # directory name: the UTC time the shard was created
    attributes: list[str]  # indexed attributes when the shard was written
    docs: int = 0
    min_time_ns: int | None = None
    max_time_ns: int | None = None
    min_log: int | None = None  # first ids of the oldest and newest log it points into
    max_log: int | None = None
    generation: int = 0  # bumped at each commit, so readers know to reload
    full: bool = False  # passed the size limit: no more writes

    def overlaps(self, start_ns: int | None, end_ns: int | None) -> bool:
        """Whether it may hold events with start <= time < end."""
        if self.min_time_ns is None or self.max_time_ns is None:
            return False
        if start_ns is not None and self.max_time_ns < start_ns:
            return False
        return not (end_ns is not None and self.min_time_ns >= end_ns)


class Manifest(msgspec.Struct, gc=False):
    """`index/manifest.json`: the durable checkpoint and the list of shards.

    `indexed_next_id`: every log whose first id is below it is indexed ("indexed through event
    id indexed_next_id - 1"). It is written after each Tantivy commit; a crash between the two
    leaves documents past the checkpoint, which the next open deletes and adds again.
    """

    version: int = INDEX_VERSION
    indexed_next_id: int = 1
    shards: list[ShardInfo] = []


class SpanHit(NamedTuple):
    """A span document a search found: where to read its events, and its time bounds."""

    log_id: int
    first_id: int
    stop_id: int  # one past the last event id
    min_time_ns: int
    max_time_ns: int
    uniform: bool
    shard: str
