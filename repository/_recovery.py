"""Recovery when a repository is opened by its owner, and rebuilding a lost table of contents.

A crash can leave: temporary log/toc files (rollover not committed: delete them, the journals
are still there and are merged again with the same ids); a toc without its log (the log's
rename is the commit point: delete the toc); a committed log whose journals were not all
deleted yet (delete them now: their events are in the log); an id high-water mark below that
log's end (raise it now); journals of writers that died before sealing (never merged; removed
when their process is known to be gone).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from journals import fsync_dir, listdir, makedirs_durable, write_atomic

from ._blocks import BLOCK_HEADER, BatchSlice, EventRun, decode_block
from ._errors import RepositoryError
from ._eventlog import read_log_header
from ._idgen import IdGenerator
from ._layout import LOG_SUFFIX, TMP_SUFFIX, TOC_SUFFIX, Layout
from ._rollover import remove_abandoned, sealed_journals
from ._store import LogStore
from ._toc import TOC_VERSION, BatchRef, Toc, encode_toc

log = logging.getLogger("provrepo.repository")


@dataclass
class RecoveryReport:
    temp_files_removed: list[str] = field(default_factory=list)
    orphan_tocs_removed: list[str] = field(default_factory=list)
    tocs_rebuilt: list[str] = field(default_factory=list)
    merged_journals_removed: list[str] = field(default_factory=list)
    abandoned_journals_removed: list[str] = field(default_factory=list)
    high_water_raised_to: int | None = None

    @property
    def anything(self) -> bool:
        return any(
            (
                self.temp_files_removed,
                self.orphan_tocs_removed,
                self.tocs_rebuilt,
                self.merged_journals_removed,
                self.abandoned_journals_removed,
                self.high_water_raised_to,
            )
        )


def recover(layout: Layout, containers: list[str], store: LogStore) -> RecoveryReport:
    rep = RecoveryReport()
    for d in (layout.logs, layout.state):
        for name in listdir(d):
            if name.endswith(TMP_SUFFIX):
                os.unlink(os.path.join(d, name))
                rep.temp_files_removed.append(name)
    names = set(listdir(layout.logs))
    for name in sorted(names):
        stem = name.rsplit(".", 1)[0]
        if name.endswith(TOC_SUFFIX) and f"{stem}{LOG_SUFFIX}" not in names:
            os.unlink(os.path.join(layout.logs, name))
            rep.orphan_tocs_removed.append(name)
    if rep.temp_files_removed or rep.orphan_tocs_removed:
        fsync_dir(layout.logs)
    store.scan()
    # A committed log whose toc is missing, torn or damaged did not load: rebuild its toc.
    loaded = {f"{r.first_id}{LOG_SUFFIX}" for r in store.readers()}
    logs = [n for n in names if n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit()]
    for name in sorted(n for n in logs if n not in loaded):
        if _rebuild_toc_of(os.path.join(layout.logs, name)):
            rep.tocs_rebuilt.append(name)
    if rep.tocs_rebuilt:
        store.scan()
    # A crash between a log's rename (its commit point) and raising the id high-water mark
    # leaves the mark below the logs; raise it now, or deleting that log (by hand, age-off)
    # would let its ids be handed out again (README Guarantee 3).
    if store.next_id > IdGenerator.read_high_water(layout):
        makedirs_durable(layout.state)
        write_atomic(layout.id_high_water, f"{store.next_id}\n".encode())
        rep.high_water_raised_to = store.next_id

    merged = {j for toc in store.tocs() for j in toc.journals}
    dirs = set()
    for path in sealed_journals(containers):
        if os.path.basename(path) in merged:
            os.unlink(path)
            rep.merged_journals_removed.append(path)
            dirs.add(os.path.dirname(path))
    rep.abandoned_journals_removed = remove_abandoned(containers)
    for d in dirs:
        fsync_dir(d)
    if rep.anything:
        log.info("recovery of %s: %s", layout.root, rep)
    return rep


def _rebuild_toc_of(path: str) -> bool:
    try:
        toc = rebuild_toc(path)
    except (RepositoryError, OSError, ValueError) as e:
        # Left as it is: `verify` and the store's problems name it; refusing to open the
        # whole repository for one damaged log would lose the others.
        log.error("event log %s has no usable table of contents and cannot be rebuilt: %s", path, e)
        return False
    write_atomic(path[: -len(LOG_SUFFIX)] + TOC_SUFFIX, encode_toc(toc))
    log.warning("event log %s had no usable table of contents; rebuilt it from its blocks", path)
    return True


def rebuild_toc(path: str) -> Toc:
    """Re-derive a log's table of contents by walking its blocks (slow; only after damage)."""
    with open(path, "rb") as f:
        header, pos = read_log_header(f)
        f.seek(0, os.SEEK_END)
        size = f.tell()
        offsets, firsts, mins, maxs = [], [], [], []
        batches: list[BatchRef] = []
        rich = 0
        next_id = header.first_id
        while pos < size:
            head = os.pread(f.fileno(), BLOCK_HEADER.size, pos)
            length, _ = BLOCK_HEADER.unpack(head)
            framed = os.pread(f.fileno(), BLOCK_HEADER.size + length, pos)
            entries = decode_block(framed, f"{path} @{pos}")
            lo = hi = None
            for e in entries:
                if isinstance(e, EventRun):
                    evs = [e.event(e.first_id + k) for k in range(e.count)]
                    times = [ev.event_time_ns for ev in evs]
                    rich += e.count
                else:
                    assert isinstance(e, BatchSlice)
                    times = [e.batch.event_time_ns]
                    _extend_batches(batches, e)
                lo = min([*times, lo] if lo is not None else times)
                hi = max([*times, hi] if hi is not None else times)
                next_id = e.first_id + e.count
            offsets.append(pos)
            firsts.append(entries[0].first_id if entries else next_id)
            mins.append(lo or 0)
            maxs.append(hi or 0)
            pos += BLOCK_HEADER.size + length
    return Toc(
        version=TOC_VERSION,
        first_id=header.first_id,
        next_id=next_id,
        created_ns=header.created_ns,
        min_time_ns=min(mins) if mins else 0,
        max_time_ns=max(maxs) if maxs else 0,
        prov_size=size,
        journals=header.journals,
        block_offsets=offsets,
        block_first_ids=firsts,
        block_min_time_ns=mins,
        block_max_time_ns=maxs,
        batches=batches,
        rich_events=rich,
    )


def _extend_batches(batches: list[BatchRef], e: BatchSlice) -> None:
    """Merge consecutive slices of one batch back into one directory row."""
    b = e.batch
    rid = b.record_ids
    step = rid.width if rid.codec == 0 else 0
    start = rid.base if rid.codec == 0 else int(rid.to_array().min())
    prev = batches[-1] if batches else None
    if (
        prev is not None
        and prev.run_id == b.run_id
        and prev.component_id == b.component_id
        and prev.partition == b.partition
        and prev.attempt == b.attempt
        and prev.first_event_id + prev.count == e.first_id
        and step != 0
        and prev.record_step == step
        and prev.record_start + prev.count * step == start
    ):
        batches[-1] = BatchRef(
            prev.run_id,
            prev.component_id,
            prev.component_type,
            prev.event_type,
            prev.partition,
            prev.attempt,
            prev.first_event_id,
            prev.count + len(b),
            prev.record_start,
            step,
            prev.associations + b.association_count,
        )
        return
    batches.append(
        BatchRef(
            b.run_id,
            b.component_id,
            b.component_type,
            b.event_type.value,
            b.partition,
            b.attempt,
            e.first_id,
            len(b),
            start,
            step,
            b.association_count,
        )
    )
