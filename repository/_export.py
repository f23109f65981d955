"""Sequential export by event id, with a cursor that survives restarts and age-off."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from journals import ProvenanceEvent

from ._errors import BadInput
from ._layout import write_atomic

if TYPE_CHECKING:
    from ._repository import ProvenanceRepository


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


class ExportCursor:
    """A named export position kept in `state/cursors/<name>.json`.

    `read()` returns the next batch without moving; `commit(batch)` moves past it durably.
    A consumer that commits only after it has stored what it read gets every event exactly
    once across restarts of either side.
    """

    def __init__(self, repo: ProvenanceRepository, name: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise BadInput(f"cursor name {name!r}: use 1-64 letters, digits, '_', '.', '-'")
        self._repo = repo
        self.name = name
        self.path = os.path.join(repo.layout.cursors, f"{name}.json")
        self.position = 1
        try:
            with open(self.path, encoding="utf-8") as f:
                self.position = int(json.load(f)["next_id"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            raise BadInput(f"cursor {name}: state file {self.path} is damaged ({e})") from e

    def read(self, max_events: int = 1000) -> ExportBatch:
        return self._repo.export(self.position, max_events)

    def commit(self, batch: ExportBatch | int) -> None:
        next_id = batch.next_id if isinstance(batch, ExportBatch) else int(batch)
        if next_id < self.position:
            raise BadInput(
                f"cursor {self.name}: cannot move back from {self.position} to {next_id}"
            )
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        write_atomic(self.path, json.dumps({"next_id": next_id}).encode())
        self.position = next_id
