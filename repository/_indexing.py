"""The repository's search index: event logs summarized into spans, kept current by a worker.

Granularity (what one index document covers):
- a lineage batch (a toc `BatchRef`: N records of one run, component, partition, attempt, one
  time and one set of attributes) is one document, exact on every field, whatever its size;
- rich events are one document per run of events inside one block (~64 KiB, a few hundred
  events), holding every value those events have; the exact filter runs on the events.
A 1 M-record rollover is then a few hundred documents (index lag well under a second). If one
log would give more than `MAX_SPANS_PER_LOG` documents (millions of tiny batches), neighbouring
small spans are merged into non-uniform ones so the lag stays bounded.

Rich events must be decoded to learn their values (~1.5 us each here), so a log decodes at most
`RICH_EVENTS_READ_PER_LOG` of them; runs past that budget get *opaque* documents: the block's
time bounds from the toc, no values, matching any field predicate (searches filter their events
exactly). A rollover of 1 M rich events then indexes in well under the 2 s goal, at the price of
reading more events for selective searches over such logs.
"""

from __future__ import annotations

import logging
import math
import sys
from bisect import bisect_right
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import cast

import msgspec
from tqdm import tqdm

from indexer import IndexWorker, LogSpans, Predicates, ShardSet, Span
from journals import LineageBatch, ProvenanceEvent, dir_bytes

from ._blocks import BatchSlice, BlockError, EventRun
from ._config import RepositoryConfig
from ._eventlog import LogReader
from ._layout import Layout
from ._search import search
from ._store import LogStore
from ._toc import Toc

log = logging.getLogger("provrepo.repository")

MAX_SPANS_PER_LOG = 16_384
RICH_EVENTS_READ_PER_LOG = 250_000


def summarize_log(path: str, toc: Toc, attributes: frozenset[str]) -> LogSpans:
    """The spans of one committed log. Reads only the blocks it needs: the first block of each
    lineage batch (for its time and attributes) and the blocks holding rich events.

    Raises FileNotFoundError if the log vanished (aged off); a damaged block is logged and its
    rich events are left out (they cannot be read by a search either).
    """
    reader = LogReader(path, toc)
    try:
        starts = {b.first_event_id for b in toc.batches}
        batches: dict[int, LineageBatch] = {}
        spans: list[Span] = []
        budget = RICH_EVENTS_READ_PER_LOG
        for i in _blocks_to_read(toc):
            try:
                entries = reader.read_block(i)
            except BlockError as e:
                log.warning("not indexing block %d of %s: %s", i, path, e)
                continue
            for entry in entries:
                if isinstance(entry, EventRun) and entry.count <= budget:
                    spans.append(_rich_span(toc.first_id, entry, attributes))
                    budget -= entry.count
                elif isinstance(entry, EventRun):
                    spans.append(_opaque_span(toc, i, entry))
                elif isinstance(entry, BatchSlice) and entry.first_id in starts:
                    batches[entry.first_id] = entry.batch
        for b in toc.batches:
            lb = batches.get(b.first_event_id)
            attrs: dict[str, tuple[str, ...]]
            if lb is not None:
                t0 = t1 = lb.event_time_ns
                attrs = {k: (v,) for k, v in lb.attributes.items() if k in attributes}
            else:  # its first block is damaged: bound the time by the blocks it spans
                t0, t1 = _block_times(toc, b.first_event_id, b.first_event_id + b.count)
                attrs = {}
            spans.append(
                Span(
                    log_id=toc.first_id,
                    first_id=b.first_event_id,
                    count=b.count,
                    min_time_ns=t0,
                    max_time_ns=t1,
                    types=(b.event_type,),
                    runs=(b.run_id,),
                    components=(b.component_id,),
                    component_types=(b.component_type,),
                    partitions=(b.partition,),
                    attempts=(b.attempt,),
                    attributes=attrs,
                    uniform=lb is not None,
                )
            )
    finally:
        reader.close()
    spans.sort(key=lambda s: s.first_id)
    return LogSpans(toc.first_id, toc.next_id, coarsen(spans, MAX_SPANS_PER_LOG))


def _blocks_to_read(toc: Toc) -> list[int]:
    firsts = toc.block_first_ids
    need = {bisect_right(firsts, b.first_event_id) - 1 for b in toc.batches}
    if toc.rich_events:
        # Blocks not wholly inside lineage batches hold rich events.
        covered: list[list[int]] = []
        for lo, hi in sorted((b.first_event_id, b.first_event_id + b.count) for b in toc.batches):
            if covered and covered[-1][1] == lo:
                covered[-1][1] = hi
            else:
                covered.append([lo, hi])
        cov_starts = [c[0] for c in covered]
        for i, lo in enumerate(firsts):
            hi = firsts[i + 1] if i + 1 < len(firsts) else toc.next_id
            j = bisect_right(cov_starts, lo) - 1
            if j < 0 or covered[j][1] < hi:
                need.add(i)
    return sorted(i for i in need if 0 <= i < len(firsts))


def _block_times(toc: Toc, lo: int, hi: int) -> tuple[int, int]:
    firsts = toc.block_first_ids
    a = max(0, bisect_right(firsts, lo) - 1)
    b = max(a + 1, bisect_right(firsts, hi - 1))
    return min(toc.block_min_time_ns[a:b]), max(toc.block_max_time_ns[a:b])


class _Indexed(msgspec.Struct, array_like=True, gc=False):
    """The leading fields of an encoded `ProvenanceEvent`: what a span summarizes. Decoding
    only these (trailing fields ignored, plain strings instead of enum members) makes
    summarizing rich events about twice as fast."""

    event_time_ns: int
    event_type: str
    run_id: str
    component_id: str
    component_type: str
    partition: int
    attempt: int


class _IndexedAttrs(_Indexed, array_like=True, gc=False):
    """`_Indexed` and the attributes (decoded only when some are indexed: they cost most)."""

    record_id: msgspec.Raw
    parent_ids: msgspec.Raw
    attributes: dict[str, str]


_INDEXED = msgspec.msgpack.Decoder(list[_Indexed])
_INDEXED_ATTRS = msgspec.msgpack.Decoder(list[_IndexedAttrs])


def _rich_span(log_id: int, run: EventRun, attributes: frozenset[str]) -> Span:
    events: list = (_INDEXED_ATTRS if attributes else _INDEXED).decode(run.data)

    def values(field: str) -> tuple:
        return tuple(sorted(set(map(attrgetter(field), events))))

    times = list(map(attrgetter("event_time_ns"), events))
    attrs: dict[str, tuple[str, ...]] = {}
    if attributes:
        dicts = list(map(attrgetter("attributes"), events))
        for a in attributes:
            vals = set(map(dict.get, dicts, repeat(a)))
            vals.discard(None)
            if vals:
                attrs[a] = tuple(sorted(cast("set[str]", vals)))
    fields = (
        types := values("event_type"),
        runs := values("run_id"),
        components := values("component_id"),
        component_types := values("component_type"),
        partitions := values("partition"),
        attempts := values("attempt"),
    )
    lo, hi = min(times), max(times)
    # Uniform: one event decides for all (every field a search can test is the same; the
    # attributes must be known for that). Rich runs rarely are; lineage batches always are.
    uniform = (
        lo == hi
        and bool(attributes)
        and all(len(v) == 1 for v in fields)
        and all(d == dicts[0] for d in dicts)
    )
    return Span(
        log_id=log_id,
        first_id=run.first_id,
        count=run.count,
        min_time_ns=lo,
        max_time_ns=hi,
        types=types,
        runs=runs,
        components=components,
        component_types=component_types,
        partitions=partitions,
        attempts=attempts,
        attributes=attrs,
        uniform=uniform,
    )


def _opaque_span(toc: Toc, block: int, run: EventRun) -> Span:
    return Span(
        log_id=toc.first_id,
        first_id=run.first_id,
        count=run.count,
        min_time_ns=toc.block_min_time_ns[block],
        max_time_ns=toc.block_max_time_ns[block],
        types=(),
        runs=(),
        components=(),
        component_types=(),
        partitions=(),
        attempts=(),
        opaque=True,
    )


def coarsen(spans: list[Span], max_spans: int) -> list[Span]:
    """At most ~max_spans spans: neighbours smaller than total/max_spans events are merged."""
    if len(spans) <= max_spans:
        return spans
    total = sum(s.count for s in spans)
    least = math.ceil(total / max_spans)
    out: list[Span] = []
    group: list[Span] = []
    size = 0
    for s in spans:
        if s.count >= least:
            if group:
                out.append(_merge(group))
                group, size = [], 0
            out.append(s)
            continue
        group.append(s)
        size += s.count
        if size >= least:
            out.append(_merge(group))
            group, size = [], 0
    if group:
        out.append(_merge(group))
    return out


def _merge(group: list[Span]) -> Span:
    if len(group) == 1:
        return group[0]

    def union(field: str) -> tuple:
        return tuple(sorted(set().union(*(getattr(s, field) for s in group))))

    attrs: dict[str, set[str]] = {}
    for s in group:
        for k, v in s.attributes.items():
            attrs.setdefault(k, set()).update(v)
    first = group[0].first_id
    return Span(
        log_id=group[0].log_id,
        first_id=first,
        count=group[-1].stop_id - first,
        min_time_ns=min(s.min_time_ns for s in group),
        max_time_ns=max(s.max_time_ns for s in group),
        types=union("types"),
        runs=union("runs"),
        components=union("components"),
        component_types=union("component_types"),
        partitions=union("partitions"),
        attempts=union("attempts"),
        attributes={k: tuple(sorted(v)) for k, v in attrs.items()},
        uniform=False,
        opaque=any(s.opaque for s in group),
    )


@dataclass(frozen=True)
class SearchIndexStats:
    """The search index's part of `RepositoryStats`."""

    index_bytes: int
    index_shards: int
    indexed_next_id: int
    events_not_indexed: int
    index_lag_seconds: float | None  # None also where this process does not index
    index_errors: int | None  # None where this process does not index (a read-only open)


class RepositoryIndex:
    """The index of one repository: `<repo>/index`, fed by the rollover listener.

    The owner recovers it at open (documents past the checkpoint are deleted and added again),
    and a worker indexes every log past the checkpoint: on its own thread, or inline (in the
    caller's thread) when the repository runs without threads. Readers only read shards.
    """

    def __init__(
        self, layout: Layout, config: RepositoryConfig, store: LogStore, read_only: bool
    ) -> None:
        self.layout = layout
        self.store = store
        self.attributes = frozenset(config.indexed_attributes)
        self._shards = ShardSet(
            layout.index,
            shard_size=config.index_shard_size,
            attributes=sorted(config.indexed_attributes),
            writable=not read_only,
        )
        self.worker: IndexWorker[Toc] | None = None

    def start(self, threaded: bool) -> None:
        """Owner: recover the index and start keeping it current."""
        self._shards.recover()
        self.worker = IndexWorker(
            self._shards,
            pending=self._pending,
            summarize=self._summarize,
            threaded=threaded,
        )
        self.worker.start()

    @property
    def shards(self) -> ShardSet:
        """The shard set to search now (the owner's live one, or a reader's refreshed view)."""
        if self.worker is not None:
            return self.worker.shards
        self._shards.refresh()
        return self._shards

    def on_rollover(self, toc: Toc) -> None:
        if self.worker is not None:
            self.worker.notify(toc)

    def _pending(self, next_id: int) -> list[Toc]:
        return [t for t in self.store.tocs() if t.first_id >= next_id]

    def _summarize(self, toc: Toc) -> LogSpans:
        return summarize_log(self.layout.log_path(toc.first_id), toc, self.attributes)

    def catch_up(self) -> None:
        """Inline mode: index whatever is pending now (threaded mode: nothing to do)."""
        if self.worker is not None and not self.worker.threaded:
            self.worker.index_pending()

    def indexed_next_id(self) -> int:
        """Events below this id are searchable (the index checkpoint, as of now)."""
        self.catch_up()
        return self.shards.indexed_next_id

    def search(self, preds: Predicates, limit: int, newest_first: bool) -> list[ProvenanceEvent]:
        """The `limit` newest (oldest) indexed events matching `preds` (see `_search`)."""
        self.catch_up()
        return search(self.store, self.shards, preds, limit, newest_first)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every committed log is searchable; False on timeout."""
        if self.worker is None:
            return self.shards.indexed_next_id >= self.store.next_id
        return self.worker.wait(self.store.next_id, timeout)

    def reindex(self, progress: bool = False) -> int:
        """Rebuild the whole index from the event logs; returns the events indexed.

        With `progress`, a tqdm bar on stderr counts events.
        """
        assert self.worker is not None
        tocs = self.store.tocs()
        total = sum(t.count for t in tocs)
        with tqdm(
            total=total,
            unit="ev",
            unit_scale=True,
            desc="reindex",
            disable=not progress,
            file=sys.stderr,
        ) as bar:
            self.worker.rebuild(tocs, bar.update)
        self.worker.index_pending()  # logs that rolled over during the rebuild
        return total

    def drop_dead_shards(self, surviving_logs: list[int]) -> list[str]:
        """Delete the shards that point only into logs that are gone; returns their names."""
        if self.worker is None:
            return []
        alive = sorted(surviving_logs)

        def dead(info) -> bool:
            if info.min_log is None or info.max_log is None:
                return False
            i = bisect_right(alive, info.max_log)
            return i == 0 or alive[i - 1] < info.min_log

        return [s.name for s in self.worker.drop_shards(dead)]

    def stats(self) -> SearchIndexStats:
        shards = self.shards
        worker = self.worker.stats if self.worker is not None else None
        return SearchIndexStats(
            index_bytes=sum(
                dir_bytes(p) for p in (shards.root, shards.root + ".rebuild", shards.root + ".old")
            ),
            index_shards=len(shards.shards()),
            indexed_next_id=shards.indexed_next_id,
            events_not_indexed=sum(t.count for t in self._pending(shards.indexed_next_id)),
            index_lag_seconds=worker.last_lag if worker is not None else None,
            index_errors=worker.errors if worker is not None else None,
        )

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
