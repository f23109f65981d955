"""Lineage over stored events: record ids to events, backward and forward hops, raw data.

Record ids are (capture point, partition, position). Every lineage batch's toc row says which
positions of which (run, capture point, partition) it holds and the event id of the first, so
finding a record's event is a dictionary lookup and a bisect, never a scan. Backward hops read
only the blocks holding the asked-for records (parents are stored with each record, CSR);
forward hops binary-search each log's forward index (`_forward`) and decode only the blocks
that hold the answer. Work is vectorized over whole groups of records (no per-record Python),
levels are deduplicated with bitmaps (`_sets`), and decoded data is cached within a byte
budget, so a trace reaching 10^7 records runs at numpy speed in bounded memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from journals import (
    MAX_PARTITION,
    Location,
    ProvenanceEvent,
    group_ids,
    isin_sorted,
    pack_record_id,
    record_id_base,
    unique_ids,
    unpack_record_id,
    unpack_record_ids,
)

from .._blocks import BatchSlice, entry_for
from .._config import RepositoryConfig
from .._errors import NotFound
from .._eventlog import LogReader
from .._layout import Layout
from .._store import LogStore
from .._toc import BatchRef
from ._cache import ByteLRU
from ._deferred import DeferredError, DeferredResolver
from ._forward import ForwardError
from ._forward_store import ForwardIndex
from ._linemarks import LineMarkStore
from ._raw import read_in_groups, read_ranges
from ._scans import ScanRows, scan_of
from ._sets import (
    EMPTY,
    POSITION_BITS,
    concat_sorted,
    difference,
    equal_runs,
    gather_ranges,
)

PARTITION_BITS = MAX_PARTITION.bit_length()

RUN_COMPONENT_TYPE = "lineage-run"  # the run descriptor's batches
_FEW_ROWS = 4  # records of one batch up to which a hop decodes just their rows
_PREFETCH_IDS = 1 << 16  # a hop over up to this many records prefetches its point lookups
_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class BatchLoc:
    """One stored lineage batch: positions [pos_start, pos_start + count) -> event ids."""

    log_first: int
    first_event_id: int
    count: int
    pos_start: int
    component_id: str
    component_type: str
    event_type: str
    attempt: int
    associations: int
    run_id: str = ""
    cp: int = -1
    partition: int = -1


@dataclass
class CapturePointInfo:
    """What a run's descriptor (or, lacking one, its batches) says about a capture point."""

    number: int
    component_id: str
    component_type: str
    event_type: str
    parents: list[int] = field(default_factory=list)
    dependency: str = "unknown"  # source | narrow | shuffle | union | unknown
    partitions: int = 0
    records: int = 0
    associations: int = 0
    captures: str | None = None  # what a reducer keeps of each record: "value" or "key"
    # The deferred narrow policy's fields (group, input, chain) when the combiner's
    # associations are re-derived at trace time (see `_deferred`); None: stored eagerly.
    deferred: dict | None = None


class _Target(NamedTuple):
    """A batch a forward hop may land in: its capture point and partition, where it is, and
    whether its dependency is narrow (then only its own partition's parents lead to it)."""

    cp: int
    part: int
    loc: BatchLoc
    narrow: bool


@dataclass
class RunInfo:
    run_id: str
    capture_points: dict[int, CapturePointInfo]
    descriptor: dict | None
    first_event_id: int
    last_event_id: int
    records: int


@dataclass
class TraceStep:
    """Where a trace stands before a hop: the frontier still to move, the records that have
    stopped (each array ascending), the hops taken so far."""

    frontier: np.ndarray
    ends: list[np.ndarray]
    hops: int


class _Slice:
    """Decoded columns of one stored batch slice."""

    __slots__ = (
        "count",
        "deferred",
        "first_id",
        "nbytes",
        "offsets",
        "parents",
        "starts",
        "uri",
        "values",
        "voffs",
    )

    def __init__(self, entry: BatchSlice) -> None:
        b = entry.batch
        self.first_id = entry.first_id
        self.count = len(b)
        self.starts = b.parent_starts()
        self.parents = b.parent_array()
        self.offsets = b.offsets.to_array() if b.offsets is not None else None
        self.uri = b.location.uri if b.location is not None else None
        self.values = b.values
        self.voffs = b.value_offsets.to_array() if b.value_offsets is not None else None
        # Stored parents are coarse (deferred narrow policy): never read them as they are.
        self.deferred = b.attributes.get("narrow") == "deferred"
        self.nbytes = (
            64
            + sum(
                a.nbytes
                for a in (self.starts, self.parents, self.offsets, self.voffs)
                if a is not None
            )
            + (len(self.values) if self.values else 0)
        )


class LineageIndex:
    """Per-run directories of lineage batches, kept in step with the repository's logs.

    Every public method first refreshes: it calls `catch_up` (the owning repository merges
    what was asked to be merged before the call, e.g. the journals of the action that just
    ended), then takes in the logs committed or aged off since the last call."""

    def __init__(
        self,
        store: LogStore,
        catch_up: Callable[[], object] | None = None,
        forward: ForwardIndex | None = None,
        cache_bytes: int = _CACHE_BYTES,
    ) -> None:
        self._store = store
        self._catch_up = catch_up
        self._lock = threading.RLock()
        self._seen: set[int] = set()
        self._dirs: dict[str, dict[tuple[int, int], list[BatchLoc]]] = {}
        self._firsts: dict[tuple[str, int, int], list[int]] = {}
        self._run_ids: dict[str, list[int]] = {}  # run -> [first id, last id, records]
        self._descriptors: dict[str, tuple[int, int]] = {}  # run -> (version, event id)
        # One byte budget for decoded lineage: backward slices, whole batches (scans), and
        # the forward index's blocks.
        eighth = cache_bytes // 8
        self._cache: ByteLRU[list[_Slice]] = ByteLRU(4 * eighth)
        self._whole: ByteLRU[tuple[np.ndarray, np.ndarray]] = ByteLRU(eighth)
        if forward is None:
            forward = ForwardIndex(store, store.layout, writable=False)
        self._forward = forward
        self._forward.cache.limit = 2 * eighth
        self._deferred = DeferredResolver(self, cache_bytes - 7 * eighth)
        self._infos: dict[str, RunInfo] = {}
        # Forward hops' landing batches per (run, capture point); a refresh that takes in
        # logs drops them and starts a new generation (the forward files' plans follow it).
        self._targets: dict[
            tuple[str, int], tuple[list[CapturePointInfo], dict[int, dict[int, _Target]]]
        ] = {}
        self._generation = 0
        # DataFrame scan rows, re-read from their files; line formats' rare rows from the
        # stored line marks before them (an owner makes those it misses at a trace).
        self._scan_rows = ScanRows(
            LineMarkStore(store.layout.scans, writable=forward.writable, sync=forward.sync)
        )

    @property
    def caches(self) -> tuple[ByteLRU, ...]:
        """The byte-bounded caches of decoded lineage (backward slices, whole batches,
        forward blocks, deferred key maps): their `nbytes` never pass their `limit`."""
        return self._cache, self._whole, self._forward.cache, self._deferred.cache

    # -- directory ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Take in logs committed (or aged off) since the last call; cheap when none were."""
        if self._catch_up is not None:
            self._catch_up()
        readers = self._store.readers()
        live = {r.first_id for r in readers}
        with self._lock:
            if live == self._seen:
                return
            aged_off = bool(self._seen - live)
            if aged_off:  # logs aged off: rebuild (rare; cheap, tocs are in memory)
                self._seen.clear()
                self._dirs.clear()
                self._firsts.clear()
                self._run_ids.clear()
                self._descriptors.clear()
                self._cache.clear()
                self._whole.clear()
                self._forward.forget(live)
                self._deferred.clear()
            touched: set[tuple[str, int, int] | None] = set()
            for r in readers:
                if r.first_id in self._seen:
                    continue
                self._seen.add(r.first_id)
                for b in r.toc.batches:
                    touched.add(self._add(r.first_id, b))
            for key in touched:
                if key is None:
                    continue
                locs = self._dirs[key[0]][key[1:]]
                locs.sort(key=lambda x: x.pos_start)
                self._firsts[key] = [x.pos_start for x in locs]
            if aged_off:  # derived files of runs now wholly gone go with them
                self._scan_rows.forget_marks_but(set(self._dirs))
            self._infos.clear()
            self._targets.clear()
            self._generation += 1

    def _add(self, log_first: int, b: BatchRef) -> tuple[str, int, int] | None:
        if b.record_step != 1:
            return None  # not positional record ids: not part of a Spark run's lineage
        cp, part, pos = unpack_record_id(b.record_start)
        loc = BatchLoc(
            log_first,
            b.first_event_id,
            b.count,
            pos,
            b.component_id,
            b.component_type,
            b.event_type,
            b.attempt,
            b.associations,
            b.run_id,
            cp,
            part,
        )
        self._dirs.setdefault(b.run_id, {}).setdefault((cp, part), []).append(loc)
        ids = self._run_ids.setdefault(b.run_id, [b.first_event_id, 0, 0])
        ids[0] = min(ids[0], b.first_event_id)
        ids[1] = max(ids[1], b.first_event_id + b.count - 1)
        ids[2] += b.count
        if b.component_type == RUN_COMPONENT_TYPE:
            prev = self._descriptors.get(b.run_id)
            if prev is None or part >= prev[0]:
                self._descriptors[b.run_id] = (part, b.first_event_id)
        return (b.run_id, cp, part)

    def runs(self) -> list[str]:
        self.refresh()
        with self._lock:
            return sorted(self._dirs, key=lambda r: self._run_ids[r][0])

    def latest_run(self) -> str:
        runs = self.runs()
        if not runs:
            raise NotFound("the repository holds no lineage runs")
        return runs[-1]

    def run_info(self, run_id: str) -> RunInfo:
        self.refresh()
        with self._lock:
            cached = self._infos.get(run_id)
            if cached is not None:
                return cached
            d = self._dirs.get(run_id)
            if d is None:
                raise NotFound(
                    f"no lineage run {run_id!r} (runs: {', '.join(self.runs()) or 'none'})"
                )
            desc = self.descriptor(run_id)
            cps: dict[int, CapturePointInfo] = {}
            if desc:
                for c in desc.get("capture_points", []):
                    cps[c["cp"]] = CapturePointInfo(
                        c["cp"],
                        c["component_id"],
                        c["component_type"],
                        c["event_type"],
                        list(c.get("parents", [])),
                        c.get("dependency", "unknown"),
                        c.get("partitions", 0),
                        captures=c.get("captures"),
                        deferred=(
                            {k: c[k] for k in ("exact", "group", "input", "chain")}
                            if c.get("narrow") == "deferred"
                            else None
                        ),
                    )
            for (cp, _part), locs in d.items():
                if locs[0].component_type == RUN_COMPONENT_TYPE:
                    continue
                cpi = cps.get(cp)
                if cpi is None:
                    cpi = cps[cp] = CapturePointInfo(
                        cp, locs[0].component_id, locs[0].component_type, locs[0].event_type
                    )
                cpi.records += sum(x.count for x in locs)
                cpi.associations += sum(x.associations for x in locs)
            first, last, records = self._run_ids[run_id]
            info = RunInfo(run_id, dict(sorted(cps.items())), desc, first, last, records)
            self._infos[run_id] = info
            return info

    def descriptor(self, run_id: str) -> dict | None:
        self.refresh()
        ref = self._descriptors.get(run_id)
        if ref is None:
            return None
        ev = self._store.get(ref[1])
        if ev is None or not ev.details:
            return None
        try:
            return json.loads(ev.details)
        except json.JSONDecodeError:
            return None

    def _loc(self, run: str, cp: int, part: int, pos: int) -> BatchLoc | None:
        d = self._dirs.get(run)
        if d is None:
            return None
        locs = d.get((cp, part))
        if not locs:
            return None
        i = bisect_right(self._firsts[(run, cp, part)], pos) - 1
        if i < 0:
            return None
        loc = locs[i]
        return loc if pos < loc.pos_start + loc.count else None

    def partitions(self, run: str, cp: int) -> list[int]:
        self.refresh()
        d = self._dirs.get(run, {})
        return sorted(p for (c, p) in d if c == cp)

    def locs(self, run: str, cp: int, part: int) -> list[BatchLoc]:
        self.refresh()
        return list(self._dirs.get(run, {}).get((cp, part), []))

    # -- records -----------------------------------------------------------------------------

    def event_ids(self, run: str, record_ids: np.ndarray) -> np.ndarray:
        """Event id of each record (0 where the record is not stored)."""
        self.refresh()
        ids = np.asarray(record_ids, dtype=np.int64)
        if not len(ids):
            return np.zeros(0, dtype=np.int64)
        u = as_set(ids)
        ev = np.zeros(len(u), dtype=np.int64)
        for base, loc, positions in self._group(run, u):
            ev[np.searchsorted(u, base + positions)] = (
                loc.first_event_id + positions - loc.pos_start
            )
        return ev if u is ids else ev[np.searchsorted(u, ids)]

    def events(self, run: str, record_ids: np.ndarray) -> list[ProvenanceEvent | None]:
        return [self._store.get(int(e)) if e else None for e in self.event_ids(run, record_ids)]

    def record_at(self, run: str, path: str, offset: int) -> int | None:
        """The first of `records_at`: a record whose line holds byte `offset` of `path`; None
        if no record of the run does."""
        found = self.records_at(run, path, offset)
        return found[0] if found else None

    def records_at(self, run: str, path: str, offset: int) -> list[int]:
        """Every record of the run whose line holds byte `offset` of `path` (input records
        named by (file, offset), as Titian's HadoopLineageRDD names them), by capture point: a
        file read twice in one run (two `textFile`s, two `lc.read`s of it, a self-join) has
        the line at each. Point lookups only: ~log2(records of one partition) events read
        per text source partition that holds the byte."""
        uri = path if "://" in path else "file://" + os.path.abspath(path)
        info = self.run_info(run)
        out = []
        for cp in info.capture_points.values():
            if cp.dependency != "source":
                continue
            for part in self.partitions(run, cp.number):
                base = record_id_base(cp.number, part)
                n = sum(loc.count for loc in self.locs(run, cp.number, part))
                first, last = self._location(run, base), self._location(run, base + n - 1)
                if first is None or last is None or first.uri != uri:
                    continue
                if not first.offset <= offset < last.offset + max(last.length, 1):
                    continue
                lo, hi = 0, n - 1  # the last record starting at or before `offset`
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    loc = self._location(run, base + mid)
                    if loc is not None and loc.offset <= offset:
                        lo = mid
                    else:
                        hi = mid - 1
                out.append(base + lo)
                break  # a line belongs to one partition of a capture point
        for number, scan in self._scans(run).items():
            hit = self._scan_rows.position_of((run, number), scan, path, offset)
            if hit is not None:
                out.append(pack_record_id(number, hit[0], hit[1]))
        return sorted(out)

    # -- DataFrame scans: rows named by position, not stored one by one -----------------------

    def _scans(self, run: str) -> dict[int, dict]:
        desc = self.run_info(run).descriptor or {}
        return {
            c["cp"]: scan
            for c in desc.get("capture_points", [])
            if (scan := scan_of(c)) is not None
        }

    def mark_scan_lines(self, run: str) -> int:
        """Make the stored line marks of every partition of the run's line-format (CSV, JSON
        lines, text) DataFrame scans that has none (the owner only; a read-only open makes
        none), so that every later trace of a rare row reads a few KB from the mark before it
        rather than the partition's lines up to it. Returns how many partitions have marks."""
        done = 0
        for cp, scan in self._scans(run).items():
            for part in range(len(scan["partitions"])):
                done += self._scan_rows.has_line_marks((run, cp), scan, part)
        return done

    def newest_run_with(self, record_id: int) -> str | None:
        """The newest run that stores this record (None if no run does)."""
        for candidate in reversed(self.runs()):
            if self.event_ids(candidate, np.array([record_id]))[0] or self.is_scan_row(
                candidate, record_id
            ):
                return candidate
        return None

    def find_records_at(
        self, path: str, offset: int, run: str | None = None
    ) -> tuple[str, list[int]] | None:
        """(run, `records_at`) for byte `offset` of `path`, in `run` (NotFound if there is no
        such run) or else the newest run that read it."""
        if run is not None:
            self.run_info(run)  # NotFound names the runs there are
        for candidate in [run] if run is not None else list(reversed(self.runs())):
            rids = self.records_at(candidate, path, offset)
            if rids:
                return candidate, rids
        return None

    def is_scan_row(self, run: str, record_id: int) -> bool:
        """Whether `record_id` names a row of one of the run's DataFrame file scans (such
        rows are re-read from their files, not stored)."""
        cp, part, pos = unpack_record_id(record_id)
        scan = self._scans(run).get(cp)
        if scan is None or part >= len(scan["partitions"]):
            return False
        return pos < self._scan_rows.count((run, cp), scan, part)

    def _scan_data(self, run: str, ids: list[int] | np.ndarray) -> dict[int, object]:
        scans = self._scans(run)
        out: dict[int, object] = {}
        if not scans:
            return out
        arr = np.asarray(ids, dtype=np.int64)
        cps, parts, poss = unpack_record_ids(arr)
        asks, masks_of = [], []
        for cp, scan in scans.items():
            sel = cps == cp
            masks = {part: sel & (parts == part) for part in np.unique(parts[sel]).tolist()}
            if masks:
                asks.append(((run, cp), scan, {part: poss[m] for part, m in masks.items()}))
                masks_of.append(masks)
        # All scans and partitions at once: their row groups are read together, concurrently.
        for masks, data in zip(masks_of, self._scan_rows.data_of_scans(asks)):
            for part, m in masks.items():
                out.update(zip(arr[m].tolist(), data[part]))
        return out

    def _location(self, run: str, record_id: int) -> Location | None:
        (ev,) = self.events(run, np.array([record_id], dtype=np.int64))
        return ev.location if ev is not None else None

    def all_records(self, run: str, cp: int) -> np.ndarray:
        """Every record id stored at a capture point, ascending."""
        self.refresh()
        chunks = []
        with self._lock:
            for part in self.partitions(run, cp):
                base = record_id_base(cp, part)
                for loc in self._dirs[run][(cp, part)]:
                    chunks.append(base + loc.pos_start + np.arange(loc.count, dtype=np.int64))
        return concat_sorted(chunks)

    def count_records(self, run: str, cp: int) -> int:
        """How many records are stored at a capture point (no arrays built)."""
        self.refresh()
        with self._lock:
            d = self._dirs.get(run, {})
            return sum(loc.count for (c, _p), locs in d.items() if c == cp for loc in locs)

    def _line_sample(self, loc: BatchLoc) -> tuple[str, int, np.ndarray] | None:
        """A text source batch's sampled line offsets (from its log's forward index)."""
        ff = self._forward.file(loc.log_first)
        return None if ff is None else ff.lines.get(loc.first_event_id)

    def count_partition(self, run: str, cp: int, part: int) -> int:
        """How many records are stored at (capture point, partition)."""
        self.refresh()
        with self._lock:
            return sum(loc.count for loc in self._dirs.get(run, {}).get((cp, part), []))

    def partition_values(self, run: str, cp: int, part: int) -> Iterator[tuple[int, Any]]:
        """(record id, captured value) of every record stored at (capture point, partition),
        decoded slice by slice (no per-record lookups)."""
        base = record_id_base(cp, part)
        for loc in self.locs(run, cp, part):
            evs = loc.first_event_id + np.arange(loc.count, dtype=np.int64)
            for sl, local in self._slices_for(loc, evs):
                if sl.values is None or sl.voffs is None:
                    continue
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
                voffs = sl.voffs.tolist()
                values = sl.values
                for li in local.tolist():
                    raw = values[voffs[li] : voffs[li + 1]]
                    yield first + li, pickle.loads(raw)

    def stored_rows(self, loc: BatchLoc, positions: np.ndarray) -> list[tuple[Any, np.ndarray]]:
        """(captured value, parents as stored) of the records at `positions` (ascending) of
        one batch: what the deferred resolver re-derives exact parents from."""
        evs = loc.first_event_id + positions - loc.pos_start
        out: list[tuple[Any, np.ndarray]] = []
        for sl, local in self._slices_for(loc, evs):
            for li in local.tolist():
                value = None
                if sl.values is not None and sl.voffs is not None:
                    value = _value(sl.values, sl.voffs, li)
                row = EMPTY if sl.parents is None else sl.parents[sl.starts[li] : sl.starts[li + 1]]
                out.append((value, row))
        return out

    def _deferred_cps(self, run: str) -> dict[int, CapturePointInfo]:
        """The run's capture points whose narrow associations are deferred."""
        try:
            cps = self.run_info(run).capture_points
        except NotFound:
            return {}
        return {n: c for n, c in cps.items() if c.deferred}

    # -- hops --------------------------------------------------------------------------------

    def parents(self, run: str, record_ids: np.ndarray) -> np.ndarray:
        """The distinct parent record ids of the given records (backward hop), ascending."""
        self.refresh()
        ids = as_set(np.asarray(record_ids, dtype=np.int64))
        deferred = self._deferred_cps(run)
        out = []
        groups: Iterable[tuple[int, BatchLoc, np.ndarray]] = self._group(run, ids)
        if len(ids) <= _PREFETCH_IDS:
            groups = list(groups)
            self._prefetch_rows(groups, deferred)
        for _, loc, positions in groups:
            if not loc.associations:
                continue  # a source's records: nothing to read
            info = deferred.get(loc.cp)
            if info is not None:  # re-derived by re-running the narrow chain
                out.extend(self._deferred.rows(run, info, loc.partition, loc, positions))
                continue
            evs = loc.first_event_id + positions - loc.pos_start
            few = self._few_rows(run, evs) if len(evs) <= _FEW_ROWS else None
            if few is not None:
                out.extend(few)
                continue
            for sl, local in self._slices_for(loc, evs):
                if sl.parents is not None:
                    out.append(_rows(_exact(sl, run), local))
        return unique_ids(out)

    def _prefetch_rows(
        self, groups: list[tuple[int, BatchLoc, np.ndarray]], deferred: dict[int, CapturePointInfo]
    ) -> None:
        """Have the blocks of a hop's point lookups read at once: a rare key's records sit one
        or two a partition, each in a block of its own, all over the log (at 2 GB, 60 blocks
        read one by one from disk took ~25 ms more than prefetched)."""
        wanted: dict[int, tuple[LogReader, set[int]]] = {}
        for _, loc, positions in groups:
            if not loc.associations or loc.cp in deferred or len(positions) > _FEW_ROWS:
                continue
            evs = loc.first_event_id + positions - loc.pos_start
            reader = self._store.reader_for(int(evs[0]))
            if reader is not None:
                wanted.setdefault(reader.first_id, (reader, set()))[1].update(
                    reader.block_indexes(evs).tolist()
                )
        for reader, blocks in wanted.values():
            with contextlib.suppress(OSError):  # aged off meanwhile: the reads will say so
                reader.prefetch(sorted(blocks))

    def parent_pairs(self, run: str, record_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The backward hop's edges: (child, parent) arrays, one entry per stored association
        of the given records (a graph needs the edges, not only the parents)."""
        self.refresh()
        ids = as_set(np.asarray(record_ids, dtype=np.int64))
        deferred = self._deferred_cps(run)
        kids, pars = [], []
        for base, loc, positions in self._group(run, ids):
            info = deferred.get(loc.cp)
            if info is not None:
                rows = self._deferred.rows(run, info, loc.partition, loc, positions)
                kids.append(np.repeat(base + positions, [len(r) for r in rows]))
                pars.append(np.concatenate(rows) if rows else EMPTY)
                continue
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                if sl.parents is None:
                    continue
                lo, hi = _exact(sl, run).starts[local], sl.starts[local + 1]
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
                kids.append(np.repeat(first + local, hi - lo))
                pars.append(gather_ranges(sl.parents, lo, hi))
        return _pairs(kids, pars)

    def parent_counts(self, run: str, cp: int) -> dict[int, int]:
        """Associations of `cp`'s records by their parents' capture point (a join or a union
        has several); read from the batches unless the descriptor names a single parent."""
        info = self.run_info(run)
        c = info.capture_points.get(cp)
        if c is None:
            raise NotFound(f"run {run} has no capture point {cp}")
        if info.descriptor is not None and len(c.parents) == 1:
            return {c.parents[0]: c.associations}
        flats = [
            self.batch_parents(loc)[1]
            for part in self.partitions(run, cp)
            for loc in self.locs(run, cp, part)
        ]
        if not flats:
            return {}
        cps, _, counts = group_ids(unpack_record_ids(np.concatenate(flats))[0])
        return dict(zip(cps.tolist(), counts.tolist()))

    def children(self, run: str, record_ids: np.ndarray, info: RunInfo | None = None) -> np.ndarray:
        """The distinct records that have any of these records as a parent (forward hop),
        ascending. Reads, per log, only the forward index blocks that hold the answer."""
        return unique_ids([kids for _pars, kids in self._forward_edges(run, record_ids, info)])

    def child_pairs(
        self, run: str, record_ids: np.ndarray, info: RunInfo | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The forward hop's edges: (parent, child) arrays, one entry per association from one
        of the given records to a stored child (a graph needs the edges, not only the
        children)."""
        edges = self._forward_edges(run, record_ids, info, pairs=True)
        return _pairs([p for p, _ in edges if p is not None], [k for _, k in edges])

    def _forward_edges(
        self,
        run: str,
        record_ids: np.ndarray,
        info: RunInfo | None = None,
        pairs: bool = False,
    ) -> list[tuple[np.ndarray | None, np.ndarray]]:
        """(parents, children) chunks of the forward hop from `record_ids`; parents aligned
        with children when `pairs`, else None (children only, possibly repeated)."""
        self.refresh()
        ids = as_set(np.asarray(record_ids, dtype=np.int64))
        if not len(ids):
            return []
        info = info or self.run_info(run)
        out: list[tuple[np.ndarray | None, np.ndarray]] = []
        for cp, mine in _by_capture_point(ids):
            deferred, by_log, generation = self._forward_targets(run, info, cp)
            for c in deferred:
                out.append(self._deferred.child_edges(run, c, mine, pairs))
            for log_first, allowed in by_log.items():
                out.extend(
                    self._edges_from_log(
                        run, (run, cp), generation, log_first, allowed, mine, pairs
                    )
                )
        return out

    def _forward_targets(
        self, run: str, info: RunInfo, cp: int
    ) -> tuple[list[CapturePointInfo], dict[int, dict[int, _Target]], int]:
        """Where a forward hop from `cp` may land: the deferred capture points it feeds, and
        per log the batches (first event id -> target) of the others; made once per refresh
        (a hop costs its answer, not a walk over every partition), and the generation of
        that set (the forward files' hop plans are made once per generation)."""
        with self._lock:
            hit = self._targets.get((run, cp))
            if hit is not None:
                return (*hit, self._generation)
            deferred: list[CapturePointInfo] = []
            by_log: dict[int, dict[int, _Target]] = {}
            for child in self._child_cps(info, cp):
                c = info.capture_points.get(child)
                if c is not None and c.deferred and int(c.deferred["input"]) == cp:
                    deferred.append(c)
                    continue
                narrow = c is not None and c.dependency == "narrow"
                for part in self.partitions(run, child):
                    for loc in self._dirs[run][(child, part)]:
                        if loc.associations:
                            by_log.setdefault(loc.log_first, {})[loc.first_event_id] = _Target(
                                child, part, loc, narrow
                            )
            self._targets[(run, cp)] = (deferred, by_log)
            return deferred, by_log, self._generation

    def _edges_from_log(
        self,
        run: str,
        key: Hashable,
        generation: int,
        log_first: int,
        allowed: dict[int, _Target],
        parents: np.ndarray,
        pairs: bool,
    ) -> list[tuple[np.ndarray | None, np.ndarray]]:
        """Edges from `parents` into the `allowed` batches of one log: through its forward
        index, or by scanning those batches when the index cannot be used."""
        ff = self._forward.file(log_first)
        for _attempt in range(2):
            if ff is None:
                break
            try:
                plan = ff.plan(key, generation, allowed.keys())
                if plan.deferred:
                    raise _no_descriptor(run)
                kids, pars = ff.hop(parents, plan, self._forward.block, pairs)
                return [(pars, kids)] if len(kids) else []
            except ForwardError as e:  # damaged block: rebuilt (owner) or not used again
                ff = self._forward.damaged(log_first, e)
            except FileNotFoundError:
                return []  # the log was aged off meanwhile
        # A narrow batch holds children of its own partition's parents only.
        parts = set(((parents >> POSITION_BITS) & MAX_PARTITION).tolist())
        return [
            self._children_in(t.cp, t.part, t.loc, parents)
            for t in allowed.values()
            if not t.narrow or t.part in parts
        ]

    def trace(
        self, run: str, record_ids: np.ndarray, forward: bool = False, depth: int | None = None
    ) -> tuple[np.ndarray, int]:
        """Records reached by hopping back (or forward) `depth` capture points, or all the way
        to the sources (final outputs) when depth is None: records where a trace ends
        (`stop_or_move`) are kept, records that reach nothing elsewhere are not (a line a filter
        dropped has no outputs; an aggregate of no rows has no sources). Returns (record ids
        ascending, hops taken).

        Only the frontier is held (levels stream: each replaces the last); capture points
        that cannot lead anywhere (sources going back, final outputs going forward) are not
        read at all."""
        # Only the last step is kept: earlier frontiers are dropped as the trace goes.
        (last,) = deque(self.trace_steps(run, record_ids, forward, depth), maxlen=1)
        return concat_sorted([*last.ends, last.frontier]), last.hops

    def trace_steps(
        self, run: str, record_ids: np.ndarray, forward: bool = False, depth: int | None = None
    ) -> Iterator[TraceStep]:
        """`trace` a level at a time: before each hop (and once at the end) the frontier still
        to move, the records that stopped, and the hops taken. A caller may stop iterating
        and go on elsewhere (a Spark job, when the frontier grows large)."""
        hop = self.children if forward else self.parents
        frontier = as_set(np.asarray(record_ids, dtype=np.int64))
        info = self.run_info(run) if len(frontier) else None
        ends: list[np.ndarray] = []
        hops = 0
        while len(frontier) and (depth is None or hops < depth):
            yield TraceStep(frontier, ends, hops)
            nxt: list[np.ndarray] = []
            for cp, group in _by_capture_point(frontier):  # some may end earlier
                end, moves = self._stop_or_move(run, info, cp, forward)
                if end:
                    ends.append(group)
                moved = hop(run, group) if moves else EMPTY
                if len(moved):
                    nxt.append(moved)
            if not nxt:
                frontier = EMPTY
                break
            frontier = nxt[0] if len(nxt) == 1 else unique_ids(nxt)  # hops return sets
            del nxt
            hops += 1
            if hops > 100_000:  # lineage is a DAG: only a damaged repository could loop
                raise RuntimeError("lineage trace does not terminate (cycle in stored lineage?)")
        yield TraceStep(frontier, ends, hops)

    def stop_or_move(self, run: str, cp: int, forward: bool) -> tuple[bool, bool]:
        """(end, moves) for a trace's records at `cp`. `end`: they belong in its result:
        going back, a source (RECEIVE; an output made from no rows, as an aggregate of
        none, has no sources); going forward, an action's output (SEND: it left the run,
        even when a later action reads it too), or a capture point other than a source that
        nothing was made from (a run whose action failed stops there). `moves`: they may
        have parents (children) to hop to."""
        return self._stop_or_move(run, self.run_info(run), cp, forward)

    def _stop_or_move(
        self, run: str, info: RunInfo | None, cp: int, forward: bool
    ) -> tuple[bool, bool]:
        moves = self._may_move(run, info, cp, forward)
        c = info.capture_points.get(cp) if info is not None else None
        ends, starts = ("SEND", "RECEIVE") if forward else ("RECEIVE", "SEND")
        if c is not None and c.event_type in (ends, starts):
            return c.event_type == ends, moves
        return not moves, moves

    def _may_move(self, run: str, info: RunInfo | None, cp: int, forward: bool) -> bool:
        """False when records at `cp` have nowhere to go: no stored parents (backward), no
        capture point fed by it (forward)."""
        if forward:
            return info is None or bool(self._child_cps(info, cp))
        with self._lock:
            return any(
                loc.associations
                for (c, _p), locs in self._dirs.get(run, {}).items()
                if c == cp
                for loc in locs
            )

    def reachable(self, run: str, record_ids: np.ndarray, forward: bool = False) -> np.ndarray:
        """Every record one or more hops back (forward) from these, at every level."""
        hop = self.children if forward else self.parents
        frontier = as_set(np.asarray(record_ids, dtype=np.int64))
        found: list[np.ndarray] = []
        seen = frontier
        while len(frontier):
            nxt = difference(hop(run, frontier), seen)
            if not len(nxt):
                break
            found.append(nxt)
            seen = unique_ids([seen, nxt])
            frontier = nxt
        return concat_sorted(found)

    def parent_lists(self, run: str, record_ids: np.ndarray) -> dict[int, np.ndarray]:
        """Each stored record's parents, in stored order (e.g. a join's left, then right)."""
        self.refresh()
        out: dict[int, np.ndarray] = {}
        deferred = self._deferred_cps(run)
        for base, loc, positions in self._group(run, as_set(np.asarray(record_ids, np.int64))):
            info = deferred.get(loc.cp)
            if info is not None:
                rows = self._deferred.rows(run, info, loc.partition, loc, positions)
                out.update(zip((base + positions).tolist(), rows))
                continue
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                first = base + loc.pos_start + (_exact(sl, run).first_id - loc.first_event_id)
                for li in local.tolist():
                    lo, hi = sl.starts[li], sl.starts[li + 1]
                    out[first + li] = (
                        sl.parents[lo:hi] if sl.parents is not None else np.array([], np.int64)
                    )
        return out

    def first_children(self, run: str, parents: np.ndarray, cp: int) -> dict[int, int]:
        """For each parent, the first (lowest) record at `cp` made from it."""
        self.refresh()
        parents = unique_ids(np.asarray(parents, dtype=np.int64))
        out: dict[int, int] = {}
        for part in self.partitions(run, cp):
            base = record_id_base(cp, part)
            for loc in self.locs(run, cp, part):
                starts, flat = self.batch_parents(loc)
                hit = np.flatnonzero(isin_sorted(flat, parents))
                if not len(hit):
                    continue
                rec = np.searchsorted(starts, hit, side="right") - 1
                ids = base + loc.pos_start + rec
                for p, rid in zip(flat[hit].tolist(), ids.tolist()):
                    if p not in out or rid < out[p]:
                        out[p] = rid
        return out

    def _child_cps(self, info: RunInfo, cp: int) -> list[int]:
        known = [c.number for c in info.capture_points.values() if cp in c.parents]
        if info.descriptor is not None:
            return known
        # No descriptor: any other capture point of the run may refer to this one.
        return [c for c in info.capture_points if c != cp]

    def _children_in(
        self, cp: int, part: int, loc: BatchLoc, parents: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(parent, child) for each association of one batch to one of `parents` (ascending),
        by scanning the batch's parents (the forward index's fallback)."""
        starts, flat = self.batch_parents(loc)
        if not len(flat):
            return flat, flat
        if len(parents) <= 8:  # a few ids: equality passes beat isin's sort
            mask = flat == parents[0]
            for p in parents[1:]:
                mask |= flat == p
        else:
            mask = isin_sorted(flat, parents)
        hit = np.flatnonzero(mask)
        rec = np.searchsorted(starts, hit, side="right") - 1
        return flat[hit], record_id_base(cp, part) + loc.pos_start + rec

    def batch_parents(self, loc: BatchLoc) -> tuple[np.ndarray, np.ndarray]:
        """A whole batch's CSR parents as two arrays (for scans), cached within the budget."""
        key = (loc.log_first, loc.first_event_id)
        hit = self._whole.get(key)
        if hit is not None:
            return hit
        info = self._deferred_cps(loc.run_id).get(loc.cp) if loc.run_id else None
        if info is not None:  # every record's parents, re-derived: the whole partition re-runs
            positions = loc.pos_start + np.arange(loc.count, dtype=np.int64)
            rows = self._deferred.rows(loc.run_id, info, loc.partition, loc, positions)
            row_starts = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum([len(r) for r in rows], out=row_starts[1:])
            flat = np.concatenate(rows) if rows else EMPTY
            return self._whole.put(key, (row_starts, flat), row_starts.nbytes + flat.nbytes)
        evs = loc.first_event_id + np.arange(loc.count, dtype=np.int64)
        starts, flats, base = [np.zeros(1, dtype=np.int64)], [], 0
        for sl, local in self._slices_for(loc, evs):
            if sl.parents is None:
                continue
            _exact(sl, loc.run_id)
            lo, hi = int(sl.starts[local[0]]), int(sl.starts[local[-1] + 1])
            flats.append(sl.parents[lo:hi])
            starts.append(base + sl.starts[local[0] + 1 : local[-1] + 2] - lo)
            base += hi - lo
        out = (
            np.concatenate(starts),
            np.concatenate(flats) if flats else np.array([], dtype=np.int64),
        )
        return self._whole.put(key, out, out[0].nbytes + out[1].nbytes)

    def _group(self, run: str, ids: np.ndarray) -> Iterator[tuple[int, BatchLoc, np.ndarray]]:
        """(record id of position 0, BatchLoc, positions ascending) for the records that are
        stored, of `ids` (ascending, distinct). Groups are found by binary search: no array the
        size of `ids` is made besides each group's positions."""
        with self._lock:
            d = self._dirs.get(run, {})
            for k, a, b in _runs_of(ids, POSITION_BITS):
                cp, part = k >> PARTITION_BITS, k & MAX_PARTITION
                locs = d.get((cp, part))
                if not locs:
                    continue
                base = record_id_base(cp, part)
                pos = ids[a:b] - base
                for loc in locs:
                    i = int(np.searchsorted(pos, loc.pos_start))
                    j = int(np.searchsorted(pos, loc.pos_start + loc.count))
                    if j > i:
                        yield base, loc, pos[i:j]

    def _slices_for(
        self, loc: BatchLoc, event_ids: np.ndarray
    ) -> Iterator[tuple[_Slice, np.ndarray]]:
        """(decoded slice, local record indexes) covering the given event ids of one batch."""
        reader = self._store.reader_for(int(event_ids[0])) if len(event_ids) else None
        if reader is None:
            return
        if len(event_ids) > 1 and not bool((event_ids[1:] >= event_ids[:-1]).all()):
            event_ids = np.sort(event_ids)
        blocks = reader.block_indexes(event_ids)
        for a, b in equal_runs(blocks):
            in_block = event_ids[a:b]
            for sl in self._block_slices(reader, int(blocks[a])):
                if sl.first_id + sl.count <= in_block[0] or sl.first_id > in_block[-1]:
                    continue
                i = int(np.searchsorted(in_block, sl.first_id))
                j = int(np.searchsorted(in_block, sl.first_id + sl.count))
                if j > i:
                    yield sl, in_block[i:j] - sl.first_id

    def _few_rows(self, run: str, evs: np.ndarray) -> list[np.ndarray] | None:
        """The stored parents of a few records (event ids) whose blocks are not decoded yet,
        decoding only their rows (a rare key's record in a large slice: its row, not the
        slice). None when a block is already decoded (then that is cheaper)."""
        reader = self._store.reader_for(int(evs[0]))
        if reader is None:
            return None
        rows = []
        for ev in evs.tolist():
            bi = reader.block_index(ev)
            if self._cache.get((reader.first_id, bi)) is not None:
                return None
            try:
                entry = entry_for(self._store.block(reader, bi), ev)
            except FileNotFoundError:
                return []
            if not isinstance(entry, BatchSlice):
                return None
            b = entry.batch
            if b.attributes.get("narrow") == "deferred":
                raise _no_descriptor(run)
            if b.parent_ids is None or b.parent_counts is None:
                continue
            rows.append(b.parent_ids.row(b.parent_counts.to_array(), ev - entry.first_id))
        return rows

    def _block_slices(self, reader, bi: int) -> list[_Slice]:
        """Decoded lineage slices of one block, through the byte-bounded cache."""
        key = (reader.first_id, bi)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            entries = self._store.block(reader, bi)
        except FileNotFoundError:
            return []
        out = [_Slice(e) for e in entries if isinstance(e, BatchSlice)]
        return self._cache.put(key, out, sum(sl.nbytes for sl in out) + 64)

    # -- data --------------------------------------------------------------------------------

    def iter_data(
        self, run: str, record_ids: np.ndarray, page: int = 10_000
    ) -> Iterator[tuple[np.ndarray, list]]:
        """(ids, raw data) a page at a time, in the order of `record_ids`: what a large
        traced set is read through, so only one page of Python objects lives at once."""
        ids = np.asarray(record_ids, dtype=np.int64)
        for a in range(0, len(ids), page):
            chunk = ids[a : a + page]
            yield chunk, self.record_data(run, chunk)

    def record_data(self, run: str, record_ids: np.ndarray) -> list:
        """Raw data of each record: source bytes re-read by offset, or the captured value;
        None where neither was captured. (A deferred combiner record's data is its key.)"""
        self.refresh()
        ids = np.asarray(record_ids, dtype=np.int64)
        out: dict[int, object] = {}
        reads: dict[str, list[tuple[int, int, int]]] = {}  # uri -> (offset, length, record)
        deferred = self._deferred_cps(run)
        grouped: dict[str, list[tuple[np.ndarray, ...]]] = {}
        distinct = unique_ids(ids)
        for base, loc, positions in self._group(run, distinct):
            sample = self._line_sample(loc)
            if sample is not None:  # text lines: one read per sampled group, no block decode
                grouped.setdefault(sample[0], []).append(_line_groups(base, loc, positions, sample))
                continue
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
                if sl.voffs is not None and sl.values is not None:
                    for li in local.tolist():
                        out[first + li] = _value(sl.values, sl.voffs, li)
                    if loc.cp in deferred:
                        for li in local.tolist():
                            v = out[first + li]
                            out[first + li] = v[0] if isinstance(v, tuple) else v
                elif sl.offsets is not None and sl.uri is not None:
                    todo = reads.setdefault(sl.uri, [])
                    for li in local.tolist():
                        start, end = int(sl.offsets[li]), int(sl.offsets[li + 1])
                        todo.append((start, end - start, first + li))
        for uri, parts in grouped.items():  # one map of each file, one slice per line
            starts, ends, which, rids = (np.concatenate(c).tolist() for c in zip(*parts))
            out.update(zip(rids, read_in_groups(uri, starts, ends, which)))
        for uri, todo in reads.items():  # one open per file, reads in offset order
            for rid, text in zip((t[2] for t in sorted(todo)), read_ranges(uri, sorted(todo))):
                out[rid] = text
        if len(out) < len(distinct) and self._scans(run):  # DataFrame scan rows: their files
            missing = [r for r in distinct.tolist() if r not in out] if out else distinct
            if len(missing):
                out.update(self._scan_data(run, missing))
        return list(map(out.get, ids.tolist()))


def _value(values: bytes, voffs: np.ndarray, li: int) -> Any:
    raw = values[int(voffs[li]) : int(voffs[li + 1])]
    try:
        return pickle.loads(raw)
    except Exception:  # a value that cannot be rebuilt here is shown as its bytes
        return raw


def _pairs(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not b:
        return EMPTY, EMPTY.copy()
    return (
        np.concatenate(a).astype(np.int64, copy=False),
        np.concatenate(b).astype(np.int64, copy=False),
    )


def _line_groups(
    base: int, loc: BatchLoc, positions: np.ndarray, sample: tuple[str, int, np.ndarray]
) -> tuple[np.ndarray, ...]:
    """For the records at `positions` of a text source batch: the byte range of the sampled
    group of lines holding each, its line in that group, and its record id."""
    _uri, stride, offs = sample
    local = positions - loc.pos_start
    groups = local // stride
    return offs[groups], offs[groups + 1], local - groups * stride, base + positions


def _exact(sl: _Slice, run: str) -> _Slice:
    """`sl`, if its stored parents are the exact ones; a deferred batch's are coarse, and
    reading them without re-deriving would be silently wrong lineage."""
    if sl.deferred:
        raise _no_descriptor(run)
    return sl


def _no_descriptor(run: str) -> DeferredError:
    return DeferredError(
        f"run {run!r} has deferred narrow lineage but its run descriptor (which holds the "
        "chain to re-derive it) is not in the repository"
    )


def as_set(ids: np.ndarray) -> np.ndarray:
    """`ids` if already ascending and distinct (a trace's levels are), else their set."""
    if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
        return ids
    return unique_ids(ids)


def _by_capture_point(ids: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(capture point, its ids) of ascending ids: contiguous runs, the capture point being
    the ids' top bits."""
    for cp, a, b in _runs_of(ids, POSITION_BITS + PARTITION_BITS):
        yield cp, ids[a:b]


def _runs_of(ids: np.ndarray, shift: int) -> Iterator[tuple[int, int, int]]:
    """(value, start, stop) of the runs of equal `id >> shift` in ascending ids, found by
    binary search (a few per run) rather than by shifting every id: a trace's level can hold
    10^7-10^8 ids, and a full-size temporary is hundreds of MB."""
    a, n = 0, len(ids)
    while a < n:
        k = int(ids[a]) >> shift
        b = int(np.searchsorted(ids, (k + 1) << shift, side="left"))
        yield k, a, b
        a = b


def _rows(sl: _Slice, local: np.ndarray) -> np.ndarray:
    """The parents of records `local` (ascending) of a slice, concatenated (views when the
    records are contiguous: a hot key's rows are not copied)."""
    assert sl.parents is not None
    if len(local) == sl.count:
        return sl.parents
    first, last = int(local[0]), int(local[-1])
    if last - first + 1 == len(local):
        return sl.parents[int(sl.starts[first]) : int(sl.starts[last + 1])]
    return gather_ranges(sl.parents, sl.starts[local], sl.starts[local + 1])


def open_index(path: str, cache_bytes: int = _CACHE_BYTES) -> LineageIndex:
    """A read-only lineage index over the event logs of the repository at `path`, without
    the facade (no lock, no threads, no search index): what a Spark worker tracing its part
    of a distributed trace opens. It sees the logs committed when it was opened or refreshed.
    The repository directory must be readable where this runs."""
    layout = Layout(os.path.abspath(path))
    store = LogStore(layout)
    store.scan()
    config = RepositoryConfig.load(layout.config) if os.path.exists(layout.config) else None
    enabled = config.forward_index if config is not None else True
    forward = ForwardIndex(store, layout, enabled=enabled, writable=False)
    # Each lookup first picks up logs committed (or aged off) since: a worker process lives on.
    return LineageIndex(store, store.scan, forward, cache_bytes)
