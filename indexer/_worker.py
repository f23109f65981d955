"""The indexing thread: after each rollover, index the new logs off the capture path.

The worker does not trust the order of notifications: on each wake it asks for every log at
or past its checkpoint, in id order, and indexes them (one Tantivy commit per pass, or per
`events_per_commit` when catching up). So a log is indexed once, in order, however rollovers
and notifications interleave; `notify` only wakes it and notes the time for the lag figure.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from journals import BackgroundLoop, gc_paused

from ._model import LogSpans, ShardInfo
from ._shards import OLD_SUFFIX, REBUILD_SUFFIX, ShardSet

log = logging.getLogger("provrepo.indexer")


class LogSource(Protocol):
    """What the worker needs to know of a log: its id range (a table of contents has it)."""

    first_id: int
    next_id: int


S = TypeVar("S", bound=LogSource)


@dataclass
class IndexStats:
    """What the indexer has done (for stats, tests and the benchmark)."""

    logs: int = 0
    events: int = 0
    spans: int = 0
    commits: int = 0
    errors: int = 0
    last_error: str | None = None
    last_lag: float | None = None  # seconds from a rollover's end until its events searchable
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


class IndexWorker(Generic[S]):
    """Keeps a `ShardSet` caught up with the event logs.

    `pending(next_id)` lists the logs whose first id is >= next_id, in id order;
    `summarize(log)` turns one into spans (raising FileNotFoundError if it vanished).
    `threaded=False` runs everything in the caller's thread (no background work).
    """

    def __init__(
        self,
        shards: ShardSet,
        *,
        pending: Callable[[int], list[S]],
        summarize: Callable[[S], LogSpans],
        threaded: bool = True,
        events_per_commit: int = 20_000_000,
    ) -> None:
        self.shards = shards
        self._pending = pending
        self._summarize = summarize
        self.threaded = threaded
        self.events_per_commit = events_per_commit
        self.stats = IndexStats()
        self._lock = threading.RLock()  # one pass (or rebuild) at a time
        self._cond = threading.Condition()
        self._arrivals: dict[int, float] = {}
        # Also when stopping, one last pass: the final rollover's logs get indexed before close.
        self._loop = BackgroundLoop(
            "provrepo-index",
            self.index_pending,
            interval=5.0,
            on_error=self._failed,
            backoff=True,
            final_step=True,
            at_exit=self._close_shards,  # the writer is released by the thread that used it
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (threaded mode); its first pass catches up with existing logs."""
        if self.threaded:
            self._loop.start(step_now=True)

    def stop(self) -> None:
        """Stop the thread after one last pass (logs rolled over so far get indexed)."""
        self._loop.stop()
        self._close_shards()

    def _close_shards(self) -> None:
        with self._lock:
            self.shards.close()

    def _failed(self, e: Exception, retry_in: float) -> None:
        self.stats.errors += 1
        self.stats.last_error = str(e)
        log.error("indexing failed (retrying in %.0fs): %s", retry_in, e)

    # -- indexing ----------------------------------------------------------------------------

    def notify(self, source: S | None = None) -> None:
        """A rollover committed `source`: index it soon (threaded) or now (inline)."""
        if source is not None:
            self._arrivals[source.first_id] = time.perf_counter()
        if self.threaded:
            self._loop.wake()
        else:
            self.index_pending()

    def index_pending(self) -> int:
        """Index every log past the checkpoint, now; returns the events indexed."""
        total = 0
        with self._lock:
            shards = self.shards
            todo = [s for s in self._pending(shards.next_id) if s.first_id >= shards.next_id]
            done: list[S] = []
            batch = 0
            for src in todo:
                batch += self._add(shards, src)
                done.append(src)
                if batch >= self.events_per_commit:
                    total += self._commit(shards, done)
                    done, batch = [], 0
            total += self._commit(shards, done)
        return total

    def _add(self, shards: ShardSet, src: S) -> int:
        try:
            with gc_paused():  # decoding allocates many small objects and no cycles
                spans = self._summarize(src)
        except FileNotFoundError:
            shards.skip(src.first_id, src.next_id)  # aged off before it was indexed
            return 0
        shards.add(spans)
        self.stats.spans += len(spans.spans)
        return spans.events

    def _commit(self, shards: ShardSet, done: list[S]) -> int:
        events = shards.commit()
        if not done and not events:
            return 0
        now = time.perf_counter()
        st = self.stats
        st.commits += 1
        st.logs += len(done)
        st.events += events
        for src in done:
            t0 = self._arrivals.pop(src.first_id, None)
            if t0 is not None:
                st.last_lag = now - t0
                st.lags.append(st.last_lag)
        with self._cond:
            self._cond.notify_all()
        return events

    def wait(self, next_id: int, timeout: float | None = None) -> bool:
        """Wait until every log below `next_id` is searchable; False on timeout."""
        if not self.threaded:
            self.index_pending()
            return self.shards.indexed_next_id >= next_id
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.shards.indexed_next_id < next_id:
                self._loop.wake()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(timeout=0.05 if left is None else min(left, 0.05))
        return True

    def drop_shards(self, is_dead: Callable[[ShardInfo], bool]) -> list[ShardInfo]:
        """Delete dead shards (see `ShardSet.drop`), never in the middle of a pass or rebuild."""
        with self._lock:
            return self.shards.drop(is_dead)

    # -- rebuilding --------------------------------------------------------------------------

    def rebuild(
        self, sources: Iterable[S], progress: Callable[[int], object] | None = None
    ) -> ShardSet:
        """Build a fresh index from `sources` beside the current one, then swap it in.

        Searches keep using the old index until the swap; a crash leaves the old one (or the
        new one, if it got as far as the swap) and the checkpoint says what is left to do.
        """
        with self._lock:
            old = self.shards
            root = old.root
            tmp = root + REBUILD_SUFFIX
            shutil.rmtree(tmp, ignore_errors=True)
            new = ShardSet(tmp, shard_size=old.shard_size, attributes=old.attributes, writable=True)
            new.recover()
            batch = 0
            for src in sources:
                batch += self._add(new, src)
                if progress is not None:
                    progress(src.next_id - src.first_id)
                if batch >= self.events_per_commit:
                    new.commit()
                    batch = 0
            new.close()
            old.close()
            if os.path.exists(root):
                os.rename(root, root + OLD_SUFFIX)
            os.rename(tmp, root)
            shutil.rmtree(root + OLD_SUFFIX, ignore_errors=True)
            fresh = ShardSet(
                root, shard_size=old.shard_size, attributes=old.attributes, writable=True
            )
            fresh.recover()
            self.shards = fresh
            with self._cond:
                self._cond.notify_all()
            return fresh
