"""Segment sinks (executor side): what consumes a segment's records.

Each sink exposes `count()` (records consumed so far, read by the input per input record) and
`run(records)`, a generator feeding Spark. Per record, a sink does what the operation needs
anyway plus at most one array append.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._inputs import InputState

_PICKLE = pickle.HIGHEST_PROTOCOL


class CombineSink:
    """Map-side combiner: one combiner record per key; parents: the inputs of its values."""

    def __init__(
        self,
        create_combiner: Callable,
        merge_value: Callable,
        base: int,
        split: int = 0,
        keep: dict | None = None,
        drop: frozenset | None = None,
    ) -> None:
        self.create = create_combiner
        self.merge = merge_value
        self.base = base
        self.split = split
        self.keep = keep  # selective replay: (partition, key) -> original id
        self.drop = drop  # exclusive replay: original ids removed here
        self.slots = array("i")
        self.n_records = 0
        self.keys: list = []  # the combiner records' keys, by slot
        self.count = self.slots.__len__

    def run(self, records: Iterator) -> Iterable:
        index: dict = {}
        keys: list = []
        vals: list = []
        get = index.get
        slots_append = self.slots.append
        create, merge = self.create, self.merge
        for k, v in records:
            s = get(k)
            if s is None:
                s = index[k] = len(keys)
                keys.append(k)
                vals.append(create(v))
            else:
                vals[s] = merge(vals[s], v)
            slots_append(s)
        self.n_records = len(keys)
        self.keys = keys
        base = self.base
        if self.keep is not None:
            keep, split = self.keep, self.split
            return [(k, (v, keep[(split, k)])) for k, v in zip(keys, vals) if (split, k) in keep]
        if self.drop:
            drop = self.drop
            return [
                (k, (v, base + s))
                for s, (k, v) in enumerate(zip(keys, vals))
                if base + s not in drop
            ]
        return zip(keys, zip(vals, range(base, base + len(keys))))


class OutputSink:
    """An action's output records; values pickled for collect/take, lengths for save."""

    def __init__(
        self,
        action: str,
        limit: int | None,
        capture_values: bool,
        source: IdSource | None = None,
        keep: tuple[dict, frozenset] | None = None,
        drop: frozenset | None = None,
        base: int = 0,
    ) -> None:
        self.action = action
        self.limit = limit
        self.source = source
        self.keep = keep  # selective replay: ({parent id: first child id}, kept child ids)
        self.drop = drop  # exclusive replay: original output ids removed
        self.base = base
        self.values: list[bytes] | None = [] if capture_values else None
        self.marks = array("b")  # one entry per output record: its count is count()
        self.lengths: array | None = None
        self.count = self.marks.__len__

    @property
    def n_records(self) -> int:
        return len(self.marks)

    def run(self, records: Iterator) -> Iterator:
        if self.keep is not None or self.drop:
            records = self._replay_filter(records)
        if self.action == "count":
            return self._count(records)
        if self.action == "save":
            return self._save(records)
        return self._collect(records)

    def _collect(self, records: Iterator) -> Iterator:
        mark = self.marks.append
        values = self.values
        limit = self.limit
        dumps = pickle.dumps
        if limit is not None:
            # Consume the whole partition so every capture point upstream is complete; only
            # the first `limit` records are outputs.
            for x in records:
                if len(self.marks) < limit:
                    mark(0)
                    if values is not None:
                        values.append(dumps(x, _PICKLE))
                    yield x
            return
        if values is None:
            for x in records:
                mark(0)
                yield x
        else:
            add = values.append
            for x in records:
                mark(0)
                add(dumps(x, _PICKLE))
                yield x

    def _replay_filter(self, records: Iterator) -> Iterator:
        """In a replay, keep exactly the outputs the replay is for. The k-th output made from
        one input is the original's k-th child of it (narrow operations are deterministic)."""
        if self.drop:
            drop, base = self.drop, self.base
            return (x for pos, x in enumerate(records) if base + pos not in drop)
        if self.keep is None or self.source is None:
            raise RuntimeError("a selective replay's output needs its kept ids and input ids")
        first, kept = self.keep
        return self._by_parent(records, first, kept, self.source)

    @staticmethod
    def _by_parent(records: Iterator, first: dict, kept: frozenset, src: IdSource) -> Iterator:
        pulled = src.bounds.__len__
        ids = src.ids if src.ids is not None else array("q")  # a replay's inputs carry ids
        last, k = None, 0
        for x in records:
            pid = src.const if src.const is not None else ids[pulled() - 1]
            if pid != last:
                last, k = pid, 0
            oid = first.get(pid, -1) + k
            k += 1
            if oid in kept:
                yield x

    def _count(self, records: Iterator) -> Iterator:
        mark = self.marks.append
        for _ in records:
            mark(0)
        yield len(self.marks)

    def _save(self, records: Iterator) -> Iterator:
        # As PySpark's saveAsTextFile: bytes as they are, str as UTF-8, anything else str().
        self.lengths = lengths = array("q")
        add = lengths.append
        mark = self.marks.append
        for x in records:
            if isinstance(x, bytes):
                b = x
            elif isinstance(x, str):
                b = x.encode("utf-8")
            else:
                b = str(x).encode("utf-8")
            mark(0)
            add(len(b))
            yield b


class IdSource:
    """Where a record's input id comes from, as cheaply as the input allows: positional
    inputs are `base + index`, union inputs carry explicit ids, and after a
    mapPartitions(lineage="partition") every record derives from one group record."""

    __slots__ = ("base", "bounds", "const", "ids")

    def __init__(self, state: InputState) -> None:
        self.bounds = state.bounds
        self.base = state.base
        self.ids = state.ids
        self.const: int | None = None


class ShuffleSink:
    """Map side of a shuffle without combining. Joins group values per key first, as
    vanilla PySpark's join does (one shuffled record per key and side, with its values' input
    ids); sorts ship each record with its input's id."""

    def __init__(self, source: IdSource, tag: int | None) -> None:
        self.source = source
        self.tag = tag
        self.n_records = 0
        self.count = _zero

    def run(self, records: Iterator) -> Iterator:
        src, tag = self.source, self.tag
        pulled = src.bounds.__len__
        base, ids, const = src.base - 1, src.ids, src.const
        if tag is None:
            if const is not None:
                return ((k, (v, const)) for k, v in records)
            if ids is None:
                return ((k, (v, base + pulled())) for k, v in records)
            return ((k, (v, ids[pulled() - 1])) for k, v in records)
        groups: dict[Any, tuple[list[Any], list[int]]] = {}
        get = groups.get
        for k, v in records:
            g = get(k)
            if g is None:
                g = groups[k] = ([], [])
            g[0].append(v)
            g[1].append(
                const
                if const is not None
                else base + pulled()
                if ids is None
                else ids[pulled() - 1]
            )
        return ((k, (tag, vs, rids)) for k, (vs, rids) in groups.items())


class ForwardSink:
    """Into a union: (value, id of the input it came from)."""

    def __init__(self, source: IdSource) -> None:
        self.source = source
        self.n_records = 0
        self.count = _zero

    def run(self, records: Iterator) -> Iterator:
        src = self.source
        pulled = src.bounds.__len__
        base, ids, const = src.base - 1, src.ids, src.const
        if const is not None:
            return ((x, const) for x in records)
        if ids is None:
            return ((x, base + pulled()) for x in records)
        return ((x, ids[pulled() - 1]) for x in records)


def _zero() -> int:
    return 0
