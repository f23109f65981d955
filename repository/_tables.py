"""Stored events as Arrow tables: `events` (one row per event) and `edges` (one row per parent
reference), built from the stored columns with array work only.

A lineage batch slice becomes its rows with a handful of numpy calls (its record ids, offsets
and CSR parents are already columns); rich events come from `decode_rich` (lockstep msgpack
parsing). Rows are kept per run, in event-id order, and handed out as tables of at most a
row group's size; string columns are dictionary-encoded (a run has few distinct components).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import pyarrow as pa

from ._blocks import BatchSlice
from ._richcolumns import RichColumns

SCHEMA_VERSION = 1  # of the exported tables; written into every file's metadata

_DICT = pa.dictionary(pa.int32(), pa.string())
EVENTS_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.int64(), nullable=False),
        pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("event_type", _DICT, nullable=False),
        pa.field("component_id", _DICT, nullable=False),
        pa.field("component_type", _DICT, nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("attempt", pa.int64(), nullable=False),
        pa.field("record_id", pa.int64(), nullable=False),
        pa.field("uri", _DICT),
        pa.field("offset", pa.int64()),
        pa.field("length", pa.int64()),
        pa.field("attributes", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("details", pa.string()),
    ]
)
EDGES_SCHEMA = pa.schema(
    [
        pa.field("child_record_id", pa.int64(), nullable=False),
        pa.field("parent_record_id", pa.int64(), nullable=False),
    ]
)
DICTIONARY_COLUMNS = ("event_type", "component_id", "component_type", "uri")
INT_COLUMNS = ("event_id", "event_time", "partition", "attempt", "record_id", "offset", "length")


Lazy = Callable[[], pa.Array]  # an Arrow array made when the table is built


class _Strings:
    """A string column in parts: a constant over n rows, or an Arrow array of strings (made
    when the table is built, by whichever thread builds it)."""

    def __init__(self) -> None:
        self.parts: list[tuple[str | None, int] | Lazy] = []

    def const(self, value: str | None, n: int) -> None:
        self.parts.append((value, n))

    def array(self, arr: Lazy) -> None:
        self.parts.append(arr)

    def dictionary(self) -> pa.DictionaryArray:
        """One dictionary array: constants cost a code each, arrays are hashed by Arrow."""
        values: dict[str, int] = {}
        codes: list[np.ndarray] = []
        for part in self.parts:
            if isinstance(part, tuple):
                value, n = part
                one = -1 if value is None else values.setdefault(value, len(values))
                codes.append(np.full(n, one, np.int32))
                continue
            enc = part().dictionary_encode()
            local = [values.setdefault(v, len(values)) for v in enc.dictionary.to_pylist()]
            remap = np.array([*local, -1], np.int32)  # the last entry: nulls
            idx = enc.indices.fill_null(len(local)).to_numpy(zero_copy_only=False)
            codes.append(remap[idx])
        code = np.concatenate(codes) if codes else np.zeros(0, np.int32)
        nulls = code < 0
        indices = pa.array(code, pa.int32(), mask=nulls if nulls.any() else None)
        return pa.DictionaryArray.from_arrays(indices, pa.array(list(values), pa.string()))

    def plain(self) -> pa.Array:
        out = []
        for part in self.parts:
            if isinstance(part, tuple):
                value, n = part
                if value is None:
                    out.append(pa.nulls(n, pa.string()))
                else:
                    out.append(pa.array([value], pa.string()).take(np.zeros(n, np.int32)))
            else:
                out.append(part().cast(pa.string()))
        return pa.concat_arrays(out) if out else pa.array([], pa.string())


class _Map:
    """The attributes column in parts: one dict over n rows, or CSR counts with key and value
    string arrays."""

    def __init__(self) -> None:
        self.counts: list[np.ndarray] = []
        self.keys: list[pa.Array | Lazy] = []
        self.values: list[pa.Array | Lazy] = []

    def const(self, attrs: dict[str, str], n: int) -> None:
        k = len(attrs)
        self.counts.append(np.full(n, k, np.int64))
        if k and n:
            tile = np.tile(np.arange(k, dtype=np.int32), n)
            self.keys.append(pa.array(list(attrs), pa.string()).take(tile))
            self.values.append(pa.array(list(attrs.values()), pa.string()).take(tile))

    def arrays(self, counts: np.ndarray, keys: Lazy, values: Lazy) -> None:
        self.counts.append(counts)
        self.keys.append(keys)
        self.values.append(values)

    def build(self) -> pa.MapArray:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        offsets = np.zeros(len(counts) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        keys = _strings(self.keys)
        values = _strings(self.values)
        return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


class RunRows:
    """Rows of one run waiting to be written, in event-id order."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.rows = 0
        self.edge_rows = 0
        self._reset_events()
        self._child: list[np.ndarray] = []
        self._parent: list[np.ndarray] = []

    def _reset_events(self) -> None:
        self._ints: dict[str, list[np.ndarray]] = {c: [] for c in INT_COLUMNS}
        self._valid: list[np.ndarray] = []  # has a location (offset, length)
        self._strings = {c: _Strings() for c in (*DICTIONARY_COLUMNS, "details")}
        self._attrs = _Map()

    # -- adding ------------------------------------------------------------------------------

    def add_slice(self, entry: BatchSlice, a: int, b: int) -> None:
        """Records [a, b) of a stored lineage batch slice."""
        batch, n = entry.batch, b - a
        if n <= 0:
            return
        ints = self._ints
        ints["event_id"].append(np.arange(entry.first_id + a, entry.first_id + b, dtype=np.int64))
        ints["event_time"].append(np.full(n, batch.event_time_ns // 1000, np.int64))
        ints["partition"].append(np.full(n, batch.partition, np.int64))
        ints["attempt"].append(np.full(n, batch.attempt, np.int64))
        rids = batch.record_ids.take(a, b)
        ints["record_id"].append(rids)
        s = self._strings
        s["event_type"].const(batch.event_type.value, n)
        s["component_id"].const(batch.component_id, n)
        s["component_type"].const(batch.component_type, n)
        s["details"].const(batch.details, n)
        loc = batch.location
        s["uri"].const(None if loc is None else loc.uri, n)
        if batch.offsets is not None:
            offs = batch.offsets.take(a, b + 1)
            ints["offset"].append(offs[:-1])
            ints["length"].append(np.diff(offs))
        else:
            ints["offset"].append(np.full(n, 0 if loc is None else loc.offset, np.int64))
            ints["length"].append(np.full(n, 0 if loc is None else loc.length, np.int64))
        self._valid.append(np.full(n, loc is not None or batch.offsets is not None))
        self._attrs.const(batch.attributes, n)
        self.rows += n
        if batch.parent_counts is not None and batch.parent_ids is not None:
            counts = batch.parent_counts.to_array()
            parents = batch.parent_array()
            assert parents is not None
            if a or b < len(batch):
                starts = batch.parent_starts()
                parents = parents[starts[a] : starts[b]]
                counts = counts[a:b]
            self._add_edges(np.repeat(rids, counts), parents)

    def add_rich(self, cols: RichColumns) -> None:
        """Rich events (all of this run)."""
        n = cols.n
        if n == 0:
            return
        ints = self._ints
        ints["event_id"].append(cols.event_id)
        ints["event_time"].append(cols.time_ns // 1000)
        ints["partition"].append(cols.partition)
        ints["attempt"].append(cols.attempt)
        ints["record_id"].append(cols.record_id)
        ints["offset"].append(cols.offset)
        ints["length"].append(cols.length)
        self._valid.append(cols.has_location)
        for name in (*DICTIONARY_COLUMNS, "details"):
            self._strings[name].array(partial(cols.strings, name))
        self._attrs.arrays(
            cols.attr_counts,
            partial(cols.strings, "attr_keys"),
            partial(cols.strings, "attr_values"),
        )
        self.rows += n
        child = np.repeat(cols.record_id, cols.parent_counts)
        keep = child != cols.parents  # a FAIL event names its own record as parent: no edge
        self._add_edges(child[keep], cols.parents[keep])

    def _add_edges(self, child: np.ndarray, parent: np.ndarray) -> None:
        if len(child):
            self._child.append(child)
            self._parent.append(parent)
            self.edge_rows += len(child)

    # -- taking ------------------------------------------------------------------------------

    def take_events(self) -> Callable[[], pa.Table]:
        """The events added so far (then forgotten), as a function that builds their table:
        cheap here, the work done where it is called (a writer thread)."""
        parts = (self._ints, self._valid, self._strings, self._attrs)
        self._reset_events()
        self.rows = 0
        return partial(_events_table, *parts)

    def take_edges(self) -> pa.Table:
        """The edges added so far as one table (then forgotten)."""
        child = _chunks(self._child, pa.int64())
        parent = _chunks(self._parent, pa.int64())
        self._child, self._parent = [], []
        self.edge_rows = 0
        return pa.Table.from_arrays([child, parent], schema=EDGES_SCHEMA)


def _events_table(
    ints: dict[str, list[np.ndarray]],
    valid: list[np.ndarray],
    strings: dict[str, _Strings],
    attrs: _Map,
) -> pa.Table:
    """The events table of a run's parts. Number columns stay in the pieces they were added
    in (Arrow chunks over the numpy arrays, no copy)."""
    for part in ints["partition"]:
        if len(part) and (part.min() < -(2**31) or part.max() >= 2**31):
            raise ValueError("a partition number does not fit the int32 partition column")
    masks = [None if v.all() else ~v for v in valid]
    ts = pa.timestamp("us", tz="UTC")
    cols = [
        _chunks(ints["event_id"], pa.int64()),
        pa.chunked_array([pa.array(p).view(ts) for p in ints["event_time"]], ts),
        strings["event_type"].dictionary(),
        strings["component_id"].dictionary(),
        strings["component_type"].dictionary(),
        _chunks([p.astype(np.int32) for p in ints["partition"]], pa.int32()),
        _chunks(ints["attempt"], pa.int64()),
        _chunks(ints["record_id"], pa.int64()),
        strings["uri"].dictionary(),
        _chunks(ints["offset"], pa.int64(), masks),
        _chunks(ints["length"], pa.int64(), masks),
        attrs.build(),
        strings["details"].plain(),
    ]
    return pa.Table.from_arrays(cols, schema=EVENTS_SCHEMA)


def _strings(parts: list[pa.Array | Lazy]) -> pa.Array:
    arrays = [(p if isinstance(p, pa.Array) else p()).cast(pa.string()) for p in parts]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def _chunks(
    parts: list[np.ndarray], type_: pa.DataType, masks: list[np.ndarray | None] | None = None
) -> pa.ChunkedArray:
    """Arrow chunks over numpy arrays (zero-copy where there is no mask)."""
    if masks is None:
        return pa.chunked_array([pa.array(p, type_) for p in parts], type_)
    return pa.chunked_array([pa.array(p, type_, mask=m) for p, m in zip(parts, masks)], type_)
