"""Candidate spans in time order, across the shards that overlap the asked time range.

Shards are opened lazily: one is opened only when its recorded time bound could still beat
the spans already found, so a search that stops early never touches older shards, and shards
outside the time range are never opened at all. Inside a shard, span documents come from
Tantivy ordered by their max time (newest first) or min time (oldest first), in pages.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Iterator

import tantivy

from ._model import ShardInfo, SpanHit
from ._query import Predicates
from ._shards import ShardSet

log = logging.getLogger("provrepo.indexer")

_FIRST_PAGE = 128
_MAX_PAGE = 16384
_FIELDS = ("log", "first_id", "last_id", "min_time", "max_time", "uniform")


def _is_panic(e: BaseException) -> bool:
    # pyo3's PanicException derives from BaseException; treat it (only it) like an error.
    return type(e).__name__ == "PanicException"


def _shard_hits(
    shards: ShardSet, info: ShardInfo, preds: Predicates, newest_first: bool
) -> Iterator[SpanHit]:
    query = preds.span_query(info.attributes)
    try:
        searcher = shards.searcher(info)
    except (ValueError, OSError) as e:
        log.warning("index shard %s cannot be searched (%s); skipping it", info.name, e)
        return
    order_field = "max_time" if newest_first else "min_time"
    order = tantivy.Order.Desc if newest_first else tantivy.Order.Asc
    offset, page = 0, _FIRST_PAGE
    while True:
        try:
            result = searcher.search(
                query, page, count=False, order_by_field=order_field, offset=offset, order=order
            )
            addrs = [a for _, a in result.hits]
            cols = [searcher.fast_field_values(f, addrs) for f in _FIELDS] if addrs else []
        except BaseException as e:
            if not isinstance(e, (ValueError, OSError)) and not _is_panic(e):
                raise
            log.warning("index shard %s failed a search (%s); skipping it", info.name, e)
            return
        if not addrs:
            return
        for lg, first, last, lo, hi, uni in zip(*cols, strict=True):
            yield SpanHit(lg, first, last + 1, lo, hi, bool(uni), info.name)
        if len(addrs) < page:
            return
        offset += page
        page = min(page * 4, _MAX_PAGE)


def candidate_spans(
    shards: ShardSet,
    preds: Predicates,
    *,
    newest_first: bool = True,
) -> Iterator[SpanHit]:
    """Span documents that may hold matching events, newest (or oldest) first.

    Ordered by max time descending (newest first) or min time ascending: a consumer that has
    enough results can stop as soon as the next span's bound cannot beat them.
    """
    if preds.impossible:
        return
    infos = shards.overlapping(preds.start_ns, preds.end_ns)
    seq = itertools.count()

    def bound(hit_or_info: ShardInfo | SpanHit) -> int:
        t = hit_or_info.max_time_ns if newest_first else hit_or_info.min_time_ns
        assert t is not None  # overlapping() returns only shards with time bounds
        return -t if newest_first else t

    # Heap entries: (bound, seq, shard info, None) until the shard is opened, then
    # (bound, seq, hit, iterator) for its next hit.
    heap: list[tuple[int, int, ShardInfo | SpanHit, Iterator[SpanHit] | None]]
    heap = [(bound(i), next(seq), i, None) for i in infos]
    heapq.heapify(heap)
    while heap:
        _, _, item, it = heapq.heappop(heap)
        if it is None:
            assert isinstance(item, ShardInfo)
            it = _shard_hits(shards, item, preds, newest_first)
        else:
            assert isinstance(item, SpanHit)
            yield item
        nxt = next(it, None)
        if nxt is not None:
            heapq.heappush(heap, (bound(nxt), next(seq), nxt, it))
