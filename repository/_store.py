"""The set of committed event logs: listing, lookup by event id, sequential reads."""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from functools import partial
from itertools import takewhile

from journals import ProvenanceEvent, listdir

from ._blocks import Entry
from ._eventlog import LogReader
from ._layout import LOG_SUFFIX, TOC_SUFFIX, Layout
from ._toc import Toc, TocError, read_toc

log = logging.getLogger("provrepo.repository")
_BLOCK_CACHE = 64


class LogStore:
    """Committed logs, ordered by first event id. Thread-safe; logs may vanish (age-off) at any
    time, and readers then skip what vanished instead of failing."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._lock = threading.RLock()
        self._logs: dict[int, LogReader] = {}
        self._firsts: list[int] = []
        self._cache: OrderedDict[tuple[int, int], list[Entry]] = OrderedDict()
        self.problems: list[str] = []

    # -- membership --------------------------------------------------------------------------

    def scan(self) -> None:
        """(Re)load every committed log from disk: a log counts once both .prov and .toc exist."""
        found: dict[int, LogReader] = {}
        problems = []
        names = listdir(self.layout.logs)
        provs = {n[: -len(LOG_SUFFIX)] for n in names if n.endswith(LOG_SUFFIX)}
        tocs = {n[: -len(TOC_SUFFIX)] for n in names if n.endswith(TOC_SUFFIX)}
        for stem in sorted(provs & tocs, key=_num):
            if not stem.isdigit():
                continue
            first = int(stem)
            existing = self._logs.get(first)
            if existing is not None:
                found[first] = existing
                continue
            try:
                toc = read_toc(self.layout.toc_path(first))
            except FileNotFoundError:
                continue
            except TocError as e:
                problems.append(str(e))
                continue
            found[first] = LogReader(self.layout.log_path(first), toc)
        for stem in sorted(provs - tocs, key=_num):
            problems.append(
                f"{self.layout.log_path(int(stem)) if stem.isdigit() else stem}: no .toc"
            )
        with self._lock:
            for first, reader in self._logs.items():
                if first not in found:
                    reader.close()
            self._logs = found
            self._firsts = sorted(found)
            self.problems = problems

    def add(self, reader: LogReader) -> None:
        with self._lock:
            self._logs[reader.first_id] = reader
            self._firsts = sorted(self._logs)

    def remove(self, first_id: int) -> None:
        with self._lock:
            reader = self._logs.pop(first_id, None)
            self._firsts = sorted(self._logs)
            for key in [k for k in self._cache if k[0] == first_id]:
                del self._cache[key]
        # Not closed here: another thread may be reading it right now (age-off removes logs
        # under running searches and exports). Its descriptor closes when the last user drops
        # it, and an unlinked file stays readable until then.
        del reader

    def readers(self) -> list[LogReader]:
        with self._lock:
            return [self._logs[f] for f in self._firsts]

    def tocs(self) -> list[Toc]:
        return [r.toc for r in self.readers()]

    @property
    def first_id(self) -> int | None:
        with self._lock:
            return self._firsts[0] if self._firsts else None

    @property
    def next_id(self) -> int:
        """One past the highest id in any surviving log (0 if there are none)."""
        with self._lock:
            return self._logs[self._firsts[-1]].next_id if self._firsts else 0

    def reader_for(self, event_id: int) -> LogReader | None:
        with self._lock:
            i = bisect_right(self._firsts, event_id) - 1
            if i < 0:
                return None
            r = self._logs[self._firsts[i]]
            return r if event_id in r else None

    # -- reading -----------------------------------------------------------------------------

    def block(self, reader: LogReader, i: int) -> list[Entry]:
        """Decoded block i of a log, through a small LRU cache."""
        key = (reader.first_id, i)
        with self._lock:
            entries = self._cache.get(key)
            if entries is not None:
                self._cache.move_to_end(key)
                return entries
        entries = reader.read_block(i)
        with self._lock:
            self._cache[key] = entries
            if len(self._cache) > _BLOCK_CACHE:
                self._cache.popitem(last=False)
        return entries

    def get(self, event_id: int) -> ProvenanceEvent | None:
        reader = self.reader_for(event_id)
        if reader is None:
            return None
        try:
            return reader.get(event_id, self.block)
        except FileNotFoundError:
            self._vanished(reader)
            return None

    def chunks_from(
        self, first_id: int, max_events: int | None = None
    ) -> Iterator[list[ProvenanceEvent]]:
        """Events with id >= first_id in id order, in lists; vanished logs are skipped.

        With `max_events`, no more than that many are built: a page that ends inside a block
        entry must not materialize the rest of the entry only to drop it."""
        pos = first_id
        left = max_events
        while left is None or left > 0:
            reader = self._reader_from(pos)
            if reader is None:
                return
            start = max(pos, reader.first_id)
            stop = reader.next_id if left is None else min(reader.next_id, start + left)
            try:
                for chunk in reader.chunks(start, stop, self.block):
                    if left is not None:
                        left -= len(chunk)
                    yield chunk
            except FileNotFoundError:
                self._vanished(reader)
            pos = max(pos, reader.next_id)

    def entries(
        self, first_id: int, stop_id: int, prefetch: Executor | None = None
    ) -> Iterator[Entry]:
        """The stored block entries (rich-event runs, lineage batch slices) holding ids in
        [first_id, stop_id), in id order, undecoded beyond the block: for columnar readers
        (export). Entries may reach past either end; vanished logs are skipped. With
        `prefetch`, the next blocks are read and decompressed there (zstd releases the GIL)
        while the caller works on this one."""
        pos = first_id
        while pos < stop_id:
            reader = self._reader_from(pos)
            if reader is None or reader.first_id >= stop_id:
                return
            first_block = reader.block_index(max(pos, reader.first_id))
            before_stop = partial(_block_before, reader, stop_id)
            wanted = takewhile(before_stop, range(first_block, reader.blocks))
            try:
                for block in _read_ahead(reader, wanted, prefetch):
                    for e in block:
                        if e.first_id + e.count <= pos:
                            continue
                        if e.first_id >= stop_id:
                            break
                        yield e
            except FileNotFoundError:
                self._vanished(reader)
            pos = max(pos, reader.next_id)

    def _reader_from(self, pos: int) -> LogReader | None:
        """The log holding id `pos`, else the first log after it (None: no such log)."""
        with self._lock:
            i = bisect_right(self._firsts, pos) - 1
            if i < 0 or pos >= self._logs[self._firsts[i]].next_id:
                i += 1
            return self._logs[self._firsts[i]] if i < len(self._firsts) else None

    def _vanished(self, reader: LogReader) -> None:
        log.info("event log %s vanished (aged off); skipping it", reader.path)
        self.remove(reader.first_id)


def _block_before(reader: LogReader, stop_id: int, bi: int) -> bool:
    return reader.block_first_id(bi) < stop_id


def _read_ahead(
    reader: LogReader, blocks: Iterator[int], prefetch: Executor | None, depth: int = 2
) -> Iterator[list[Entry]]:
    """The decoded blocks, in order; up to `depth` of them read ahead on `prefetch`."""
    if prefetch is None:
        for bi in blocks:
            yield reader.read_block(bi)
        return
    ahead: deque[Future[list[Entry]]] = deque()
    for bi in blocks:
        ahead.append(prefetch.submit(reader.read_block, bi))
        if len(ahead) > depth:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


def _num(stem: str) -> int:
    return int(stem) if stem.isdigit() else -1
