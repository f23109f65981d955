"""Lineage graphs for the browser: a record's trace as a bounded picture, laid out in Python.

A trace can reach millions of records; a browser draws a few thousand nodes at most (Cytoscape
takes 2.4 s for 10,000 preset nodes here, dagre 52 s for 5,000: LIMITS.md). So the server
walks the whole trace with numpy, then decides what to ship:

- each capture point's records are shown one by one while there are at most `collapse` of
  them, otherwise as one group node per (capture point, partition) with its count (or per
  capture point, when it has more than `collapse` partitions);
- at most `limit` record nodes in all: the largest capture points collapse first;
- a group named in `expand` shows its first records (up to what `limit` leaves) one by one,
  the rest stays a group ("N more"); `truncated` says when that happened;
- edges are aggregated between the nodes shown, with their association counts.

Positions are computed here (layered left to right by capture point, columns by the capture
point's depth in the run's DAG, rows ordered by the barycenter heuristic), so the browser
only draws (`preset` layout). Requests are stateless: the picture is a function of the
request, and the walk (the expensive part) is cached for the next request on the same trace.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from journals import MAX_PARTITION, group_ids, isin_sorted, unique_ids, unpack_record_ids

from .. import BadInput, LineageIndex, NotFound, RunInfo, format_record_id

DIRECTIONS = ("backward", "forward", "both")
DEFAULT_COLLAPSE = 200
DEFAULT_LIMIT = 1000
MAX_LIMIT = 5000
_ALL = MAX_PARTITION + 1  # the "partition" of a whole-capture-point group
_COL_GAP = 320.0
_ROW = {"record": 36.0, "group": 64.0}
_BLOCK_GAP = 48.0
_TEXT = 300  # characters of a record's data shipped with its node
_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class GraphRequest:
    """What picture to draw: a record's trace, plus groups expanded and one-hop expansions."""

    run: str
    root: int
    direction: str = "backward"
    also: tuple[int, ...] = ()  # more roots: a FILE@OFFSET line read again in the same run
    depth: int | None = None  # hops; None: all the way
    expand: tuple[str, ...] = ()  # group keys "cp:partition" or "cp:*"
    hops: tuple[tuple[int, str], ...] = ()  # (record id, "backward" | "forward"): one hop each
    collapse: int = DEFAULT_COLLAPSE
    limit: int = DEFAULT_LIMIT


@dataclass
class _Walk:
    """Records reached and the associations followed (parent -> child)."""

    records: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    cut: dict[str, np.ndarray] = field(default_factory=dict)  # depth reached: more beyond
    hops: dict[str, int] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return self.records.nbytes + self.src.nbytes + self.dst.nbytes + 256


class TraceGraphs:
    """Builds trace pictures over one lineage index, caching walks by request."""

    def __init__(self, index: LineageIndex, cache_bytes: int = _CACHE_BYTES) -> None:
        self._index = index
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, _Walk] = OrderedDict()
        self._cache_bytes = 0
        self._max_bytes = cache_bytes

    def clear_cache(self) -> None:
        """Forget cached walks (benchmarks measure cold requests)."""
        with self._lock:
            self._cache.clear()
            self._cache_bytes = 0

    def graph(self, req: GraphRequest, version: Any = None) -> dict:
        """The picture as JSON-ready data: nodes (with x, y), edges, columns, truncated."""
        _check(req)
        index = self._index
        info = index.run_info(req.run)  # NotFound naming the runs there are
        asked = [req.root, *req.also] + [h[0] for h in req.hops]
        stored = index.event_ids(req.run, np.array(asked, dtype=np.int64))
        for rid, ev in zip(asked, stored.tolist()):
            # DataFrame scan rows are re-read from their files, not stored as events.
            if not ev and not index.is_scan_row(req.run, rid):
                raise NotFound(f"run {req.run} stores no record {format_record_id(rid)}")
        walk = self._walk(req, info, version)
        return _Picture(index, info, req, walk).build()

    def _walk(self, req: GraphRequest, info: RunInfo, version: Any) -> _Walk:
        key = (req.run, req.root, req.also, req.direction, req.depth, req.hops, version)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        parts: list[_Walk] = []
        root = unique_ids(np.array([req.root, *req.also], dtype=np.int64))
        if req.direction in ("backward", "both"):
            parts.append(self._one_way(req.run, info, root, False, req.depth))
        if req.direction in ("forward", "both"):
            parts.append(self._one_way(req.run, info, root, True, req.depth))
        for rid, way in req.hops:
            one = np.array([rid], dtype=np.int64)
            parts.append(self._one_way(req.run, info, one, way == "forward", 1))
        src, dst = _associations(parts)
        walk = _Walk(unique_ids(np.concatenate([w.records for w in parts])), src, dst)
        for way in ("backward", "forward"):
            ways = [w for w in parts if way in w.cut]
            if not ways:
                continue
            # Records at the depth limit have more beyond, unless another walk went on.
            went_on = unique_ids(
                np.concatenate([w.dst if way == "backward" else w.src for w in ways])
            )
            cut = unique_ids(np.concatenate([w.cut[way] for w in ways]))
            walk.cut[way] = cut[~isin_sorted(cut, went_on)]
            if _goes(req, way):
                walk.hops[way] = ways[0].hops[way]
        with self._lock:
            self._cache[key] = walk
            self._cache_bytes += walk.nbytes
            while self._cache_bytes > self._max_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.nbytes
        return walk

    def _one_way(
        self, run: str, info: RunInfo, start: np.ndarray, forward: bool, depth: int | None
    ) -> _Walk:
        index = self._index
        seen = frontier = start
        src: list[np.ndarray] = [np.array([], dtype=np.int64)]
        dst: list[np.ndarray] = [np.array([], dtype=np.int64)]
        hops = 0
        while len(frontier) and (depth is None or hops < depth):
            if forward:
                parents, children = index.child_pairs(run, frontier, info)
                reached = children
            else:
                children, parents = index.parent_pairs(run, frontier)
                reached = parents
            if not len(reached):
                frontier = reached
                break
            src.append(parents)
            dst.append(children)
            hops += 1
            reached = unique_ids(reached)
            frontier = reached[~isin_sorted(reached, seen)]
            seen = unique_ids(np.concatenate([seen, frontier]))
            if hops > 100_000:  # lineage is a DAG: only a damaged repository could loop
                raise RuntimeError("lineage trace does not terminate (cycle in stored lineage?)")
        name = "forward" if forward else "backward"
        return _Walk(seen, np.concatenate(src), np.concatenate(dst), {name: frontier}, {name: hops})


def _associations(walks: list[_Walk]) -> tuple[np.ndarray, np.ndarray]:
    """Every association the walks followed, once: a record expanded backward brings all of
    its parent associations (a hop may expand it again, or a forward walk reach them from the
    parent's side), a record expanded forward all of its child associations."""
    back = [w for w in walks if "backward" in w.cut]
    fwd = [w for w in walks if "forward" in w.cut]
    srcs, dsts = [], []
    done = np.array([], dtype=np.int64)  # children whose parents are in
    for w in back:
        keep = ~isin_sorted(w.dst, done)
        srcs.append(w.src[keep])
        dsts.append(w.dst[keep])
        done = unique_ids(np.concatenate([done, w.dst]))
    out_done = np.array([], dtype=np.int64)  # parents whose children are in
    for w in fwd:
        keep = ~isin_sorted(w.src, out_done) & ~isin_sorted(w.dst, done)
        srcs.append(w.src[keep])
        dsts.append(w.dst[keep])
        out_done = unique_ids(np.concatenate([out_done, w.src]))
    return np.concatenate(srcs), np.concatenate(dsts)


def _goes(req: GraphRequest, direction: str) -> bool:
    return req.direction in (direction, "both")


def _check(req: GraphRequest) -> None:
    if req.direction not in DIRECTIONS:
        raise BadInput(f"direction must be one of {', '.join(DIRECTIONS)}, got {req.direction!r}")
    if req.depth is not None and req.depth < 1:
        raise BadInput(f"depth must be a positive integer, got {req.depth}")
    if not 1 <= req.collapse <= MAX_LIMIT:
        raise BadInput(f"collapse must be 1..{MAX_LIMIT}, got {req.collapse}")
    if not 1 <= req.limit <= MAX_LIMIT:
        raise BadInput(f"limit must be 1..{MAX_LIMIT}, got {req.limit}")
    for _, way in req.hops:
        if way not in ("backward", "forward"):
            raise BadInput(f"a hop goes backward or forward, not {way!r}")


def parse_group_key(text: str) -> tuple[int, int]:
    """(capture point, partition) of a group key `cp:partition`, or (cp, ALL) for `cp:*`."""
    cp, sep, part = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(cp), _ALL if part == "*" else int(part)
    except ValueError:
        raise BadInput(f"{text!r} is not a group key (cp:partition or cp:*)") from None


def layers(info: RunInfo) -> dict[int, int]:
    """Each capture point's column: its depth in the run's DAG (sources at 0). Without a
    descriptor the DAG is unknown: capture points in the order they were numbered."""
    cps = info.capture_points
    if info.descriptor is None:
        return {cp: k for k, cp in enumerate(sorted(cps))}
    rank: dict[int, int] = {}

    def depth_of(cp: int, guard: int = 0) -> int:
        if cp in rank:
            return rank[cp]
        if guard > len(cps):  # a cycle in a damaged descriptor
            return 0
        c = cps.get(cp)
        parents = [p for p in (c.parents if c else []) if p in cps and p != cp]
        rank[cp] = 1 + max((depth_of(p, guard + 1) for p in parents), default=-1)
        return rank[cp]

    for cp in cps:
        depth_of(cp)
    return rank


class _Picture:
    """One response: which records are shown alone, which grouped, where each node goes."""

    def __init__(self, index: LineageIndex, info: RunInfo, req: GraphRequest, walk: _Walk):
        self.index, self.info, self.req, self.walk = index, info, req, walk

    def build(self) -> dict:
        req, walk = self.req, self.walk
        recs = walk.records
        cps, parts, poss = unpack_record_ids(recs)
        alone, truncated = self._choose(recs, cps, parts)
        # Node numbering: records shown alone first (ascending ids), then groups.
        n_alone = int(alone.sum())
        node_of = np.empty(len(recs), dtype=np.int64)
        node_of[alone] = np.arange(n_alone)
        gkey = cps * (_ALL + 1) + np.where(self.whole_cp[cps], _ALL, parts)
        groups, ginv, gcount = group_ids(gkey[~alone])
        node_of[~alone] = n_alone + ginv
        n_nodes = n_alone + len(groups)

        # Edges between nodes, with association counts.
        s = node_of[np.searchsorted(recs, walk.src)]
        d = node_of[np.searchsorted(recs, walk.dst)]
        keep = s != d
        ekey, _, ecount = group_ids(s[keep] * n_nodes + d[keep])
        es, ed = ekey // max(n_nodes, 1), ekey % max(n_nodes, 1)

        # Per node: capture point, kind, sort key within its capture point.
        alone_ids = recs[alone]
        ncp = np.concatenate([cps[alone], groups // (_ALL + 1)])
        gpart = groups % (_ALL + 1)
        nkey = np.concatenate(
            [parts[alone] * (1 << 32) + poss[alone], gpart * (1 << 32) + (1 << 32) - 1]
        )
        is_group = np.concatenate([np.zeros(n_alone, bool), np.ones(len(groups), bool)])
        col_of_cp = layers(self.info)
        ncol = np.array([col_of_cp.get(int(c), 0) for c in ncp.tolist()], dtype=np.int64)
        x, y = _layout(ncol, ncp, nkey, is_group, es, ed)

        nodes = self._record_nodes(alone_ids, x[:n_alone], y[:n_alone])
        nodes += self._group_nodes(groups, gcount, x[n_alone:], y[n_alone:])
        ids = [n["id"] for n in nodes]
        edges = [
            {"source": ids[a], "target": ids[b], "count": c}
            for a, b, c in zip(es.tolist(), ed.tolist(), ecount.tolist())
        ]
        columns = self._columns(cps, ncp, x)
        return {
            "run": req.run,
            "root": format_record_id(req.root),
            "root_id": req.root,
            "direction": req.direction,
            "depth": req.depth,
            "hops": dict(walk.hops),
            "records": len(recs),
            "collapsed_records": int((~alone).sum()),
            "truncated": truncated,
            "nodes": nodes,
            "edges": edges,
            "columns": columns,
        }

    def _choose(
        self, recs: np.ndarray, cps: np.ndarray, parts: np.ndarray
    ) -> tuple[np.ndarray, bool]:
        """Which records are shown alone; True when `limit` kept an expanded group partly
        collapsed."""
        req = self.req
        pins = unique_ids(
            np.array([req.root, *req.also] + [h[0] for h in req.hops], dtype=np.int64)
        )
        pinned = isin_sorted(recs, pins)
        ucp, inv, counts = group_ids(cps)
        alone_cp = counts <= req.collapse
        # The record budget: collapse the largest capture points first.
        while alone_cp.any() and counts[alone_cp].sum() + pinned[~alone_cp[inv]].sum() > req.limit:
            biggest = int(np.argmax(np.where(alone_cp, counts, -1)))
            alone_cp[biggest] = False
        alone = alone_cp[inv] | pinned
        # Capture points with more partitions than `collapse` group per capture point.
        self.whole_cp = np.zeros(int(ucp.max()) + 1 if len(ucp) else 1, dtype=bool)
        for k, cp in enumerate(ucp.tolist()):
            if not alone_cp[k]:
                grouped_parts = unique_ids(parts[(cps == cp) & ~alone])
                self.whole_cp[cp] = len(grouped_parts) > req.collapse
        truncated = False
        room = req.limit - int(alone.sum())
        for key in dict.fromkeys(req.expand):
            cp, part = parse_group_key(key)
            if cp >= len(self.whole_cp):
                continue  # not in this picture
            if part == _ALL:  # split a whole capture point into its partitions
                if self.whole_cp[cp]:
                    n_parts = len(unique_ids(parts[(cps == cp) & ~alone]))
                    self.whole_cp[cp] = n_parts > req.limit
                    truncated |= bool(self.whole_cp[cp])
                continue
            if self.whole_cp[cp]:
                continue  # that partition is not a group of its own (yet)
            members = np.flatnonzero((cps == cp) & (parts == part) & ~alone)
            take = members[: max(room, 0)]
            alone[take] = True
            room -= len(take)
            truncated |= len(take) < len(members)
        return alone, truncated

    def _record_nodes(self, ids: np.ndarray, x: np.ndarray, y: np.ndarray) -> list[dict]:
        if not len(ids):
            return []
        index, run, info = self.index, self.req.run, self.info
        events = index.event_ids(run, ids).tolist()
        data = index.record_data(run, ids)
        cut = {
            way: set(c[isin_sorted(c, ids)].tolist()) for way, c in self.walk.cut.items() if len(c)
        }
        cps, parts, poss = (a.tolist() for a in unpack_record_ids(ids))
        out = []
        for k, rid in enumerate(ids.tolist()):
            c = info.capture_points.get(cps[k])
            more = [
                way
                for way, found in cut.items()
                if rid in found and _can_go(info, cps[k], way == "forward")
            ]
            out.append(
                {
                    "id": "r" + format_record_id(rid),
                    "kind": "record",
                    "record": format_record_id(rid),
                    "record_id": rid,
                    "capture_point": cps[k],
                    "component_id": c.component_id if c else None,
                    "partition": parts[k],
                    "position": poss[k],
                    "event_id": events[k] or None,
                    "text": data_text(data[k], _TEXT),
                    "root": rid == self.req.root or rid in self.req.also,
                    "more": more,
                    "x": float(x[k]),
                    "y": float(y[k]),
                }
            )
        return out

    def _group_nodes(
        self, groups: np.ndarray, counts: np.ndarray, x: np.ndarray, y: np.ndarray
    ) -> list[dict]:
        out = []
        expanded = set(self.req.expand)
        for k, g in enumerate(groups.tolist()):
            cp, part = divmod(g, _ALL + 1)
            c = self.info.capture_points.get(cp)
            key = f"{cp}:*" if part == _ALL else f"{cp}:{part}"
            out.append(
                {
                    "id": "g" + key,
                    "kind": "group",
                    "group": key,
                    "capture_point": cp,
                    "component_id": c.component_id if c else None,
                    "partition": None if part == _ALL else part,
                    "count": int(counts[k]),
                    "rest": key in expanded,  # what `limit` left of an expanded group
                    "x": float(x[k]),
                    "y": float(y[k]),
                }
            )
        return out

    def _columns(self, cps: np.ndarray, ncp: np.ndarray, x: np.ndarray) -> list[dict]:
        ucp, _, counts = group_ids(cps)
        per_cp = dict(zip(ucp.tolist(), counts.tolist()))
        xs: dict[int, float] = {}
        for cp, xx in zip(ncp.tolist(), x.tolist()):
            xs[cp] = xx
        out = []
        for cp in sorted(per_cp, key=lambda c: (xs.get(c, 0.0), c)):
            c = self.info.capture_points.get(cp)
            out.append(
                {
                    "capture_point": cp,
                    "component_id": c.component_id if c else None,
                    "component_type": c.component_type if c else None,
                    "records": per_cp[cp],
                    "x": xs.get(cp, 0.0),
                }
            )
        return out


def _can_go(info: RunInfo, cp: int, forward: bool) -> bool:
    c = info.capture_points.get(cp)
    if forward:
        return any(cp in o.parents for o in info.capture_points.values()) or not info.descriptor
    return c is None or c.dependency != "source"


def data_text(value: Any, limit: int | None = None) -> str | None:
    """A record's data as text for display: strings as they are, anything else as its repr."""
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _layout(
    col: np.ndarray,
    cp: np.ndarray,
    key: np.ndarray,
    is_group: np.ndarray,
    es: np.ndarray,
    ed: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """x by column; y by a barycenter ordering (two sweeps each way), capture points kept in
    blocks within a column, each column centred on y = 0."""
    n = len(col)
    if not n:
        return np.zeros(0), np.zeros(0)
    # Compact columns: only the ones present, in order.
    ucol = unique_ids(col)
    x = np.searchsorted(ucol, col).astype(float) * _COL_GAP
    order = np.lexsort((key, cp, col))  # initial: by capture point, then partition/position
    pos = np.empty(n)
    _positions(order, col, pos)
    for _sweep in range(2):
        for cols, left in ((ucol[1:], True), (ucol[:-1][::-1], False)):
            for c in cols.tolist():
                members = np.flatnonzero(col == c)
                # neighbours on the swept-from side only
                a, b = (es, ed) if left else (ed, es)  # a: neighbour, b: member
                sel = (col[b] == c) & ((col[a] < c) if left else (col[a] > c))
                sums = np.bincount(b[sel], weights=pos[a[sel]], minlength=n)
                cnts = np.bincount(b[sel], minlength=n)
                bary = np.where(cnts > 0, sums / np.maximum(cnts, 1), pos)[members]
                # capture points stay in blocks, ordered by their mean barycenter
                inv = group_ids(cp[members])[1]
                block = np.bincount(inv, weights=bary) / np.bincount(inv)
                ranked = members[np.lexsort((key[members], bary, block[inv]))]
                _positions(ranked, col, pos)
    # y: stack each column's nodes in order, a gap between capture points, centred.
    y = np.zeros(n)
    final = np.lexsort((pos, col))
    heights = np.where(is_group, _ROW["group"], _ROW["record"])
    start = 0
    for c in ucol.tolist():
        k = np.searchsorted(col[final], c, side="right")
        members = final[start:k]
        start = k
        gaps = np.concatenate([[0.0], np.where(np.diff(cp[members]) != 0, _BLOCK_GAP, 0.0)])
        h = heights[members]
        centers = np.cumsum(h) - h / 2 + np.cumsum(gaps)
        total = centers[-1] + h[-1] / 2
        y[members] = centers - total / 2
    return x, y


def _positions(ranked: np.ndarray, col: np.ndarray, pos: np.ndarray) -> None:
    """Normalised positions in (0, 1) for each column's nodes in the given order."""
    cols = col[ranked]
    for c in unique_ids(cols).tolist():
        members = ranked[cols == c]
        pos[members] = (np.arange(len(members)) + 0.5) / len(members)
