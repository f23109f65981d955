"""Sequential export by event id, with a cursor that survives restarts and age-off."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from journals import ProvenanceEvent, gc_paused, makedirs_durable, write_atomic

from ._errors import BadInput, check_id
from ._store import LogStore


@dataclass
class ExportBatch:
    """Events in ascending id order from `first_id`; `next_id` is where the next read starts.

    `skipped` lists the id ranges [lo, hi) that were asked for but no longer exist (aged off):
    the batch says so instead of silently jumping ahead.
    """

    first_id: int
    events: list[ProvenanceEvent]
    next_id: int
    skipped: list[tuple[int, int]] = field(default_factory=list)

    @property
    def skipped_count(self) -> int:
        return sum(hi - lo for lo, hi in self.skipped)


class Exporter:
    """Reads events in id order from the store and keeps the gap bookkeeping: which asked-for
    ids no longer exist (aged off), so a consumer is told instead of silently skipped ahead."""

    def __init__(self, store: LogStore, max_event_id: Callable[[], int]) -> None:
        self._store = store
        self._max_event_id = max_event_id

    def export(self, first_id: int, max_events: int) -> ExportBatch:
        """Up to `max_events` events with id >= first_id, ascending, and the ids skipped."""
        check_id(first_id, "first id", allow_zero=True)
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
            end = max(first_id, min(self._store.next_id or first_id, self._max_event_id() + 1))
            if end > first_id:
                skipped.append((first_id, end))
            expect = max(expect, end)
        return ExportBatch(first_id, events, expect, skipped)

    def _collect(
        self,
        first_id: int,
        max_events: int,
        events: list[ProvenanceEvent],
        skipped: list[tuple[int, int]],
    ) -> None:
        expect = first_id
        for chunk in self._store.chunks_from(first_id, max_events - len(events)):
            if chunk[0].event_id > expect:
                skipped.append((expect, chunk[0].event_id))
            room = max_events - len(events)
            events.extend(chunk if len(chunk) <= room else chunk[:room])
            expect = events[-1].event_id + 1
            if len(events) >= max_events:
                return


class ExportCursor:
    """A named export position kept in `state/cursors/<name>.json`.

    `read()` returns the next batch without moving; `commit(batch)` moves past it durably.
    A consumer that commits only after it has stored what it read gets every event exactly
    once across restarts of either side.
    """

    def __init__(self, exporter: Exporter, directory: str, name: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise BadInput(f"cursor name {name!r}: use 1-64 letters, digits, '_', '.', '-'")
        self._exporter = exporter
        self.name = name
        self.path = os.path.join(directory, f"{name}.json")
        self.position = 1
        try:
            with open(self.path, encoding="utf-8") as f:
                self.position = int(json.load(f)["next_id"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            raise BadInput(f"cursor {name}: state file {self.path} is damaged ({e})") from e

    def read(self, max_events: int = 1000) -> ExportBatch:
        return self._exporter.export(self.position, max_events)

    def commit(self, batch: ExportBatch | int) -> None:
        next_id = batch.next_id if isinstance(batch, ExportBatch) else int(batch)
        if next_id < self.position:
            raise BadInput(
                f"cursor {self.name}: cannot move back from {self.position} to {next_id}"
            )
        makedirs_durable(os.path.dirname(self.path))
        write_atomic(self.path, json.dumps({"next_id": next_id}).encode())
        self.position = next_id


@dataclass
class TableExport:
    """What an export wrote: ids [first_id, next_id) covered, rows per table, files, and the
    id ranges [lo, hi) that no longer existed (aged off) and so are in no file."""

    out: str
    format: str
    run: str | None
    first_id: int
    next_id: int
    events: int = 0
    edges: int = 0
    files: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    resumed: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "format": self.format,
            "run": self.run,
            "first_id": self.first_id,
            "next_id": self.next_id,
            "events": self.events,
            "edges": self.edges,
            "files": len(self.files),
            "runs": self.runs,
            "skipped": [list(s) for s in self.skipped],
            "resumed": self.resumed,
            "seconds": round(self.seconds, 3),
        }
