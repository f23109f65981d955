"""Lineage over stored events: record ids to events, backward and forward hops, raw data.

Record ids are (capture point, partition, position). Every lineage batch's toc row says which
positions of which (run, capture point, partition) it holds and the event id of the first, so
finding a record's event is a dictionary lookup and a bisect, never a scan. Backward hops read
only the blocks holding the asked-for records (parents are stored with each record, CSR);
forward hops read the child capture point's batches and match parent ids with numpy, pruned
to the same partition when the run's descriptor says the dependency is narrow.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

from .._blocks import BatchSlice
from .._errors import NotFound
from .._store import LogStore
from .._toc import BatchRef
from ._raw import read_ranges
from ._scans import ScanRows, scan_of

PARTITION_BITS = MAX_PARTITION.bit_length()

RUN_COMPONENT_TYPE = "lineage-run"  # the run descriptor's batches
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


@dataclass
class RunInfo:
    run_id: str
    capture_points: dict[int, CapturePointInfo]
    descriptor: dict | None
    first_event_id: int
    last_event_id: int
    records: int


class _Slice:
    """Decoded columns of one stored batch slice."""

    __slots__ = (
        "count",
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

    def __init__(self, store: LogStore, catch_up: Callable[[], object] | None = None) -> None:
        self._store = store
        self._catch_up = catch_up
        self._lock = threading.RLock()
        self._seen: set[int] = set()
        self._dirs: dict[str, dict[tuple[int, int], list[BatchLoc]]] = {}
        self._firsts: dict[tuple[str, int, int], list[int]] = {}
        self._run_ids: dict[str, list[int]] = {}  # run -> [first id, last id, records]
        self._descriptors: dict[str, tuple[int, int]] = {}  # run -> (version, event id)
        self._cache: OrderedDict[tuple[int, int], list[_Slice]] = OrderedDict()
        self._cache_bytes = 0
        self._infos: dict[str, RunInfo] = {}
        self._whole: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._whole_bytes = 0
        self._scan_rows = ScanRows()  # DataFrame scan rows, re-read from their files

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
            if self._seen - live:  # logs aged off: rebuild (rare; cheap, tocs are in memory)
                self._seen.clear()
                self._dirs.clear()
                self._firsts.clear()
                self._run_ids.clear()
                self._descriptors.clear()
                self._cache.clear()
                self._cache_bytes = 0
                self._whole.clear()
                self._whole_bytes = 0
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
            self._infos.clear()

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

    def locs(self, run: str, cp: int, part: int) -> list[BatchLoc]:
        self.refresh()
        return list(self._dirs.get(run, {}).get((cp, part), []))

    # -- records -----------------------------------------------------------------------------

    def event_ids(self, run: str, record_ids: np.ndarray) -> np.ndarray:
        """Event id of each record (0 where the record is not stored)."""
        self.refresh()
        out = np.zeros(len(record_ids), dtype=np.int64)
        cps, parts, poss = unpack_record_ids(np.asarray(record_ids, dtype=np.int64))
        with self._lock:
            for k in range(len(out)):
                loc = self._loc(run, int(cps[k]), int(parts[k]), int(poss[k]))
                if loc is not None:
                    out[k] = loc.first_event_id + int(poss[k]) - loc.pos_start
        return out

    def events(self, run: str, record_ids: np.ndarray) -> list[ProvenanceEvent | None]:
        return [self._store.get(int(e)) if e else None for e in self.event_ids(run, record_ids)]

    def record_at(self, run: str, path: str, offset: int) -> int | None:
        """The text-source record whose line holds byte `offset` of `path` (input records named
        by (file, offset), as Titian's HadoopLineageRDD names them); None if no stored record
        of the run does. Point lookups only: ~log2(records of one partition) events read."""
        uri = path if "://" in path else "file://" + os.path.abspath(path)
        info = self.run_info(run)
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
                return base + lo
        return self._scan_record_at(run, path, offset)

    # -- DataFrame scans: rows named by position, not stored one by one -----------------------

    def _scans(self, run: str) -> dict[int, dict]:
        desc = self.run_info(run).descriptor or {}
        return {
            c["cp"]: scan
            for c in desc.get("capture_points", [])
            if (scan := scan_of(c)) is not None
        }

    def _scan_record_at(self, run: str, path: str, offset: int) -> int | None:
        for cp, scan in self._scans(run).items():
            hit = self._scan_rows.position_of((run, cp), scan, path, offset)
            if hit is not None:
                return pack_record_id(cp, hit[0], hit[1])
        return None

    def newest_run_with(self, record_id: int) -> str | None:
        """The newest run that stores this record (None if no run does)."""
        for candidate in reversed(self.runs()):
            if self.event_ids(candidate, np.array([record_id]))[0] or self.is_scan_row(
                candidate, record_id
            ):
                return candidate
        return None

    def find_record_at(
        self, path: str, offset: int, run: str | None = None
    ) -> tuple[str, int] | None:
        """(run, record id) of the text-input line holding byte `offset` of `path`, in `run`
        (NotFound if there is no such run) or else the newest run that read it."""
        if run is not None:
            self.run_info(run)  # NotFound names the runs there are
        for candidate in [run] if run is not None else list(reversed(self.runs())):
            rid = self.record_at(candidate, path, offset)
            if rid is not None:
                return candidate, rid
        return None

    def is_scan_row(self, run: str, record_id: int) -> bool:
        """Whether `record_id` names a row of one of the run's DataFrame file scans (such
        rows are re-read from their files, not stored)."""
        cp, part, pos = unpack_record_id(record_id)
        scan = self._scans(run).get(cp)
        if scan is None or part >= len(scan["partitions"]):
            return False
        return pos < self._scan_rows.count((run, cp), scan, part)

    def _scan_data(self, run: str, ids: list[int]) -> dict[int, object]:
        scans = self._scans(run)
        out: dict[int, object] = {}
        if not scans:
            return out
        arr = np.asarray(ids, dtype=np.int64)
        cps, parts, poss = unpack_record_ids(arr)
        for cp, scan in scans.items():
            sel = cps == cp
            for part in np.unique(parts[sel]).tolist():
                m = sel & (parts == part)
                data = self._scan_rows.data((run, cp), scan, part, poss[m])
                out.update(zip(arr[m].tolist(), data))
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
        return unique_ids(np.concatenate(chunks)) if chunks else np.array([], dtype=np.int64)

    # -- hops --------------------------------------------------------------------------------

    def parents(self, run: str, record_ids: np.ndarray) -> np.ndarray:
        """The distinct parent record ids of the given records (backward hop)."""
        return unique_ids(self.parent_pairs(run, record_ids)[1])

    def children(self, run: str, record_ids: np.ndarray, info: RunInfo | None = None) -> np.ndarray:
        """The distinct records that have any of these records as a parent (forward hop)."""
        return unique_ids(self.child_pairs(run, record_ids, info)[1])

    def parent_pairs(self, run: str, record_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The backward hop's edges: (child, parent) arrays, one entry per stored association
        of the given records (a graph needs the edges, not only the parents)."""
        self.refresh()
        ids = unique_ids(np.asarray(record_ids, dtype=np.int64))
        kids, pars = [], []
        for base, loc, positions in self._group(run, ids):
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                if sl.parents is None:
                    continue
                lo, hi = sl.starts[local], sl.starts[local + 1]
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
                kids.append(np.repeat(first + local, hi - lo))
                pars.append(_gather_ranges(sl.parents, lo, hi))
        return _pairs(kids, pars)

    def child_pairs(
        self, run: str, record_ids: np.ndarray, info: RunInfo | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The forward hop's edges: (parent, child) arrays, one entry per association from one
        of the given records to a stored child."""
        self.refresh()
        ids = unique_ids(np.asarray(record_ids, dtype=np.int64))
        if not len(ids):
            return ids, ids
        info = info or self.run_info(run)
        cps, parts, _ = unpack_record_ids(ids)
        pars, kids = [], []
        for cp in unique_ids(cps).tolist():
            mine = ids[cps == cp]
            my_parts = set(parts[cps == cp].tolist())
            for child in self._child_cps(info, cp):
                c = info.capture_points.get(child)
                narrow = c is not None and c.dependency == "narrow"
                for part in self.partitions(run, child):
                    if narrow and part not in my_parts:
                        continue
                    for loc in self._dirs[run][(child, part)]:
                        hit_parents, hit_children = self._children_in(child, part, loc, mine)
                        pars.append(hit_parents)
                        kids.append(hit_children)
        return _pairs(pars, kids)

    def trace(
        self, run: str, record_ids: np.ndarray, forward: bool = False, depth: int | None = None
    ) -> tuple[np.ndarray, int]:
        """Records reached by hopping back (or forward) `depth` capture points, or all the way
        to the sources (final outputs) when depth is None. Records with nowhere further to go
        stay in the result. Returns (record ids, hops taken)."""
        hop = self.children if forward else self.parents
        frontier = unique_ids(np.asarray(record_ids, dtype=np.int64))
        ends: list[np.ndarray] = []
        hops = 0
        while len(frontier) and (depth is None or hops < depth):
            nxt: list[np.ndarray] = []
            stuck: list[np.ndarray] = []
            cps = unpack_record_ids(frontier)[0]
            for cp in unique_ids(cps).tolist():  # per capture point: some may end earlier
                group = frontier[cps == cp]
                moved = hop(run, group)
                (nxt if len(moved) else stuck).append(moved if len(moved) else group)
            if not nxt:
                ends.extend(stuck)
                frontier = np.array([], dtype=np.int64)
                break
            ends.extend(stuck)
            frontier = unique_ids(np.concatenate(nxt))
            hops += 1
            if hops > 100_000:  # lineage is a DAG: only a damaged repository could loop
                raise RuntimeError("lineage trace does not terminate (cycle in stored lineage?)")
        ends.append(frontier)
        out = unique_ids(np.concatenate(ends)) if ends else frontier
        return out, hops

    def reachable(self, run: str, record_ids: np.ndarray, forward: bool = False) -> np.ndarray:
        """Every record one or more hops back (forward) from these, at every level."""
        hop = self.children if forward else self.parents
        frontier = unique_ids(np.asarray(record_ids, dtype=np.int64))
        found: list[np.ndarray] = []
        seen = frontier
        while len(frontier):
            reached = unique_ids(hop(run, frontier))
            nxt = reached[~isin_sorted(reached, seen)]
            if not len(nxt):
                break
            found.append(nxt)
            seen = unique_ids(np.concatenate([seen, nxt]))
            frontier = nxt
        return unique_ids(np.concatenate(found)) if found else np.array([], dtype=np.int64)

    def parent_lists(self, run: str, record_ids: np.ndarray) -> dict[int, np.ndarray]:
        """Each stored record's parents, in stored order (e.g. a join's left, then right)."""
        self.refresh()
        out: dict[int, np.ndarray] = {}
        for base, loc, positions in self._group(run, unique_ids(np.asarray(record_ids))):
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
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
        """(parent, child) for each association of one batch to one of `parents` (sorted)."""
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
        """A whole batch's CSR parents as two arrays (for forward scans), cached by bytes."""
        key = (loc.log_first, loc.first_event_id)
        with self._lock:
            hit = self._whole.get(key)
            if hit is not None:
                self._whole.move_to_end(key)
                return hit
        evs = loc.first_event_id + np.arange(loc.count, dtype=np.int64)
        starts, flats, base = [np.zeros(1, dtype=np.int64)], [], 0
        for sl, local in self._slices_for(loc, evs):
            if sl.parents is None:
                continue
            lo, hi = int(sl.starts[local[0]]), int(sl.starts[local[-1] + 1])
            flats.append(sl.parents[lo:hi])
            starts.append(base + sl.starts[local[0] + 1 : local[-1] + 2] - lo)
            base += hi - lo
        out = (
            np.concatenate(starts),
            np.concatenate(flats) if flats else np.array([], dtype=np.int64),
        )
        with self._lock:
            self._whole[key] = out
            self._whole_bytes += out[0].nbytes + out[1].nbytes
            while self._whole_bytes > _CACHE_BYTES and len(self._whole) > 1:
                _, old = self._whole.popitem(last=False)
                self._whole_bytes -= old[0].nbytes + old[1].nbytes
        return out

    def _group(self, run: str, ids: np.ndarray):
        """(record id of position 0, BatchLoc, positions) for the records that are stored."""
        cps, parts, poss = unpack_record_ids(ids)
        key = (cps << PARTITION_BITS) | parts
        with self._lock:
            for k in unique_ids(key).tolist():
                sel = key == k
                cp, part = k >> PARTITION_BITS, k & MAX_PARTITION
                pos = poss[sel]
                locs = self._dirs.get(run, {}).get((cp, part), [])
                base = record_id_base(cp, part)
                for loc in locs:
                    m = (pos >= loc.pos_start) & (pos < loc.pos_start + loc.count)
                    if m.any():
                        yield base, loc, pos[m]

    def _slices_for(self, loc: BatchLoc, event_ids: np.ndarray):
        """(decoded slice, local record indexes) covering the given event ids of one batch."""
        reader = self._store.reader_for(int(event_ids[0])) if len(event_ids) else None
        if reader is None:
            return
        event_ids = np.sort(event_ids)
        blocks = reader.block_indexes(event_ids)
        for bi in unique_ids(blocks).tolist():
            in_block = event_ids[blocks == bi]
            for sl in self._block_slices(reader, bi):
                if sl.first_id + sl.count <= in_block[0] or sl.first_id > in_block[-1]:
                    continue
                m = (in_block >= sl.first_id) & (in_block < sl.first_id + sl.count)
                if m.any():
                    yield sl, in_block[m] - sl.first_id

    def _block_slices(self, reader, bi: int) -> list[_Slice]:
        """Decoded lineage slices of one block, through an LRU cache bounded in bytes."""
        key = (reader.first_id, bi)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        try:
            entries = self._store.block(reader, bi)
        except FileNotFoundError:
            return []
        out = [_Slice(e) for e in entries if isinstance(e, BatchSlice)]
        with self._lock:
            self._cache[key] = out
            self._cache_bytes += sum(sl.nbytes for sl in out)
            while self._cache_bytes > _CACHE_BYTES and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= sum(sl.nbytes for sl in old)
        return out

    # -- data --------------------------------------------------------------------------------

    def record_data(self, run: str, record_ids: np.ndarray) -> list:
        """Raw data of each record: source bytes re-read by offset, or the captured value;
        None where neither was captured."""
        self.refresh()
        ids = np.asarray(record_ids, dtype=np.int64)
        out: dict[int, object] = {}
        reads: dict[str, list[tuple[int, int, int]]] = {}  # uri -> (offset, length, record)
        for base, loc, positions in self._group(run, unique_ids(ids)):
            evs = loc.first_event_id + positions - loc.pos_start
            for sl, local in self._slices_for(loc, evs):
                first = base + loc.pos_start + (sl.first_id - loc.first_event_id)
                if sl.voffs is not None and sl.values is not None:
                    for li in local.tolist():
                        out[first + li] = _value(sl.values, sl.voffs, li)
                elif sl.offsets is not None and sl.uri is not None:
                    todo = reads.setdefault(sl.uri, [])
                    for li in local.tolist():
                        start, end = int(sl.offsets[li]), int(sl.offsets[li + 1])
                        todo.append((start, end - start, first + li))
        for uri, todo in reads.items():  # one open per file, reads in offset order
            for rid, text in zip((t[2] for t in sorted(todo)), read_ranges(uri, sorted(todo))):
                out[rid] = text
        missing = [int(r) for r in np.unique(ids) if int(r) not in out]
        if missing:
            out.update(self._scan_data(run, missing))
        return [out.get(int(r)) for r in ids]


def _value(values: bytes, voffs: np.ndarray, li: int) -> Any:
    raw = values[int(voffs[li]) : int(voffs[li + 1])]
    try:
        return pickle.loads(raw)
    except Exception:  # a value that cannot be rebuilt here is shown as its bytes
        return raw


def _pairs(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not a:
        empty = np.array([], dtype=np.int64)
        return empty, empty.copy()
    return np.concatenate(a).astype(np.int64, copy=False), np.concatenate(b).astype(
        np.int64, copy=False
    )


def _gather_ranges(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of values[lo[k]:hi[k]] for all k, vectorized."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.array([], dtype=values.dtype)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return values[starts + np.arange(total)]
