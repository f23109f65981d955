"""Export to files other tools read: Parquet (DuckDB, Spark, pandas) or JSON lines.

    OUT/events/run_id=<run>/part-<first id>.parquet   one row per event
    OUT/edges/run_id=<run>/part-<first id>.parquet    one row per (child, parent) reference
    OUT/_provrepo_export.json                          the export cursor: where the next run starts

Hive-partitioned by run (the value percent-encoded), rows in event-id order, zstd, the schema
version and id range in each file's metadata. The export walks the event ids in chunks; each
chunk's files are written under temporary names (`.part-*.tmp`, which readers skip), fsynced,
renamed into place, and only then is the cursor moved past the chunk. A run killed anywhere
resumes from the cursor: files of the chunk it did not commit are deleted and written again,
so nothing is duplicated or lost. The next export into the same OUT goes on from the cursor
(an incremental export, e.g. to keep lineage past the repository's retention).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from journals import fsync_dir, gc_paused, listdir, write_atomic

from ._blocks import BatchSlice, Entry, EventRun
from ._errors import BadInput, RepositoryLocked, check_id
from ._export import TableExport
from ._lock import OwnerLock
from ._richcolumns import PAD as _RICH_PAD
from ._richcolumns import decode_rich
from ._store import LogStore
from ._tables import (
    EDGES_SCHEMA,
    EVENTS_SCHEMA,
    SCHEMA_VERSION,
    WRITER_OPTIONS,
    RunRows,
)

FORMATS = ("parquet", "jsonl")
TABLES = ("events", "edges")
STATE_FILE = "_provrepo_export.json"
LOCK_FILE = "_provrepo_export.lock"
CHUNK_EVENTS = 16_000_000  # ids per committed step: what a kill can cost to redo
ROW_GROUP_ROWS = 1 << 18  # rows a table is written in: small enough to overlap writes
_BUFFERED_ROWS = 4 << 20  # rows held across all runs before everything is written out
_RICH_GROUP = 16_384  # rich events parsed in lockstep at once (a few MB: stays in cache)
_IN_FLIGHT = 4  # tables queued for the writer threads
# A run's events in a chunk go to files of about this many rows each, written alternately by
# two threads: pyarrow writes one file on one thread, and the events table is the bulk of the
# writing (10 M narrow rows: ~0.7 s of writer CPU against ~0.06 s for their edges).
SEGMENT_ROWS = 1 << 20
LANES = {"events": 2, "edges": 1}  # writer threads per table
_EXT = {"parquet": "parquet", "jsonl": "jsonl"}


# -- the export cursor ---------------------------------------------------------------------------


class _State(msgspec.Struct):
    schema_version: int
    format: str
    run: str | None
    next_id: int


def _load_state(path: str) -> _State | None:
    try:
        with open(path, "rb") as f:
            return msgspec.json.decode(f.read(), type=_State)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadInput(f"export cursor {path} is damaged ({e}); export into a new directory") from e


def _save_state(path: str, state: _State) -> None:
    write_atomic(path, msgspec.json.encode(state))


# -- files -------------------------------------------------------------------------------------


def run_dir(out: str, table: str, run: str) -> str:
    """Where a run's files of one table go (Hive style; the value percent-encoded as Spark and
    DuckDB decode it)."""
    return os.path.join(out, table, "run_id=" + urllib.parse.quote(run, safe=""))


def _part_name(first: int, fmt: str) -> str:
    return f"part-{first:020d}.{_EXT[fmt]}"


def _part_first(name: str, fmt: str) -> int | None:
    """The first id of a final file name (at or after its chunk's first), None if `name` is
    not one."""
    stem, dot, ext = name.partition(".")
    if not (dot and ext == _EXT[fmt] and stem.startswith("part-") and stem[5:].isdigit()):
        return None
    return int(stem[5:])


def _metadata(table: str, run: str, first: int) -> dict[str, str]:
    return {
        "provrepo.schema_version": str(SCHEMA_VERSION),
        "provrepo.table": table,
        "provrepo.run_id": run,
        "provrepo.first_event_id": str(first),
    }


class _Sink:
    """One file of a chunk, for one (table, run) and ids from `first` on, under a temporary
    name until `commit`; `lane`: the writer thread that writes it."""

    def __init__(self, out: str, fmt: str, table: str, run: str, first: int, lane: int) -> None:
        self.dir = run_dir(out, table, run)
        os.makedirs(self.dir, exist_ok=True)
        self.final = os.path.join(self.dir, _part_name(first, fmt))
        self.tmp = os.path.join(self.dir, "." + _part_name(first, fmt) + ".tmp")
        self.fmt, self.table, self.run, self.first, self.lane = fmt, table, run, first, lane
        self.rows = 0  # rows handed to it (counted by the chunk, as they are queued)
        meta = _metadata(table, run, first)
        schema = EVENTS_SCHEMA if table == "events" else EDGES_SCHEMA
        self._pq: pq.ParquetWriter | None = None
        self._file = None
        if fmt == "parquet":
            self._pq = pq.ParquetWriter(
                self.tmp, schema.with_metadata(meta), **WRITER_OPTIONS[table]
            )
        else:
            self._file = open(self.tmp, "wb")  # noqa: SIM115 - closed in commit/abort

    def write(self, table: pa.Table) -> None:
        if self._pq is not None:
            self._pq.write_table(table, row_group_size=ROW_GROUP_ROWS)
        else:
            assert self._file is not None
            self._file.write(_json_lines(table, self.run, self.table))

    def close(self, stop: int) -> None:
        """Close and fsync the temporary file; `stop`: the end of the ids it covers (known
        once the next file of its run has started: it goes in the footer only, not in the
        Arrow schema stored at the start)."""
        if self._pq is not None:
            self._pq.add_key_value_metadata({"provrepo.stop_event_id": str(stop)})
            self._pq.close()
            self._pq = None
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        elif self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def abort(self) -> None:
        try:
            if self._pq is not None:
                self._pq.close()
            if self._file is not None:
                self._file.close()
        finally:
            self._pq = self._file = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)


_ENC = msgspec.json.Encoder()


def _json_lines(table: pa.Table, run: str, name: str) -> bytes:
    """A table's rows as JSON lines (the run id first; times in RFC 3339, UTC)."""
    out = bytearray()
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    keys = ["run_id", *cols]
    runs = [run] * table.num_rows
    values = [runs, *cols.values()]
    if name == "events":
        cols["attributes"][:] = map(dict, cols["attributes"])
    for row in zip(*values):
        _ENC.encode_into(dict(zip(keys, row)), out, -1)
        out += b"\n"
    return bytes(out)


class _Chunk:
    """The files of one chunk of ids [first, stop). A run's rows of a table go to one file,
    or (events) to files of about `SEGMENT_ROWS` rows each, which cover consecutive id ranges:
    the first from the chunk's first id, each next one from its first row's id. Files are
    written by background threads (`LANES` per table; a file's row groups by one of them, in
    order) while the next tables are built (pyarrow's writer and most numpy work release the
    GIL); at most `_IN_FLIGHT` tables wait, which bounds the memory held."""

    def __init__(
        self,
        out: str,
        fmt: str,
        first: int,
        stop: int,
        pools: dict[str, list[ThreadPoolExecutor]],
    ) -> None:
        self.out, self.fmt, self.first, self.stop = out, fmt, first, stop
        self.sinks: list[_Sink] = []  # as opened: per (table, run), in id order
        self._open: dict[tuple[str, str], _Sink] = {}  # (table, run) -> the file rows go to
        self._pools = pools
        self._lane = dict.fromkeys(pools, 0)  # the lane the table's next file goes to
        self._pending: deque[tuple[_Sink, Future[None]]] = deque()

    def write(
        self, table: str, run: str, rows: pa.Table | Callable[[], pa.Table], n: int, first: int
    ) -> None:
        """Write `n` rows (`rows`, or the table that function builds: on the writer thread
        while it keeps up, else here, so the thread that is behind only writes) whose first
        event id is `first`."""
        if n == 0:
            return
        sink = self._open.get((table, run))
        if sink is None or (table == "events" and sink.rows >= SEGMENT_ROWS):
            lanes = len(self._pools[table])
            lane = self._lane[table]
            self._lane[table] = (lane + 1) % lanes
            start = self.first if sink is None else first
            sink = _Sink(self.out, self.fmt, table, run, start, lane)
            self._open[(table, run)] = sink
            self.sinks.append(sink)
        sink.rows += n  # counted here: the next write knows whether to start a file
        if not isinstance(rows, pa.Table) and self._busy(sink.lane, table):
            rows = rows()
        pool = self._pools[table][sink.lane]
        self._pending.append((sink, pool.submit(self._write, sink, rows)))
        while len(self._pending) > _IN_FLIGHT:
            self._pending.popleft()[1].result()  # raises what the writer raised

    def _busy(self, lane: int, table: str) -> bool:
        return any(
            s.table == table and s.lane == lane and not job.done() for s, job in self._pending
        )

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft()[1].result()  # on an error, abort() waits for the rest

    @staticmethod
    def _write(sink: _Sink, rows: pa.Table | Callable[[], pa.Table]) -> None:
        sink.write(rows if isinstance(rows, pa.Table) else rows())

    def commit(self) -> list[str]:
        """Close and fsync every file, rename them into place, fsync their directories."""
        self._drain()
        # In a fixed order: events files, then edges; runs as first written, each run's files
        # in id order (whichever writer thread opened its file first).
        runs = list(dict.fromkeys(s.run for s in self.sinks))
        sinks = [s for t in TABLES for r in runs for s in self.sinks if (s.table, s.run) == (t, r)]
        # Each file is closed (footer) and fsynced by its writer thread: in parallel.
        for k, s in enumerate(sinks):
            nxt = sinks[k + 1] if k + 1 < len(sinks) else None
            same = nxt is not None and (nxt.table, nxt.run) == (s.table, s.run)
            stop = nxt.first if same and nxt is not None else self.stop
            self._pending.append((s, self._pools[s.table][s.lane].submit(s.close, stop)))
        self._drain()
        for sink in sinks:
            os.replace(sink.tmp, sink.final)
        for d in {s.dir for s in sinks}:
            fsync_dir(d)
        return [os.path.relpath(s.final, self.out) for s in sinks]

    def abort(self) -> None:
        for _, job in self._pending:
            job.cancel()
        for _, job in self._pending:
            with contextlib.suppress(BaseException):  # already failing: the first error wins
                job.result()
        for sink in self.sinks:
            sink.abort()


def _clean_uncommitted(out: str, fmt: str, next_id: int) -> None:
    """Delete what a killed export left past its cursor: temporary files, and the files of the
    chunk it had renamed but not committed (their first id is at or past the cursor)."""
    for table in TABLES:
        top = os.path.join(out, table)
        for sub in listdir(top):
            d = os.path.join(top, sub)
            if not sub.startswith("run_id=") or not os.path.isdir(d):
                continue
            removed = False
            for name in listdir(d):
                first = _part_first(name, fmt)
                stale = name.startswith(".part-") and name.endswith(".tmp")
                if stale or (first is not None and first >= next_id):
                    os.unlink(os.path.join(d, name))
                    removed = True
            if removed:
                fsync_dir(d)


# -- rows --------------------------------------------------------------------------------------


class _Rows:
    """Routes stored entries to per-run rows and writes full row groups to the chunk."""

    def __init__(self, run: str | None, report: TableExport) -> None:
        self.run = run
        self.report = report
        self.runs: dict[str, RunRows] = {}
        self.chunk: _Chunk | None = None
        self._rich: list[tuple[EventRun, int, int]] = []
        self._rich_n = 0

    def add(self, entry: Entry, lo: int, hi: int) -> None:
        """Ids [lo, hi) of a stored entry."""
        a, b = lo - entry.first_id, hi - entry.first_id
        if isinstance(entry, EventRun):
            self._rich.append((entry, a, b))
            self._rich_n += b - a
            if self._rich_n >= _RICH_GROUP:
                self._flush_rich()
            return
        assert isinstance(entry, BatchSlice)
        self._flush_rich()  # keep each run's rows in id order
        run = entry.batch.run_id
        if self.run is not None and run != self.run:
            return
        rows = self._rows(run)
        rows.add_slice(entry, a, b)
        self._spill(rows)

    def _rows(self, run: str) -> RunRows:
        rows = self.runs.get(run)
        if rows is None:
            rows = self.runs[run] = RunRows(run)
        return rows

    def _flush_rich(self) -> None:
        if not self._rich:
            return
        datas, starts, ends, ids = [], [], [], []
        base = 0
        for e, a, b in self._rich:
            offs = e.offsets()
            lo, hi = int(offs[a]), int(offs[b])
            datas.append(e.data[lo:hi])
            starts.append(offs[a:b] - lo + base)
            ends.append(offs[a + 1 : b + 1] - lo + base)
            ids.append(np.arange(e.first_id + a, e.first_id + b, dtype=np.int64))
            base += hi - lo
        self._rich, self._rich_n = [], 0
        datas.append(bytes(_RICH_PAD))  # room for decode_rich's fixed-width reads: no copy
        cols = decode_rich(
            b"".join(datas), np.concatenate(starts), np.concatenate(ends), np.concatenate(ids)
        )
        one = cols.same_string("run_id")
        codes: np.ndarray | None = None
        if one is not None:
            runs = [one]
        else:
            enc = cols.strings("run_id").dictionary_encode()
            runs = enc.dictionary.to_pylist()
            codes = enc.indices.to_numpy(zero_copy_only=False)
        for k, run in enumerate(runs):
            if self.run is not None and run != self.run:
                continue
            rows = self._rows(run)
            one_run = codes is None or len(runs) == 1
            rows.add_rich(cols if one_run else cols.select(np.flatnonzero(codes == k)))
            self._spill(rows)

    def _spill(self, rows: RunRows) -> None:
        if rows.rows >= ROW_GROUP_ROWS:
            self._write_events(rows)
        if rows.edge_rows >= ROW_GROUP_ROWS:
            self._write_edges(rows)
        if sum(r.rows + r.edge_rows for r in self.runs.values()) >= _BUFFERED_ROWS:
            self.flush()

    def _write_events(self, rows: RunRows) -> None:
        n, first = rows.rows, rows.first_event_id()
        self.report.events += n
        assert self.chunk is not None
        self.chunk.write("events", rows.run_id, rows.take_events(), n, first)

    def _write_edges(self, rows: RunRows) -> None:
        table = rows.take_edges()
        self.report.edges += table.num_rows
        assert self.chunk is not None
        self.chunk.write("edges", rows.run_id, table, table.num_rows, self.chunk.first)

    def flush(self) -> None:
        """Write out everything held."""
        self._flush_rich()
        for rows in self.runs.values():
            if rows.rows:
                self._write_events(rows)
            if rows.edge_rows:
                self._write_edges(rows)
        self.runs = {r: rows for r, rows in self.runs.items() if rows.rows or rows.edge_rows}


# -- the export --------------------------------------------------------------------------------


def export_tables(
    store: LogStore,
    out: str | os.PathLike[str],
    fmt: str = "parquet",
    *,
    run: str | None = None,
    from_id: int | None = None,
    progress: bool = False,
    chunk_events: int = CHUNK_EVENTS,
) -> TableExport:
    """Export the stored events with ids from the cursor (or `from_id`, or 1) to the newest
    as tables under `out` (see the module docstring); returns what was written."""
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if run is not None and (not isinstance(run, str) or not run):
        raise BadInput(f"run must be a non-empty string, got {run!r}")
    if from_id is not None:
        check_id(from_id, "from id")
    check_id(chunk_events, "chunk_events")
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not os.path.isdir(out):
        raise BadInput(f"{out} exists and is not a directory")
    state_path = os.path.join(out, STATE_FILE)
    state = _load_state(state_path)
    if state is not None:
        _check_resume(state, out, fmt, run, from_id)
    elif any(os.path.exists(os.path.join(out, t)) for t in TABLES):
        raise BadInput(f"{out} holds exported tables but no export cursor; use a new directory")
    os.makedirs(out, exist_ok=True)
    lock = OwnerLock(os.path.join(out, LOCK_FILE))
    try:
        lock.acquire()
    except RepositoryLocked as e:
        raise BadInput(f"another process is exporting into {out} ({e.owner})") from None
    try:
        with gc_paused():
            return _export(store, out, fmt, run, from_id, state, progress, chunk_events)
    finally:
        lock.release()


def _check_resume(state: _State, out: str, fmt: str, run: str | None, from_id: int | None) -> None:
    if state.schema_version != SCHEMA_VERSION:
        raise BadInput(
            f"{out} holds an export of schema version {state.schema_version} (this is "
            f"{SCHEMA_VERSION}); export into a new directory"
        )
    if state.format != fmt:
        raise BadInput(f"{out} holds a {state.format} export; export {fmt} into a new directory")
    if state.run != run:
        was = f"run {state.run}" if state.run else "every run"
        raise BadInput(f"{out} holds an export of {was}; export this into a new directory")
    if from_id is not None and from_id != state.next_id:
        raise BadInput(
            f"{out} holds an export up to id {state.next_id - 1}: it goes on from id "
            f"{state.next_id} (leave out --from-id), or export into a new directory"
        )


def _export(
    store: LogStore,
    out: str,
    fmt: str,
    run: str | None,
    from_id: int | None,
    state: _State | None,
    progress: bool,
    chunk_events: int,
) -> TableExport:
    t0 = time.perf_counter()
    resumed = state is not None
    start = state.next_id if state is not None else (from_id or 1)
    if state is None:
        state = _State(SCHEMA_VERSION, fmt, run, start)
        _save_state(os.path.join(out, STATE_FILE), state)
    _clean_uncommitted(out, fmt, start)
    end = max(start, store.next_id)  # a snapshot: what is committed now
    report = TableExport(out, fmt, run, start, start, resumed=resumed)
    rows = _Rows(run, report)
    seen_runs: set[str] = set()
    bar = tqdm(
        total=end - start,
        unit="ev",
        unit_scale=True,
        disable=not progress,
        file=sys.stderr,
        desc="export",
    )
    # Writer threads per table (LANES): a file's row groups go in order, files in parallel.
    pools = {
        t: [ThreadPoolExecutor(1, f"provrepo-export-{t}-{k}") for k in range(LANES[t])]
        for t in TABLES
    }
    # And one that reads and decompresses the next blocks while this thread parses.
    reader = ThreadPoolExecutor(1, "provrepo-export-read")
    with bar, contextlib.ExitStack() as stack:
        for pool in (reader, *(p for lanes in pools.values() for p in lanes)):
            stack.enter_context(pool)
        pos = start
        while pos < end:
            stop = min(end, pos + chunk_events)
            chunk = rows.chunk = _Chunk(out, fmt, pos, stop, pools)
            try:
                expect = pos
                for entry, lo, hi in _clipped(store, pos, stop, reader):
                    if lo > expect:
                        _skip(report, expect, lo)
                    rows.add(entry, lo, hi)
                    bar.update(hi - expect)
                    expect = hi
                if expect < stop:
                    _skip(report, expect, stop)
                    bar.update(stop - expect)
                rows.flush()
                report.files += chunk.commit()
                seen_runs.update(s.run for s in chunk.sinks)
            except BaseException:
                chunk.abort()
                raise
            state.next_id = report.next_id = stop
            _save_state(os.path.join(out, STATE_FILE), state)
            pos = stop
    report.runs = sorted(seen_runs)
    report.seconds = time.perf_counter() - t0
    return report


def _clipped(
    store: LogStore, pos: int, stop: int, prefetch: ThreadPoolExecutor
) -> Iterator[tuple[Entry, int, int]]:
    for e in store.entries(pos, stop, prefetch):
        lo, hi = max(pos, e.first_id), min(stop, e.first_id + e.count)
        if lo < hi:
            yield e, lo, hi


def _skip(report: TableExport, lo: int, hi: int) -> None:
    if report.skipped and report.skipped[-1][1] == lo:
        report.skipped[-1] = (report.skipped[-1][0], hi)
    else:
        report.skipped.append((lo, hi))


def read_state(out: str) -> dict[str, Any] | None:
    """The export cursor of `out` as a dict (None if `out` holds no export)."""
    state = _load_state(os.path.join(os.fspath(out), STATE_FILE))
    return None if state is None else json.loads(msgspec.json.encode(state))
