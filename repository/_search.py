"""Time-range search: candidate spans from the index, events from the logs, exact filter.

`search()` walks candidate spans newest (or oldest) first, reads their events from the logs,
keeps the events that match every predicate exactly, and stops as soon as the next span
cannot beat the `limit` best events found. The index only narrows where to look: every
result is read from, and checked against, the event log.
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
import re
import time
from collections.abc import Iterable, Mapping

from indexer import Predicates, QueryError, ShardSet, SpanHit, UserQuery, candidate_spans
from journals import EventType, ProvenanceEvent, gc_paused

from ._blocks import BlockError
from ._config import parse_duration
from ._errors import BadInput
from ._store import LogStore

log = logging.getLogger("provrepo.repository")

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_RELATIVE = re.compile(r"^\s*(?:now\s*)?-\s*(.+)$", re.IGNORECASE)
_TYPES = {t.value for t in EventType}


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def parse_time(value, what: str = "time", now_ns: int | None = None) -> int | None:
    """Nanoseconds since the epoch from: None; an int (already ns); a datetime (naive = local
    time); or a string: ISO-8601 (`2025-06-01T12:00:00Z`, `2025-06-01`), `now`, a relative
    time (`-15m`, `-2h`, `now-7d`), or an integer of ns. Clamped to the int64 range an index
    holds. Raises BadInput on anything else."""
    ns = _parse_time(value, what, now_ns)
    return None if ns is None else min(max(ns, _I64_MIN), _I64_MAX)


def _parse_time(value, what: str, now_ns: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadInput(f"{what}: expected a time, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        return _datetime_ns(value)
    if not isinstance(value, str):
        raise BadInput(f"{what}: expected a time, got {type(value).__name__} {value!r}")
    text = value.strip()
    now = time.time_ns() if now_ns is None else now_ns
    if text.lower() == "now":
        return now
    if re.fullmatch(r"\d+", text):
        return int(text)
    m = _RELATIVE.match(text)
    if m:
        try:
            seconds = parse_duration(m.group(1), what)
        except BadInput:
            seconds = None
        if seconds is not None:
            return now - round(seconds * 1e9)
    iso = text[:-1] + "+00:00" if text[-1:] in "zZ" else text
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        raise BadInput(
            f"{what}: {value!r} is not a time (use ISO-8601 like 2025-06-01T12:00:00Z, "
            "or relative like -15m, -2h, -7d)"
        ) from None
    return _datetime_ns(when)


def _datetime_ns(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.astimezone()  # naive: local time, as `date` would read it
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _names(value, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    try:
        items = list(items)
    except TypeError:
        raise BadInput(f"{what}: expected a string or a list of strings, got {value!r}") from None
    for x in items:
        if not isinstance(x, str):
            raise BadInput(f"{what}: expected strings, got {type(x).__name__} {x!r}")
    return frozenset(items)


def build_predicates(
    *,
    start=None,
    end=None,
    event_types=None,
    components=None,
    runs=None,
    attributes: Mapping[str, str] | None = None,
    query: str | None = None,
    indexed_attributes: Iterable[str] = (),
) -> Predicates:
    """Validate search arguments into `Predicates`; BadInput on anything malformed."""
    now = time.time_ns()
    start_ns = parse_time(start, "start", now)
    end_ns = parse_time(end, "end", now)
    types = _names(event_types, "event_types")
    if types is not None:
        bad = sorted(types - _TYPES)
        if bad:
            raise BadInput(
                f"event_types: unknown event type(s) {', '.join(bad)} "
                f"(known: {', '.join(sorted(_TYPES))})"
            )
    if attributes is not None:
        if not isinstance(attributes, Mapping):
            raise BadInput(f"attributes: expected a mapping of name to value, got {attributes!r}")
        for k, v in attributes.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise BadInput(f"attributes: names and values must be strings, got {k!r}: {v!r}")
    parsed = None
    if query is not None:
        try:
            parsed = UserQuery(query, indexed_attributes)
        except QueryError as e:
            raise BadInput(str(e)) from None
    return Predicates(
        start_ns=start_ns,
        end_ns=end_ns,
        event_types=types,
        runs=_names(runs, "runs"),
        components=_names(components, "components"),
        attributes=attributes,
        query=parsed,
    )


def check_limit(limit) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise BadInput(f"limit must be a non-negative integer, got {limit!r}")
    return limit


def search(
    store: LogStore,
    shards: ShardSet,
    preds: Predicates,
    limit: int,
    newest_first: bool = True,
) -> list[ProvenanceEvent]:
    """The `limit` newest (or oldest) events matching `preds`, in that order."""
    if limit <= 0 or preds.impossible:  # Tantivy panics on limit 0: never pass it on
        return []
    best: list[tuple[int, int, ProvenanceEvent]] = []  # min-heap of the `limit` best so far
    with gc_paused():  # decoding allocates many small objects and no cycles
        _collect(store, shards, preds, limit, newest_first, best)
    best.sort(key=lambda k: k[:2], reverse=True)
    return [k[2] for k in best]


def _collect(
    store: LogStore,
    shards: ShardSet,
    preds: Predicates,
    limit: int,
    newest_first: bool,
    best: list[tuple[int, int, ProvenanceEvent]],
) -> None:
    sign = 1 if newest_first else -1
    for hit in candidate_spans(shards, preds, newest_first=newest_first):
        if len(best) >= limit:
            worst = sign * best[0][0]
            if (hit.max_time_ns < worst) if newest_first else (hit.min_time_ns > worst):
                break  # no event of this span (or any later one) can beat what we have
        for ev in _span_matches(store, hit, preds, limit, newest_first):
            key = (sign * ev.event_time_ns, sign * ev.event_id, ev)
            if len(best) < limit:
                heapq.heappush(best, key)
            elif key[:2] > best[0][:2]:
                heapq.heapreplace(best, key)


def _span_matches(
    store: LogStore, hit: SpanHit, preds: Predicates, limit: int, newest_first: bool
) -> list[ProvenanceEvent]:
    reader = store.reader_for(hit.first_id)
    if reader is None or reader.first_id != hit.log_id:
        return []  # aged off
    if hit.uniform and not preds.uses_ids:
        # Every event of the span has the same fields: one decides for all, and only the
        # `limit` events nearest the wanted end can make it into the results.
        if newest_first:
            lo, hi = max(hit.first_id, hit.stop_id - limit), hit.stop_id
        else:
            lo, hi = hit.first_id, min(hit.stop_id, hit.first_id + limit)
        events = _read(store, reader, lo, hi)
        return events if events and preds.matches(events[0]) else []
    return preds.filter(_read(store, reader, hit.first_id, hit.stop_id))


def _read(store: LogStore, reader, lo: int, hi: int) -> list[ProvenanceEvent]:
    out: list[ProvenanceEvent] = []
    try:
        for chunk in reader.chunks(lo, hi, store.block):
            out.extend(chunk)
    except FileNotFoundError:
        log.info("event log %s vanished (aged off) during a search; skipping it", reader.path)
        store.remove(reader.first_id)
    except BlockError as e:
        log.warning("search skipped a damaged block: %s", e)
    return out
