"""The driver's own journals: a pool of writers that `register_events` appends to."""

from __future__ import annotations

import itertools
import threading

from journals import JournalError, JournalWriter, LineageBatch, ProvenanceEvent, WriterSpec


class _Slot:
    """One journal of the pool, opened on first use; its lock serializes its appends."""

    __slots__ = ("lock", "writer")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writer: JournalWriter | None = None


class WriterPool:
    """Driver-side journals: containers x journals_per_container writers, each with a lock.

    Appends go round-robin over the writers; `seal_all` (at each rollover) seals the ones that
    hold frames, so driver events become durable and mergeable together."""

    def __init__(self, spec: WriterSpec, size: int) -> None:
        self._spec = spec
        self._slots = [_Slot() for _ in range(size)]
        self._rr = itertools.count()

    def append(self, items: list[ProvenanceEvent] | LineageBatch) -> None:
        slot = self._slots[next(self._rr) % len(self._slots)]
        with slot.lock:
            if slot.writer is None:
                slot.writer = JournalWriter.create(self._spec, tag="driver")
            writer = slot.writer
            try:
                writer.append(items)
            except JournalError:
                # A failed append may leave a partial frame: never seal this journal.
                writer.abort()
                slot.writer = None
                raise

    def seal_all(self) -> None:
        for slot in self._slots:
            with slot.lock:
                writer = slot.writer
                if writer is not None:
                    slot.writer = None
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
            with slot.lock:
                if slot.writer is not None:
                    slot.writer.abort()
                    slot.writer = None
