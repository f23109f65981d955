"""`ProvenanceRepository`: the embedded repository's public facade.

It owns a directory (one owning process at a time) and only delegates: rollover (and the
driver's journals) to `Rollover`, lookup and export to the store and `Exporter`, search to
the index, age-off to `AgeOff`, lineage, culprits and mining to `repository.lineage`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import msgspec

from journals import (
    MARKER_NAME,
    TRANSPORTS,
    JournalWriter,
    LineageBatch,
    ProvenanceEvent,
    WriterSpec,
    makedirs_durable,
    write_atomic,
)

from . import _search
from ._ageoff import AgeOff, AgeOffReport
from ._config import RepositoryConfig, parse_duration, parse_size
from ._errors import BadInput, NotFound, RepositoryError, check_id
from ._eventlog import LogReader
from ._export import ExportBatch, ExportCursor, Exporter, TableExport
from ._idgen import IdGenerator
from ._indexing import RepositoryIndex
from ._layout import Layout
from ._lock import OwnerLock
from ._receiver import JournalReceiver, ReceiverStats, files_spec
from ._recovery import RecoveryReport, recover
from ._retired import load_retired, retire
from ._rollover import Rollover, RolloverStats, sealed_journals
from ._stats import RepositoryStats, repository_stats
from ._store import LogStore
from ._toc import Toc
from ._verify import VerifyReport, verify
from ._writers import WriterPool
from .lineage import (
    Culprit,
    ForwardIndex,
    LineageIndex,
    MineReport,
    event_data,
    find_culprits,
    mine,
    verify_forward,
    verify_line_marks,
)

log = logging.getLogger("provrepo.repository")


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
        self.recovery: RecoveryReport | None = None
        self._lock = lock
        self._closed = False
        self._store = LogStore(self.layout)
        self._ids = IdGenerator(self.layout)
        self._files = files_spec(self.containers, config.sync, config.journals_per_container)
        self._token = ""  # each container's marker while the receiver runs
        self._receiver: JournalReceiver | None = None
        self._receiver_stats: ReceiverStats | None = None
        self._pool = WriterPool(self._files, len(self.containers) * config.journals_per_container)
        self._rollover = Rollover(
            self.layout, config, self.containers, self._store, self._ids, self._pool
        )
        self._exporter = Exporter(self._store, lambda: self.max_event_id)
        self._forward = ForwardIndex(
            self._store,
            self.layout,
            enabled=config.forward_index,
            writable=not read_only,
            block_size=config.block_size,
            level=config.zstd_level,
            sync=config.sync != "none",
        )
        self._lineage: LineageIndex | None = None
        self._close_listeners: list[Callable[[], object]] = []
        self._index = RepositoryIndex(self.layout, config, self._store, read_only)
        self._ageoff = AgeOff(
            self.layout,
            self._store,
            self._index,
            config.max_storage_time,
            config.max_storage_bytes,
            interval=min(config.rollover_interval, 60.0),
            retire=lambda tocs: retire(self.layout, tocs, config.sync != "none"),
        )

    # -- opening and closing -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        config: RepositoryConfig | None = None,
        *,
        read_only: bool = False,
        start_threads: bool = True,
        create: bool = True,
    ) -> ProvenanceRepository:
        """Create or open the repository at `path` (read-only, or `create=False`: open an
        existing one, NotFound otherwise). `start_threads=False`: no background rollover,
        indexing or age-off (commands that do one thing and close)."""
        path = os.path.abspath(os.fspath(path))
        layout = Layout(path)
        if config is not None and not isinstance(config, RepositoryConfig):
            raise BadInput(f"config must be a RepositoryConfig, got {type(config).__name__}")
        if read_only or not create:
            _check_exists(layout)
        if read_only:
            stored = RepositoryConfig.load(layout.config) if os.path.exists(layout.config) else None
            repo = cls(path, config or stored or RepositoryConfig(), True, None)
            repo.refresh()
            return repo
        if os.path.exists(path) and not os.path.isdir(path):
            raise BadInput(f"{path} exists and is not a directory")
        makedirs_durable(path)
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

    @staticmethod
    def stored_config(path: str | os.PathLike[str]) -> RepositoryConfig | None:
        """The configuration persisted in the repository at `path` (None if it has none),
        without opening it; NotFound if `path` holds no repository."""
        layout = Layout(os.path.abspath(os.fspath(path)))
        _check_exists(layout)
        return RepositoryConfig.load(layout.config) if os.path.exists(layout.config) else None

    def _open_owner(self, start_threads: bool) -> None:
        for d in (self.layout.logs, self.layout.state, *self.containers):
            makedirs_durable(d)
        write_atomic(self.layout.config, json.dumps(self.config.to_json(), indent=2).encode())
        self.recovery = recover(self.layout, self.containers, self._store)
        self._ids.load(self._store.next_id)
        self._rollover.load(self._store.tocs(), load_retired(self.layout))
        if self.config.forward_index:
            self._rollover.add_derived(self._forward.builder)
        if sealed_journals(self.containers):
            self.rollover()  # redo an interrupted rollover before anyone reads
        # Forward lineage indexes: rebuild what a crash or damage left missing or bad.
        self._forward.check_all()
        # Index: recover (re-index past the checkpoint), then index each rollover's log.
        self._index.start(threaded=start_threads)
        self.add_rollover_listener(self._index.on_rollover)
        if start_threads:
            self.add_rollover_listener(self._ageoff.wake)
            self._ageoff.start()
            self._rollover.start()

    def close(self) -> None:
        """Stop the threads, seal driver journals and merge them. Safe to call twice."""
        if self._closed:
            return
        for callback in list(self._close_listeners):
            try:
                callback()
            except Exception:  # closing goes on: the listener's work is its own
                log.exception("a close listener failed")
        self._closed = True
        self.stop_receiver()  # no journal may arrive after the final rollover
        self._rollover.stop()
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------

    def writer_spec(self, transport: str | None = None) -> WriterSpec:
        """What another process (a Spark task) needs to write journals into this repository.

        `transport` (default: the configured one) says where its writers put them: "shared"
        files in the containers; with a receiver running (`start_receiver`), "socket" streams
        to it and "auto" writes files where the process sees the containers, else streams."""
        mode = self.config.transport if transport is None else transport
        if mode not in TRANSPORTS:
            raise BadInput(f"transport must be one of {', '.join(TRANSPORTS)}, got {mode!r}")
        rx = self._receiver
        if rx is None or mode == "shared":
            if mode == "socket":
                raise BadInput("transport 'socket' needs a journal receiver: start_receiver()")
            return self._files
        return msgspec.structs.replace(
            self._files,
            transport=mode,
            receiver=rx.address,
            container_token=self._token,
            secret=rx.secret_hex,
        )

    def start_receiver(
        self, host: str = "127.0.0.1", *, bind_host: str | None = None, port: int | None = None
    ) -> tuple[str, int]:
        """Take journals from processes that cannot reach the containers (Spark executors
        without the shared filesystem): a TCP receiver on `bind_host` (default `host`) and
        `port` (default: the configured `transport_port`, 0 = any), which seals each journal
        into a container before acknowledging it. Clients must hold the secret that
        `writer_spec()` then carries. Returns (host, port) clients connect to; a second call
        returns the running receiver's."""
        self._check_writable()
        if self._receiver is None:
            # Executors in "auto" mode write files only where they see this very token.
            token = secrets.token_hex(16)
            sync = self.config.sync != "none"
            for c in self.containers:
                write_atomic(os.path.join(c, MARKER_NAME), token.encode(), sync)
            self._token = token
            rx = JournalReceiver(
                self._receive_journal,
                host,
                self.config.transport_port if port is None else port,
                bind_host=bind_host,
            )
            rx.start()
            self._receiver = rx
            self._receiver_stats = rx.stats
        return self._receiver.address

    def stop_receiver(self) -> None:
        """Stop the journal receiver (streams under way are dropped); no-op if none runs."""
        rx, self._receiver = self._receiver, None
        if rx is not None:
            rx.stop()
            for c in self.containers:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(c, MARKER_NAME))

    @property
    def receiver_stats(self) -> ReceiverStats | None:
        """What the journal receiver did (the last one to run; None if none ran)."""
        return self._receiver_stats

    def _receive_journal(self, tag: str) -> JournalWriter:
        return JournalWriter.create(self._files, tag)

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
        return self._rollover.run()

    def request_rollover(self) -> None:
        """Ask the rollover thread to merge soon, without waiting (e.g. when a Spark action
        ends). A repository opened without threads merges at the next `rollover()`, or at the
        next lineage lookup (`lineage`, `culprits`, `mine`), which catches up first."""
        self._rollover.request()

    def _catch_up(self) -> None:
        """A lookup right after an action sees its lineage: merge what was requested."""
        if not self.read_only and not self._closed:
            self._rollover.catch_up()

    def add_close_listener(self, callback: Callable[[], object]) -> None:
        """Call `callback()` when `close()` begins, while the repository is still open (e.g.
        to finish work that reads it, such as OpenLineage events waiting for their counts)."""
        self._close_listeners.append(callback)

    def add_rollover_listener(self, callback: Callable[[Toc], object]) -> None:
        """Call `callback(toc)` after each rollover that produced a log (e.g. the indexer)."""
        self._rollover.add_listener(callback)

    @property
    def rollover_stats(self) -> RolloverStats:
        """What the rollovers of this process did (counts, the last error)."""
        return self._rollover.stats

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
        check_id(event_id, "event id")
        return self._store.get(event_id)

    def get_events(self, first_id: int, max_events: int) -> list[ProvenanceEvent]:
        """Up to `max_events` events with id >= first_id, ascending (see `export` for gaps)."""
        return self.export(first_id, max_events).events

    def export(self, first_id: int, max_events: int) -> ExportBatch:
        """Like get_events, but also says which asked-for ids were skipped (aged off)."""
        return self._exporter.export(first_id, max_events)

    def cursor(self, name: str = "default") -> ExportCursor:
        """A named, persistent export cursor (exactly-once when committed after use)."""
        return ExportCursor(self._exporter, self.layout.cursors, name)

    def export_parquet(
        self,
        out: str | os.PathLike[str],
        *,
        run: str | None = None,
        from_id: int | None = None,
        progress: bool = False,
        chunk_events: int | None = None,
    ) -> TableExport:
        """Export events and lineage edges as Parquet tables under `out` (`events/` and
        `edges/`, Hive-partitioned by run_id; DuckDB, Spark and pandas read them), from `out`'s
        export cursor (or `from_id`, or the first id) to the newest event; `run`: that run
        only. Written atomically and resumable: a killed export goes on where it stopped, and
        a later one into the same `out` exports what came since. `progress`: a tqdm bar."""
        return self._export_tables(out, "parquet", run, from_id, progress, chunk_events)

    def export_jsonl(
        self,
        out: str | os.PathLike[str],
        *,
        run: str | None = None,
        from_id: int | None = None,
        progress: bool = False,
        chunk_events: int | None = None,
    ) -> TableExport:
        """As `export_parquet`, in JSON lines (one object per row, the run id in each)."""
        return self._export_tables(out, "jsonl", run, from_id, progress, chunk_events)

    def _export_tables(
        self,
        out: str | os.PathLike[str],
        fmt: str,
        run: str | None,
        from_id: int | None,
        progress: bool,
        chunk_events: int | None,
    ) -> TableExport:
        from ._tableexport import CHUNK_EVENTS, export_tables  # pyarrow: loaded when used

        return export_tables(
            self._store,
            out,
            fmt,
            run=run,
            from_id=from_id,
            progress=progress,
            chunk_events=CHUNK_EVENTS if chunk_events is None else chunk_events,
        )

    def logs(self) -> list[LogReader]:
        """The committed event logs, oldest first."""
        return self._store.readers()

    # -- lineage (see repository.lineage) ----------------------------------------------------

    @property
    def lineage(self) -> LineageIndex:
        """Record-level lineage over the stored events (runs, hops, raw data)."""
        if self._lineage is None:
            self._lineage = LineageIndex(
                self._store, self._catch_up, self._forward, self.config.lineage_cache_size
            )
        return self._lineage

    def culprits(self, run: str | None = None, with_data: bool = False) -> list[Culprit]:
        """Input records whose processing raised (FAIL events), once per record and error."""
        self._catch_up()
        return find_culprits(self._store, self._index, self.lineage, run, with_data)

    def event_data(self, event: ProvenanceEvent) -> Any:
        """The raw data of an event's record (None when none was captured): the input line
        re-read by offset, or the captured value, as traces and culprits show it."""
        return event_data(self.lineage, event)

    def mine(
        self,
        run: str,
        bad_outputs: Sequence[int] | None = None,
        good_outputs: Sequence[int] | None = None,
        *,
        threshold: float = 3.5,
    ) -> MineReport:
        """Newt's `mine`: actor instances of `run` ranked by anomalous output multiplicity and
        selectivity; winnowed to the backward trace of `bad_outputs` (record ids), and ranked
        against `good_outputs`' lineage when given (see `repository.lineage._mine`)."""
        return mine(self.lineage, run, bad_outputs, good_outputs, threshold=threshold)

    # -- search and age-off (see _search.py, _indexing.py, _ageoff.py) ------------------------

    def search(
        self,
        start: Any = None,
        end: Any = None,
        event_types: str | Iterable[str] | None = None,
        components: str | Iterable[str] | None = None,
        runs: str | Iterable[str] | None = None,
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
        return self._index.search(preds, limit, newest_first)

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until every committed log is searchable (index lag over); False on timeout."""
        return self._index.wait(timeout)

    def reindex(self, progress: bool = False) -> int:
        """Rebuild every index from the event logs (owner only): the search index and the
        forward lineage indexes; returns the events indexed."""
        self._check_writable()
        n = self._index.reindex(progress=progress)
        if self.config.forward_index:
            self._forward.rebuild_all()
        return n

    def age_off(
        self, max_age: str | float | None = None, max_bytes: str | int | None = None
    ) -> AgeOffReport:
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

    # -- checking and stats ------------------------------------------------------------------

    def verify(self) -> VerifyReport:
        """Check every frame, block and table of contents, every forward lineage index and
        every line marks file; report problems, change nothing."""
        report = verify(self.layout, self.containers)
        problems, files = verify_forward(self.layout, expected=self.config.forward_index)
        mark_problems, marks = verify_line_marks(self.layout.scans)
        return dataclasses.replace(
            report,
            problems=report.problems + problems + mark_problems,
            forward_files=files,
            line_marks=marks,
        )

    def stats(self) -> RepositoryStats:
        """Counts and sizes: events, id range, files, bytes, journals pending, the index."""
        return repository_stats(
            self.layout, self.containers, self._store, self._index, self.max_event_id, self._owner()
        )

    def _owner(self) -> str | None:
        if not self.read_only:
            return f"pid {os.getpid()} (this process)"
        lock = OwnerLock(self.layout.lock)
        return lock.describe_owner() if lock.is_held_by_other() else None

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "owner"
        return f"ProvenanceRepository({self.path!r}, {mode}, max_event_id={self.max_event_id})"


def _check_exists(layout: Layout) -> None:
    if not os.path.isdir(layout.logs) and not os.path.exists(layout.config):
        raise NotFound(f"no provenance repository at {layout.root}")
