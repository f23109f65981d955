"""Age-off: delete the oldest event logs by age and by total size, and index shards with them.

NiFi's rules: by `max_storage_time`, every log whose newest event is older than the limit
goes; by `max_storage_bytes` (logs, tocs, files derived from logs, indexes, state), logs go
oldest first (by first event id) until the total is at most 90 % of the limit, so it does not
delete a little at every pass. A shard goes whole once every log it points into is gone.

Never deleted: journals (not merged yet), the log a rollover is writing (it is not committed,
so it is not in the store), state (the id high-water mark keeps ids from being reused). When
nothing deletable is left and the limit is still exceeded, the pass says so and stops.
Deleting a log removes it from the store first, then its `.prov` (the commit point: recovery
drops a toc without its log), then its toc and derived files; readers that vanish mid-read
skip the log, and export reports the ids they skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from journals import BackgroundLoop, dir_bytes, fsync_dir

from ._eventlog import LogReader
from ._indexing import RepositoryIndex
from ._layout import Layout
from ._store import LogStore
from ._toc import Toc

log = logging.getLogger("provrepo.repository")

LOW_WATER = 0.9  # delete down to this fraction of max_storage_bytes


@dataclass
class AgeOffReport:
    """What one age-off pass deleted, and whether the limits are met."""

    deleted_logs: list[tuple[int, int]] = field(default_factory=list)  # [first_id, next_id)
    deleted_shards: list[str] = field(default_factory=list)
    events_deleted: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    unmet: str | None = None  # why the size limit cannot be met, if it cannot

    @property
    def bytes_freed(self) -> int:
        return max(0, self.bytes_before - self.bytes_after)

    def to_dict(self) -> dict:
        return {
            "deleted_logs": [list(r) for r in self.deleted_logs],
            "deleted_shards": self.deleted_shards,
            "events_deleted": self.events_deleted,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "bytes_freed": self.bytes_freed,
            "unmet": self.unmet,
        }


def log_files(layout: Layout) -> dict[int, list[tuple[str, int]]]:
    """Files under logs/ grouped by the log they belong to (name `<firstId>.<anything>`)."""
    out: dict[int, list[tuple[str, int]]] = {}
    for root, _dirs, files in os.walk(layout.logs):
        for name in files:
            stem = name.split(".", 1)[0]
            if not stem.isdigit():
                continue
            path = os.path.join(root, name)
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                continue
            out.setdefault(int(stem), []).append((path, size))
    return out


def storage_bytes(layout: Layout) -> int:
    """Everything age-off accounts for: logs and what derives from them, indexes, state."""
    idx = layout.index
    return sum(
        dir_bytes(p) for p in (layout.logs, idx, idx + ".rebuild", idx + ".old", layout.state)
    )


class AgeOff:
    """One-pass age-off (`run`) and the thread that runs it periodically and after rollovers."""

    def __init__(
        self,
        layout: Layout,
        store: LogStore,
        index: RepositoryIndex,
        max_age: float | None,
        max_bytes: int | None,
        interval: float = 60.0,
        retire: Callable[[list[Toc]], None] | None = None,
    ) -> None:
        self.layout = layout
        self.retire = retire  # called with the victims' tocs before any is deleted
        self.store = store
        self.index = index
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.interval = interval
        self.last: AgeOffReport | None = None
        self._lock = threading.Lock()
        self._warned: str | None = None
        self._loop = BackgroundLoop(
            "provrepo-ageoff", self._pass, interval=interval, on_error=_pass_failed
        )

    # -- one pass ----------------------------------------------------------------------------

    def run(
        self,
        max_age: float | None = None,
        max_bytes: int | None = None,
        now_ns: int | None = None,
    ) -> AgeOffReport:
        """Delete what the limits say must go (defaults: the configured limits)."""
        max_age = self.max_age if max_age is None else max_age
        max_bytes = self.max_bytes if max_bytes is None else max_bytes
        with self._lock:
            rep = AgeOffReport(bytes_before=storage_bytes(self.layout))
            readers = self.store.readers()
            files = log_files(self.layout)
            victims: list[LogReader] = []
            if max_age is not None:
                now = time.time_ns() if now_ns is None else now_ns
                cutoff = now - int(max_age * 1e9)
                victims = [r for r in readers if r.toc.max_time_ns < cutoff]
            if max_bytes is not None:
                rep.unmet = self._by_size(readers, victims, files, rep.bytes_before, max_bytes)
            if victims and self.retire is not None:
                self.retire([r.toc for r in victims])
            for r in sorted(victims, key=lambda r: r.first_id):
                self._delete_log(r, files.get(r.first_id, []))
                rep.deleted_logs.append((r.first_id, r.next_id))
                rep.events_deleted += r.next_id - r.first_id
            survivors = [r.first_id for r in self.store.readers()]
            if victims:
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(self.layout.logs)
            rep.deleted_shards = self.index.drop_dead_shards(survivors)
            rep.bytes_after = storage_bytes(self.layout)
            self.last = rep
        if rep.deleted_logs:
            log.info(
                "age-off deleted %d logs (%d events) and %d shards, %d bytes",
                len(rep.deleted_logs),
                rep.events_deleted,
                len(rep.deleted_shards),
                rep.bytes_freed,
            )
        return rep

    def _by_size(
        self,
        readers: list[LogReader],
        victims: list[LogReader],
        files: dict[int, list[tuple[str, int]]],
        total: int,
        max_bytes: int,
    ) -> str | None:
        """Add victims, oldest first, until the estimated total is <= 90 % of max_bytes."""
        if total <= max_bytes:
            return None
        target = int(max_bytes * LOW_WATER)
        root = self.index.shards.root
        shards = [
            (s.min_log, s.max_log, dir_bytes(os.path.join(root, s.name)))
            for s in self.index.shards.shards()
            if s.min_log is not None and s.max_log is not None
        ]
        alive = sorted(r.first_id for r in readers)
        est = total

        def kill(first_id: int) -> None:
            nonlocal est
            alive.pop(bisect_left(alive, first_id))
            est -= sum(size for _, size in files.get(first_id, ()))
            for k in range(len(shards) - 1, -1, -1):
                lo, hi, size = shards[k]
                i = bisect_right(alive, hi)
                if i == 0 or alive[i - 1] < lo:  # no surviving log inside: the shard goes too
                    est -= size
                    shards.pop(k)

        for r in victims:
            kill(r.first_id)
        chosen = {r.first_id for r in victims}
        for r in readers:
            if est <= target:
                break
            if r.first_id not in chosen:
                victims.append(r)
                kill(r.first_id)
        if est > max_bytes:
            return (
                f"max_storage_bytes {max_bytes} cannot be met: {est} bytes would remain in files "
                "age-off never deletes (journals not merged yet, state, the log being written)"
            )
        return None

    def _delete_log(self, reader: LogReader, files: list[tuple[str, int]]) -> None:
        first = reader.first_id
        self.store.remove(first)  # new readers stop finding it; running ones skip it
        prov = self.layout.log_path(first)
        paths = [prov] + [p for p, _ in files if p != prov and not p.endswith(".tmp")]
        for p in paths:  # the .prov first: it is the commit point
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    # -- the thread --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (only if a limit is configured); its first pass runs at once."""
        if self.max_age is not None or self.max_bytes is not None:
            self._loop.start(step_now=True)

    def wake(self, _toc: object = None) -> None:
        """Run a pass soon (called after each rollover: the size limit may be passed)."""
        self._loop.wake()

    def stop(self) -> None:
        self._loop.stop()

    def _pass(self) -> None:
        rep = self.run()
        if rep.unmet and rep.unmet != self._warned:
            log.warning("age-off: %s", rep.unmet)  # once per distinct problem, no spin
        self._warned = rep.unmet


def _pass_failed(e: Exception, _retry_in: float) -> None:
    log.error("age-off pass failed: %s", e)
