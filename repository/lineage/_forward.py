"""The forward lineage index: `<firstId>.fwd` beside each event log, built at rollover.

A log stores each record with its parents (CSR, backward). A forward hop asks the reverse:
which records have these parents? Scanning every batch of the child capture point costs the
repository's size; this index costs the answer's. For every positional lineage batch of the
log it holds a *section*: the batch's (parent, child) pairs sorted by parent, cut into slices
of distinct parents (ascending, DELTA), children per parent, and the children themselves (child
indexes in the batch, SEGMENTED rows: the same codecs as the lineage). The directory keeps,
per section, each slice's block and [first, last] parent, so a hop binary-searches those
bounds and decodes only the blocks whose ranges hold a parent asked for.

Which sections can hold a parent? A batch whose parents all lie in one (capture point,
partition) -- a narrow dependency: a combiner's input lines, an action's output -- is found
by that partition. Batches whose parents span partitions (a shuffle's reduce side, a union,
a join) are found through the *routing table*: every distinct parent of such batches with the
sections it appears in, sorted, so one binary search names the few reduce partitions that
hold a record's children instead of probing all of them.

The file is derived: rollover writes it after the log is committed (the log's rename is the
commit point), and a missing, torn or damaged file is rebuilt from the log, never trusted. Its
directory names the log it inverts (first and next id, crc32 of the toc's batch directory).

Layout: b"PRVF", version(u8), 3 reserved bytes; blocks framed as the log's (`comp_len(u32)
crc32(u32)` + zstd of a msgpack list of slices); the msgpack directory; then a 16-byte footer:
directory length (u64), its crc32 (u32), b"PRVF".
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import struct
import threading
import zlib
from collections.abc import Callable, Collection, Hashable, Iterator
from itertools import pairwise

import msgspec
import numpy as np

from journals import IntColumn, LineageBatch, fsync_dir, unique_ids

from .._blocks import BlockError, compress_block, decode_framed
from .._errors import RepositoryError
from .._layout import TMP_SUFFIX
from .._toc import Toc
from ._sets import EMPTY, POSITION_BITS, value_runs

log = logging.getLogger("provrepo.repository")

FWD_SUFFIX = ".fwd"
FWD_MAGIC = b"PRVF"
FWD_VERSION = 1
_HEAD = struct.Struct("<4sB3x")
_FOOT = struct.Struct("<QI4s")
SLICE_PAIRS = 65536  # pairs per slice: a point lookup decodes one slice (~0.5 ms)
ROUTE_PAIRS = 2048  # routed sections' pairs per slice
# Routing entries per slice: a lookup decodes a slice's parents and just its own entries'
# sections and children, so larger slices cost a hop fewer slices (a line's words: 1-2).
ROUTE_TABLE_PAIRS = 8192
SECTION_PAIRS = 1024  # a section of this many pairs starts and ends blocks of its own
SECTION_BLOCK = 4096  # bytes of small sections' slices after which their block ends
ROUTE_BLOCK = 8192  # bytes of routing slices after which their block ends
# Parents of one slice up to which a lookup decodes just their rows of children.
_ROW_LOOKUPS = 8
# Entries of one routing slice up to which a lookup decodes just their sections and children.
_ENTRY_LOOKUPS = 64
_QUEUE = 2  # batches waiting for the builder's thread (each holds its decoded parents)
LINE_STRIDE = 32  # text lines per sampled offset: a traced line costs one read of ~32 lines


class ForwardError(RepositoryError):
    """A forward index file is missing, torn, damaged or not the one of its log."""


class FwdSlice(msgspec.Struct, tag=1, array_like=True, gc=False):
    """Pairs of one section: distinct parents ascending, children per parent, children."""

    section: int
    parents: IntColumn
    counts: IntColumn
    children: IntColumn


class RouteSlice(msgspec.Struct, tag=2, array_like=True, gc=False):
    """Part of the routing table: parents ascending (repeated once per section holding them),
    and, where the section gives each of its parents exactly one child (a shuffle's reduce
    side), that child's index (else -1): such a hop needs no read of the section at all.
    (Files written before `children` existed decode with None: their sections are read.)"""

    parents: IntColumn
    sections: IntColumn
    children: IntColumn | None = None


class FwdSection(msgspec.Struct, array_like=True, gc=False):
    """One lineage batch's inverted pairs: in which blocks, between which parents."""

    first_event_id: int  # the batch (toc BatchRef) it inverts
    pairs: int
    partition_key: int  # parents' (cp << bits | partition) when all share one, else -1
    blocks: list[int]
    lo: list[int]
    hi: list[int]
    # Pair i is (lo[0] + i, child i): a narrow 1:1 batch over a range of parents (an
    # action's output of a reduce partition). A hop computes such children, reading nothing.
    # (Files written before this field decode with False: their sections are read.)
    identity: bool = False


class LineSample(msgspec.Struct, array_like=True, gc=False):
    """Every `stride`-th byte offset of a text source batch's lines, and the end of its last:
    a traced line is re-read from its group's bytes without decoding the log's blocks."""

    first_event_id: int
    uri: str
    stride: int
    offsets: bytes  # int64 little-endian: offsets[0], offsets[stride], ..., offsets[n]


class FwdDirectory(msgspec.Struct, gc=False):
    version: int
    log_first_id: int
    log_next_id: int
    batches_crc: int  # crc32 of the log toc's batch directory: which log this inverts
    block_offsets: list[int]
    sections: list[FwdSection]
    route_blocks: list[int] = []
    route_lo: list[int] = []
    route_hi: list[int] = []
    # Batches of deferred narrow lineage (coarse parents, re-derived at trace time): no
    # section; their forward hops re-run the chain instead.
    deferred: list[int] = []
    lines: list[LineSample] = []


_ENC = msgspec.msgpack.Encoder()
_SLICES = msgspec.msgpack.Decoder(list[FwdSlice | RouteSlice])
_DIR = msgspec.msgpack.Decoder(FwdDirectory)


def forward_path(logs_dir: str, first_id: int) -> str:
    return os.path.join(logs_dir, f"{first_id}{FWD_SUFFIX}")


def batches_crc(toc: Toc) -> int:
    return zlib.crc32(_ENC.encode(toc.batches))


def indexed(batch: LineageBatch) -> bool:
    """Whether a batch gets a section: positional record ids (a Spark run's lineage) with
    parents."""
    rid = batch.record_ids
    return batch.parent_ids is not None and rid.codec == 0 and rid.width == 1


def is_deferred(attributes: dict[str, str]) -> bool:
    """A batch of deferred narrow lineage (its stored parents are coarse)."""
    return attributes.get("narrow") == "deferred"


# -- inverting -----------------------------------------------------------------------------------


def invert(counts: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR pairs (child i has parents[starts[i]:starts[i+1]]) as (parent, child index)
    sorted by parent, then child (a stable order of the pairs by parent)."""
    n, m = len(counts), len(parents)
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if m == 1 or bool((parents[1:] >= parents[:-1]).all()):
        return parents, np.repeat(np.arange(n, dtype=np.int64), counts)
    lo = int(parents.min())
    span = int(parents.max()) - lo
    if span < 1 << 32:
        # Two stable 16-bit radix passes (numpy's radix sort) over parents relative to the
        # smallest: a narrow batch's parents are one partition's positions. Measured ~20 ns
        # a pair against ~30 for timsort of packed keys and ~50 for the default sort. The
        # keys, the second pass's gather and the children are narrow (u16, u16, i32): the
        # gathers are most of the time left, and they move a quarter of the bytes of int64.
        rel = (parents - lo).astype(np.uint32)
        order = np.argsort(rel.astype(np.uint16), kind="stable")
        if span >= 1 << 16:
            high = (rel >> 16).astype(np.uint16)
            order = order[np.argsort(high[order], kind="stable")]
        kind = np.int32 if n < 1 << 31 else np.int64
        child = np.repeat(np.arange(n, dtype=kind), counts)[order].astype(np.int64)
        if span < 4 * m:  # dense: the sorted parents are each parent repeated, no gather
            ranks = np.arange(lo, lo + span + 1, dtype=np.int64)
            return np.repeat(ranks, np.bincount(rel, minlength=span + 1)), child
        return parents[order], child
    order = np.argsort(parents, kind="stable")  # child indexes ascend within equal parents
    return parents[order], np.repeat(np.arange(n, dtype=np.int64), counts)[order]


# -- writing -------------------------------------------------------------------------------------


class ForwardBuilder:
    """Writes one log's forward index; a `DerivedBuilder` for rollover (`add_batch`, then
    `commit(toc)` once the log is committed, or `discard`).

    Sections are built on a thread of their own while rollover merges the next batches:
    the sort and the encoding are numpy and zstd work that releases the GIL, so on two cores
    the index costs the rollover little wall time. At most `_QUEUE` batches wait for it."""

    def __init__(
        self, logs_dir: str, first_id: int, block_size: int, level: int, sync: bool = False
    ) -> None:
        self.path = forward_path(logs_dir, first_id)
        self.tmp = self.path + TMP_SUFFIX
        self.logs_dir = logs_dir
        self.block_size = block_size
        self.level = level
        self.sync = sync
        self._file = open(self.tmp, "wb")  # noqa: SIM115 - closed in commit/discard
        self._pos = 0
        try:
            self._write(_HEAD.pack(FWD_MAGIC, FWD_VERSION))
        except OSError:
            self._remove_tmp()
            raise
        self._offsets: list[int] = []
        self._sections: list[FwdSection] = []
        self._pending: list[FwdSlice | RouteSlice] = []
        self._size = 0
        # Routing: distinct parents of multi-partition sections, with their section number.
        self._route_parents: list[np.ndarray] = []
        self._route_sections: list[np.ndarray] = []
        self._route_children: list[np.ndarray] = []
        self._deferred: list[int] = []
        self._lines: list[LineSample] = []
        self._queue: queue.Queue[tuple[int, np.ndarray, np.ndarray] | None] = queue.Queue(_QUEUE)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def add_batch(self, batch: LineageBatch, first_event_id: int) -> None:
        """Queue a merged batch's section (built on the builder's thread)."""
        if self._error is not None:
            raise RepositoryError(f"forward index builder failed: {self._error}")
        rid = batch.record_ids
        if batch.offsets is not None and batch.location is not None and rid.codec == 0:
            self.add_lines(first_event_id, batch.location.uri, batch.offsets.to_array())
        if not indexed(batch) or batch.parent_counts is None:
            return
        if is_deferred(batch.attributes):
            self.skip_deferred(first_event_id)
            return
        parents = batch.parent_array()
        assert parents is not None
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="provrepo-forward", daemon=True)
            self._thread.start()
        self._queue.put((first_event_id, batch.parent_counts.to_array(), parents))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # failed: drain until told to stop
            try:
                self.add_pairs(*item)
            except BaseException as e:
                self._error = e

    def _join(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def add_lines(self, first_event_id: int, uri: str, offsets: np.ndarray) -> None:
        """Sample a text source batch's line offsets (N+1 of them), every LINE_STRIDE-th."""
        if len(offsets) < 2:
            return
        sample = np.append(offsets[:-1:LINE_STRIDE], offsets[-1]).astype("<i8")
        self._lines.append(LineSample(first_event_id, uri, LINE_STRIDE, sample.tobytes()))

    def skip_deferred(self, first_event_id: int) -> None:
        """Note a batch of deferred lineage (no section: its parents are coarse)."""
        self._deferred.append(first_event_id)

    def add_pairs(self, first_event_id: int, counts: np.ndarray, parents: np.ndarray) -> None:
        """Add the section of one batch (CSR parent counts and parents)."""
        p, c = invert(np.asarray(counts, dtype=np.int64), np.asarray(parents, dtype=np.int64))
        m = len(p)
        if m == 0:
            return
        # A lookup decompresses its slice's whole block, and each partition a hop reaches
        # costs one such read (~100 us for a 64 KiB block of a reduce side's slices: what a
        # forward trace at scale paid per partition). So a large section has blocks of its
        # own, and small ones (one reduce partition's outputs) share a block only with small
        # neighbours, up to SECTION_BLOCK bytes: a hop into one decodes little beside it.
        if m >= SECTION_PAIRS:
            self._flush()
        hi = p >> POSITION_BITS
        single = int(hi[0]) if int(hi[0]) == int(hi[-1]) else -1
        number = len(self._sections)
        new = np.empty(m, dtype=bool)
        new[0] = True
        np.not_equal(p[1:], p[:-1], out=new[1:])
        identity = (
            single >= 0
            and int(p[-1]) - int(p[0]) == m - 1
            and bool(new.all())  # distinct and ascending over m values: p[0] .. p[0] + m - 1
            and bool((c == np.arange(m)).all())
        )
        sec = FwdSection(first_event_id, m, single, [], [], [], identity)
        self._sections.append(sec)
        if single < 0:
            distinct = p[new]
            self._route_parents.append(distinct)
            self._route_sections.append(np.full(len(distinct), number, dtype=np.int64))
            # One child per parent (every parent distinct): the routing entry can name it.
            one = c if len(distinct) == m else np.full(len(distinct), -1, dtype=np.int64)
            self._route_children.append(one)
        # A routed section (a shuffle's reduce side) is looked up a few parents at a time
        # across many sections: small slices. A narrow one (a combiner's) can be huge, where
        # the per-slice encoding overhead tells: large slices.
        step = SLICE_PAIRS if single >= 0 else ROUTE_PAIRS
        for a in range(0, m, step):
            b = min(m, a + step)
            pp, cc, nn = p[a:b], c[a:b], new[a:b].copy()
            nn[0] = True
            starts = np.flatnonzero(nn)
            counts_k = np.diff(np.append(starts, b - a))
            one_each = len(starts) == b - a  # a shuffle's or an output's: no rows to code
            sl = FwdSlice(
                number,
                IntColumn.stored(pp[starts]),
                IntColumn.stored(counts_k),
                IntColumn.stored(cc) if one_each else IntColumn.stored(cc, counts_k),
            )
            sec.blocks.append(len(self._offsets))
            sec.lo.append(int(pp[0]))
            sec.hi.append(int(pp[-1]))
            self._add_slice(sl, len(sl.parents.data) + len(sl.counts.data) + len(sl.children.data))
        if m >= SECTION_PAIRS or self._size >= SECTION_BLOCK:
            self._flush()

    def _add_slice(self, sl: FwdSlice | RouteSlice, size: int) -> None:
        self._pending.append(sl)
        self._size += size + 32
        if self._size >= self.block_size:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        self._offsets.append(self._pos)
        self._write(compress_block(_ENC.encode(self._pending), self.level))
        self._pending, self._size = [], 0

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self._pos += len(data)

    def _routing(self) -> tuple[list[int], list[int], list[int]]:
        """Write the routing table's slices; their blocks and parent bounds."""
        self._flush()
        blocks: list[int] = []
        lo: list[int] = []
        hi: list[int] = []
        if not self._route_parents:
            return blocks, lo, hi
        parents = np.concatenate(self._route_parents)
        sections = np.concatenate(self._route_sections)
        children = np.concatenate(self._route_children)
        self._route_parents, self._route_sections, self._route_children = [], [], []
        order = np.argsort(parents, kind="stable")
        parents, sections, children = parents[order], sections[order], children[order]
        for a in range(0, len(parents), ROUTE_TABLE_PAIRS):
            b = min(len(parents), a + ROUTE_TABLE_PAIRS)
            # Sections and children packed plain (not as deltas): a lookup reads just its
            # entries' values (`IntColumn.at`).
            kids = IntColumn.from_array(children[a:b])
            secs = IntColumn.from_array(sections[a:b])
            sl = RouteSlice(IntColumn.stored(parents[a:b]), secs, kids)
            blocks.append(len(self._offsets))
            lo.append(int(parents[a]))
            hi.append(int(parents[b - 1]))
            self._add_slice(sl, len(sl.parents.data) + len(sl.sections.data) + len(kids.data))
            # A hop reads the routing blocks of its few parents, and each pick of a trace
            # reaches other ones: small blocks, so a read decodes little beside its slice.
            if self._size >= ROUTE_BLOCK:
                self._flush()
        self._flush()
        return blocks, lo, hi

    def commit(self, toc: Toc) -> None:
        """Write the routing table, directory and footer; rename into place."""
        self._join()
        if self._error is not None:
            raise RepositoryError(f"forward index builder failed: {self._error}")
        route_blocks, route_lo, route_hi = self._routing()
        directory = FwdDirectory(
            FWD_VERSION,
            toc.first_id,
            toc.next_id,
            batches_crc(toc),
            self._offsets,
            self._sections,
            route_blocks,
            route_lo,
            route_hi,
            sorted(self._deferred),
            self._lines,
        )
        body = _ENC.encode(directory)
        self._write(body)
        self._write(_FOOT.pack(len(body), zlib.crc32(body), FWD_MAGIC))
        self._file.flush()
        if self.sync:
            os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.tmp, self.path)
        if self.sync:
            fsync_dir(self.logs_dir)

    def discard(self) -> None:
        self._error = self._error or RepositoryError("discarded")
        self._join()
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


# -- reading -------------------------------------------------------------------------------------


class Decoded:
    """A forward slice, decoded on first use (a block holds many slices, and a lookup
    needs one or two of them): its section, distinct parents, CSR row starts, children.
    A point lookup decodes the parents and row lengths, and only its own rows of children
    (the children of a narrow section's slice are most of its bytes and decode time)."""

    __slots__ = ("_arrays", "_heads", "_slice", "nbytes", "section")

    def __init__(self, sl: FwdSlice) -> None:
        self.section = sl.section
        self._slice: FwdSlice | None = sl
        self._heads: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # What the decoded arrays will take: 8 bytes per parent, per row start, per child.
        self.nbytes = 96 + 8 * (2 * sl.parents.n + 1 + sl.children.n)

    def _parents(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(distinct parents, row lengths, row starts)."""
        if self._heads is None:
            sl = self._slice
            assert sl is not None
            counts = sl.counts.to_array()
            starts = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=starts[1:])
            self._heads = (sl.parents.to_array(), counts, starts)
        return self._heads

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(distinct parents, row starts, children)."""
        if self._arrays is None:
            parents, counts, starts = self._parents()
            assert self._slice is not None
            self._arrays = (parents, starts, self._slice.children.to_array(counts))
            self._slice = None
        return self._arrays

    def lookup(self, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(children, their parents) of the parents `ps` (ascending) held here, one per
        association; None when none is."""
        parents_k, counts, starts = self._parents()
        idx = np.searchsorted(parents_k, ps)
        idx[idx == len(parents_k)] = 0
        hit = idx[parents_k[idx] == ps]
        if not len(hit):
            return None
        lens = starts[hit + 1] - starts[hit]
        sl = self._slice
        if sl is not None and len(hit) <= _ROW_LOOKUPS:
            rows = [sl.children.row(counts, i) for i in hit.tolist()]
            kids = rows[0] if len(rows) == 1 else np.concatenate(rows)
        else:
            children = self.arrays()[2]
            kids = children[_ranges(starts[hit], starts[hit + 1])]
        return kids, np.repeat(parents_k[hit], lens)


class RouteEntry:
    """A routing slice, decoded on first use (a lookup needs one or two of a block's): a
    lookup of a few parents decodes the parents and only their entries' sections and
    children."""

    __slots__ = ("_arrays", "_parents", "_slice", "nbytes")

    def __init__(self, sl: RouteSlice) -> None:
        self._slice: RouteSlice | None = sl
        self._parents: np.ndarray | None = None
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self.nbytes = 64 + 8 * 3 * sl.parents.n
        # Each column decodes to its stated count, so checking the counts checks the arrays
        # for a full decode and for `lookup`'s partial one alike.
        n = sl.parents.n
        if sl.sections.n != n or (sl.children is not None and sl.children.n != n):
            raise ForwardError("a routing slice's columns differ in length")

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(parents, their sections, their one child or -1; None: not stored)."""
        if self._arrays is None:
            sl = self._slice
            assert sl is not None
            parents, sections = self._parents_array(), sl.sections.to_array()
            kids = sl.children.to_array() if sl.children is not None else None
            self._arrays = (parents, sections, kids)
            self._slice = None
        return self._arrays

    def _parents_array(self) -> np.ndarray:
        if self._parents is None:
            assert self._slice is not None
            self._parents = self._slice.parents.to_array()
        return self._parents

    def lookup(self, ps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(parent, section, child or -1) of each entry of the parents `ps` (ascending);
        children None when the slice stores none (an older file)."""
        sl = self._slice
        if sl is not None and len(ps) <= _ENTRY_LOOKUPS and sl.parents.progression() == 1:
            # Consecutive distinct parents (a shuffle's map side, each record routed once):
            # an entry's index is its parent's offset, no search.
            first = sl.parents.base
            who = ps[(ps >= first) & (ps < first + sl.parents.n)]
            return self._entries(sl, who, who - first)
        parents = self._parents_array() if self._arrays is None else self._arrays[0]
        a = np.searchsorted(parents, ps, side="left")
        z = np.searchsorted(parents, ps, side="right")
        sel = z > a
        if not sel.any():
            return EMPTY, EMPTY, EMPTY
        idx = _ranges(a[sel], z[sel])
        who = np.repeat(ps[sel], z[sel] - a[sel])
        if sl is not None and len(idx) <= _ENTRY_LOOKUPS:
            return self._entries(sl, who, idx)
        _, sections, children = self.arrays()
        return who, sections[idx], None if children is None else children[idx]

    @staticmethod
    def _entries(
        sl: RouteSlice, who: np.ndarray, idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(parents, sections, children) of entries `idx` of a slice not decoded in full."""
        kids = sl.children.at(idx) if sl.children is not None else None
        return who, sl.sections.at(idx), kids


BlockLoader = Callable[["ForwardFile", int], list]


class ForwardFile:
    """One log's forward index, opened and checked against the log's toc."""

    def __init__(self, path: str, toc: Toc) -> None:
        self.path = path
        self.first_id = toc.first_id
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEAD.size + _FOOT.size:
                raise ForwardError(f"{path}: truncated forward index ({size} bytes)")
            magic, version = _HEAD.unpack(f.read(_HEAD.size))
            if magic != FWD_MAGIC or version != FWD_VERSION:
                raise ForwardError(f"{path}: not a forward index of version {FWD_VERSION}")
            f.seek(size - _FOOT.size)
            length, crc, tail = _FOOT.unpack(f.read(_FOOT.size))
            if tail != FWD_MAGIC or length > size - _HEAD.size - _FOOT.size:
                raise ForwardError(f"{path}: forward index footer is torn")
            f.seek(size - _FOOT.size - length)
            body = f.read(length)
        if zlib.crc32(body) != crc:
            raise ForwardError(f"{path}: forward index directory fails its crc32")
        try:
            d = _DIR.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise ForwardError(f"{path}: forward index directory does not decode: {e}") from e
        if (d.log_first_id, d.log_next_id, d.batches_crc) != (
            toc.first_id,
            toc.next_id,
            batches_crc(toc),
        ):
            raise ForwardError(f"{path}: forward index is not the one of this event log")
        self.directory = d
        self.data_end = size - _FOOT.size - length
        self.sections = {s.first_event_id: k for k, s in enumerate(d.sections)}
        self.lines = {
            s.first_event_id: (s.uri, s.stride, np.frombuffer(s.offsets, dtype="<i8"))
            for s in d.lines
        }
        # Each section's first record id (its batch's, from the toc): children are record ids.
        starts = {b.first_event_id: b.record_start for b in toc.batches if b.record_step == 1}
        self.record_starts = np.array(
            [starts.get(s.first_event_id, -1) for s in d.sections], dtype=np.int64
        )
        self._plans: dict[Hashable, tuple[int, HopPlan]] = {}
        self._bounds_of: dict[int, Bounds] = {}
        self._fd: int | None = None

    def _bounds(self, k: int) -> Bounds:
        """Section k's (or, for -1, the routing table's) slice bounds as arrays, made once."""
        hit = self._bounds_of.get(k)
        if hit is None:
            d = self.directory
            lo, hi, blocks = (
                (d.route_lo, d.route_hi, d.route_blocks)
                if k < 0
                else (d.sections[k].lo, d.sections[k].hi, d.sections[k].blocks)
            )
            hit = self._bounds_of[k] = (
                np.asarray(lo, dtype=np.int64),
                np.asarray(hi, dtype=np.int64),
                np.asarray(blocks, dtype=np.int64),
            )
        return hit

    def block_span(self, b: int) -> tuple[int, int]:
        offs = self.directory.block_offsets
        end = offs[b + 1] if b + 1 < len(offs) else self.data_end
        return offs[b], end - offs[b]

    def read_block(self, b: int) -> list:
        """Decoded slices of block b (checksum verified). Raises ForwardError if damaged."""
        fd = self._fd
        if fd is None:
            fd = self._fd = os.open(self.path, os.O_RDONLY)
        offset, length = self.block_span(b)
        try:
            entries = decode_framed(
                os.pread(fd, length, offset), f"{self.path} block {b} @{offset}", _SLICES
            )
        except BlockError as e:
            raise ForwardError(str(e)) from e
        return [Decoded(e) if isinstance(e, FwdSlice) else RouteEntry(e) for e in entries]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- lookups ---------------------------------------------------------------------------------

    def plan(self, key: Hashable, version: int, allowed: Collection[int]) -> HopPlan:
        """The `HopPlan` of hops into the batches `allowed` (first event ids), made once per
        `key` (the caller's name for that set of batches) and `version` (a new version of
        the set replaces the plan of the last one)."""
        hit = self._plans.get(key)
        if hit is None or hit[0] != version:
            hit = self._plans[key] = (version, HopPlan(self.directory, allowed))
        return hit[1]

    def hop(
        self, parents: np.ndarray, plan: HopPlan, blocks: BlockLoader, pairs: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(child record ids, their parents) in the plan's batches of `parents` (ascending,
        distinct): one per association, with its parent when `pairs` (else None; children
        may then repeat). Work is vectorized over the sections the answer reaches: identity
        sections and routing entries that name their child give record ids by arithmetic;
        only the other sections' slices are read. `blocks(self, b)` decodes block b."""
        kids: list[np.ndarray] = []
        pars: list[np.ndarray] = []
        if len(plan.id_lo):
            i = np.searchsorted(plan.id_lo, parents, side="right") - 1
            np.maximum(i, 0, out=i)
            hit = (parents >= plan.id_lo[i]) & (parents <= plan.id_hi[i])
            if hit.any():
                ps, j = parents[hit], i[hit]
                kids.append(self.record_starts[plan.id_sec[j]] + (ps - plan.id_lo[j]))
                pars.append(ps)
        wanted: dict[int, np.ndarray] = {}  # section -> the parents to look up there
        if plan.narrow:  # parents ascend, so do their partitions: a run of them per partition
            for key, a, b in value_runs(parents >> POSITION_BITS):
                for k in plan.narrow.get(key, ()):
                    wanted[k] = parents[a:b]
        if plan.routed:  # the routing table is searched only when a routed section may answer
            self._routed(parents, plan, blocks, wanted, kids, pars)
        for k in sorted(wanted):
            found, their = self._section_children(k, wanted[k], blocks)
            if len(found):
                kids.append(self.record_starts[k] + found)
                pars.append(their)
        if not kids:
            return EMPTY, (EMPTY if pairs else None)
        if len(kids) == 1:
            return kids[0], (pars[0] if pairs else None)
        return np.concatenate(kids), (np.concatenate(pars) if pairs else None)

    def _routed(
        self,
        parents: np.ndarray,
        plan: HopPlan,
        blocks: BlockLoader,
        wanted: dict[int, np.ndarray],
        kids: list[np.ndarray],
        pars: list[np.ndarray],
    ) -> None:
        """The routed (multi-partition) sections' answer: children that routing entries name
        go to `kids` / `pars` (record ids, parents) at once, whatever the number of sections;
        the parents whose sections must be read (entries naming no child) to `wanted`."""
        for rt, ps in self._slices(-1, parents, blocks):
            assert isinstance(rt, RouteEntry)
            who, secs, named = rt.lookup(ps)
            if not len(who):
                continue
            if int(secs.min()) < 0 or int(secs.max()) >= len(plan.allowed):
                raise ForwardError(f"{self.path}: a routing entry names no section")
            keep = plan.allowed[secs]
            secs, who = secs[keep], who[keep]
            if named is not None:
                named = named[keep]
                direct = named >= 0  # the section gives this parent this one child
                kids.append(self.record_starts[secs[direct]] + named[direct])
                pars.append(who[direct])
                secs, who = secs[~direct], who[~direct]
            if not len(secs):
                continue
            # Grouped by section at once (a stable sort keeps each section's parents
            # ascending), not a mask per section: a line's words reach many reduce sections.
            order = np.argsort(secs, kind="stable")
            secs, who = secs[order], who[order]
            for k, i, j in value_runs(secs):
                prev = wanted.get(k)
                mine = who[i:j]
                wanted[k] = mine if prev is None else unique_ids(np.concatenate((prev, mine)))

    def _slices(
        self, k: int, parents: np.ndarray, blocks: BlockLoader
    ) -> Iterator[tuple[Decoded | RouteEntry, np.ndarray]]:
        """(slice, the parents that may be in it) of section k (-1: the routing table), for
        the slices whose parent bounds hold any of `parents`: only those are decoded, not
        every slice of the section sharing their blocks."""
        lo_a, hi_a, block_of = self._bounds(k)
        for j, ps in _by_slice(lo_a, hi_a, parents):
            b = int(block_of[j])
            # The section's slices in a block are its slices j0.. in order (blocks ascend).
            nth = j - int(np.searchsorted(block_of, b, side="left"))
            entries = blocks(self, b)
            mine: list[Decoded | RouteEntry]
            if k < 0:
                mine = [e for e in entries if isinstance(e, RouteEntry)]
            else:
                mine = [e for e in entries if isinstance(e, Decoded) and e.section == k]
            if nth >= len(mine):
                raise ForwardError(f"{self.path}: block {b} lacks slice {j} of section {k}")
            yield mine[nth], ps

    def _section_children(
        self, k: int, parents: np.ndarray, blocks: BlockLoader
    ) -> tuple[np.ndarray, np.ndarray]:
        """(child indexes, their parents): one per association of `parents` in section k."""
        sec = self.directory.sections[k]
        if sec.identity:  # pair i is (lo + i, i)
            lo = sec.lo[0] if sec.lo else 0
            ps = parents[(parents >= lo) & (parents < lo + sec.pairs)]
            return ps - lo, ps
        kids, pars = [], []
        for sl, ps in self._slices(k, parents, blocks):
            assert isinstance(sl, Decoded)
            found = sl.lookup(ps)
            if found is not None:
                kids.append(found[0])
                pars.append(found[1])
        if not kids:
            return EMPTY, EMPTY
        if len(kids) == 1:
            return kids[0], pars[0]
        return np.concatenate(kids), np.concatenate(pars)


class HopPlan:
    """What hops into one set of batches (a run's capture points fed by the hop's) need of a
    forward file, made once: which sections are allowed; the identity sections as one
    sorted table of parent ranges (a hop into many of them is one binary search); the other
    narrow sections by their parents' partition; whether any routed section is allowed."""

    __slots__ = ("allowed", "deferred", "id_hi", "id_lo", "id_sec", "narrow", "routed")

    def __init__(self, d: FwdDirectory, allowed: Collection[int]) -> None:
        firsts = set(allowed)
        self.allowed = np.array([s.first_event_id in firsts for s in d.sections], dtype=bool)
        # Batches of deferred lineage have no section: the caller re-runs their chains.
        self.deferred = not firsts.isdisjoint(d.deferred)
        ident = [
            (s.lo[0], s.lo[0] + s.pairs - 1, k)
            for k, s in enumerate(d.sections)
            if self.allowed[k] and s.identity and s.lo and s.partition_key >= 0
        ]
        ident.sort()
        if any(a[1] >= b[0] for a, b in pairwise(ident)):
            ident = []  # overlapping ranges (two outputs of one partition): read per section
        table = np.array(ident, dtype=np.int64).reshape(-1, 3)
        self.id_lo, self.id_hi, self.id_sec = table[:, 0], table[:, 1], table[:, 2]
        in_table = set(self.id_sec.tolist())
        self.narrow: dict[int, list[int]] = {}
        for k, s in enumerate(d.sections):
            if self.allowed[k] and s.partition_key >= 0 and k not in in_table:
                self.narrow.setdefault(s.partition_key, []).append(k)
        self.routed = any(self.allowed[k] for k, s in enumerate(d.sections) if s.partition_key < 0)


Bounds = tuple[np.ndarray, np.ndarray, np.ndarray]  # slices' first and last parents, blocks


def _by_slice(
    lo_a: np.ndarray, hi_a: np.ndarray, parents: np.ndarray
) -> Iterator[tuple[int, np.ndarray]]:
    """(slice, the parents that may be in it, ascending) for each slice whose [lo, hi] holds
    any of `parents` (ascending). Slice bounds ascend (a parent may end one slice and start
    the next, so it can fall in several)."""
    if not len(lo_a):
        return
    if len(parents) == 1:  # a point lookup: plain binary search, no array work
        p = int(parents[0])
        i = int(np.searchsorted(hi_a, p, side="left"))
        j = int(np.searchsorted(lo_a, p, side="right"))
        for s in range(i, j):
            yield s, parents
        return
    first = np.searchsorted(hi_a, parents, side="left")  # first slice ending at or after p
    last = np.searchsorted(lo_a, parents, side="right")  # one past the last starting <= p
    # Both ascend with the parents: equal ends mean every parent has the same slices (the
    # usual case for a few parents: a line's words in one routing slice).
    if first[0] == first[-1] and last[0] == last[-1]:
        for s in range(int(first[0]), int(last[0])):
            yield s, parents
        return
    sel = last > first
    if not sel.any():
        return
    a, z = first[sel], last[sel]
    who = np.repeat(parents[sel], z - a)
    slices = _ranges(a, z)
    order = np.argsort(slices, kind="stable")  # stable: each slice's parents stay ascending
    slices, who = slices[order], who[order]
    for s, i, j in value_runs(slices):
        yield s, who[i:j]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of arange(lo[k], hi[k]) for all k."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return starts + np.arange(total)
