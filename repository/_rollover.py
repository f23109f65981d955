"""Rollover: merge sealed journals into one event log, then delete them.

Order of durability (invariant 3): the log and its toc are fsynced and renamed into place, the
id high-water mark is raised, and only then are the journals deleted. The toc names the journals
it holds, so recovery can finish an interrupted deletion instead of merging them twice.
Ids are assigned in a deterministic order (journals by name, frames in file order), so a rollover
redone from the same journals assigns the same ids.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field

from journals import (
    OPEN_SUFFIX,
    SEALED_SUFFIX,
    EventsPayload,
    JournalProblem,
    JournalReader,
    LineageBatch,
    fsync_dir,
)

from ._config import RepositoryConfig
from ._errors import RepositoryError
from ._eventlog import LogWriter
from ._layout import Layout
from ._toc import Toc

log = logging.getLogger("provrepo.repository")


class RolloverError(RepositoryError):
    """A rollover could not complete; its journals are untouched and it will be retried."""


class AttemptRegistry:
    """Which task attempt's lineage won for each (run, capture point, partition).

    Spark retries and speculative attempts can each seal a complete journal; the first attempt
    merged for a key wins and every other attempt's batches for that key are dropped, in this
    rollover and in later ones (invariant 6).
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
    found = []
    for c in containers:
        try:
            names = os.listdir(c)
        except FileNotFoundError:
            continue
        found.extend((n, os.path.join(c, n)) for n in names if n.endswith(SEALED_SUFFIX))
    found.sort()
    return [p for _, p in found]


def open_journals(containers: list[str]) -> list[str]:
    """Paths of journals still being written (or abandoned by a writer that died)."""
    out = []
    for c in containers:
        try:
            out.extend(os.path.join(c, n) for n in os.listdir(c) if n.endswith(OPEN_SUFFIX))
        except FileNotFoundError:
            continue
    return sorted(out)


def merge(
    layout: Layout,
    config: RepositoryConfig,
    journals: list[str],
    first_id: int,
    registry: AttemptRegistry,
) -> MergeResult:
    """Merge `journals` into `<first_id>.prov` + `.toc` (committed, fsynced). Nothing is deleted."""
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
    try:
        for path in journals:
            reader = JournalReader(path)
            for frame in reader:
                p = frame.payload
                if isinstance(p, EventsPayload):
                    writer.add_events(p)
                elif registry.keep(p, pending):
                    writer.add_batch(p)
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
        # Name the file: on a full disk the operator needs to know which one.
        where = layout.log_path(first_id) + (f" (at {e.filename})" if e.filename else "")
        raise RolloverError(f"rollover into {where} failed: {e.strerror or e}") from e
    except BaseException:
        writer.discard()
        raise
    registry.commit(pending)
    return result


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
        os.makedirs(layout.quarantine, exist_ok=True)
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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
