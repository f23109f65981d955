"""`RepositoryStats`: counts and sizes of a repository, as `stats()` and `provrepo stats` give."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from journals import file_bytes, listdir

from ._indexing import RepositoryIndex
from ._layout import LOG_SUFFIX, TOC_SUFFIX, Layout
from ._rollover import open_journals, sealed_journals
from ._store import LogStore

# Worker figures only an indexing process (the owner) has: left out of `to_dict` elsewhere.
_OWNER_ONLY = ("index_lag_seconds", "index_errors")


@dataclass(frozen=True)
class RepositoryStats:
    """Counts and sizes: events, id range, files, bytes, journals pending, the search index."""

    path: str
    events: int
    rich_events: int
    lineage_records: int
    first_event_id: int | None  # None: the repository holds no events
    max_event_id: int
    logs: int
    blocks: int
    log_bytes: int
    toc_bytes: int
    journals_pending: int  # sealed, not merged yet
    journal_bytes_pending: int
    journals_open: int  # being written (or abandoned by a writer that died)
    quarantined_journals: int
    oldest_event_time_ns: int | None
    newest_event_time_ns: int | None
    index_bytes: int
    index_shards: int
    indexed_next_id: int  # events below this id are searchable
    events_not_indexed: int
    index_lag_seconds: float | None  # the last rollover's index lag (owner only)
    index_errors: int | None  # None where this process does not index (a read-only open)
    owner: str | None  # the owning process, None if no process owns it now

    def to_dict(self) -> dict[str, Any]:
        """As `provrepo stats --json` prints it (owner-only figures only in the owner)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.index_errors is None:
            for name in _OWNER_ONLY:
                del out[name]
        return out


def repository_stats(
    layout: Layout,
    containers: list[str],
    store: LogStore,
    index: RepositoryIndex,
    max_event_id: int,
    owner: str | None,
) -> RepositoryStats:
    readers = store.readers()
    log_paths = [r.path for r in readers]
    toc_paths = [p[: -len(LOG_SUFFIX)] + TOC_SUFFIX for p in log_paths]
    sealed = sealed_journals(containers)
    ix = index.stats()
    return RepositoryStats(
        path=layout.root,
        events=sum(r.toc.count for r in readers),
        rich_events=sum(r.toc.rich_events for r in readers),
        lineage_records=sum(r.toc.count - r.toc.rich_events for r in readers),
        first_event_id=store.first_id,
        max_event_id=max_event_id,
        logs=len(readers),
        blocks=sum(len(r.toc.block_offsets) for r in readers),
        log_bytes=file_bytes(log_paths),
        toc_bytes=file_bytes(toc_paths),
        journals_pending=len(sealed),
        journal_bytes_pending=file_bytes(sealed),
        journals_open=len(open_journals(containers)),
        quarantined_journals=len(listdir(layout.quarantine)),
        oldest_event_time_ns=min((r.toc.min_time_ns for r in readers), default=None),
        newest_event_time_ns=max((r.toc.max_time_ns for r in readers), default=None),
        index_bytes=ix.index_bytes,
        index_shards=ix.index_shards,
        indexed_next_id=ix.indexed_next_id,
        events_not_indexed=ix.events_not_indexed,
        index_lag_seconds=ix.index_lag_seconds,
        index_errors=ix.index_errors,
        owner=owner,
    )
