"""Event log files: `<firstId>.prov` (header + zstd blocks) with its `<firstId>.toc`.

Writing: blocks are compressed by a small thread pool (python-zstandard releases the GIL) while
the merging thread encodes the next one; the log and toc are written under temporary names,
fsynced, then renamed (toc first, the log's rename is the commit point).
Reading: block by toc offset, one `pread`, one decompression.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import msgspec
import numpy as np

from journals import EventsPayload, LineageBatch, ProvenanceEvent, fsync_dir, prefetch_ranges

from ._blocks import (
    BLOCK_HEADER,
    BatchSlice,
    BlockError,
    Entry,
    EventRun,
    compress_block,
    decode_block,
    encode_entries,
    entry_for,
)
from ._errors import RepositoryError
from ._layout import TMP_SUFFIX, Layout
from ._toc import TOC_VERSION, BatchRef, Toc, encode_toc

LOG_MAGIC = b"PRVL"
LOG_VERSION = 1
_HEAD = struct.Struct("<4sB3xII")  # magic, version, header body length, header body crc32
_ENTRY_OVERHEAD = 24
_MAX_PENDING = 8


class LogHeader(msgspec.Struct, gc=False):
    """Self-description at the start of a log, so its toc can be rebuilt if it is ever lost."""

    first_id: int
    created_ns: int
    journals: list[str]


def encode_log_header(header: LogHeader) -> bytes:
    body = msgspec.msgpack.encode(header)
    return _HEAD.pack(LOG_MAGIC, LOG_VERSION, len(body), zlib.crc32(body)) + body


def read_log_header(f) -> tuple[LogHeader, int]:
    """(header, offset of the first block) of an open log file."""
    head = f.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise RepositoryError("log is shorter than its header")
    magic, version, length, crc = _HEAD.unpack(head)
    if magic != LOG_MAGIC:
        raise RepositoryError("not a provrepo event log")
    if version != LOG_VERSION:
        raise RepositoryError(f"event log version {version} is not supported")
    body = f.read(length)
    if len(body) != length or zlib.crc32(body) != crc:
        raise RepositoryError("event log header is damaged")
    return msgspec.msgpack.decode(body, type=LogHeader), _HEAD.size + length


class LogWriter:
    """Builds one event log from rich-event runs and lineage batches, in id order."""

    def __init__(
        self,
        layout: Layout,
        first_id: int,
        journals: list[str],
        block_size: int,
        zstd_level: int,
        threads: int = 2,
    ) -> None:
        self.layout = layout
        self.first_id = first_id
        self.next_id = first_id
        self.journals = journals
        self.block_size = block_size
        self.level = zstd_level
        self.created_ns = time.time_ns()
        self.prov_tmp = layout.log_path(first_id) + TMP_SUFFIX
        self.toc_tmp = layout.toc_path(first_id) + TMP_SUFFIX
        self._file = open(self.prov_tmp, "wb")  # noqa: SIM115 - closed in commit/discard
        self._pos = 0
        self._write(encode_log_header(LogHeader(first_id, self.created_ns, journals)))
        self._entries: list[Entry] = []
        self._size = 0
        self._bmin: int | None = None  # event time bounds of the block being filled
        self._bmax: int | None = None
        self._block_first = first_id
        self.block_offsets: list[int] = []
        self.block_first_ids: list[int] = []
        self.block_min: list[int] = []
        self.block_max: list[int] = []
        self.batches: list[BatchRef] = []
        self.rich_events = 0
        self.skipped_records = 0
        self._pool = ThreadPoolExecutor(threads, "provrepo-zstd") if threads > 1 else None
        self._pending: deque[tuple[Future[bytes] | bytes, int, int, int, int]] = deque()

    @property
    def count(self) -> int:
        return self.next_id - self.first_id

    # -- adding ------------------------------------------------------------------------------

    def add_events(self, payload: EventsPayload) -> None:
        """Append a journal frame's rich events (ids assigned in order), copied, not decoded."""
        n = payload.count
        if n <= 0:
            return
        offs = payload.offsets_array().astype(np.int64)
        # Bytes of events [0, k] as they will sit in a block: the event plus its length entry.
        ends = offs[1:] - offs[0] + 2 * np.arange(1, n + 1)
        i = 0
        while i < n:
            base = int(ends[i - 1]) if i else 0
            room = self.block_size - self._size - _ENTRY_OVERHEAD
            j = int(np.searchsorted(ends, base + room, side="right"))
            if j <= i:
                if self._entries:
                    self._flush_block()
                    continue
                j = i + 1  # one event larger than a block: it gets a block of its own
            run = EventRun.cut(self.next_id, payload.data, offs, i, j)
            self._add_entry(run, int(ends[j - 1]) - base)
            self._time(payload.min_time_ns, payload.max_time_ns)
            self.next_id += j - i
            self.rich_events += j - i
            i = j
            if self._size >= self.block_size:
                self._flush_block()

    def add_batch(self, batch: LineageBatch) -> None:
        """Append a lineage batch, cut into block-sized slices; records get consecutive ids."""
        n = len(batch)
        if n == 0:
            return
        rid = batch.record_ids
        step = rid.width if rid.codec == 0 else 0
        start = rid.base if rid.codec == 0 else int(rid.to_array().min())
        self.batches.append(
            BatchRef(
                batch.run_id,
                batch.component_id,
                batch.component_type,
                batch.event_type.value,
                batch.partition,
                batch.attempt,
                self.next_id,
                n,
                start,
                step,
                batch.association_count,
            )
        )
        # Plan the cuts first (vectorized sizes), then split the batch once: None = flush here.
        ends = batch.cumulative_bytes()
        plan: list[tuple[int, int] | None] = []
        size, i = self._size, 0
        while i < n:
            base = int(ends[i - 1]) if i else 0
            room = self.block_size - size - _ENTRY_OVERHEAD
            j = int(np.searchsorted(ends, base + room, side="right"))
            if j <= i:
                if size:
                    plan.append(None)
                    size = 0
                    continue
                j = i + 1  # one record larger than a block: it gets a block of its own
            plan.append((i, j))
            size += int(ends[j - 1]) - base + _ENTRY_OVERHEAD
            if size >= self.block_size:
                plan.append(None)
                size = 0
            i = j
        cuts = [0] + [cut[1] for cut in plan if cut is not None]
        slices = iter(batch.split(cuts, stored=True))  # straight to the storage form
        for cut in plan:
            if cut is None:
                self._flush_block()
                continue
            sl = next(slices)
            self._entries.append(BatchSlice(self.next_id, sl))
            self._time(batch.event_time_ns, batch.event_time_ns)
            self.next_id += len(sl)
        self._size = size

    def _add_entry(self, entry: Entry, size: int) -> None:
        self._entries.append(entry)
        self._size += size + _ENTRY_OVERHEAD

    def _time(self, lo: int, hi: int) -> None:
        self._bmin = lo if self._bmin is None else min(self._bmin, lo)
        self._bmax = hi if self._bmax is None else max(self._bmax, hi)

    # -- blocks ------------------------------------------------------------------------------

    def _flush_block(self) -> None:
        if not self._entries:
            self._size = 0
            return
        assert self._bmin is not None and self._bmax is not None  # set by every entry added
        raw = encode_entries(self._entries)
        job = self._pool.submit(compress_block, raw, self.level) if self._pool else None
        item = job if job is not None else compress_block(raw, self.level)
        self._pending.append((item, self._block_first, self._bmin, self._bmax, 0))
        self._block_first = self.next_id
        self._entries, self._size, self._bmin, self._bmax = [], 0, None, None
        while len(self._pending) > _MAX_PENDING:
            self._drain_one()

    def _drain_one(self) -> None:
        item, first, lo, hi, _ = self._pending.popleft()
        data = item.result() if isinstance(item, Future) else item
        self.block_offsets.append(self._pos)
        self.block_first_ids.append(first)
        self.block_min.append(lo)
        self.block_max.append(hi)
        self._write(data)

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self._pos += len(data)

    # -- ending ------------------------------------------------------------------------------

    def commit(self, skipped_records: int = 0) -> Toc:
        """Write the last block and the toc; fsync both; rename toc, then log (commit point)."""
        self._flush_block()
        while self._pending:
            self._drain_one()
        self._shutdown_pool()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        toc = Toc(
            version=TOC_VERSION,
            first_id=self.first_id,
            next_id=self.next_id,
            created_ns=self.created_ns,
            min_time_ns=min(self.block_min) if self.block_min else 0,
            max_time_ns=max(self.block_max) if self.block_max else 0,
            prov_size=self._pos,
            journals=self.journals,
            block_offsets=self.block_offsets,
            block_first_ids=self.block_first_ids,
            block_min_time_ns=self.block_min,
            block_max_time_ns=self.block_max,
            batches=self.batches,
            rich_events=self.rich_events,
            skipped_records=skipped_records,
        )
        with open(self.toc_tmp, "wb") as f:
            f.write(encode_toc(toc))
            f.flush()
            os.fsync(f.fileno())
        os.rename(self.toc_tmp, self.layout.toc_path(self.first_id))
        os.rename(self.prov_tmp, self.layout.log_path(self.first_id))
        fsync_dir(self.layout.logs)
        return toc

    def discard(self) -> None:
        """Drop everything written so far (temporary files removed)."""
        self._shutdown_pool()
        with contextlib.suppress(OSError):  # being deleted: a failed close leaves nothing behind
            self._file.close()
        for p in (self.prov_tmp, self.toc_tmp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def _shutdown_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class LogReader:
    """Random and sequential access to one committed event log, through its toc."""

    def __init__(self, path: str, toc: Toc) -> None:
        self.path = path
        self.toc = toc
        self.first_id = toc.first_id
        self.next_id = toc.next_id
        self._block_ids = np.asarray(toc.block_first_ids, dtype=np.int64)
        self._fd: int | None = None

    def __contains__(self, event_id: int) -> bool:
        return self.first_id <= event_id < self.next_id

    def block_index(self, event_id: int) -> int:
        return int(np.searchsorted(self._block_ids, event_id, side="right")) - 1

    @property
    def blocks(self) -> int:
        return len(self._block_ids)

    def block_first_id(self, i: int) -> int:
        return int(self._block_ids[i])

    def block_indexes(self, event_ids: np.ndarray) -> np.ndarray:
        """`block_index` of each of the (sorted) event ids."""
        return np.searchsorted(self._block_ids, event_ids, side="right") - 1

    def _descriptor(self) -> int:
        fd = self._fd  # a local: another thread may close the reader meanwhile
        if fd is None:
            fd = self._fd = os.open(self.path, os.O_RDONLY)
        return fd

    def prefetch(self, blocks: Iterable[int]) -> None:
        """Have the kernel read these blocks now, in one queue (scattered point lookups of a
        log that is not in the page cache then wait once, not once a block)."""
        spans = [self.toc.block_span(i) for i in blocks]
        prefetch_ranges(self._descriptor(), ((o, o + n) for o, n in spans), random=False)

    def read_block(self, i: int) -> list[Entry]:
        """Decode block i (checksum verified). Raises FileNotFoundError if the log is gone."""
        fd = self._descriptor()
        offset, length = self.toc.block_span(i)
        framed = os.pread(fd, length, offset)
        if len(framed) < BLOCK_HEADER.size:
            raise BlockError(f"{self.path}: block {i} at offset {offset} is truncated")
        return decode_block(framed, f"{self.path} block {i} @{offset}")

    def get(self, event_id: int, blocks=None) -> ProvenanceEvent | None:
        if event_id not in self:
            return None
        i = self.block_index(event_id)
        entries = blocks(self, i) if blocks else self.read_block(i)
        e = entry_for(entries, event_id)
        return None if e is None else e.event(event_id)

    def chunks(self, start_id: int, stop_id: int, blocks=None) -> Iterator[list[ProvenanceEvent]]:
        """Events with start_id <= id < stop_id, ascending, one list per block entry."""
        start_id = max(start_id, self.first_id)
        stop_id = min(stop_id, self.next_id)
        if start_id >= stop_id:
            return
        for i in range(self.block_index(start_id), len(self._block_ids)):
            if self._block_ids[i] >= stop_id:
                break
            entries = blocks(self, i) if blocks else self.read_block(i)
            for e in entries:
                if e.first_id + e.count <= start_id:
                    continue
                if e.first_id >= stop_id:
                    break
                yield e.events(start_id, stop_id)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
