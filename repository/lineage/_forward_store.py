"""The forward index files of a repository: opened per log, checked, rebuilt, verified.

A forward file is used only once it opens cleanly and names its very log (see `_forward`).
Otherwise the owner rebuilds it from the log (at open, on `reindex`, or when a read finds a
damaged block) and a read-only process falls back to scanning the log's batches for that hop,
so a bad forward file costs time, never a wrong answer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from journals import listdir

from .._blocks import BatchSlice, BlockError
from .._eventlog import LogReader
from .._layout import LOG_SUFFIX, TOC_SUFFIX, Layout
from .._store import LogStore
from .._toc import BatchRef, Toc, TocError, read_toc
from ._cache import ByteLRU
from ._forward import (
    FWD_SUFFIX,
    Decoded,
    ForwardBuilder,
    ForwardError,
    ForwardFile,
    FwdSection,
    RouteEntry,
    forward_path,
    is_deferred,
)

log = logging.getLogger("provrepo.repository")


def positional(ref: BatchRef) -> bool:
    """Whether a toc batch has a forward section (positional ids and some parents)."""
    return ref.record_step == 1 and ref.associations > 0


class ForwardIndex:
    """Forward files of the logs in `store`; `writable` (the owner) rebuilds bad ones."""

    def __init__(
        self,
        store: LogStore,
        layout: Layout,
        *,
        enabled: bool = True,
        writable: bool,
        block_size: int = 64 * 1024,
        level: int = 3,
        cache: ByteLRU | None = None,
        sync: bool = False,
    ) -> None:
        self.store = store
        self.layout = layout
        self.enabled = enabled  # off: no forward files are used (hops scan the batches)
        self.writable = writable
        self.block_size = block_size
        self.level = level
        # fsync each file before its rename, and the directory after (as the log itself): a
        # torn file would be rebuilt anyway, but the repository's renames are all durable.
        self.sync = sync
        self.cache: ByteLRU = cache if cache is not None else ByteLRU(64 * 1024 * 1024)
        self._files: dict[int, ForwardFile | None] = {}
        self._lock = threading.RLock()
        self.rebuilt: list[int] = []  # logs whose forward file this process rebuilt

    def builder(self, first_id: int) -> ForwardBuilder:
        """A rollover `DerivedFactory`: the forward index of the log being merged."""
        # zstd level 1: the children are Rice-coded already; only the small columns shrink.
        return ForwardBuilder(self.layout.logs, first_id, self.block_size, 1, self.sync)

    # -- files -----------------------------------------------------------------------------------

    def file(self, log_first: int) -> ForwardFile | None:
        """The usable forward file of a log (rebuilt first if needed and allowed); None when
        it cannot be used (the caller scans the log's batches instead)."""
        if not self.enabled:
            return None
        with self._lock:
            if log_first in self._files:
                return self._files[log_first]
            reader = self._reader(log_first)
            if reader is None:
                return None
            ff = self._open(reader)
            self._files[log_first] = ff
            return ff

    def _reader(self, log_first: int) -> LogReader | None:
        for r in self.store.readers():
            if r.first_id == log_first:
                return r
        return None

    def _open(self, reader: LogReader) -> ForwardFile | None:
        path = forward_path(self.layout.logs, reader.first_id)
        try:
            return ForwardFile(path, reader.toc)
        except FileNotFoundError:
            problem = f"{path}: missing"
        except (ForwardError, OSError) as e:
            problem = str(e)
        if not self.writable:
            log.warning("%s; forward hops scan that log instead (`provrepo reindex`)", problem)
            return None
        log.warning("%s; rebuilding it from the log", problem)
        try:
            return self.rebuild(reader)
        except (OSError, BlockError, RuntimeError) as e:
            log.error("cannot rebuild the forward index of %s: %s", reader.path, e)
            return None

    def damaged(self, log_first: int, error: Exception) -> ForwardFile | None:
        """A read found a damaged block: never trust that file again (rebuild if allowed)."""
        with self._lock:
            old = self._files.pop(log_first, None)
            if old is not None:
                old.close()
            self.cache.drop(lambda k: k[0] == log_first)
            log.warning("forward index of log %d: %s", log_first, error)
            reader = self._reader(log_first)
            if reader is None or not self.writable:
                self._files[log_first] = None
                return None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(forward_path(self.layout.logs, log_first))
            ff = self._open(reader)
            self._files[log_first] = ff
            return ff

    def forget(self, live: set[int]) -> None:
        """Drop what is held for logs no longer in the store (aged off)."""
        with self._lock:
            for first in [f for f in self._files if f not in live]:
                ff = self._files.pop(first)
                if ff is not None:
                    ff.close()
            self.cache.drop(lambda k: k[0] not in live)

    def block(self, ff: ForwardFile, b: int) -> list:
        """Decoded slices of block b of `ff`, through the byte-bounded cache."""
        key = (ff.first_id, b)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        slices = ff.read_block(b)
        return self.cache.put(key, slices, sum(s.nbytes for s in slices) + 64)

    # -- building --------------------------------------------------------------------------------

    def rebuild(self, reader: LogReader) -> ForwardFile:
        """Write a log's forward file from its batches (as rollover would have) and open it."""
        with self._lock:
            b = self.builder(reader.first_id)
            try:
                for c in batch_columns(reader):
                    first = c.ref.first_event_id
                    if c.offsets is not None and c.uri is not None:
                        b.add_lines(first, c.uri, c.offsets)
                    if not c.ref.associations:
                        continue
                    if c.deferred:
                        b.skip_deferred(first)
                    else:
                        b.add_pairs(first, c.counts, c.parents)
                b.commit(reader.toc)
            except BaseException:
                b.discard()
                raise
            self.rebuilt.append(reader.first_id)
            self._files.pop(reader.first_id, None)
            self.cache.drop(lambda k: k[0] == reader.first_id)
            return ForwardFile(forward_path(self.layout.logs, reader.first_id), reader.toc)

    def check_all(self) -> list[int]:
        """Owner, at open: open every log's forward file, rebuilding what is missing or bad;
        delete forward files whose log is gone. Returns the logs rebuilt."""
        if not self.enabled:
            return []
        before = len(self.rebuilt)
        live = {r.first_id for r in self.store.readers()}
        for name in listdir(self.layout.logs):
            stem = name[: -len(FWD_SUFFIX)]
            if name.endswith(FWD_SUFFIX) and stem.isdigit() and int(stem) not in live:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.layout.logs, name))
        for first in sorted(live):
            self.file(first)
        return self.rebuilt[before:]

    def rebuild_all(self, progress: Callable[[int], object] | None = None) -> int:
        """Rebuild every log's forward file (`reindex`); returns the files written."""
        n = 0
        for reader in self.store.readers():
            try:
                ff = self.rebuild(reader)
            except FileNotFoundError:
                continue  # aged off meanwhile
            with self._lock:
                old = self._files.pop(reader.first_id, None)
                if old is not None:
                    old.close()
                self._files[reader.first_id] = ff
            n += 1
            if progress is not None:
                progress(reader.next_id - reader.first_id)
        return n


@dataclass
class BatchColumns:
    """What the forward index is built from, for one positional batch of a log."""

    ref: BatchRef
    counts: np.ndarray  # CSR parent counts (zeros when records have no parents)
    parents: np.ndarray
    deferred: bool  # its parents are coarse (deferred narrow lineage)
    offsets: np.ndarray | None  # a text source's N+1 line offsets
    uri: str | None


def batch_columns(reader: LogReader) -> Iterator[BatchColumns]:
    """The columns of every positional batch of a log, read from its blocks in order (each
    block decoded once)."""
    refs = sorted(
        (b for b in reader.toc.batches if b.record_step == 1), key=lambda b: b.first_event_id
    )
    if not refs:
        return
    counts: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    k, got, deferred, uri = 0, 0, False, None
    start = reader.block_index(refs[0].first_event_id)
    for bi in range(start, len(reader.toc.block_offsets)):
        for e in reader.read_block(bi):
            while k < len(refs) and e.first_id >= refs[k].first_event_id + refs[k].count:
                k += 1
            if k == len(refs):
                return
            ref = refs[k]
            if not isinstance(e, BatchSlice) or e.first_id < ref.first_event_id:
                continue
            b = e.batch
            p = b.parent_array()
            deferred = is_deferred(b.attributes)
            counts.append(
                b.parent_counts.to_array()
                if b.parent_counts is not None
                else np.zeros(e.count, np.int64)
            )
            parents.append(p if p is not None else np.zeros(0, np.int64))
            if b.offsets is not None and b.location is not None:
                offs = b.offsets.to_array()
                offsets.append(offs if not offsets else offs[1:])  # slices share their ends
                uri = b.location.uri
            got += e.count
            if got == ref.count:
                yield BatchColumns(
                    ref,
                    np.concatenate(counts),
                    np.concatenate(parents),
                    deferred,
                    np.concatenate(offsets) if offsets else None,
                    uri,
                )
                counts, parents, offsets, got, uri = [], [], [], 0, None
                k += 1
    if k < len(refs):
        raise RuntimeError(f"{reader.path}: batch at event {refs[k].first_event_id} is incomplete")


def verify_forward(layout: Layout, expected: bool = True) -> tuple[list[str], int]:
    """Check every log's forward file: present (when `expected`: the repository builds them),
    names its log, every block intact, one section per positional batch holding all its
    pairs. Returns (problems, files checked)."""
    problems: list[str] = []
    checked = 0
    names = set(listdir(layout.logs))
    for name in sorted(names):
        if not name.endswith(FWD_SUFFIX):
            continue
        stem = name[: -len(FWD_SUFFIX)]
        if f"{stem}{LOG_SUFFIX}" not in names:
            problems.append(f"{os.path.join(layout.logs, name)}: forward index without its log")
    for name in sorted(names):
        if not name.endswith(TOC_SUFFIX) or f"{name[: -len(TOC_SUFFIX)]}{LOG_SUFFIX}" not in names:
            continue
        stem = name[: -len(TOC_SUFFIX)]
        if not stem.isdigit():
            continue
        try:
            toc = read_toc(os.path.join(layout.logs, name))
        except (TocError, OSError):
            continue  # the log's own check reports it
        path = forward_path(layout.logs, int(stem))
        if f"{stem}{FWD_SUFFIX}" not in names:
            if expected:
                problems.append(
                    f"{path}: missing (the owner rebuilds it at open; or provrepo reindex)"
                )
            continue
        checked += 1
        problems.extend(_verify_file(path, toc))
    return problems, checked


def _check_deferred(path: str, toc: Toc, firsts: set[int]) -> list[str]:
    """The batches a forward file lists as deferred must say so themselves (else their
    forward hops would silently find nothing)."""
    if not firsts:
        return []
    reader = LogReader(path[: -len(FWD_SUFFIX)] + LOG_SUFFIX, toc)
    problems = []
    try:
        for first in sorted(firsts):
            try:
                entries = reader.read_block(reader.block_index(first))
            except (BlockError, OSError) as err:
                problems.append(f"{path}: cannot check batch at event {first}: {err}")
                continue
            entry = next((x for x in entries if x.first_id == first), None)
            if not isinstance(entry, BatchSlice) or not is_deferred(entry.batch.attributes):
                problems.append(f"{path}: lists batch at event {first} as deferred; it is not")
    finally:
        reader.close()
    return problems


def _check_route(
    path: str, b: int, rt: RouteEntry, firsts: list[int], sizes: dict[int, int]
) -> list[str]:
    """A routing slice names existing sections, and children inside their batches."""
    _parents, sections, kids = rt.arrays()
    if len(sections) and (int(sections.min()) < 0 or int(sections.max()) >= len(firsts)):
        return [f"{path}: block {b}: a routing entry names no section"]
    if kids is not None and len(kids):
        limit = np.array([sizes.get(f, 0) for f in firsts], dtype=np.int64)[sections]
        if bool(((kids < -1) | (kids >= limit)).any()):
            return [f"{path}: block {b}: a routing entry names a child outside its batch"]
    return []


def _identity_fits(s: Decoded, sec: FwdSection, done: int) -> bool:
    """Whether a slice of an identity section holds exactly its pairs (lo + i, i), for
    i from `done` (its section's pairs in earlier slices): hops compute those children
    without reading the slices."""
    parents, starts, children = s.arrays()
    n = len(children)
    want = np.arange(done, done + n, dtype=np.int64)
    return (
        bool(sec.lo)
        and len(parents) == n
        and bool((np.diff(starts) == 1).all())
        and bool((children == want).all())
        and bool((parents == sec.lo[0] + want).all())
    )


def _verify_file(path: str, toc: Toc) -> list[str]:
    try:
        ff = ForwardFile(path, toc)
    except (ForwardError, OSError) as e:
        return [str(e)]
    problems: list[str] = []
    try:
        pairs: dict[int, int] = {}
        sizes = {b.first_event_id: b.count for b in toc.batches}
        firsts = [s.first_event_id for s in ff.directory.sections]
        sections = ff.directory.sections
        for b in range(len(ff.directory.block_offsets)):
            try:
                slices = ff.read_block(b)
                for s in slices:
                    if isinstance(s, Decoded):  # decoded in full: each column must decode
                        if not 0 <= s.section < len(sections):
                            problems.append(f"{path}: block {b}: a slice names no section")
                            continue
                        done = pairs.get(s.section, 0)
                        pairs[s.section] = done + len(s.arrays()[2])
                        if sections[s.section].identity and not _identity_fits(
                            s, sections[s.section], done
                        ):
                            problems.append(
                                f"{path}: block {b}: section for event "
                                f"{firsts[s.section]} is not the identity it claims"
                            )
                    else:
                        problems.extend(_check_route(path, b, s, firsts, sizes))
            except ForwardError as e:
                problems.append(str(e))
        want = {b.first_event_id: b.associations for b in toc.batches if positional(b)}
        deferred = set(ff.directory.deferred)
        problems.extend(_check_deferred(path, toc, deferred & set(want)))
        want = {f: n for f, n in want.items() if f not in deferred}
        have = {s.first_event_id: s.pairs for s in ff.directory.sections}
        for first, n in want.items():
            if have.get(first) != n:
                problems.append(
                    f"{path}: batch at event {first} has {n} associations, "
                    f"its forward section {have.get(first, 'none')}"
                )
        counts = {b.first_event_id: b.count for b in toc.batches if b.record_step == 1}
        for first, (_uri, stride, offs) in ff.lines.items():
            size = counts.get(first)
            ok = size is not None and stride > 0 and len(offs) == (size + stride - 1) // stride + 1
            if not ok or (len(offs) > 1 and bool((offs[1:] < offs[:-1]).any())):
                problems.append(f"{path}: line offsets of the batch at event {first} do not fit it")
        for k, s in enumerate(ff.directory.sections):
            if s.first_event_id not in want:
                problems.append(f"{path}: section for event {s.first_event_id}, no such batch")
            elif pairs.get(k, 0) != s.pairs:
                problems.append(
                    f"{path}: section for event {s.first_event_id} holds {pairs.get(k, 0)} "
                    f"pairs in its blocks, its directory says {s.pairs}"
                )
    finally:
        ff.close()
    return problems
