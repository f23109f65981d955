"""The provenance event model: NiFi's event, adapted to record-level Spark lineage.

Rich events (`ProvenanceEvent`) are written one by one (driver side, low volume). High-volume
lineage is written columnar (`LineageBatch`): one batch is N records of one (run, component,
partition, attempt) with packed int columns, and each record still becomes its own
`ProvenanceEvent` with its own event id when read back.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable
from itertools import repeat
from typing import Any

import msgspec
import numpy as np

from ._columns import PLAIN, RANGE, SEGMENTED, IntColumn


class EventType(str, enum.Enum):
    """What happened to a record (NiFi's event types, plus Spark's operator shapes)."""

    CREATE = "CREATE"
    RECEIVE = "RECEIVE"  # read from a source
    FORK = "FORK"  # one parent, N children
    JOIN = "JOIN"  # N parents, one child: aggregations, joins, combiners
    ROUTE = "ROUTE"  # passed a filter
    DROP = "DROP"  # removed by a filter, or by an exclusive replay
    SEND = "SEND"  # written to a sink or returned to the driver
    FAIL = "FAIL"  # the input record whose processing raised
    CONTENT_MODIFIED = "CONTENT_MODIFIED"
    ATTRIBUTES_MODIFIED = "ATTRIBUTES_MODIFIED"
    REPLAY = "REPLAY"

    def __str__(self) -> str:
        return self.value


class Location(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """Where a source or sink record lives: enough to re-read its raw bytes by seeking."""

    uri: str
    offset: int = 0
    length: int = -1


class ProvenanceEvent(msgspec.Struct, array_like=True, gc=False):
    """One provenance event about one record. `event_id` is 0 until the repository assigns it."""

    event_time_ns: int
    event_type: EventType
    run_id: str
    component_id: str
    component_type: str
    partition: int
    attempt: int
    record_id: int
    parent_ids: list[int]
    attributes: dict[str, str]
    location: Location | None = None
    details: str | None = None
    event_id: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (event type by name, location as an object)."""
        out: dict[str, Any] = msgspec.to_builtins(
            {
                "event_id": self.event_id,
                "event_time_ns": self.event_time_ns,
                "event_type": self.event_type.value,
                "run_id": self.run_id,
                "component_id": self.component_id,
                "component_type": self.component_type,
                "partition": self.partition,
                "attempt": self.attempt,
                "record_id": self.record_id,
                "parent_ids": self.parent_ids,
                "attributes": self.attributes,
                "location": None
                if self.location is None
                else {
                    "uri": self.location.uri,
                    "offset": self.location.offset,
                    "length": self.location.length,
                },
                "details": self.details,
            }
        )
        return out


class LineageBatch(msgspec.Struct, array_like=True, gc=False, kw_only=True):
    """N records of one (run, component, partition, attempt), columnar.

    - `record_ids`: N record ids (usually a range: capture point, partition, positions 0..N-1).
    - `parent_counts` / `parent_ids`: CSR parent references; record i's parents are
      `parent_ids[sum(counts[:i]) : sum(counts[:i+1])]`. Both None when records have no parents.
    - `offsets`: N+1 byte offsets into `location.uri` for source/sink records; record i spans
      `[offsets[i], offsets[i+1])`, so its raw bytes can be re-read by seeking.
    - `values` / `value_offsets`: optional captured record values (opaque bytes per record).
    """

    event_time_ns: int
    event_type: EventType
    run_id: str
    component_id: str
    component_type: str
    partition: int
    attempt: int
    record_ids: IntColumn
    parent_counts: IntColumn | None = None
    parent_ids: IntColumn | None = None
    offsets: IntColumn | None = None
    values: bytes | None = None
    value_offsets: IntColumn | None = None
    attributes: dict[str, str] = {}
    location: Location | None = None
    details: str | None = None

    @classmethod
    def build(
        cls,
        *,
        event_time_ns: int,
        event_type: EventType,
        run_id: str,
        component_id: str,
        component_type: str,
        partition: int,
        attempt: int,
        record_ids: np.ndarray | range,
        parent_counts: np.ndarray | None = None,
        parent_ids: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
        values: list[bytes] | None = None,
        attributes: dict[str, str] | None = None,
        location: Location | None = None,
        details: str | None = None,
    ) -> LineageBatch:
        """Build a batch from numpy arrays (or a range of record ids), validating shapes."""
        ids = IntColumn.from_range(record_ids) if isinstance(record_ids, range) else None
        if ids is None:
            ids = IntColumn.from_array(record_ids)
        n = ids.n
        pc = pi = None
        if (parent_counts is None) != (parent_ids is None):
            raise ValueError("parent_counts and parent_ids go together")
        if parent_counts is not None:
            counts = np.asarray(parent_counts, dtype=np.int64)
            if len(counts) != n:
                raise ValueError(f"parent_counts has {len(counts)} entries for {n} records")
            if counts.size and counts.min() < 0:
                raise ValueError("parent_counts must not be negative")
            parents = np.asarray(parent_ids, dtype=np.int64)
            if int(counts.sum()) != len(parents):
                raise ValueError(
                    f"parent_counts sum to {int(counts.sum())} but there are {len(parents)} parents"
                )
            pc, pi = IntColumn.from_array(counts), IntColumn.from_array(parents)
        off = None
        if offsets is not None:
            off = IntColumn.from_array(offsets)
            if off.n != n + 1:
                raise ValueError(f"offsets needs {n + 1} entries (N+1), got {off.n}")
        vals = voff = None
        if values is not None:
            if len(values) != n:
                raise ValueError(f"values has {len(values)} entries for {n} records")
            vals = b"".join(values)
            lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=n)
            voff = IntColumn.from_array(np.concatenate(([0], np.cumsum(lens))))
        return cls(
            event_time_ns=event_time_ns,
            event_type=EventType(event_type),
            run_id=run_id,
            component_id=component_id,
            component_type=component_type,
            partition=partition,
            attempt=attempt,
            record_ids=ids,
            parent_counts=pc,
            parent_ids=pi,
            offsets=off,
            values=vals,
            value_offsets=voff,
            attributes=dict(attributes or {}),
            location=location,
            details=details,
        )

    def __len__(self) -> int:
        return self.record_ids.n

    @property
    def association_count(self) -> int:
        """How many (record, parent) references the batch holds."""
        return 0 if self.parent_ids is None else self.parent_ids.n

    def parent_array(self) -> np.ndarray | None:
        """All parent ids as one int64 array (CSR order), or None when records have none.
        Use this rather than `parent_ids.to_array()`: stored parent columns need the counts."""
        if self.parent_ids is None:
            return None
        if self.parent_ids.codec == SEGMENTED and self.parent_counts is not None:
            return self.parent_ids.to_array(self.parent_counts.to_array())
        return self.parent_ids.to_array()

    def parent_starts(self) -> np.ndarray:
        """CSR row starts: N+1 entries, record i's parents are [starts[i], starts[i+1])."""
        n = len(self)
        starts = np.zeros(n + 1, dtype=np.int64)
        if self.parent_counts is not None and n:
            np.cumsum(self.parent_counts.to_array(), out=starts[1:])
        return starts

    def value(self, i: int) -> bytes | None:
        """The captured value bytes of record i, if values were captured."""
        if self.values is None or self.value_offsets is None:
            return None
        vo = self.value_offsets.to_array()
        return self.values[int(vo[i]) : int(vo[i + 1])]

    def slice(self, start: int, stop: int) -> LineageBatch:
        """Records [start, stop) as a batch of their own (columns sliced, CSR rebased)."""
        n = len(self)
        return self.split([max(0, min(start, n)), max(0, min(stop, n))])[0]

    def split(self, bounds: list[int], stored: bool = False) -> list[LineageBatch]:
        """Consecutive slices [bounds[0], bounds[1]), [bounds[1], bounds[2]), ...

        Columns are decoded once for all slices, so cutting a large batch into blocks is linear.
        With `stored`, each slice's columns are in their storage form (as `compacted()`).
        """
        pack = IntColumn.stored if stored else IntColumn.from_array
        ids = None if self.record_ids.codec == RANGE else self.record_ids.to_array()
        counts = offs = vo = None
        parents = starts = np.zeros(0, dtype=np.int64)  # used only where counts is set
        if self.parent_counts is not None and self.parent_ids is not None:
            counts = self.parent_counts.to_array()
            parents = self.parent_ids.to_array(counts)
            starts = self.parent_starts()
        if self.offsets is not None:
            offs = self.offsets.to_array()
        if self.values is not None and self.value_offsets is not None:
            vo = self.value_offsets.to_array()
        out = []
        for a, b in itertools.pairwise(bounds):
            pc = pi = off = vals = voff = None
            if counts is not None:
                pc = pack(counts[a:b])
                p = parents[starts[a] : starts[b]]
                pi = IntColumn.stored(p, counts[a:b]) if stored else IntColumn.from_array(p)
            if offs is not None:
                off = pack(offs[a : b + 1])
            if vo is not None and self.values is not None:
                vals = self.values[int(vo[a]) : int(vo[b])]
                voff = pack(vo[a : b + 1] - vo[a])
            out.append(
                msgspec.structs.replace(
                    self,
                    record_ids=self.record_ids.slice(a, b) if ids is None else pack(ids[a:b]),
                    parent_counts=pc,
                    parent_ids=pi,
                    offsets=off,
                    values=vals,
                    value_offsets=voff,
                )
            )
        return out

    def cumulative_bytes(self) -> np.ndarray:
        """Estimated encoded bytes of records [0, i] for each i: where to cut block-sized slices."""
        n = len(self)
        per = np.full(n, 2 if self.record_ids.codec == 0 else 8, dtype=np.int64)
        if self.parent_counts is not None:
            per += 1 + 4 * self.parent_counts.to_array()
        if self.offsets is not None:
            per += 4
        if self.value_offsets is not None:
            per += 2 + np.diff(self.value_offsets.to_array())
        return np.cumsum(per)

    def compacted(self) -> LineageBatch:
        """The same batch with columns in their compact (delta/shuffled) storage form."""
        pc, pi = self.parent_counts, self.parent_ids
        if pc is not None and pi is not None:
            # Parents are coded row by row (SEGMENTED), which needs the counts to decode.
            pi = pi.compacted(pc.to_array()) if pi.codec == PLAIN else pi
            pc = pc.compacted()
        return msgspec.structs.replace(
            self,
            record_ids=self.record_ids.compacted(),
            parent_counts=pc,
            parent_ids=pi,
            offsets=None if self.offsets is None else self.offsets.compacted(),
            value_offsets=None if self.value_offsets is None else self.value_offsets.compacted(),
        )

    def nbytes(self) -> int:
        """Approximate encoded size, used to cut batches into ~block-sized slices."""
        size = 96 + len(self.run_id) + len(self.component_id) + len(self.component_type)
        for col in (
            self.record_ids,
            self.parent_counts,
            self.parent_ids,
            self.offsets,
            self.value_offsets,
        ):
            if col is not None:
                size += len(col.data) + 16
        if self.values is not None:
            size += len(self.values)
        return size

    def event(self, i: int, event_id: int = 0) -> ProvenanceEvent:
        """Record i as a per-record `ProvenanceEvent` (one record of a batch is one event).

        Decodes only what record i needs (its parents' row, two offsets): a point lookup
        must not pay for decoding the whole batch slice."""
        n = len(self)
        if not 0 <= i < n:
            raise IndexError(f"record {i} of a batch of {n}")
        parents: list[int] = []
        if self.parent_ids is not None and self.parent_counts is not None:
            parents = self.parent_ids.row(self.parent_counts.to_array(), i).tolist()
        loc = self.location
        if self.offsets is not None:
            a, b = self.offsets.take(i, i + 2).tolist()
            loc = Location(self.location.uri if self.location is not None else "", a, b - a)
        return ProvenanceEvent(
            self.event_time_ns,
            self.event_type,
            self.run_id,
            self.component_id,
            self.component_type,
            self.partition,
            self.attempt,
            int(self.record_ids.take(i, i + 1)[0]),
            parents,
            dict(self.attributes),
            loc,
            self.details,
            event_id,
        )

    def events(
        self, first_event_id: int = 0, start: int = 0, stop: int | None = None
    ) -> list[ProvenanceEvent]:
        """Records [start, stop) as `ProvenanceEvent`s; record i gets id first_event_id + i.

        Built in bulk: columns decoded once, events constructed by `map` over columns, each
        with its own parent list and attribute dict (events are mutable and independent).
        """
        n = len(self)
        stop = n if stop is None else min(stop, n)
        start = max(0, start)
        k = stop - start
        if k <= 0:
            return []
        ids = self.record_ids.take(start, stop).tolist()
        all_parents = self.parent_array()
        if all_parents is not None:
            starts = self.parent_starts()
            flat = all_parents[starts[start] : starts[stop]].tolist()
            b = (starts[start : stop + 1] - starts[start]).tolist()
            parents = [flat[x:y] for x, y in itertools.pairwise(b)]
        else:
            parents = [[] for _ in range(k)]
        if self.offsets is not None:
            uri = self.location.uri if self.location is not None else ""
            offs = self.offsets.take(start, stop + 1)
            # map over prepared columns: half the cost of a comprehension over pairs
            locs: Iterable[Location | None] = list(
                map(Location, repeat(uri, k), offs[:-1].tolist(), np.diff(offs).tolist())
            )
        else:
            locs = repeat(self.location, k)
        attrs = self.attributes
        attributes = [dict(attrs) for _ in range(k)] if attrs else [{} for _ in range(k)]
        eids = (
            range(first_event_id + start, first_event_id + stop) if first_event_id else repeat(0, k)
        )
        return list(
            map(
                ProvenanceEvent,
                repeat(self.event_time_ns, k),
                repeat(self.event_type, k),
                repeat(self.run_id, k),
                repeat(self.component_id, k),
                repeat(self.component_type, k),
                repeat(self.partition, k),
                repeat(self.attempt, k),
                ids,
                parents,
                attributes,
                locs,
                repeat(self.details, k),
                eids,
            )
        )
