"""Where things live inside a repository directory."""

from __future__ import annotations

import os
from dataclasses import dataclass

from journals import TMP_SUFFIX

__all__ = ["LOG_SUFFIX", "TMP_SUFFIX", "TOC_SUFFIX", "Layout"]

LOG_SUFFIX = ".prov"
TOC_SUFFIX = ".toc"


@dataclass(frozen=True)
class Layout:
    root: str

    @property
    def config(self) -> str:
        return os.path.join(self.root, "repository.json")

    @property
    def lock(self) -> str:
        return os.path.join(self.root, "owner.lock")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "logs")

    @property
    def state(self) -> str:
        return os.path.join(self.root, "state")

    @property
    def index(self) -> str:
        return os.path.join(self.root, "index")

    @property
    def scans(self) -> str:
        """Line marks of DataFrame line-format scans (derived: `lineage/_linemarks.py`)."""
        return os.path.join(self.root, "scans")

    @property
    def quarantine(self) -> str:
        return os.path.join(self.root, "quarantine")

    @property
    def id_high_water(self) -> str:
        return os.path.join(self.state, "next_event_id")

    @property
    def cursors(self) -> str:
        return os.path.join(self.state, "cursors")

    def log_path(self, first_id: int) -> str:
        return os.path.join(self.logs, f"{first_id}{LOG_SUFFIX}")

    def toc_path(self, first_id: int) -> str:
        return os.path.join(self.logs, f"{first_id}{TOC_SUFFIX}")
