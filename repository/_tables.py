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
from typing import Any

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

# Parquet writer settings per table (bench/export.py's baseline writes with the same ones).
# Measured on 10 M narrow-lineage rows (bench/export.py): 0.73 s of writer CPU against 1.05 s
# with one encoding and statistics for every column, same file size.
# - Ids, times, offsets climb: delta-coded they cost a few bits a value. Partition and attempt
#   are small repeated ints: plain and zstd is 3x cheaper to write than delta, as small.
# - Min/max statistics only where readers prune on them (ids and times: DuckDB and Spark skip
#   row groups on `record_id = x`, time ranges, id ranges). On a dictionary column the writer
#   hashes every row group's indices for them (a third of such a column's cost).
# - Values go to the encoders 64 k at a time, not 1 k: the per-batch bookkeeping was ~25 %.
_DELTA = ("event_id", "event_time", "record_id", "offset", "length")
_EDGE_COLUMNS = ("child_record_id", "parent_record_id")
WRITER_OPTIONS: dict[str, dict[str, Any]] = {
    "events": {
        "compression": "zstd",
        "use_dictionary": [*DICTIONARY_COLUMNS, "details"],
        "column_encoding": {
            **{c: "DELTA_BINARY_PACKED" for c in _DELTA},
            **{c: "PLAIN" for c in ("partition", "attempt")},
        },
        "write_statistics": ["event_id", "event_time", "record_id"],
        "write_batch_size": 1 << 16,
    },
    "edges": {
        "compression": "zstd",
        "use_dictionary": False,
        "column_encoding": {c: "DELTA_BINARY_PACKED" for c in _EDGE_COLUMNS},
        "write_statistics": list(_EDGE_COLUMNS),
        "write_batch_size": 1 << 16,
    },
}


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
        codes: list[int | np.ndarray] = []  # a constant's code, or an array part's codes
        sizes: list[int] = []
        for part in self.parts:
            if isinstance(part, tuple):
                value, n = part
                codes.append(-1 if value is None else values.setdefault(value, len(values)))
                sizes.append(n)
                continue
            enc = part().dictionary_encode()
            local = [values.setdefault(v, len(values)) for v in enc.dictionary.to_pylist()]
            remap = np.array([*local, -1], np.int32)  # the last entry: nulls
            idx = enc.indices.fill_null(len(local)).to_numpy(zero_copy_only=False)
            codes.append(remap[idx])
            sizes.append(len(idx))
        if all(isinstance(c, int) for c in codes):  # lineage batches: runs of one code
            code = np.repeat(np.array(codes, np.int32), sizes)
        else:
            code = np.empty(sum(sizes), np.int32)
            pos = 0
            for c, n in zip(codes, sizes):
                code[pos : pos + n] = c
                pos += n
        valid = code >= 0
        indices = _numpy_array(code, pa.int32(), None if valid.all() else valid)
        # Codes come from `values` itself: no bounds check over every row (safe=False).
        return pa.DictionaryArray.from_arrays(
            indices, pa.array(list(values), pa.string()), safe=False
        )

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
        self.counts: list[tuple[int, int] | np.ndarray] = []  # (items a row, rows) or counts
        self.keys: list[pa.Array | Lazy] = []
        self.values: list[pa.Array | Lazy] = []

    def const(self, attrs: dict[str, str], n: int) -> None:
        k = len(attrs)
        self.counts.append((k, n))
        if k and n:
            tile = np.tile(np.arange(k, dtype=np.int32), n)
            self.keys.append(pa.array(list(attrs), pa.string()).take(tile))
            self.values.append(pa.array(list(attrs.values()), pa.string()).take(tile))

    def arrays(self, counts: np.ndarray, keys: Lazy, values: Lazy) -> None:
        self.counts.append(counts)
        self.keys.append(keys)
        self.values.append(values)

    def build(self) -> pa.MapArray:
        # Offsets part by part: a constant part is an arithmetic run (no counts array, no
        # running sum over its rows: lineage batches have no attributes).
        sizes = [c[1] if isinstance(c, tuple) else len(c) for c in self.counts]
        items = sum(c[0] * c[1] if isinstance(c, tuple) else int(c.sum()) for c in self.counts)
        if items >= 2**31:
            raise ValueError("a table's attributes exceed the 2**31 items of a map column")
        offsets = np.empty(sum(sizes) + 1, np.int32)
        offsets[0] = end = 0
        pos = 1
        for part, n in zip(self.counts, sizes):
            out = offsets[pos : pos + n]
            if isinstance(part, tuple):
                k = part[0]
                if k:
                    np.multiply(np.arange(1, n + 1, dtype=np.int32), k, out=out)
                    out += end
                else:
                    out.fill(end)
                end += k * n
            elif n:
                np.cumsum(part, out=out)
                out += end
                end = int(out[-1])
            pos += n
        keys = _strings(self.keys)
        values = _strings(self.values)
        return pa.MapArray.from_arrays(_numpy_array(offsets, pa.int32()), keys, values)


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
        ints["partition"].append(np.full(n, _partition(batch.partition), np.int32))
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
            if loc is None:  # null in the table (masked)
                ints["offset"].append(np.zeros(n, np.int64))
                ints["length"].append(np.zeros(n, np.int64))
            else:
                ints["offset"].append(np.full(n, loc.offset, np.int64))
                ints["length"].append(np.full(n, loc.length, np.int64))
        self._valid.append(np.full(n, loc is not None or batch.offsets is not None))
        self._attrs.const(batch.attributes, n)
        self.rows += n
        if batch.parent_counts is not None and batch.parent_ids is not None:
            counts = batch.parent_counts.to_array()
            parents = batch.parent_ids.to_array(counts)  # what parent_array() decodes
            if a or b < len(batch):
                parents = parents[int(counts[:a].sum()) : int(counts[:b].sum())]
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
        part = cols.partition
        _partition(int(part.min()))
        _partition(int(part.max()))
        ints["partition"].append(part.astype(np.int32))
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

    def first_event_id(self) -> int:
        """The id of the first event held (there is one)."""
        return int(self._ints["event_id"][0][0])

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
    present = [None if v.all() else v for v in valid]
    ts = pa.timestamp("us", tz="UTC")
    cols = [
        _chunks(ints["event_id"], pa.int64()),
        _chunks(ints["event_time"], ts),
        strings["event_type"].dictionary(),
        strings["component_id"].dictionary(),
        strings["component_type"].dictionary(),
        _chunks(ints["partition"], pa.int32()),
        _chunks(ints["attempt"], pa.int64()),
        _chunks(ints["record_id"], pa.int64()),
        strings["uri"].dictionary(),
        _chunks(ints["offset"], pa.int64(), present),
        _chunks(ints["length"], pa.int64(), present),
        attrs.build(),
        strings["details"].plain(),
    ]
    return pa.Table.from_arrays(cols, schema=EVENTS_SCHEMA)


def _partition(p: int) -> int:
    if not -(2**31) <= p < 2**31:
        raise ValueError(f"partition {p} does not fit the int32 partition column")
    return p


def _strings(parts: list[pa.Array | Lazy]) -> pa.Array:
    arrays = [(p if isinstance(p, pa.Array) else p()).cast(pa.string()) for p in parts]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def _chunks(
    parts: list[np.ndarray], type_: pa.DataType, valid: list[np.ndarray | None] | None = None
) -> pa.ChunkedArray:
    """Arrow chunks over numpy arrays, without copying them (`valid`: each part's validity,
    None where every value is present)."""
    if valid is None:
        return pa.chunked_array([_numpy_array(p, type_) for p in parts], type_)
    return pa.chunked_array([_numpy_array(p, type_, v) for p, v in zip(parts, valid)], type_)


def _numpy_array(
    values: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None
) -> pa.Array:
    """An Arrow array of the signed-int-backed `type_` over a numpy array's memory (copied
    only if it is not contiguous ints of that width), null where `valid` is False.
    Cheaper than `pa.array(values, mask=...)` (3 us against 12 us for a 10 k masked part; a
    table has a part per stored batch slice)."""
    values = np.ascontiguousarray(values, dtype=f"<i{type_.bit_width // 8}")
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(values)])
