"""`ProvenanceRepository`: the embedded repository's public facade.

It owns a directory (one owning process at a time), merges sealed journals into event logs on a
timer, on demand and when other processes seal journals, and serves lookup, export and stats.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from journals import (
    JournalError,
    JournalWriter,
    LineageBatch,
    ProvenanceEvent,
    WriterSpec,
    gc_paused,
)

from . import _search
from ._ageoff import AgeOff, AgeOffReport
from ._config import RepositoryConfig, parse_duration, parse_size
from ._culprits import Culprit, find_culprits
from ._errors import BadInput, NotFound, RepositoryError
from ._eventlog import LogReader
from ._export import ExportBatch, ExportCursor
from ._idgen import IdGenerator
from ._indexing import RepositoryIndex
from ._layout import Layout, write_atomic
from ._lineage import LineageIndex
from ._lock import OwnerLock
from ._mine import MineReport, mine
from ._recovery import RecoveryReport, recover, remove_abandoned
from ._rollover import (
    AttemptRegistry,
    RolloverError,
    merge,
    open_journals,
    retire_journals,
    sealed_journals,
)
from ._store import LogStore
from ._watch import JournalWatcher

log = logging.getLogger("provrepo.repository")


@dataclass
class RolloverStats:
    """What the last rollovers did (for stats and tests)."""

    rollovers: int = 0
    events_merged: int = 0
    journals_merged: int = 0
    records_skipped: int = 0  # duplicate task attempts dropped
    journal_problems: int = 0
    last_error: str | None = None
    last_seconds: float = 0.0


class _WriterPool:
    """Driver-side journals: containers x journals_per_container writers, each with a lock."""

    def __init__(self, spec: WriterSpec, size: int) -> None:
        self._spec = spec
        self._slots: list[list] = [[threading.Lock(), None] for _ in range(size)]
        self._rr = itertools.count()

    def append(self, items: list[ProvenanceEvent] | LineageBatch) -> None:
        lock, _ = slot = self._slots[next(self._rr) % len(self._slots)]
        with lock:
            if slot[1] is None:
                slot[1] = JournalWriter.open(self._spec, tag="driver")
            writer: JournalWriter = slot[1]
            try:
                writer.append(items)
            except JournalError:
                # A failed append may leave a partial frame: never seal this journal.
                writer.abort()
                slot[1] = None
                raise

    def seal_all(self) -> None:
        for slot in self._slots:
            with slot[0]:
                writer = slot[1]
                if writer is not None:
                    slot[1] = None
                    if not writer.frames:
                        writer.abort()
                        continue
                    try:
                        writer.seal()
                    except JournalError:
                        writer.abort()  # it can never be sealed now: free its space (ENOSPC)
                        raise

    def abort_all(self) -> None:
        for slot in self._slots:
            with slot[0]:
                if slot[1] is not None:
                    slot[1].abort()
                    slot[1] = None


class ProvenanceRepository:
    """A persistent provenance repository in one directory.

    Open with `ProvenanceRepository.open(path, config=None)`; use as a context manager or call
    `close()`. Read-only opens (`read_only=True`) take no lock, start no threads and change
    nothing, so CLI reads work beside a running owner.
    """

    def __init__(
        self,
        path: str,
        config: RepositoryConfig,
        read_only: bool,
        lock: OwnerLock | None,
    ) -> None:
        self.path = path
        self.config = config
        self.read_only = read_only
        self.layout = Layout(path)
        self.containers = config.container_paths(path)
        self._lock = lock
        self._store = LogStore(self.layout)
        self._ids = IdGenerator(self.layout)
        self._registry = AttemptRegistry()
        self._rollover_lock = threading.Lock()
        # Rollovers asked for (request_rollover) and served; lookups catch up on the difference.
        self._requests_lock = threading.Lock()
        self._requested = 0
        self._served = 0
        self._pool = _WriterPool(
            self.writer_spec(), len(self.containers) * config.journals_per_container
        )
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: JournalWatcher | None = None
        self._listeners: list = []
        self.rollover_stats = RolloverStats()
        self.recovery: RecoveryReport | None = None
        self._closed = False
        self._lineage: LineageIndex | None = None
        self._index = RepositoryIndex(self.layout, config, self._store, read_only)
        self._ageoff = AgeOff(
            self.layout,
            self._store,
            self._index,
            config.max_storage_time,
            config.max_storage_bytes,
            interval=min(config.rollover_interval, 60.0),
        )

    # -- opening and closing -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str,
        config: RepositoryConfig | None = None,
        *,
        read_only: bool = False,
        start_threads: bool = True,
    ) -> ProvenanceRepository:
        """Create or open the repository at `path` (read-only: open an existing one)."""
        path = os.path.abspath(os.fspath(path))
        layout = Layout(path)
        if config is not None and not isinstance(config, RepositoryConfig):
            raise BadInput(f"config must be a RepositoryConfig, got {type(config).__name__}")
        if read_only:
            if not os.path.isdir(layout.logs) and not os.path.exists(layout.config):
                raise NotFound(f"no provenance repository at {path}")
            stored = RepositoryConfig.load(layout.config) if os.path.exists(layout.config) else None
            repo = cls(path, config or stored or RepositoryConfig(), True, None)
            repo._store.scan()
            repo._ids.load(repo._store.next_id)
            return repo
        if os.path.exists(path) and not os.path.isdir(path):
            raise BadInput(f"{path} exists and is not a directory")
        os.makedirs(path, exist_ok=True)
        lock = OwnerLock(layout.lock)
        lock.acquire()
        try:
            if config is None:
                config = (
                    RepositoryConfig.load(layout.config)
                    if os.path.exists(layout.config)
                    else RepositoryConfig()
                )
            repo = cls(path, config, False, lock)
            repo._open_owner(start_threads)
            return repo
        except BaseException:
            lock.release()
            raise

    def _open_owner(self, start_threads: bool) -> None:
        for d in (self.layout.logs, self.layout.state, *self.containers):
            os.makedirs(d, exist_ok=True)
        write_atomic(self.layout.config, json.dumps(self.config.to_json(), indent=2).encode())
        self.recovery = recover(self.layout, self.containers, self._store)
        self._ids.load(self._store.next_id)
        self._registry.load(self._store.tocs())
        if sealed_journals(self.containers):
            self.rollover()  # redo an interrupted rollover before anyone reads
        # Index: recover (re-index past the checkpoint), then index each rollover's log.
        self._index.start(threaded=start_threads)
        self.add_rollover_listener(self._index.on_rollover)
        if start_threads:
            self.add_rollover_listener(self._ageoff.wake)
            self._ageoff.start()
            self._thread = threading.Thread(
                target=self._rollover_loop, name="provrepo-rollover", daemon=True
            )
            self._thread.start()
            self._watcher = JournalWatcher(self.containers, self._wake.set)
            self._watcher.start()

    def close(self) -> None:
        """Stop the threads, seal driver journals and merge them. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            self._watcher.stop()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._ageoff.stop()
        try:
            if not self.read_only:
                try:
                    self.rollover()
                except RepositoryError as e:
                    log.error("final rollover failed; journals stay for the next open: %s", e)
                    self._pool.abort_all()
        finally:
            try:
                self._index.close()  # indexes the final rollover's log, releases the writer
            except Exception:
                log.exception("closing the search index failed; the next open re-indexes")
            for r in self._store.readers():
                r.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> ProvenanceRepository:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def writer_spec(self) -> WriterSpec:
        """What another process needs to write journals into this repository."""
        return WriterSpec(
            containers=list(self.containers),
            sync=self.config.sync,
            journals_per_container=self.config.journals_per_container,
        )

    def register_events(self, events: Iterable[ProvenanceEvent] | LineageBatch) -> int:
        """Write driver-side events (or one lineage batch); they get ids at the next rollover."""
        self._check_writable()
        items = events if isinstance(events, LineageBatch) else list(events)
        if not isinstance(items, LineageBatch):
            for ev in items:
                if not isinstance(ev, ProvenanceEvent):
                    raise BadInput(
                        f"register_events takes ProvenanceEvent, got {type(ev).__name__}"
                    )
        if len(items) == 0:
            return 0
        self._pool.append(items)
        return len(items)

    def rollover(self) -> int:
        """Merge every sealed journal into a new event log now; returns the events merged."""
        self._check_writable(allow_closing=True)
        with self._rollover_lock:
            started = time.perf_counter()
            asked = self._requested  # everything asked for so far is sealed before the listing
            self._pool.seal_all()
            journals = sealed_journals(self.containers)
            if not journals:
                self._served = max(self._served, asked)
                return 0
            first_id = self._ids.next_id
            try:
                with gc_paused():
                    result = merge(self.layout, self.config, journals, first_id, self._registry)
            except RolloverError as e:
                self.rollover_stats.last_error = str(e)
                raise
            toc = result.toc
            if toc is not None:
                self._store.add(LogReader(self.layout.log_path(toc.first_id), toc))
                try:
                    self._ids.advance(toc.next_id, sync=self.config.sync != "none")
                except OSError as e:
                    # The log is committed: its journals must still be retired, or the next
                    # rollover would merge them twice. Recovery re-derives the mark at open.
                    log.error("cannot persist the event id high-water mark: %s", e)
            retire_journals(self.layout, journals, result.damaged, self.config.sync != "none")
            st = self.rollover_stats
            st.rollovers += 1
            st.events_merged += toc.count if toc else 0
            st.journals_merged += len(journals)
            st.records_skipped += result.skipped_records
            st.journal_problems += len(result.problems)
            st.last_error = None
            st.last_seconds = time.perf_counter() - started
            self._served = max(self._served, asked)
        if toc is not None:
            for listener in list(self._listeners):
                try:
                    listener(toc)
                except Exception:
                    log.exception("rollover listener failed")
        return toc.count if toc else 0

    def add_rollover_listener(self, callback) -> None:
        """Call `callback(toc)` after each rollover that produced a log (e.g. the indexer)."""
        self._listeners.append(callback)

    def _rollover_loop(self) -> None:
        interval = self.config.rollover_interval
        backoff = 0.0
        while not self._stop.is_set():
            woke = self._wake.wait(timeout=max(interval, backoff))
            if self._stop.is_set():
                break
            if woke:
                # A journal was sealed elsewhere: wait a moment so a burst merges as one log.
                self._stop.wait(self.config.rollover_debounce)
                self._wake.clear()
            try:
                self.rollover()
                remove_abandoned(self.containers)
                backoff = 0.0
            except Exception as e:
                backoff = min(max(1.0, backoff * 2), 60.0)
                log.error("rollover failed (retrying in %.0fs): %s", backoff, e)

    def _check_writable(self, allow_closing: bool = False) -> None:
        if self.read_only:
            raise BadInput("repository is open read-only")
        if self._closed and not allow_closing:
            raise BadInput("repository is closed")

    # -- reading -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Pick up logs committed or aged off by another process (read-only opens)."""
        self._store.scan()
        self._ids.load(self._store.next_id)

    @property
    def max_event_id(self) -> int:
        """The highest event id ever assigned (0 if none)."""
        return max(self._ids.next_id, self._store.next_id, 1) - 1

    @property
    def min_event_id(self) -> int | None:
        """The lowest event id still stored (None if the repository holds no events)."""
        return self._store.first_id

    def get_event(self, event_id: int) -> ProvenanceEvent | None:
        """The event with this id, or None if it does not exist (never assigned, or aged off)."""
        _check_id(event_id, "event id")
        return self._store.get(event_id)

    def get_events(self, first_id: int, max_events: int) -> list[ProvenanceEvent]:
        """Up to `max_events` events with id >= first_id, ascending (see `export` for gaps)."""
        return self.export(first_id, max_events).events

    def export(self, first_id: int, max_events: int) -> ExportBatch:
        """Like get_events, but also says which asked-for ids were skipped (aged off)."""
        _check_id(first_id, "first id", allow_zero=True)
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0:
            raise BadInput(f"max_events must be a non-negative integer, got {max_events!r}")
        first_id = max(first_id, 1)
        events: list[ProvenanceEvent] = []
        skipped: list[tuple[int, int]] = []
        expect = first_id
        if max_events:
            with gc_paused():
                self._collect(first_id, max_events, events, skipped)
            if events:
                expect = events[-1].event_id + 1
        if not events:
            end = max(first_id, min(self._store.next_id or first_id, self.max_event_id + 1))
            if end > first_id:
                skipped.append((first_id, end))
            expect = max(expect, end)
        return ExportBatch(first_id, events, expect, skipped)

    def _collect(self, first_id: int, max_events: int, events: list, skipped: list) -> None:
        expect = first_id
        for chunk in self._store.chunks_from(first_id, max_events - len(events)):
            if chunk[0].event_id > expect:
                skipped.append((expect, chunk[0].event_id))
            room = max_events - len(events)
            events.extend(chunk if len(chunk) <= room else chunk[:room])
            expect = events[-1].event_id + 1
            if len(events) >= max_events:
                return

    def cursor(self, name: str = "default") -> ExportCursor:
        """A named, persistent export cursor (exactly-once when committed after use)."""
        return ExportCursor(self, name)

    def logs(self) -> list[LogReader]:
        """The committed event logs, oldest first."""
        return self._store.readers()

    # -- lineage -----------------------------------------------------------------------------

    @property
    def lineage(self) -> LineageIndex:
        """Record-level lineage over the stored events (runs, hops, raw data)."""
        if self._lineage is None:
            self._lineage = LineageIndex(self._store, self._catch_up)
        return self._lineage

    def culprits(self, run: str | None = None, with_data: bool = False) -> list[Culprit]:
        """Input records whose processing raised (FAIL events), once per record and error."""
        self._catch_up()
        return find_culprits(self, run, with_data)

    def request_rollover(self) -> None:
        """Ask the rollover thread to merge soon, without waiting (e.g. when a Spark action
        ends). A repository opened without threads merges at the next `rollover()`, or at the
        next lineage lookup (`lineage`, `culprits`, `mine`), which catches up first."""
        with self._requests_lock:
            self._requested += 1
        self._wake.set()

    def _catch_up(self) -> None:
        """Merge now if a rollover was asked for and not done yet (a lookup right after an
        action sees its lineage); if the rollover thread is merging, wait for it."""
        if not self.read_only and not self._closed and self._served < self._requested:
            self.rollover()

    def mine(
        self, run: str, bad_outputs=None, good_outputs=None, *, threshold: float = 3.5
    ) -> MineReport:
        """Newt's `mine`: actor instances of `run` ranked by anomalous output multiplicity and
        selectivity; winnowed to the backward trace of `bad_outputs` (record ids), and ranked
        against `good_outputs`' lineage when given (see `repository._mine`)."""
        return mine(self.lineage, run, bad_outputs, good_outputs, threshold=threshold)

    # -- search and age-off (see _search.py, _indexing.py, _ageoff.py) ------------------------

    def search(
        self,
        start=None,
        end=None,
        event_types=None,
        components=None,
        runs=None,
        attributes: dict[str, str] | None = None,
        query: str | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[ProvenanceEvent]:
        """Events matching every given predicate exactly, ordered by event time.

        start / end: event time range [start, end): int ns since the epoch, datetime, or a
        string (ISO-8601, `now`, relative `-15m`, `-2h`). event_types, components (component
        ids), runs: one string or several (any of them). attributes: {name: value}, all must
        match. query: Tantivy query syntax over type, run, component, component_type,
        partition, attempt, time, id and `attrs.<indexed attribute>`. Returns the `limit`
        newest events (oldest with newest_first=False). Only indexed logs are searched: see
        `wait_for_index`. Raises BadInput on malformed arguments.
        """
        preds = _search.build_predicates(
            start=start,
            end=end,
            event_types=event_types,
            components=components,
            runs=runs,
            attributes=attributes,
            query=query,
            indexed_attributes=self.config.indexed_attributes,
        )
        limit = _search.check_limit(limit)
        if not isinstance(newest_first, bool):
            raise BadInput(f"newest_first must be True or False, got {newest_first!r}")
        self._index.catch_up()
        return _search.search(self._store, self._index.shards, preds, limit, newest_first)

    def _indexed_next_id(self) -> int:
        """Events below this id are searchable (the index checkpoint, as of now)."""
        self._index.catch_up()
        return self._index.shards.indexed_next_id

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until every committed log is searchable (index lag over); False on timeout."""
        return self._index.wait(timeout)

    def reindex(self, progress: bool = False) -> int:
        """Rebuild every index from the event logs (owner only); returns the events indexed."""
        self._check_writable()
        return self._index.reindex(progress=progress)

    def age_off(self, max_age=None, max_bytes=None) -> AgeOffReport:
        """One age-off pass now, by `max_age` (seconds or '7d') and `max_bytes` ('10GiB'),
        defaulting to the configured limits; returns what it deleted (owner only)."""
        self._check_writable()
        age = None if max_age is None else parse_duration(max_age, "max_age")
        if age is not None and age <= 0:
            raise BadInput("max_age: must be positive")
        size = None if max_bytes is None else parse_size(max_bytes, "max_bytes")
        if size is not None and size <= 0:
            raise BadInput("max_bytes: must be positive")
        return self._ageoff.run(age, size)

    # -- stats -------------------------------------------------------------------------------

    def stats(self) -> dict:
        """Counts and sizes: events, id range, files, bytes, journals pending."""
        readers = self._store.readers()
        log_bytes = toc_bytes = 0
        for r in readers:
            for p, add in ((r.path, "log"), (r.path[: -len(".prov")] + ".toc", "toc")):
                try:
                    size = os.path.getsize(p)
                except FileNotFoundError:
                    continue
                if add == "log":
                    log_bytes += size
                else:
                    toc_bytes += size
        sealed = sealed_journals(self.containers)
        opened = open_journals(self.containers)
        return {
            "path": self.path,
            "events": sum(r.toc.count for r in readers),
            "rich_events": sum(r.toc.rich_events for r in readers),
            "lineage_records": sum(r.toc.count - r.toc.rich_events for r in readers),
            "first_event_id": self._store.first_id,
            "max_event_id": self.max_event_id,
            "logs": len(readers),
            "blocks": sum(len(r.toc.block_offsets) for r in readers),
            "log_bytes": log_bytes,
            "toc_bytes": toc_bytes,
            "journals_pending": len(sealed),
            "journal_bytes_pending": _sizes(sealed),
            "journals_open": len(opened),
            "quarantined_journals": len(_listdir(self.layout.quarantine)),
            "oldest_event_time_ns": min((r.toc.min_time_ns for r in readers), default=None),
            "newest_event_time_ns": max((r.toc.max_time_ns for r in readers), default=None),
            **self._index.stats(),
            "owner": self._owner(),
        }

    def _owner(self) -> str | None:
        if not self.read_only:
            return f"pid {os.getpid()} (this process)"
        lock = OwnerLock(self.layout.lock)
        return lock.describe_owner() if lock.is_held_by_other() else None

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "owner"
        return f"ProvenanceRepository({self.path!r}, {mode}, max_event_id={self.max_event_id})"


def _check_id(value: int, what: str, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise BadInput(f"{what} must be positive, got {value}")


def _sizes(paths: list[str]) -> int:
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except FileNotFoundError:
            continue
    return total


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except FileNotFoundError:
        return []
