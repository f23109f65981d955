"""Segment inputs (executor side): where a segment's records come from, and their ids.

Every input appends, for each record it hands on, the sink's current count to `state.bounds`:
because narrow operations are lazy and pull one record at a time, the sink records produced
after input record i is pulled and before i+1 is pulled all derive from i (Titian's "current
input" in the task context, kept as an array so nothing but one append happens per record).
At the end, numpy turns bounds into parent references in one vectorized pass.
"""

from __future__ import annotations

import gzip
import pickle
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from operator import itemgetter, le
from typing import Any

import numpy as np

_CHUNK = 1 << 22


class InputState:
    """What an input leaves behind for the sink and the journal."""

    __slots__ = (
        "base",
        "bounds",
        "chunk",
        "chunks",
        "current",
        "exhausted",
        "ids",
        "merge",
        "offsets",
        "values",
    )

    def __init__(self, base: int) -> None:
        self.base = base  # record id of position 0 when ids are positional
        self.bounds = array("q")
        self.ids: array | None = None  # explicit input ids (union inputs)
        self.offsets: np.ndarray | None = None  # text inputs: N+1 byte offsets
        self.exhausted = False
        # Shuffle inputs: (record count, layout, a, b) with layout "coo": a = each arrival's
        # record slot, b = its id; "csr": a = parents per record, b = parent ids.
        self.merge: tuple | None = None
        self.values: list[bytes] | None = None  # captured record values (pickled)
        # Text inputs: (index of its first line, its N+1 offsets) of the chunk being read, set
        # once per chunk, so a FAIL event can name the failing line's bytes at no per-record cost.
        self.chunk: tuple[int, np.ndarray] | None = None
        self.chunks: list[np.ndarray] = []  # text inputs: each chunk's line starts so far
        # DataFrame rows: the row handed on last (a FAIL event shows it).
        self.current: Any = None

    def input_ids(self) -> np.ndarray:
        n = len(self.bounds)
        if self.ids is not None:
            return np.frombuffer(self.ids, dtype=np.int64)[:n]
        return self.base + np.arange(n, dtype=np.int64)

    def explicit_ids(self) -> array:
        """The array of explicit input ids (set up where records carry their ids)."""
        if self.ids is None:
            raise RuntimeError("this input names its records by position, not by explicit ids")
        return self.ids

    def text_offsets(self, start: int) -> np.ndarray:
        """Text inputs: the N+1 byte offsets of the N lines handed on (all of the split's
        once it was read to its end; fewer when a mapPartitions function stopped early)."""
        if self.offsets is not None:
            return self.offsets
        if self.chunk is None:
            return np.array([start], dtype=np.int64)
        first, offs = self.chunk  # the chunk being read: its starts are chunks[-1]
        return np.concatenate([*self.chunks[:-1], offs[: len(self.bounds) - first + 1]])

    def current_id(self) -> int:
        i = len(self.bounds) - 1
        return self.ids[i] if self.ids is not None else self.base + i


# -- text -------------------------------------------------------------------------------------


def text_lines(path: str, start: int, length: int) -> Iterator[tuple[np.ndarray, list, bool]]:
    """Chunks of (N+1 line offsets, N lines without their newline, whether a CR may follow).

    Hadoop's LineRecordReader rule, so splits partition a file exactly as `sc.textFile` does:
    a split that does not start the file skips through its first newline, and a split owns
    every line that starts at or before its end (the last one may run past it).
    """
    gz = path.endswith(".gz")
    # A gzip file is read whole (it cannot be split), its offsets those of its decompressed
    # bytes, as Hadoop's codec gives them to Spark.
    end = (1 << 62) if gz else start + length
    with gzip.open(path, "rb") if gz else open(path, "rb", buffering=0) as f:
        f.seek(start)
        pos = start
        carry = b""
        if start:
            pos += len(f.readline())
        while pos <= end:
            chunk = f.read(_CHUNK)
            data = carry + chunk if carry else chunk
            if not data:
                return
            lines = data.split(b"\n")
            carry = lines.pop()
            unterminated = not chunk and bool(carry)
            if unterminated:  # end of file: the last line has no terminator
                lines.append(carry)
                carry = b""
            if lines:
                lens = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1
                starts = pos + np.concatenate(([0], np.cumsum(lens[:-1])))
                keep = int(np.searchsorted(starts, end, side="right"))
                offs = np.append(starts, starts[-1] + lens[-1] - unterminated)
                if keep < len(lines):  # the rest starts after this split's end
                    yield offs[: keep + 1], lines[:keep], b"\r" in data
                    return
                yield offs, lines, b"\r" in data
                pos = int(offs[-1])
            if not chunk:
                return


def text_input(
    state: InputState, split: tuple[str, int, int], count: Callable[[], int]
) -> Iterator[str]:
    """Lines of a text split as str (UTF-8, errors replaced, "\\n" or "\\r\\n" stripped)."""
    path, start, length = split
    bounds_append = state.bounds.append
    offsets = state.chunks
    end_pos = start
    for offs, lines, has_cr in text_lines(path, start, length):
        offsets.append(offs[:-1])
        end_pos = int(offs[-1])
        state.chunk = (len(state.bounds), offs)
        if has_cr:
            lines = [raw[:-1] if raw[-1:] == b"\r" else raw for raw in lines]
        for raw in lines:
            bounds_append(count())
            yield raw.decode("utf-8", "replace")
    # (A last line without its newline ends at the end of the file: `text_lines`.)
    end_pos = end_pos if offsets else start
    state.offsets = np.concatenate([*offsets, [end_pos]]) if offsets else np.array([start])
    state.exhausted = True


def text_input_without(
    state: InputState, split: tuple[str, int, int], count: Callable[[], int], drop: frozenset
) -> Iterator[str]:
    """An exclusive replay's text split: the original lines minus the `drop`ped record ids
    (positions stay the original ones; the survivors carry their original ids)."""
    path, start, length = split
    bounds_append, ids_append = state.bounds.append, state.explicit_ids().append
    rid = state.base
    for _, lines, has_cr in text_lines(path, start, length):
        for raw in lines:
            rid += 1
            if rid - 1 in drop:
                continue
            ids_append(rid - 1)
            bounds_append(count())
            yield (raw[:-1] if has_cr and raw[-1:] == b"\r" else raw).decode("utf-8", "replace")
    state.exhausted = True


# -- parallelize and unions ------------------------------------------------------------------


def parallel_input(
    state: InputState,
    iterator,
    count: Callable[[], int],
    capture_values: bool,
    drop: frozenset | None = None,
) -> Iterator:
    """Elements of a parallelized collection; named (partition, index), their values kept
    (the collection lives only in the driver's memory, so it is captured as data)."""
    bounds_append = state.bounds.append
    if drop:  # exclusive replay: survivors carry their original ids
        ids_append = state.explicit_ids().append
        for rid, x in enumerate(iterator, state.base):
            if rid not in drop:
                ids_append(rid)
                bounds_append(count())
                yield x
    elif capture_values:
        values: list[bytes] = []
        state.values = values
        add, dumps = values.append, pickle.dumps
        for x in iterator:
            add(dumps(x, pickle.HIGHEST_PROTOCOL))
            bounds_append(count())
            yield x
    else:
        for x in iterator:
            bounds_append(count())
            yield x
    state.exhausted = True


def frame_input(
    state: InputState, iterator, count: Callable[[], int], fields: list[str] | None
) -> Iterator:
    """A captured DataFrame's Rows, their ids as their last field (one id, None: none, or a
    list): named by position, each a record whose parents are its ids (deduplicated,
    ascending), left in `state.merge` as CSR. Each is handed on as a Row of `fields`, the
    Row PySpark makes (its class and `__fields__`, built without Row's Python-level
    constructor and setter), or as its first value (None)."""
    from pyspark.sql import Row

    bounds_append = state.bounds.append
    per, parents = array("i"), array("q")
    per_append, parents_append, parents_extend = per.append, parents.append, parents.extend
    state.merge = (0, "csr", per, parents)  # as they are pulled (a mapPartitions may stop)
    new = tuple.__new__
    for got in iterator:
        t = tuple(got)
        ids = t[-1]
        if fields is None:
            row = t[0]
        else:
            row = new(Row, t[:-1])
            row.__dict__["__fields__"] = fields
        if type(ids) is int:
            per_append(1)
            parents_append(ids)
        elif ids is None:
            per_append(0)
        else:
            if len(ids) > 1:
                ids = sorted(set(ids))
            per_append(len(ids))
            parents_extend(ids)
        state.current = row
        bounds_append(count())
        yield row
    state.exhausted = True


def union_input(state: InputState, iterator, count: Callable[[], int]) -> Iterator:
    """Records arriving as (value, id) from other segments; their ids pass through."""
    bounds_append = state.bounds.append
    if state.ids is None:
        state.ids = array("q")
    ids_append = state.ids.append  # the same array the sinks read ids from
    for value, rid in iterator:
        ids_append(rid)
        bounds_append(count())
        yield value
    state.exhausted = True


# -- shuffle reads ---------------------------------------------------------------------------


# Post-shuffle records are named by position, so positions must not depend on the order in
# which shuffle blocks arrive (Spark fetches remote blocks in random order, and a second job
# or a replay re-reads the shuffle): each shuffle read orders its records by their parents'
# ids, which every job sees alike. In local mode this is the arrival order anyway.


def _merge_aggregate(iterator, merge_combiners: Callable):
    """Merge (k, (combined, combiner id)) per key: keys and values ordered by each key's
    smallest combiner id (one combiner record has one key, so no ties), and for each arrival
    its record's slot and the combiner record's id."""
    index: dict = {}
    keys: list = []
    vals: list = []
    slots = array("i")
    parents = array("q")
    get = index.get
    slots_append, parents_append = slots.append, parents.append
    for k, (v, rid) in iterator:
        s = get(k)
        if s is None:
            s = index[k] = len(keys)
            keys.append(k)
            vals.append(v)
        else:
            vals[s] = merge_combiners(vals[s], v)
        slots_append(s)
        parents_append(rid)
    n = len(keys)
    if n > 1:
        sl = np.frombuffer(slots, dtype=np.int32)
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, sl, np.frombuffer(parents, dtype=np.int64))
        order = np.argsort(first, kind="stable")
        if (order != np.arange(n)).any():
            rank = np.empty(n, dtype=np.int32)
            rank[order] = np.arange(n, dtype=np.int32)
            picks = order.tolist()
            keys = [keys[i] for i in picks]
            vals = [vals[i] for i in picks]
            slots = array("i")
            slots.frombytes(rank[sl].tobytes())
    return keys, vals, slots, parents


def aggregate_input(
    state: InputState,
    iterator,
    count: Callable[[], int],
    merge_combiners: Callable,
    capture: str | None = None,
) -> Iterator:
    """Reduce side of an aggregation. The merged records are this capture point's records
    (position = order of first arrival); each one's parents are the combiner records merged
    into it. `capture`: keep each record's "value" (key, value) or just its "key"."""
    keys, vals, slots, parents = _merge_aggregate(iterator, merge_combiners)
    state.merge = (len(keys), "coo", slots, parents)
    bounds_append = state.bounds.append
    if capture:
        values: list[bytes] = []
        state.values = values
        add, dumps = values.append, pickle.dumps
        for kv in zip(keys, vals):
            # Pickled before anything downstream can mutate it.
            add(dumps(kv if capture == "value" else kv[0], pickle.HIGHEST_PROTOCOL))
            bounds_append(count())
            yield kv
    else:
        for kv in zip(keys, vals):
            bounds_append(count())
            yield kv
    state.exhausted = True


def _group_sides(iterator) -> list[tuple]:
    """Merge what both sides shipped: (key, (left values, left ids, right values, right ids))
    per key, in canonical order: each side's values by their ids (stable: values of one
    input keep the order its map task gave them), keys by their smallest id, then (for keys
    sharing it, e.g. two words of one line) by their pickled form."""
    groups: dict = {}
    get = groups.get
    for k, (tag, vs, ids) in iterator:
        g = get(k)
        if g is None:
            g = groups[k] = ([], [], [], [])
        side = 0 if tag == 1 else 2
        g[side].extend(vs)
        g[side + 1].extend(ids)
    ordered = []
    for k, (vs, vids, ws, wids) in groups.items():
        vs, vids = _by_id(vs, vids)
        ws, wids = _by_id(ws, wids)
        first = min(vids[0] if vids else _NO_ID, wids[0] if wids else _NO_ID)
        ordered.append((first, k, (vs, vids, ws, wids)))
    ordered.sort(key=itemgetter(0))
    i = 0
    while i < len(ordered):  # runs of keys with the same smallest id
        j = i + 1
        while j < len(ordered) and ordered[j][0] == ordered[i][0]:
            j += 1
        if j - i > 1:
            ordered[i:j] = sorted(ordered[i:j], key=lambda t: pickle.dumps(t[1], 4))
        i = j
    return [(k, g) for _, k, g in ordered]


_NO_ID = 1 << 63


def _by_id(values: list, ids: list) -> tuple[list, list]:
    # Usually already ascending (blocks arrive in map order locally): check in C first.
    if len(ids) < 2 or all(map(le, ids, islice(ids, 1, None))):
        return values, ids
    order = sorted(range(len(ids)), key=ids.__getitem__)
    return [values[i] for i in order], [ids[i] for i in order]


def _join_pairs(groups: list[tuple], how: str) -> Iterator[tuple]:
    """(key, left value, right value, parent ids) per join output, as PySpark's python_join
    orders them; an outer side without a match contributes None and no parent."""
    left_outer, right_outer = how in ("left", "full"), how in ("right", "full")
    for k, (vs, vids, ws, wids) in groups:
        if not ws and left_outer:
            ws, wids = [None], [-1]
        if not vs and right_outer:
            vs, vids = [None], [-1]
        for v, rv in zip(vs, vids):
            for w, rw in zip(ws, wids):
                if rv >= 0 and rw >= 0:
                    yield k, v, w, (rv, rw)
                else:
                    yield k, v, w, (rv if rv >= 0 else rw,)


def join_input(state: InputState, iterator, count: Callable[[], int], how: str) -> Iterator:
    """Reduce side of (outer) joins: pair the two sides per key."""
    pcounts = array("i")
    parents = array("q")
    pc_append, p_extend = pcounts.append, parents.extend
    bounds_append = state.bounds.append
    for k, v, w, pids in _join_pairs(_group_sides(iterator), how):
        pc_append(len(pids))
        p_extend(pids)
        bounds_append(count())
        yield (k, (v, w))
    state.merge = (len(pcounts), "csr", pcounts, parents)
    state.exhausted = True


def _cogroups(iterator) -> Iterator[tuple]:
    from pyspark.resultiterable import ResultIterable

    for k, (vs, vids, ws, wids) in _group_sides(iterator):
        yield (k, (ResultIterable(vs), ResultIterable(ws))), sorted(set(vids) | set(wids))


def cogroup_input(state: InputState, iterator, count: Callable[[], int]) -> Iterator:
    """Reduce side of cogroup: one record per key with both sides' values; parents: all."""
    pcounts = array("i")
    parents = array("q")
    bounds_append = state.bounds.append
    for record, rids in _cogroups(iterator):
        pcounts.append(len(rids))
        parents.extend(rids)
        bounds_append(count())
        yield record
    state.merge = (len(pcounts), "csr", pcounts, parents)
    state.exhausted = True


def _sorted_items(iterator, ascending: bool, keyfunc: Callable | None) -> list:
    """Sorted by key; equal keys by their input's id (the sort is stable, also reversed), not
    by arrival."""
    items = list(iterator)
    items.sort(key=_shipped_id)
    kf = keyfunc or (lambda x: x)
    items.sort(key=lambda kv: kf(kv[0]), reverse=not ascending)
    return items


def _shipped_id(kv: tuple) -> int:
    return kv[1][1]


def sort_input(
    state: InputState,
    iterator,
    count: Callable[[], int],
    ascending: bool,
    keyfunc: Callable | None,
) -> Iterator:
    """Reduce side of sortByKey: sort the range partition; each record's parent is the one
    shipped to it."""
    items = _sorted_items(iterator, ascending, keyfunc)
    parents = array("q", [rid for _, (_, rid) in items])
    state.merge = (len(items), "csr", array("i", [1]) * len(items), parents)
    bounds_append = state.bounds.append
    for k, (v, _) in items:
        bounds_append(count())
        yield (k, v)
    state.exhausted = True


def replay_shuffle_input(
    state: InputState,
    iterator,
    count: Callable[[], int],
    spec,
    keep: dict | None,
    drop: frozenset | None,
) -> Iterator:
    """A shuffle read during a replay (capture off). Each merged record is recognized by what
    survives subsetting the input -- its key, or its parents' original ids -- and carries its
    original id on (selective replay: records not in `keep` are dropped), or it is dropped by
    position (exclusive replay: `drop`)."""
    kind = spec.kind
    pairs: Iterable[tuple[Any, Any]]  # (record, what it is recognized by)
    if kind == "aggregate":
        keys, vals, _, _ = _merge_aggregate(iterator, spec.merge_combiners)
        pairs = zip(zip(keys, vals), keys)
    elif kind == "join":
        pairs = (
            ((k, (v, w)), pids)
            for k, v, w, pids in _join_pairs(_group_sides(iterator), spec.join_how)
        )
    elif kind == "cogroup":
        pairs = ((record, rids[0]) for record, rids in _cogroups(iterator))
    else:
        items = _sorted_items(iterator, spec.sort_ascending, spec.sort_keyfunc)
        pairs = (((k, v), rid) for k, (v, rid) in items)
    bounds_append = state.bounds.append
    ids_append = state.explicit_ids().append
    base = state.base
    for pos, (record, ident) in enumerate(pairs):
        if keep is not None:
            oid = keep.get(ident)
            if oid is None:
                continue
        else:
            oid = base + pos
            if drop and oid in drop:
                continue
        ids_append(oid)
        bounds_append(count())
        yield record
    state.exhausted = True
