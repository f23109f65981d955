"""Notice journals sealed by other processes at once (inotify via watchdog), not only on a timer.

On filesystems without change notification (NFS across hosts) the rollover timer still merges
them; the watcher only makes it prompt.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from journals import SEALED_SUFFIX

log = logging.getLogger("provrepo.repository")


class _StopRace(logging.Filter):
    """watchdog logs an error when stopping an observer races an inotify read already in flight
    ("queue_events() called when the thread is inactive"); nothing is lost (the read is
    dropped by design), so the message is noise at every close."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in record.getMessage()


logging.getLogger("watchdog.observers.inotify").addFilter(_StopRace())


class _Handler(FileSystemEventHandler):
    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback

    def _maybe(self, path) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if path.endswith(SEALED_SUFFIX):
            self._callback()

    def on_moved(self, event: FileSystemEvent) -> None:
        self._maybe(event.dest_path)

    def on_created(self, event: FileSystemEvent) -> None:
        self._maybe(event.src_path)


class JournalWatcher:
    """Calls `callback` whenever a `*.journal` appears in one of the containers."""

    def __init__(self, containers: list[str], callback: Callable[[], None]) -> None:
        self._observer = Observer()
        self._observer.daemon = True
        handler = _Handler(callback)
        for c in containers:
            self._observer.schedule(handler, c, recursive=False)

    def start(self) -> None:
        try:
            self._observer.start()
        except OSError as e:  # e.g. inotify watch limit reached: the timer still works
            log.warning("cannot watch journal containers (%s); relying on the rollover timer", e)

    def stop(self) -> None:
        if self._observer.is_alive():
            self._observer.stop()
            self._observer.join(timeout=5)
