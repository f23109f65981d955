"""The function Spark runs for each partition of a captured segment (executor side).

It wires an input, the narrow operations and a sink, feeds Spark, and when the partition is
done turns the per-record arrays into columnar lineage batches with numpy and journals them:
one journal per task attempt, sealed only if the partition completed. Nothing here imports
pyspark at module import time.
"""

from __future__ import annotations

import os
import pickle
import time
import traceback
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from journals import (
    EventType,
    JournalWriter,
    LineageBatch,
    Location,
    ProvenanceEvent,
    WriterSpec,
    record_id_base,
    unique_ids,
)

from . import _inputs as inputs
from . import _sinks as sinks
from ._spec import (
    CapturePoint,
    CombineSink,
    ForwardSink,
    FrameInput,
    NarrowOp,
    OutputSink,
    ParallelInput,
    ReplayInput,
    SegmentSpec,
    ShuffleInput,
    ShuffleSink,
    TextInput,
    UnionInput,
)

STOP_ITERATION_MESSAGE = "Caught StopIteration thrown from user's code; failing the task"


def task_attempt_id() -> int:
    """Spark's task attempt id (unique within the application); 0 outside Spark."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return 0
    tc = TaskContext.get()
    return int(tc.taskAttemptId()) if tc is not None else 0


def cp_batch(
    cp: CapturePoint, run_id: str, partition: int, attempt: int, n: int, **columns
) -> LineageBatch:
    """The batch of records 0..n-1 of (cp, partition)."""
    base = record_id_base(cp.number, partition)
    return LineageBatch.build(
        event_time_ns=time.time_ns(),
        event_type=EventType(cp.event_type),
        run_id=run_id,
        component_id=cp.component_id,
        component_type=cp.component_type,
        partition=partition,
        attempt=attempt,
        record_ids=range(base, base + n),
        **columns,
    )


@dataclass(slots=True)
class TakeOutput:
    """The last element a `take` task returns instead of journaling its output batch: the
    driver keeps only the records take returns (a partition may give more than are kept),
    and journals exactly those."""

    partition: int
    attempt: int
    parent_counts: np.ndarray
    parent_ids: np.ndarray
    values: list[bytes] | None

    def batch(self, cp: CapturePoint, run_id: str, keep: int) -> LineageBatch | None:
        """The batch of this partition's first `keep` outputs (None if keep is 0)."""
        if keep <= 0:
            return None
        counts = np.asarray(self.parent_counts, dtype=np.int64)[:keep]
        columns: dict = {
            "parent_counts": counts,
            "parent_ids": np.asarray(self.parent_ids, dtype=np.int64)[: int(counts.sum())],
        }
        if self.values is not None:
            columns["values"] = self.values[:keep]
        return cp_batch(cp, run_id, self.partition, self.attempt, keep, **columns)


class TaskJournal:
    """The lineage batches and FAIL events of one task attempt; one journal, sealed at the end."""

    def __init__(self, spec: WriterSpec, run_id: str, partition: int) -> None:
        self.spec = spec
        self.run_id = run_id
        self.partition = partition
        self.attempt = task_attempt_id()
        self.batches: list[LineageBatch] = []
        self.fails: list[ProvenanceEvent] = []

    def batch(self, cp: CapturePoint, n: int, **columns) -> None:
        if n > 0:
            self.batches.append(
                cp_batch(cp, self.run_id, self.partition, self.attempt, n, **columns)
            )

    def fail_event(
        self,
        cp_component: str,
        record_id: int,
        error: BaseException,
        record: tuple[Location | None, str | None] = (None, None),
    ) -> None:
        """Record that processing `record_id` raised. `record` is where its raw bytes are, or
        its value's repr: the event alone must show the culprit, since a failing attempt's
        lineage batches are dropped (only one attempt's lineage may ever be merged)."""
        location, value = record
        attributes = {"exception": type(error).__name__, "message": str(error)[:2000]}
        if value is not None:
            attributes["value"] = value
        self.fails.append(
            ProvenanceEvent(
                event_time_ns=time.time_ns(),
                event_type=EventType.FAIL,
                run_id=self.run_id,
                component_id=cp_component,
                component_type="failure",
                partition=self.partition,
                attempt=self.attempt,
                record_id=record_id,
                parent_ids=[record_id] if record_id >= 0 else [],
                attributes=attributes,
                location=location,
                details="".join(traceback.format_exception_only(type(error), error))[-4000:],
            )
        )

    def seal(self) -> None:
        if not self.batches and not self.fails:
            return
        w = JournalWriter.open(self.spec, tag=f"p{self.partition}")
        try:
            for b in self.batches:
                w.append_batch(b)
            if self.fails:
                w.append_events(self.fails)
            w.seal()
        except BaseException:
            w.abort()
            raise

    def seal_failures_only(self) -> None:
        """The task is failing: keep its FAIL events (durable), drop its partial lineage."""
        self.batches = []
        self.seal()


class Segment:
    """Picklable per-partition function for `mapPartitionsWithIndex`."""

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec = spec

    def __call__(self, split: int, iterator: Iterable[Any]) -> Iterator[Any]:
        return run_segment(self.spec, split, iter(iterator))


def run_segment(spec: SegmentSpec, split: int, iterator: Iterator) -> Iterator:
    if isinstance(spec.input, ReplayInput):
        # A selective replay runs only the partitions holding traced records: each task's
        # data names the original partition it replays (ids and mapPartitionsWithIndex need it).
        split, iterator = _replayed_partition(split, iterator)
    journal = TaskJournal(spec.journal, spec.run_id, split) if spec.journal is not None else None
    inp = spec.input
    in_cp = getattr(inp, "cp", None)
    state = inputs.InputState(record_id_base(in_cp.number, split) if in_cp else 0)
    rp = spec.replay
    if isinstance(inp, UnionInput | ReplayInput) or (
        rp is not None
        and (isinstance(inp, ShuffleInput) or (in_cp is not None and in_cp.number in rp.drop))
    ):
        state.ids = array("q")  # records carry explicit (original) ids
    groups: list[tuple[CapturePoint, array | None]] = []
    ids = sinks.IdSource(state)
    sink = _make_sink(spec, split, ids)
    records = _make_input(inp, state, split, iterator, sink.count, journal is not None, rp)
    # Skipping resumes the chain after a record raised. A mapPartitions function is a user
    # generator that an exception ends for good, so in its segment nothing is skipped: the
    # failure is recorded and the task fails, as under "fail".
    skip = spec.on_error == "skip" and not any(op.name == "mapPartitions" for op in spec.ops)
    on_fail: Callable[[BaseException], None] | None = None
    if skip:
        on_fail = (
            partial(_record_failure, journal, inp, state, split)
            if journal is not None
            else ignore_error
        )
    try:
        # A mapPartitions function that is no generator runs (and may raise) in here.
        records = apply_ops(records, spec.ops, split, state, groups, on_fail)
        if groups:  # after a partition-lineage mapPartitions every record derives from it
            ids.const = record_id_base(groups[-1][0].number, split)
        if on_fail is not None:  # skip
            records = skipping(records, on_fail)
        yield from sink.run(records)
        if not state.exhausted:  # a StopIteration escaped a user function and ended a map early
            raise RuntimeError(STOP_ITERATION_MESSAGE)
    except Exception as e:
        if journal is not None:
            _record_failure(journal, inp, state, split, e)
            journal.seal_failures_only()
        raise
    # Only a partition that completed journals its lineage (a killed or failed attempt leaves
    # nothing, so only one attempt's lineage can ever be merged).
    if journal is not None:
        tail = _journal_lineage(journal, spec, split, state, sink, groups)
        journal.seal()
        if tail is not None:
            yield tail


def _replayed_partition(split: int, iterator: Iterator) -> tuple[int, Iterator]:
    items = list(iterator)  # one (original partition, records) element, or none
    if not items:
        return split, iter(())
    original, records = items[0]
    return original, iter([records])


def _safe_id(state: inputs.InputState) -> int:
    try:
        return state.current_id() if len(state.bounds) else -1
    except IndexError:
        return -1


_VALUE_REPR_MAX = 2000


def _file_uri(path: str) -> str:
    return "file://" + os.path.abspath(path)


def _record_failure(
    journal: TaskJournal, inp, state: inputs.InputState, split: int, error: BaseException
) -> None:
    cp = getattr(inp, "cp", None)
    journal.fail_event(
        cp.component_id if cp else "union",
        _safe_id(state),
        error,
        _failing_record(inp, state, split),
    )


def _failing_record(
    inp, state: inputs.InputState, split: int
) -> tuple[Location | None, str | None]:
    """Where the record being processed lies (text: its line's bytes), or its value's repr
    (captured values: parallelize, aggregations); (None, None) when neither is known."""
    i = len(state.bounds) - 1
    if i < 0:
        return None, None
    try:
        if isinstance(inp, TextInput) and state.chunk is not None:
            first, offs = state.chunk
            j = i - first
            if 0 <= j < len(offs) - 1:
                loc = Location(
                    _file_uri(inp.splits[split][0]), int(offs[j]), int(offs[j + 1] - offs[j])
                )
                return loc, None
        if state.values is not None and i < len(state.values):
            return None, repr(pickle.loads(state.values[i]))[:_VALUE_REPR_MAX]
        if isinstance(inp, FrameInput):
            return None, repr(state.current)[:_VALUE_REPR_MAX]
    except Exception:  # naming the culprit must never hide the user's own error
        pass
    return None, None


def skipping(records: Iterator, on_fail: Callable[[BaseException], None]) -> Iterator:
    """on_error="skip": a record whose processing raised is recorded (FAIL) and dropped. The
    C iterators `map` and `filter` survive an exception in their function, so pulling again
    goes on with the next record; flat-mapping is guarded per record (`_guarded`)."""
    nxt = records.__next__
    while True:
        try:
            x = nxt()
        except StopIteration:
            return
        except Exception as e:
            on_fail(e)
            continue
        yield x


def _guarded(f: Callable, on_fail: Callable[[BaseException], None]) -> Callable:
    """A flat-mapping function whose failure drops just its record: itertools.chain gives up
    for good when its source raises, so the error must not reach it. The output is
    materialized so an error raised while iterating it (a generator) is caught here too."""

    def guarded(x):
        try:
            return tuple(f(x))
        except Exception as e:
            on_fail(e)
            return ()

    return guarded


def ignore_error(_error: BaseException) -> None:
    return None


def _make_input(
    inp, state, split: int, iterator, count: Callable[[], int], capture: bool, rp
) -> Iterator:
    drop = rp.drop.get(inp.cp.number) if rp is not None and hasattr(inp, "cp") else None
    if isinstance(inp, TextInput):
        if drop:
            return inputs.text_input_without(state, inp.splits[split], count, drop)
        return inputs.text_input(state, inp.splits[split], count)
    if isinstance(inp, ParallelInput):
        return inputs.parallel_input(state, iterator, count, capture, drop)
    if isinstance(inp, FrameInput):
        return inputs.frame_input(state, iterator, count, inp.fields)
    if isinstance(inp, UnionInput):
        return inputs.union_input(state, iterator, count)
    if isinstance(inp, ReplayInput):  # each partition: one list of (value, original id)
        return inputs.union_input(state, chain.from_iterable(iterator), count)
    if isinstance(inp, ShuffleInput) and rp is not None:
        keep = rp.keep.get(inp.cp.number)
        return inputs.replay_shuffle_input(state, iterator, count, inp, keep, drop)
    if isinstance(inp, ShuffleInput):
        if inp.kind == "aggregate" and inp.merge_combiners is not None:
            return inputs.aggregate_input(
                state, iterator, count, inp.merge_combiners, inp.capture if capture else None
            )
        if inp.kind == "join":
            return inputs.join_input(state, iterator, count, inp.join_how)
        if inp.kind == "cogroup":
            return inputs.cogroup_input(state, iterator, count)
        if inp.kind == "sort":
            return inputs.sort_input(state, iterator, count, inp.sort_ascending, inp.sort_keyfunc)
    raise TypeError(f"unknown segment input {inp!r}")


def _make_sink(spec: SegmentSpec, split: int, ids: sinks.IdSource):
    s = spec.sink
    rp = spec.replay
    cp = getattr(s, "cp", None)
    keep = rp.keep.get(cp.number) if rp is not None and cp is not None else None
    drop = rp.drop.get(cp.number) if rp is not None and cp is not None else None
    if isinstance(s, CombineSink):
        base = record_id_base(s.cp.number, split)
        return sinks.CombineSink(s.create_combiner, s.merge_value, base, split, keep, drop)
    if isinstance(s, OutputSink):
        return sinks.OutputSink(
            s.action,
            s.limit,
            s.capture_values and spec.journal is not None,
            ids,
            keep,
            drop,
            record_id_base(cp.number, split) if cp is not None else 0,
        )
    if isinstance(s, ShuffleSink):
        return sinks.ShuffleSink(ids, s.tag)
    if isinstance(s, ForwardSink):
        return sinks.ForwardSink(ids)
    raise TypeError(f"unknown segment sink {s!r}")


def apply_ops(
    records: Iterator,
    ops: tuple[NarrowOp, ...],
    split: int,
    state,
    groups: list,
    on_fail: Callable[[BaseException], None] | None = None,
) -> Iterator:
    """Chain the narrow operations lazily; `on_fail` (skip policy) guards flat-mapping."""
    for op in ops:
        f = op.func
        name = op.name
        if name == "map":
            records = map(f, records)
        elif name == "filter":
            records = filter(f, records)
        elif name in ("flatMap", "flatMapValues"):
            if name == "flatMapValues":
                f = lambda kv, f=f: ((kv[0], x) for x in f(kv[1]))  # noqa: E731
            if on_fail is not None:
                f = _guarded(f, on_fail)
            records = chain.from_iterable(map(f, records))
        elif name == "mapValues":

            def map_value(kv: tuple[Any, Any], f: Callable[[Any], Any] = f) -> tuple[Any, Any]:
                return (kv[0], f(kv[1]))

            records = map(map_value, records)
        elif name == "keyBy":

            def key_by(x: Any, f: Callable[[Any], Any] = f) -> tuple[Any, Any]:
                return (f(x), x)

            records = map(key_by, records)
        elif name == "values":
            records = map(itemgetter(1), records)
        elif name == "keys":
            records = map(itemgetter(0), records)
        elif name == "mapPartitions":
            # f may stop reading early (vanilla allows it): the input is then not exhausted,
            # so what tells a StopIteration that escaped a map and ended it early (see
            # run_segment) is checked here, and again on f's output.
            records = _ended_properly(records, state)
            if op.lineage == "partition":
                reached = None
                if not groups:  # the first group's parents: the inputs that reached f
                    reached = array("q")
                    records = _reaching(records, reached, state.bounds.__len__)
                groups.append((op.group_cp, reached))
            records = f(split, records) if op.with_index else f(records)
            records = _marking_end(iter(records), state)
        else:
            raise TypeError(f"unknown narrow operation {name}")
    return records


def _ended_properly(records: Iterator, state) -> Iterator:
    """`records`, failing the task if they end before the segment's input does (a
    StopIteration escaped a user function and ended a map early)."""
    yield from records
    if not state.exhausted:
        raise RuntimeError(STOP_ITERATION_MESSAGE)


def _marking_end(records: Iterator, state) -> Iterator:
    """A mapPartitions function's output; once it ends, the records downstream ended
    properly as far as this segment's input goes (`f` may have left input unread)."""
    state.exhausted = False
    yield from records
    state.exhausted = True


def _reaching(records: Iterator, reached: array, n_pulled: Callable[[], int]) -> Iterator:
    add = reached.append
    for x in records:
        add(n_pulled() - 1)
        yield x


# -- turning arrays into lineage batches ------------------------------------------------------


def _journal_lineage(
    journal: TaskJournal, spec: SegmentSpec, split: int, state, sink, groups
) -> TakeOutput | None:
    """Journal the partition's batches; a take's output batch is returned instead."""
    inp = spec.input
    n_in = len(state.bounds)
    in_ids = state.input_ids()
    if isinstance(inp, TextInput):
        path, start, length = inp.splits[split]
        journal.batch(
            inp.cp,
            n_in,
            offsets=state.text_offsets(start),
            location=Location(_file_uri(path), start, length),
        )
    elif isinstance(inp, ParallelInput):
        journal.batch(inp.cp, n_in, values=state.values)
    elif isinstance(inp, ShuffleInput | FrameInput) and state.merge is not None:
        n, counts, parents = _merge_csr(state.merge)
        journal.batch(inp.cp, n, parent_counts=counts, parent_ids=parents, values=state.values)
    # mapPartitions groups: one record each; the first's parents are the inputs that reached it.
    prev = None
    for cp, reached in groups:
        gid = record_id_base(cp.number, split)
        if prev is None:
            idx = unique_ids(np.frombuffer(reached, dtype=np.int64)) if reached else np.array([])
            parents = in_ids[idx.astype(np.int64)] if len(idx) else np.array([], dtype=np.int64)
        else:
            parents = np.array([prev], dtype=np.int64)
        journal.batch(cp, 1, parent_counts=np.array([len(parents)]), parent_ids=parents)
        prev = gid
    group_parent = prev
    s = spec.sink
    if isinstance(s, CombineSink):
        _journal_combiner(journal, s, state, sink, in_ids, group_parent)
    elif isinstance(s, OutputSink):
        return _journal_output(journal, s, split, state, sink, in_ids, group_parent)
    return None


def _merge_csr(merge: tuple) -> tuple[int, np.ndarray, np.ndarray]:
    """CSR parents of a shuffle (or DataFrame rows') input's records from what the merge
    recorded."""
    n, layout, a, b = merge
    parents = np.frombuffer(b, dtype=np.int64)
    per = np.frombuffer(a, dtype=np.int32)
    if layout == "csr":  # as many records as counts (a DataFrame's rows: those pulled)
        return len(per), per.astype(np.int64), parents
    order = _stable_order(per, n)  # "coo": group arrivals by record, keeping arrival order
    return n, np.bincount(per, minlength=n), parents[order]


def _stable_order(slots: np.ndarray, n_slots: int) -> np.ndarray:
    """Stable argsort of small non-negative ints, by 16-bit radix passes (linear time)."""
    if n_slots <= 1 << 16:
        return np.argsort(slots.astype(np.uint16), kind="stable")
    lo = np.argsort((slots & 0xFFFF).astype(np.uint16), kind="stable")
    hi = np.argsort((slots[lo] >> 16).astype(np.uint16), kind="stable")
    return lo[hi]


def _input_index(bounds: array, m: int) -> np.ndarray:
    """For each of m sink records, the index of the input it came from (-1: none)."""
    b = np.frombuffer(bounds, dtype=np.int64)
    return np.searchsorted(b, np.arange(m, dtype=np.int64), side="right") - 1


def _journal_combiner(journal, s: CombineSink, state, sink, in_ids, group_parent) -> None:
    cp = s.cp
    n = sink.n_records
    if group_parent is not None:
        journal.batch(
            cp, n, parent_counts=np.ones(n, dtype=np.int64), parent_ids=np.full(n, group_parent)
        )
        return
    slots = np.frombuffer(sink.slots, dtype=np.int32)
    m = len(slots)
    b = np.frombuffer(state.bounds, dtype=np.int64)
    # Input index of each consumed record: inputs are pulled in order, so a repeat suffices.
    per_input = np.diff(np.append(b, m))
    src = np.repeat(np.arange(len(b), dtype=np.int32 if len(b) < 1 << 31 else np.int64), per_input)
    if len(src) < m:  # records consumed before any input was pulled (no parent)
        slots = slots[m - len(src) :]
    if s.defer is not None and state.ids is None:  # positional input: ids are base + index
        _journal_deferred(journal, cp, s.defer, state.base, slots, src, sink.keys)
        return
    # Group (slot, input) pairs by slot, inputs ascending: one sort of packed keys is 3x
    # faster than a stable argsort and two gathers (numpy's SIMD int64 sort).
    if len(b) < 1 << 32:
        key = (slots.astype(np.int64) << 32) | src
        key.sort()  # in place: no second copy of every word's key
        s_sorted, i_sorted = key >> 32, key & 0xFFFFFFFF
    else:
        order = _stable_order(slots, n)
        s_sorted, i_sorted = slots[order], src[order]
    if len(s_sorted) > 1:  # a key seen twice in one input has that input as parent once
        keep = np.empty(len(s_sorted), dtype=bool)
        keep[0] = True
        np.not_equal(s_sorted[1:], s_sorted[:-1], out=keep[1:])
        keep[1:] |= i_sorted[1:] != i_sorted[:-1]
        s_sorted, i_sorted = s_sorted[keep], i_sorted[keep]
    # Positional inputs: ids are base + index, no gather needed.
    parents = in_ids[i_sorted] if state.ids is not None else state.base + i_sorted.astype(np.int64)
    journal.batch(cp, n, parent_counts=np.bincount(s_sorted, minlength=n), parent_ids=parents)


def _journal_deferred(
    journal: TaskJournal,
    cp: CapturePoint,
    defer: tuple[int, int],
    base: int,
    slots: np.ndarray,
    src: np.ndarray,
    keys: list,
) -> None:
    """The deferred narrow policy (see `_deferred`): each combiner record keeps its key and,
    when it has more than `exact` parents, the groups of `group` consecutive inputs that hold
    them (base + input // group) instead of the inputs."""
    exact, group = defer
    n = len(keys)
    key = (slots.astype(np.int64) << 32) | src
    key.sort()
    s_sorted, i_sorted = key >> 32, key & 0xFFFFFFFF
    if len(key) > 1:  # one (record, input) pair per input, as eagerly
        keep = np.empty(len(key), dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        s_sorted, i_sorted = s_sorted[keep], i_sorted[keep]
    counts = np.bincount(s_sorted, minlength=n)
    coarse = counts > exact
    if coarse.any():
        c = coarse[s_sorted]
        i_sorted = np.where(c, i_sorted // group, i_sorted)
        if len(i_sorted) > 1:  # inputs of one group collapse into one parent
            keep = np.ones(len(i_sorted), dtype=bool)
            keep[1:] = (s_sorted[1:] != s_sorted[:-1]) | (i_sorted[1:] != i_sorted[:-1])
            s_sorted, i_sorted = s_sorted[keep], i_sorted[keep]
        counts = np.bincount(s_sorted, minlength=n)
    groups = np.where(coarse, group, 1)
    values = [pickle.dumps((k, int(g)), pickle.HIGHEST_PROTOCOL) for k, g in zip(keys, groups)]
    journal.batch(
        cp,
        n,
        parent_counts=counts,
        parent_ids=base + i_sorted.astype(np.int64),
        values=values,
        attributes={"narrow": "deferred"},
    )


def _journal_output(
    journal, s: OutputSink, split: int, state, sink, in_ids, group_parent
) -> TakeOutput | None:
    m = sink.n_records
    if group_parent is not None:
        counts, parents = np.ones(m, dtype=np.int64), np.full(m, group_parent)
    else:
        idx = _input_index(state.bounds, m)
        has = idx >= 0
        counts = has.astype(np.int64)
        parents = in_ids[idx[has]]
    columns: dict = {"parent_counts": counts, "parent_ids": parents}
    if s.action == "save" and sink.lengths is not None:
        lens = np.frombuffer(sink.lengths, dtype=np.int64) + 1  # each record, then "\n"
        columns["offsets"] = np.concatenate(([0], np.cumsum(lens)))
        uri = _file_uri(os.path.join(s.save_path or ".", f"part-{split:05d}"))
        columns["location"] = Location(uri, 0, int(lens.sum()))
    elif sink.values is not None:
        columns["values"] = sink.values
    if s.action == "take":
        return TakeOutput(split, journal.attempt, counts, parents, columns.get("values"))
    journal.batch(s.cp, m, **columns)
    return None
