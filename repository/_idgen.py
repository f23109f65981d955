"""The event id generator: one-up, never reused, not after a crash and not after age-off."""

from __future__ import annotations

import threading

from journals import makedirs_durable, write_atomic

from ._layout import Layout


class IdGenerator:
    """Hands out ranges of event ids. Ids start at 1 (0 means "not assigned yet").

    The persisted high-water mark (`state/next_event_id`) is raised after each log commits, so
    deleting the newest logs (age-off, or by hand) never lets an id come back; at open the
    generator also takes the end of every surviving log into account.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._next = 1

    def load(self, logs_next_id: int) -> int:
        persisted = self.read_high_water(self.layout)
        with self._lock:
            self._next = max(1, persisted, logs_next_id)
            return self._next

    @staticmethod
    def read_high_water(layout: Layout) -> int:
        try:
            with open(layout.id_high_water, encoding="ascii") as f:
                return int(f.read().strip() or 1)
        except FileNotFoundError:
            return 1
        except ValueError:
            # A damaged mark is never trusted lower than the logs: the caller takes the max.
            return 1

    @property
    def next_id(self) -> int:
        return self._next

    def advance(self, next_id: int, sync: bool = True) -> None:
        """Record that every id below `next_id` is taken (durably)."""
        with self._lock:
            if next_id <= self._next:
                return
            # In memory first: even if the mark cannot be written (ENOSPC), this process never
            # hands out an id below next_id again.
            self._next = next_id
            makedirs_durable(self.layout.state)
            write_atomic(self.layout.id_high_water, f"{next_id}\n".encode(), sync=sync)
