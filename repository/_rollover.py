"""Rollover: merge sealed journals into one event log, then delete them.

Order of durability (README Guarantees 1 and 2): the log and its toc are fsynced and renamed
into place, the id high-water mark is raised, and only then are the journals deleted. The toc
names the journals it holds, so recovery can finish an interrupted deletion instead of merging
them twice.
Ids are assigned in a deterministic order (journals by name, frames in file order), so a rollover
redone from the same journals assigns the same ids.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from journals import (
    OPEN_SUFFIX,
    SEALED_SUFFIX,
    BackgroundLoop,
    EventsPayload,
    JournalProblem,
    JournalReader,
    LineageBatch,
    fsync_dir,
    gc_paused,
    host_tag,
    listdir,
    makedirs_durable,
)

from ._config import RepositoryConfig
from ._errors import RepositoryError
from ._eventlog import LogReader, LogWriter
from ._idgen import IdGenerator
from ._layout import Layout
from ._store import LogStore
from ._toc import Toc
from ._watch import JournalWatcher
from ._writers import WriterPool

log = logging.getLogger("provrepo.repository")


class RolloverError(RepositoryError):
    """A rollover could not complete; its journals are untouched and it will be retried."""


class AttemptRegistry:
    """Which task attempt's lineage won for each (run, capture point, partition).

    Spark retries and speculative attempts can each seal a complete journal; the first attempt
    merged for a key wins and every other attempt's batches for that key are dropped, in this
    rollover and in later ones (README Guarantee 6).
    """

    def __init__(self) -> None:
        self._winners: dict[tuple[str, str, int], int] = {}

    def load(self, tocs: list[Toc]) -> None:
        for toc in tocs:
            for b in toc.batches:
                self._winners.setdefault((b.run_id, b.component_id, b.partition), b.attempt)

    def keep(self, batch: LineageBatch, pending: dict[tuple[str, str, int], int]) -> bool:
        key = (batch.run_id, batch.component_id, batch.partition)
        winner = self._winners.get(key, pending.get(key))
        if winner is None:
            pending[key] = batch.attempt
            return True
        return winner == batch.attempt

    def commit(self, pending: dict[tuple[str, str, int], int]) -> None:
        self._winners.update(pending)


@dataclass
class MergeResult:
    toc: Toc | None
    journals: list[str]
    problems: list[JournalProblem] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    skipped_records: int = 0


def sealed_journals(containers: list[str]) -> list[str]:
    """Paths of every sealed journal, in merge order (by name: creation time first)."""
    found: list[tuple[str, str]] = []
    for c in containers:
        found.extend((n, os.path.join(c, n)) for n in listdir(c) if n.endswith(SEALED_SUFFIX))
    found.sort()
    return [p for _, p in found]


def open_journals(containers: list[str]) -> list[str]:
    """Paths of journals still being written (or abandoned by a writer that died)."""
    out: list[str] = []
    for c in containers:
        out.extend(os.path.join(c, n) for n in listdir(c) if n.endswith(OPEN_SUFFIX))
    return sorted(out)


class DerivedBuilder(Protocol):
    """Builds a file derived from one event log while rollover writes the log (e.g. the
    lineage forward index). Derived files are rebuildable: a builder that fails is dropped
    with a logged error and never fails the rollover."""

    def add_batch(self, batch: LineageBatch, first_event_id: int) -> None: ...

    def commit(self, toc: Toc) -> None:
        """Called once the log is committed: put the derived file in place."""

    def discard(self) -> None: ...


DerivedFactory = Callable[[int], DerivedBuilder]  # the log's first event id -> a builder


def merge(
    layout: Layout,
    config: RepositoryConfig,
    journals: list[str],
    first_id: int,
    registry: AttemptRegistry,
    derived: Sequence[DerivedFactory] = (),
) -> MergeResult:
    """Merge `journals` into `<first_id>.prov` + `.toc` (committed, fsynced), and the files
    derived from it (after the log: the log's rename is the commit point, and a derived file
    missing after a crash is rebuilt). Nothing is deleted."""
    names = [os.path.basename(p) for p in journals]
    try:
        writer = LogWriter(
            layout,
            first_id,
            names,
            config.block_size,
            config.zstd_level,
            config.compression_threads,
        )
    except OSError as e:
        raise RolloverError(
            f"cannot start event log {layout.log_path(first_id)}: {e.strerror or e}"
        ) from e
    result = MergeResult(None, journals)
    pending: dict[tuple[str, str, int], int] = {}
    builders = _start_derived(derived, first_id)
    try:
        for path in journals:
            reader = JournalReader(path)
            for frame in reader:
                p = frame.payload
                if isinstance(p, EventsPayload):
                    writer.add_events(p)
                elif registry.keep(p, pending):
                    first = writer.next_id
                    writer.add_batch(p)
                    builders = _feed_derived(builders, p, first)
                else:
                    result.skipped_records += len(p)
            if reader.problems:
                result.problems.extend(reader.problems)
                result.damaged.append(path)
        if writer.count:
            result.toc = writer.commit(result.skipped_records)
        else:
            writer.discard()
    except OSError as e:
        writer.discard()
        _discard_derived(builders)
        # Name the file: on a full disk the operator needs to know which one.
        where = layout.log_path(first_id) + (f" (at {e.filename})" if e.filename else "")
        raise RolloverError(f"rollover into {where} failed: {e.strerror or e}") from e
    except BaseException:
        writer.discard()
        _discard_derived(builders)
        raise
    if result.toc is None:
        _discard_derived(builders)
    else:
        for b in builders:
            try:
                b.commit(result.toc)
            except Exception as e:  # derived: rebuilt from the log when next needed
                log.error("cannot write a file derived from log %d: %s", first_id, e)
                b.discard()
    registry.commit(pending)
    return result


def _start_derived(factories: Sequence[DerivedFactory], first_id: int) -> list[DerivedBuilder]:
    builders = []
    for make in factories:
        try:
            builders.append(make(first_id))
        except Exception as e:
            log.error("cannot start a file derived from log %d: %s", first_id, e)
    return builders


def _feed_derived(
    builders: list[DerivedBuilder], batch: LineageBatch, first_event_id: int
) -> list[DerivedBuilder]:
    """Hand a merged batch to each builder; one that fails is dropped (its file is rebuilt
    later), the rollover goes on."""
    if not builders:
        return builders
    alive = []
    for b in builders:
        try:
            b.add_batch(batch, first_event_id)
            alive.append(b)
        except Exception as e:
            log.error("dropping a derived file of this rollover (rebuilt later): %s", e)
            b.discard()
    return alive


def _discard_derived(builders: list[DerivedBuilder]) -> None:
    for b in builders:
        try:
            b.discard()
        except Exception:
            log.exception("discarding a derived file failed")


def retire_journals(layout: Layout, journals: list[str], damaged: list[str], sync: bool) -> None:
    """Delete merged journals; damaged ones go to quarantine/ for a human to look at."""
    dirs = set()
    damaged_set = set(damaged)
    for path in journals:
        try:
            if path in damaged_set:
                _quarantine(layout, path)
            else:
                os.unlink(path)
            dirs.add(os.path.dirname(path))
        except FileNotFoundError:
            continue
    if sync:
        for d in dirs:
            fsync_dir(d)


def _quarantine(layout: Layout, path: str) -> None:
    """Move a merged-but-damaged journal out of the merge path, for a human to look at.

    Its intact frames are already in a committed log, so it must never be merged again: if it
    cannot be moved (full disk, another filesystem), it is renamed in place to a name rollover
    ignores; only if even that fails is it deleted.
    """
    target = os.path.join(layout.quarantine, os.path.basename(path))
    try:
        makedirs_durable(layout.quarantine)
        shutil.move(path, target)
        log.warning("journal %s had damaged frames; moved to %s", path, target)
        return
    except FileNotFoundError:
        raise
    except OSError as e:
        log.error("cannot move damaged journal %s to quarantine/ (%s)", path, e)
    try:
        os.rename(path, path + ".damaged")
        log.warning("damaged journal kept as %s.damaged", path)
    except OSError as e:
        log.error("cannot rename damaged journal %s (%s); deleting it", path, e)
        os.unlink(path)


def remove_abandoned(containers: list[str]) -> list[str]:
    """Delete open journals whose writer (on this host) is dead: they can never be sealed."""
    host = host_tag()
    removed = []
    for path in open_journals(containers):
        parts = os.path.basename(path)[: -len(OPEN_SUFFIX)].split("-")
        if len(parts) < 4 or not parts[2].isdigit():
            continue
        if parts[1] == host and not pid_alive(int(parts[2])):
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                continue
    return removed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


RolloverListener = Callable[[Toc], object]


class Rollover:
    """Merges sealed journals into event logs: on demand (`run`), and, once started, on the
    rollover timer and as soon as a journal is sealed (watchdog), in one background loop.

    Driver journals (the `WriterPool`) are sealed first, so what `register_events` wrote is
    in the log a rollover commits. After each log, the listeners get its toc (the indexer,
    age-off)."""

    def __init__(
        self,
        layout: Layout,
        config: RepositoryConfig,
        containers: list[str],
        store: LogStore,
        ids: IdGenerator,
        pool: WriterPool,
    ) -> None:
        self.layout = layout
        self.config = config
        self.containers = containers
        self.stats = RolloverStats()
        self._store = store
        self._ids = ids
        self._pool = pool
        self._registry = AttemptRegistry()
        self._lock = threading.Lock()
        # Rollovers asked for (`request`) and served; `catch_up` merges the difference.
        self._requests_lock = threading.Lock()
        self._requested = 0
        self._served = 0
        self._listeners: list[RolloverListener] = []
        self._derived: list[DerivedFactory] = []
        self._loop = BackgroundLoop(
            "provrepo-rollover",
            self._step,
            interval=config.rollover_interval,
            # A journal was sealed elsewhere: wait a moment so a burst merges as one log.
            debounce=config.rollover_debounce,
            backoff=True,
            on_error=_loop_failed,
        )
        self._watcher: JournalWatcher | None = None

    def load(self, tocs: list[Toc], retired: dict[tuple[str, str, int], int] | None = None) -> None:
        """Learn which task attempts the committed logs kept (at open, before any merge), and
        those of aged-off logs (`retired`: they were merged first, so they win)."""
        if retired:
            self._registry.commit(retired)
        self._registry.load(tocs)

    def add_listener(self, callback: RolloverListener) -> None:
        self._listeners.append(callback)

    def add_derived(self, factory: DerivedFactory) -> None:
        """Build a derived file beside every log from now on (see `DerivedBuilder`)."""
        self._derived.append(factory)

    def run(self) -> int:
        """Merge every sealed journal into a new event log now; returns the events merged."""
        with self._lock:
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
                    result = merge(
                        self.layout,
                        self.config,
                        journals,
                        first_id,
                        self._registry,
                        self._derived,
                    )
            except RolloverError as e:
                self.stats.last_error = str(e)
                raise
            toc = result.toc
            sync = self.config.sync != "none"
            if toc is not None:
                self._store.add(LogReader(self.layout.log_path(toc.first_id), toc))
                try:
                    self._ids.advance(toc.next_id, sync=sync)
                except OSError as e:
                    # The log is committed: its journals must still be retired, or the next
                    # rollover would merge them twice. Recovery re-derives the mark at open.
                    log.error("cannot persist the event id high-water mark: %s", e)
            retire_journals(self.layout, journals, result.damaged, sync)
            st = self.stats
            st.rollovers += 1
            st.events_merged += toc.count if toc else 0
            st.journals_merged += len(journals)
            st.records_skipped += result.skipped_records
            st.journal_problems += len(result.problems)
            st.last_error = None
            st.last_seconds = time.perf_counter() - started
            self._served = max(self._served, asked)
        if toc is None:
            return 0
        for listener in list(self._listeners):
            try:
                listener(toc)
            except Exception:
                log.exception("rollover listener failed")
        return toc.count

    # -- in the background -------------------------------------------------------------------

    def start(self) -> None:
        """Merge on the timer, on `request()`, and when another process seals a journal."""
        self._loop.start()
        self._watcher = JournalWatcher(self.containers, self._loop.wake)
        self._watcher.start()

    def request(self) -> None:
        """Merge soon, without waiting (before `start`: nothing until the next `run` or
        `catch_up`)."""
        with self._requests_lock:
            self._requested += 1
        self._loop.wake()

    def catch_up(self) -> None:
        """Merge now if a rollover was requested and not done yet (so a lookup right after an
        action sees its lineage); if the background loop is merging, wait for it."""
        if self._served < self._requested:
            self.run()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        self._loop.stop()

    def _step(self) -> None:
        self.run()
        remove_abandoned(self.containers)


def _loop_failed(e: Exception, retry_in: float) -> None:
    log.error("rollover failed (retrying in %.0fs): %s", retry_in, e)
