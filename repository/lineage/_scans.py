"""Rows of DataFrame file scans, re-read from their files by position.

A DataFrame source row is named (scan capture point, scan partition, position in the
partition): the capture agent projects Spark's `monotonically_increasing_id()` directly over
the scan, which is exactly that pair. Such rows are not stored one by one; the capture point's
descriptor holds the scan's plan instead (files with sizes and mtimes, each partition's
(file, start, length) pieces, the reader's line rules), and this module turns a position back
into its line (CSV, JSON lines, text: byte offsets, as for `textFile`) or its Parquet row:

- A piece owns the lines that start after its first line break (at its start when it starts
  the file) and at or before its end: Hadoop's LineRecordReader rule, which Spark's line
  readers use. Without `lineSep` a line breaks at "\n", "\r\n" or a lone "\r".
- CSV drops blank lines (every byte <= 0x20, Java's `trim`), comment lines when a comment
  character is set, and the header (the first line left) in each file's first piece. JSON
  lines drop whitespace-only lines and refuse a line holding a top-level array (it would give
  several rows). Text keeps every line.
- Parquet: a piece reads the row groups whose midpoint lies inside it (parquet-mr's
  `filterFileMetaDataByMidpoint`), every row of each (the agent turns filter pushdown off
  under its ids, so no row group is skipped).

A rare row of a line format is read from the stored line mark before it (`_linemarks`: the
offset of every 1,024th row), a few KB. An owner's first trace of a partition makes its
marks from the lines it scans anyway (up to its last row: a prefix of the partition), and a
trace beyond that prefix scans on from the last mark and stores the longer marks (a
read-only open extends them in memory only). Without marks (a read-only open before any
owner made them, or marks that do not hold), lines are found with numpy over a read-only
map of the file, only as far as the last row a trace asks for; a partition's line table
(or its first rows) is cached (bounded in bytes) and extended when a later trace asks
further. A rare row's Parquet row groups (a handful across partitions) are read together on
threads, each decoded only up to its last wanted row, its dictionary-encoded strings kept as
dictionaries (each distinct value made once); each file's footer is parsed once per read and
must still list the row groups the run read.
A big group's trace asks for 0.3-0.6 M rows at once: lines are sliced per file in offset order
from numpy arrays, and Parquet rows become pyspark Rows in bulk (`_arrowrows`: one conversion
per column, not a dict per row).
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._errors import BadInput
from ._arrowrows import rows_of
from ._linemarks import EVERY, LineMarks, LineMarkStore
from ._raw import gunzipped

log = logging.getLogger("provrepo.lineage")

_CACHE_BYTES = 256 * 1024 * 1024
_JSON_SPACE = np.array([0x20, 0x09, 0x0A, 0x0D], dtype=np.uint8)
# Bytes scanned per numpy pass when finding lines: bounds the temporaries.
_CHUNK = 16 * 1024 * 1024
# The same, when only a partition's first lines are wanted: finer, to stop sooner.
_STEP = 2 * 1024 * 1024
# Row groups decoded at once by one trace: pyarrow releases the GIL while it decodes.
_READERS = min(4, os.cpu_count() or 2)
# At most this many row groups of one scan are read ahead for one trace (each up to ~20 MB
# decoded), and of all its scans together.
_PREFETCH = 8
_PREFETCH_ALL = 12
# Rows of a scan in one trace up to which it counts as rare (its row groups read ahead).
_RARE = 4096
# A row count past any row group's: read the whole group.
_WHOLE = 1 << 62
# Lines starting with a blank byte looked at one by one; more: one pass over the bytes.
_FEW_LINES = 2048
# Bytes scanned per numpy pass from a line mark: a mark's lines are ~EVERY x 130 bytes.
_MARK_STEP = 256 * 1024


class SourceChanged(BadInput):
    """A scanned file changed since the run read it: its rows cannot be re-read by position."""


class _MarksWrong(Exception):
    """Line marks that do not fit the file they name (not a line start, too few lines)."""


# -- gzip inputs: read from a decompressed copy ----------------------------------------------


def readable(scan: dict) -> dict:
    """`scan` as its bytes are read: a gzip file (descriptor's "gzip": Spark reads it whole,
    one piece, through Hadoop's codec) is its decompressed copy, made on first use, with its
    piece spanning the copy; "source_files" keeps the files as listed (their names, sizes
    and mtimes, which tell whether they changed). Line offsets of a gzip file are offsets in
    its decompressed bytes."""
    if not scan.get("gzip") or "source_files" in scan:
        return scan
    files = _Decompressed(scan["files"], frozenset(int(i) for i in scan["gzip"]))
    return {
        **scan,
        "source_files": scan["files"],
        "files": files,
        "partitions": _WholePieces(scan["partitions"], files),
    }


class _Decompressed(Sequence):
    """The files of a scan, a gzip file's entry being its decompressed copy's."""

    def __init__(self, files: list, gz: frozenset[int]) -> None:
        self._files = files
        self._gz = gz

    def __len__(self) -> int:
        return len(self._files)

    def gzipped(self, fi: int) -> bool:
        return fi in self._gz

    def __getitem__(self, fi: Any) -> Any:
        if fi not in self._gz:
            return self._files[fi]
        path, size, mtime_ns = self._files[fi]
        copy, copy_size = _gunzip(path, int(size), int(mtime_ns))
        return [copy, copy_size, mtime_ns]


class _WholePieces(Sequence):
    """A scan's partitions, a gzip file's piece spanning its decompressed copy."""

    def __init__(self, parts: list, files: _Decompressed) -> None:
        self._parts = parts
        self._files = files

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, partition: Any) -> Any:
        return [
            [fi, 0, self._files[fi][1]] if self._files.gzipped(fi) else [fi, start, length]
            for fi, start, length in self._parts[partition]
        ]


def _gunzip(path: str, size: int, mtime_ns: int) -> tuple[str, int]:
    try:
        return gunzipped(path, size, mtime_ns)
    except OSError as e:
        raise SourceChanged(f"source file {path} cannot be decompressed: {e}") from e


def scan_of(cp_descriptor: dict | None) -> dict | None:
    """The scan plan a capture point's descriptor holds, if it is a DataFrame file scan."""
    if not cp_descriptor:
        return None
    scan = cp_descriptor.get("scan")
    return scan if isinstance(scan, dict) and "partitions" in scan else None


class _Lines:
    """One partition's rows of a line format: file index, start and end byte of each line
    (end excludes the terminator); `complete` False when only its first rows are here."""

    __slots__ = ("complete", "ends", "file", "nbytes", "piece", "resume", "starts")

    def __init__(
        self,
        file: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        complete: bool = True,
        piece: int = 0,
        resume: int | None = None,
    ) -> None:
        self.file, self.starts, self.ends, self.complete = file, starts, ends, complete
        # Where a partial table goes on: the piece, and the byte to scan on from (None: the
        # piece's own start).
        self.piece, self.resume = piece, resume
        self.nbytes = file.nbytes + starts.nbytes + ends.nbytes + 64


class _Found:
    """A trace's positions of one partition and the file index, start and end of each one's
    line (-1: not found yet), filled in by the scans that meet them."""

    __slots__ = ("done", "ends", "file", "pos", "starts")

    def __init__(self, pos: np.ndarray) -> None:
        self.pos = pos
        self.file = np.full(len(pos), -1, dtype=np.int32)
        self.starts = np.full(len(pos), -1, dtype=np.int64)
        self.ends = self.starts.copy()
        self.done = np.zeros(len(pos), dtype=bool)

    def take(self, first: int, fi: int, starts: np.ndarray, ends: np.ndarray) -> None:
        """Rows `first`, `first + 1`, ... are the lines `starts`/`ends` of file `fi`."""
        ks = np.flatnonzero((self.pos >= first) & (self.pos < first + len(starts)))
        local = self.pos[ks] - first
        self.file[ks], self.starts[ks], self.ends[ks] = fi, starts[local], ends[local]
        self.done[ks] = True


class ScanRows:
    """Resolves positions of scan capture points to raw rows; thread-safe, cached."""

    def __init__(self, marks: LineMarkStore | None = None) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._bytes = 0
        self._checked: set[tuple] = set()
        # Stored line marks (keys are then (run, capture point)): a rare row of a line format
        # is read from the mark before it; an owner makes a partition's marks when missing.
        self._marks = marks

    # -- public ----------------------------------------------------------------------------

    def data(self, key: Any, scan: dict, partition: int, positions: np.ndarray) -> list:
        """Raw rows at these positions of one partition: str lines (CSV, JSON, text) or
        pyspark `Row`s (Parquet); None past the partition's end."""
        scan = readable(scan)
        self._check_files(key, scan)
        if scan["format"] == "parquet":
            return self._parquet_rows(key, scan, partition, positions)
        pos = np.asarray(positions, dtype=np.int64)
        rare = 0 < len(pos) <= _RARE
        found = self._marked_lines(key, scan, partition, pos) if rare else None
        if found is not None:  # rare rows, from the line marks before them
            file_of, starts_of, ends_of = found
            ok = np.flatnonzero(file_of >= 0)
            which = file_of[ok]
        else:
            # Rare rows: only as far as the last one asked for, not the whole partition (a
            # big group's rows, asked for in batches, get the whole table at once).
            need = None if len(pos) > _RARE else int(pos.max()) + 1 if len(pos) else 0
            lines = self.lines(key, scan, partition, need)
            ok = np.flatnonzero((pos >= 0) & (pos < len(lines.starts)))
            which = lines.file[pos[ok]]
            starts_of = np.full(len(pos), -1, dtype=np.int64)
            ends_of = starts_of.copy()
            starts_of[ok], ends_of[ok] = lines.starts[pos[ok]], lines.ends[pos[ok]]
        out: list = [None] * len(pos)
        # Per file, the lines in offset order, sliced and decoded in bulk (no per-line tuples).
        for fi in np.unique(which).tolist():
            ks = ok[which == fi]
            starts, ends = starts_of[ks], ends_of[ks]
            order = np.argsort(starts, kind="stable")
            ks, starts, ends = ks[order], starts[order], ends[order]
            with (
                open(scan["files"][fi][0], "rb") as f,
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm,
            ):
                raws = [mm[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
            for k, raw in zip(ks.tolist(), raws):
                out[k] = (raw[:-1] if raw.endswith(b"\r") else raw).decode("utf-8", "replace")
        return out

    def data_of_partitions(
        self, key: Any, scan: dict, positions: Mapping[int, np.ndarray]
    ) -> dict[int, list]:
        """`data` of several partitions at once ({partition: positions}): a Parquet scan's
        row groups they need (when few: a rare row's) are read together, concurrently, each only
        as far as its last wanted row."""
        return self.data_of_scans([(key, scan, positions)])[0]

    def data_of_scans(
        self, asks: Sequence[tuple[Any, dict, Mapping[int, np.ndarray]]]
    ) -> list[dict[int, list]]:
        """`data_of_partitions` of several scans at once ((key, scan, {partition: positions})
        each): the row groups a rare trace needs in all its Parquet scans (a join's tables)
        are read together on the reader threads, the costliest first, rather than one
        scan's after another's (decompressing a group's one-page column chunks is most of a
        rare trace's time, and two cores halve it only if both have groups to read)."""
        for key, scan, _ in asks:
            self._check_files(key, scan)
        now: list[tuple[Any, dict, dict[tuple[int, int], int]]] = []
        later: dict[int, dict[tuple[int, int], int]] = {}
        held = 0
        for i, (key, scan, positions) in enumerate(asks):
            wanted = _rare_groups(scan, positions)
            # A rare row's few row groups at once; a big group's many are read one at a time
            # as `data` reaches them (all held at once, they would outgrow the cache).
            if wanted is None or len(wanted) > _PREFETCH:
                continue
            if held + len(wanted) <= _PREFETCH_ALL:
                now.append((key, scan, wanted))
                held += len(wanted)
            else:
                later[i] = wanted
        self._read_row_groups(now)
        out = []
        for i, (key, scan, positions) in enumerate(asks):
            if i in later:
                self._read_row_groups([(key, scan, later[i])])
            out.append({part: self.data(key, scan, part, pos) for part, pos in positions.items()})
        return out

    def spans(self, key: Any, scan: dict, partition: int, positions: np.ndarray) -> list:
        """(file path, offset, length) of each line (None past the end); line formats only."""
        scan = readable(scan)
        self._check_files(key, scan)
        lines = self.lines(key, scan, partition)
        out: list[tuple[str, int, int] | None] = []
        for pos in np.asarray(positions, dtype=np.int64).tolist():
            if 0 <= pos < len(lines.starts):
                fi = int(lines.file[pos])
                start = int(lines.starts[pos])
                name = scan.get("source_files", scan["files"])[fi][0]
                out.append((name, start, int(lines.ends[pos]) - start))
            else:
                out.append(None)
        return out

    def count(self, key: Any, scan: dict, partition: int) -> int:
        """How many rows the partition has."""
        scan = readable(scan)
        self._check_files(key, scan)
        if scan["format"] == "parquet":
            return int(sum(n for _, _, n in _parquet_groups(scan, partition)))
        # Marks of a prefix are extended to the end: cheaper than all the lines from the start.
        marks = self._line_marks(key, scan, partition, None, build=False)
        if marks is not None:
            return marks.total
        return len(self.lines(key, scan, partition).starts)

    def position_of(self, key: Any, scan: dict, path: str, offset: int) -> tuple[int, int] | None:
        """(partition, position) of the row whose line holds byte `offset` of `path`; None if
        this scan read no such line (line formats only)."""
        scan = readable(scan)
        if scan["format"] == "parquet":
            return None
        target = os.path.realpath(path)
        listed = scan.get("source_files", scan["files"])
        indexes = [i for i, f in enumerate(listed) if os.path.realpath(f[0]) == target]
        if not indexes:
            return None
        self._check_files(key, scan)
        for part, pieces in enumerate(scan["partitions"]):
            if not any(fi in indexes for fi, _, _ in pieces):
                continue
            lines = self.lines(key, scan, part)
            mine = np.flatnonzero(np.isin(lines.file, indexes))
            if not len(mine):
                continue
            starts = lines.starts[mine]
            j = int(np.searchsorted(starts, offset, side="right")) - 1
            if j < 0:
                continue
            pos = int(mine[j])
            # The line must hold the byte (terminator included): not a dropped line after it.
            nxt = _next_line_start(scan["files"][int(lines.file[pos])][0], int(lines.ends[pos]))
            if offset < nxt:
                return part, pos
        return None

    def has_line_marks(self, key: Any, scan: dict, partition: int) -> bool:
        """Whether a line-format partition has usable line marks of all its rows, an owner
        making (or completing) and storing them first if it has none (a trace's rare row of
        the partition makes those up to it)."""
        scan = readable(scan)
        self._check_files(key, scan)
        if scan["format"] == "parquet":
            return False
        return self._line_marks(key, scan, partition, None) is not None

    def forget_marks_but(self, live_runs: set[str]) -> int:
        """Delete the stored line marks of runs not in `live_runs` (an owner's; else none)."""
        return self._marks.forget_runs_but(live_runs) if self._marks is not None else 0

    # -- line marks ------------------------------------------------------------------------

    def _line_marks(
        self,
        key: Any,
        scan: dict,
        partition: int,
        need: int | None,
        build: bool = True,
        found: _Found | None = None,
    ) -> LineMarks | None:
        """The partition's line marks covering at least its first `need` rows (None: all of
        them), cached per open. Stored marks of a shorter prefix are extended from their last
        mark; an owner makes them from the partition's start when it has none (`build`), and
        stores what it made; `found` takes the lines of its positions such a scan meets.
        None: no marks (read the lines)."""
        if self._marks is None:
            return None
        ck = (key, "marks", partition)
        hit = self._get(ck)
        if hit is False:
            return None  # looked for, none usable
        run, cp = key
        marks = hit if hit is not None else self._marks.load(run, cp, partition, scan)
        if marks is not None and marks.covers(need):
            if hit is None:
                self._put(ck, marks, marks.nbytes)
            return marks
        if marks is None and not (build and self._marks.writable):
            # A read-only open scans instead; an owner's count() leaves the making to data.
            if not self._marks.writable:
                self._put(ck, False, 64)
            return None
        try:
            made = _extend_marks(scan, partition, marks, need, found)
        except _MarksWrong as e:
            log.warning(
                "line marks of %s partition %d do not hold (%s): scanning", key, partition, e
            )
            self._put(ck, False, 64, replace=True)
            return None
        # A file changed during the scan would have given marks that do not fit it.
        if not _files_unchanged(scan, partition):
            raise SourceChanged(
                f"a source file of {key} partition {partition} changed while it was read: "
                "its rows cannot be re-read by position"
            )
        if made is None:  # lines that cannot be read by position: the scan says why
            if marks is None:
                self._put(ck, False, 64)
            return None
        if self._marks.writable:
            try:
                self._marks.save(run, cp, partition, scan, made)
            except OSError as e:  # derived data: the trace goes on, the next one retries
                log.warning("line marks of %s partition %d not stored: %s", key, partition, e)
        with self._lock:
            # Another thread may have extended them further meanwhile: keep the longer.
            now = self._cache.get(ck)
        if now is not None and now[0] is not False and now[0].covers(made.total):
            return made
        self._put(ck, made, made.nbytes, replace=True)
        return made

    def _marked_lines(
        self, key: Any, scan: dict, partition: int, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """File index, start and end of each position's line (-1 past the end), read from
        the line marks before them; None when there are no marks (or they do not hold)."""
        # Rows a scan extending the marks meets are taken from it (not read again from a mark).
        found = _Found(pos)
        marks = self._line_marks(key, scan, partition, int(pos.max()) + 1, found=found)
        if marks is None:
            return None
        rest = np.flatnonzero(~found.done)
        try:
            if len(rest):
                lines = _lines_from_marks(scan, partition, marks, pos[rest])
                found.file[rest], found.starts[rest], found.ends[rest] = lines
            return found.file, found.starts, found.ends
        except _MarksWrong as e:
            log.warning(
                "line marks of %s partition %d do not hold (%s): scanning", key, partition, e
            )
            self._put((key, "marks", partition), False, 64, replace=True)
            return None

    # -- lines -----------------------------------------------------------------------------

    def lines(self, key: Any, scan: dict, partition: int, need: int | None = None) -> _Lines:
        """A partition's line table: whole, or holding at least its first `need` rows."""
        scan = readable(scan)
        ck = (key, "lines", partition)
        hit = self._get(ck)
        if hit is None or not (hit.complete or (need is not None and len(hit.starts) >= need)):
            hit = _partition_lines(scan, partition, need, hit)
            self._put(ck, hit, hit.nbytes, replace=True)
        return hit

    def _get(self, ck: tuple) -> Any:
        with self._lock:
            hit = self._cache.get(ck)
            if hit is None:
                return None
            self._cache.move_to_end(ck)
            return hit[0]

    def _put(self, ck: tuple, value: Any, nbytes: int, replace: bool = False) -> None:
        with self._lock:
            if ck in self._cache:
                if not replace:
                    return
                self._bytes -= self._cache.pop(ck)[1]
            self._cache[ck] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > _CACHE_BYTES and len(self._cache) > 1:
                _, (_, size) = self._cache.popitem(last=False)
                self._bytes -= size

    def _check_files(self, key: Any, scan: dict) -> None:
        if key in self._checked:
            return
        for fi in range(len(scan["files"])):
            if (why := _file_change(scan, fi)) is not None:
                raise SourceChanged(why)
        self._checked.add(key)

    # -- parquet ---------------------------------------------------------------------------

    def _parquet_rows(self, key: Any, scan: dict, partition: int, positions: np.ndarray) -> list:
        pos = np.asarray(positions, dtype=np.int64)
        # Each row group's wanted rows taken in bulk, then every Row built at once: one
        # pyarrow conversion per column rather than a dict per row (0.3-0.6 M rows a group).
        order, pieces = [], []
        for fi, rg, ks, local in _parquet_split(scan, partition, pos):
            order.append(ks)
            group = self._row_group(key, scan, fi, rg, int(local.max()) + 1)
            pieces.append(group.take(local))
        if not pieces:
            return [None] * len(pos)
        # Group by group: one group's column may be dictionary-encoded and the next's not.
        rows = rows_of(pieces[0])
        for piece in pieces[1:]:
            rows.extend(rows_of(piece))
        ks = np.concatenate(order)
        if len(ks) == len(pos) and bool((ks == np.arange(len(pos))).all()):
            return rows
        out: list = [None] * len(pos)
        for k, row in zip(ks.tolist(), rows):
            out[k] = row
        return out

    def _row_group(self, key: Any, scan: dict, fi: int, rg: int, rows: int) -> Any:
        """Row group `rg` of file `fi`, at least its first `rows` rows: a cached prefix (a
        rare trace's, read ahead by `data_of_partitions`), or the whole group read now (a big
        group's rows come in batches, so a prefix would be read again for the next one)."""
        hit = self._get((key, "rg", fi, rg))
        if hit is not None and hit.num_rows >= rows:
            return hit
        self._read_row_groups([(key, scan, {(fi, rg): _WHOLE})])
        return self._get((key, "rg", fi, rg))

    def _read_row_groups(self, asks: list[tuple[Any, dict, dict[tuple[int, int], int]]]) -> None:
        """Reads, for each (key, scan, {(file, row group): rows}), the first `rows` rows of
        each row group not cached with as many, concurrently (pyarrow decodes without the
        GIL), the costliest first (so the last to finish is a small one), each file's footer
        parsed once."""
        todo = []
        for key, scan, wanted in asks:
            for (fi, rg), rows in wanted.items():
                hit = self._get((key, "rg", fi, rg))
                if hit is None:
                    todo.append((key, scan, fi, rg, rows))
                elif hit.num_rows < rows:
                    # Read before up to an earlier row: a big group's ids come in batches,
                    # each reaching further; the whole group now, so it is decoded twice at most.
                    todo.append((key, scan, fi, rg, _WHOLE))
        if not todo:
            return
        footers = {(t[0], t[2]): self._footer(t[0], t[1], t[2]) for t in todo}
        for key, scan, fi, rg, _ in todo:
            md = footers[key, fi]
            n_rows = scan["row_groups"][fi][rg][1]
            if rg >= md.num_row_groups or md.row_group(rg).num_rows != n_rows:
                raise SourceChanged(
                    f"source file {scan['files'][fi][0]} changed since the run read it "
                    "(its row groups differ): its rows cannot be re-read by position"
                )

        def cost(t: tuple) -> float:
            # Decompression is of the whole group; decoding stops at the last wanted row.
            meta = footers[t[0], t[2]].row_group(t[3])
            return float(meta.total_byte_size) * (1.0 + min(t[4], meta.num_rows) / meta.num_rows)

        def read(t: tuple) -> Any:
            key, scan, fi, rg, rows = t
            path = scan["files"][fi][0]
            return _read_prefix(path, footers[key, fi], rg, rows, scan.get("columns"), alone)

        todo.sort(key=cost, reverse=True)
        alone = len(todo) == 1  # one group: pyarrow's own threads decode its columns
        if alone:
            tables = [read(todo[0])]
        else:
            workers = min(len(todo), _READERS)
            with ThreadPoolExecutor(workers, thread_name_prefix="provrepo-parquet") as pool:
                tables = list(pool.map(read, todo))
        for (key, _, fi, rg, _), table in zip(todo, tables):
            self._put((key, "rg", fi, rg), table, int(table.nbytes) + 64, replace=True)

    def _footer(self, key: Any, scan: dict, fi: int) -> Any:
        """File `fi`'s parsed footer, cached as the files' checks are (per repository open)."""
        hit = self._get((key, "footer", fi))
        if hit is None:
            hit = _footer(scan["files"][fi][0])
            self._put((key, "footer", fi), hit, int(hit.serialized_size) * 4 + 64)
        return hit


def _footer(path: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except (OSError, pa.ArrowException) as e:
        raise SourceChanged(
            f"source file {path} cannot be read as Parquet any more ({e}): its rows cannot be "
            "re-read by position"
        ) from None


def _read_prefix(
    path: str, md: Any, rg: int, rows: int, columns: list | None, use_threads: bool
) -> Any:
    """The first `rows` rows of row group `rg` (all of them if it has no more): decoding
    stops there. String columns stored dictionary-encoded stay dictionary arrays (not
    expanded to one string per row): `rows_of` makes each distinct value once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = md.row_group(rg)
    schema = md.schema
    dictionary = []
    for i in range(meta.num_columns):
        chunk = meta.column(i)
        name = chunk.path_in_schema
        if (
            "." not in name  # top-level columns only: read_dictionary names leaf paths
            and schema.column(i).physical_type == "BYTE_ARRAY"
            and any("DICTIONARY" in e for e in chunk.encodings)
            and (columns is None or name in columns)
        ):
            dictionary.append(name)
    pf = pq.ParquetFile(path, metadata=md, read_dictionary=dictionary or None)
    if rows * 4 >= meta.num_rows * 3:  # most of it: the whole group reads faster
        return pf.read_row_group(rg, columns=columns, use_threads=use_threads)
    batches, got = [], 0
    for batch in pf.iter_batches(
        batch_size=rows, row_groups=[rg], columns=columns, use_threads=use_threads
    ):
        batches.append(batch)
        got += batch.num_rows
        if got >= rows:
            break
    return pa.Table.from_batches(batches)


def _rare_groups(
    scan: dict, positions: Mapping[int, np.ndarray]
) -> dict[tuple[int, int], int] | None:
    """{(file, row group): rows to read} for a Parquet scan's rare rows (None: not Parquet,
    or too many rows to count as rare)."""
    if scan["format"] != "parquet" or sum(len(p) for p in positions.values()) > _RARE:
        return None
    wanted: dict[tuple[int, int], int] = {}
    for part, pos in positions.items():
        for fi, rg, _, local in _parquet_split(scan, part, np.asarray(pos, np.int64)):
            wanted[fi, rg] = max(wanted.get((fi, rg), 0), int(local.max()) + 1)
    return wanted


def _parquet_split(
    scan: dict, partition: int, pos: np.ndarray
) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(file index, row group, indexes into `pos`, rows within the group) of each row group
    holding some of a partition's positions; positions past its end are left out."""
    groups = _parquet_groups(scan, partition)
    ends = np.cumsum([n for _, _, n in groups]) if groups else np.array([], dtype=np.int64)
    which = np.searchsorted(ends, pos, side="right")
    out = []
    for g in np.unique(which).tolist():
        if g >= len(groups):
            continue
        fi, rg, n = groups[g]
        ks = np.flatnonzero((which == g) & (pos >= 0))
        if len(ks):
            out.append((fi, rg, ks, pos[ks] - (int(ends[g]) - n)))
    return out


def _parquet_groups(scan: dict, partition: int) -> list[tuple[int, int, int]]:
    """(file index, row group, rows) read by a partition, in read order."""
    groups = scan["row_groups"]  # per file: [[midpoint, rows], ...]
    out = []
    for fi, start, length in scan["partitions"][partition]:
        for rg, (mid, n) in enumerate(groups[fi]):
            if start <= mid < start + length:
                out.append((fi, rg, n))
    return out


def _next_line_start(path: str, end: int) -> int:
    """Where the line after one ending (terminator excluded) at `end` starts."""
    with open(path, "rb") as f:
        f.seek(end)
        tail = f.read(2)
    return end + 2 if tail.startswith(b"\r\n") else end + 1


def _partition_lines(
    scan: dict, partition: int, need: int | None = None, prev: _Lines | None = None
) -> _Lines:
    """A partition's line table: all of it, or (given `need`) at least its first `need`
    rows, `complete` saying whether that is all; a partial `prev` is extended, not redone
    (a big group's rows are asked for in batches, each reaching further)."""
    pieces = scan["partitions"][partition]
    files, starts, ends = [], [], []
    got, first, resume = 0, 0, None
    if prev is not None and not prev.complete:
        files, starts, ends = [prev.file], [prev.starts], [prev.ends]
        got, first, resume = len(prev.starts), prev.piece, prev.resume
    complete, piece, at = True, 0, None
    for j in range(first, len(pieces)):
        if need is not None and got >= need:
            complete, piece, at = False, j, (resume if j == first else None)
            break
        fi = pieces[j][0]
        begin = resume if j == first else None
        s, e, stop = _kept_lines(scan, pieces[j], None if need is None else need - got, begin)
        files.append(np.full(len(s), fi, dtype=np.int32))
        starts.append(s)
        ends.append(e)
        got += len(s)
        if stop is not None:  # the piece's later lines are not known: nor are later pieces'
            complete, piece, at = False, j, stop
            break
    if not starts:
        empty = np.array([], dtype=np.int64)
        return _Lines(np.array([], dtype=np.int32), empty, empty, complete, piece, at)
    return _Lines(
        np.concatenate(files), np.concatenate(starts), np.concatenate(ends), complete, piece, at
    )


def _kept_lines(
    scan: dict, piece: list, max_lines: int | None, begin: int | None, step: int | None = None
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Start and end of a piece's rows (its lines less the dropped ones) from its first line
    (or from line start `begin`, past any header) and where its next line starts (None: the
    piece ends), as `_piece_lines` finds them; given `max_lines`, at least that many rows or
    all there are."""
    fi, start, length = piece
    path, size = scan["files"][fi][0], scan["files"][fi][1]
    raw = None if max_lines is None else max_lines + 64
    while True:
        s, e, stop = _piece_lines(path, start, length, size, raw, begin, step)
        if scan["format"] in ("csv", "json") and len(s):
            s, e = _drop_lines(scan, path, s, e, first_piece=start == 0 and begin is None)
        if stop is None or raw is None or max_lines is None or len(s) >= max_lines:
            return s, e, stop
        raw *= 2  # blank, comment or header lines dropped: scan further


def _extend_marks(
    scan: dict,
    partition: int,
    marks: LineMarks | None,
    need: int | None,
    found: _Found | None = None,
) -> LineMarks | None:
    """The partition's line marks covering at least its first `need` rows (None: all),
    scanned from its start, or from the last of `marks` (a prefix: its rows after that mark
    are scanned again, at most `EVERY`); `found` takes the lines of its positions scanned.
    None if the lines cannot be read by position (the trace that reads up to its row says
    why, as before). `_MarksWrong`: `marks` do not fit the file."""
    pieces = scan["partitions"][partition]
    # At least a row: marks of no rows would say the partition has none.
    need = None if need is None else max(need, 1)
    rows: list[np.ndarray] = []
    marked: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    got, first, begin = 0, 0, None
    if marks is not None and len(marks.rows):
        last = len(marks.rows) - 1
        rows, marked, offsets = [marks.rows[:last]], [marks.pieces[:last]], [marks.offsets[:last]]
        got, first, begin = int(marks.rows[last]), int(marks.pieces[last]), int(marks.offsets[last])
        _check_line_start(scan, pieces[first], begin)
    complete = True
    try:
        for j in range(first, len(pieces)):
            if need is not None and got >= need:
                complete = False
                break
            at = begin if j == first else None
            s, e, stop = _kept_lines(scan, pieces[j], None if need is None else need - got, at)
            if at is not None and not (len(s) and s[0] == at):
                raise _MarksWrong(f"offset {at} is not a kept line")
            if found is not None:
                found.take(got, pieces[j][0], s, e)
            # Every piece's first row and every EVERY-th after it (a resumed mark is one).
            idx = np.arange(0, len(s), EVERY, dtype=np.int64)
            rows.append(got + idx)
            marked.append(np.full(len(idx), j, dtype=np.int64))
            offsets.append(s[idx])
            got += len(s)
            if stop is not None:  # the piece's later lines are not scanned: a prefix
                complete = False
                break
    except BadInput:
        return None
    if not got:
        empty = np.array([], dtype=np.int64)
        return LineMarks(empty, empty, empty, 0)
    return LineMarks(
        np.concatenate(rows), np.concatenate(marked), np.concatenate(offsets), got, complete
    )


def _check_line_start(scan: dict, piece: list, offset: int) -> None:
    """`_MarksWrong` unless `offset` may start one of the piece's lines: the file's first
    byte or one after a newline, inside the piece (marks made from another file's bytes are
    caught here, or by the count of lines after them)."""
    fi, start, length = piece
    if not (start < offset <= start + length or offset == start == 0):
        raise _MarksWrong(f"offset {offset} outside its piece")
    if offset > 0:
        path = scan["files"][fi][0]
        with open(path, "rb") as f:
            around = os.pread(f.fileno(), 2, offset - 1)
        # After a "\n", or a lone "\r" (not the "\r" of a "\r\n").
        if not (around[:1] == b"\n" or (around[:1] == b"\r" and around[1:2] != b"\n")):
            raise _MarksWrong(f"offset {offset} of {path} is not a line start")


def _file_change(scan: dict, fi: int) -> str | None:
    """Why the scan's file `fi` can no longer be re-read by position (gone, or its size or
    mtime is not what the run recorded), or None."""
    path, size, mtime_ns = scan.get("source_files", scan["files"])[fi]
    try:
        st = os.stat(path)
    except OSError:
        return f"source file {path} is gone: its rows cannot be re-read"
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        return (
            f"source file {path} changed since the run read it (size or mtime): "
            "its rows cannot be re-read by position"
        )
    return None


def _files_unchanged(scan: dict, partition: int) -> bool:
    """Whether the partition's files still have the size and mtime the run recorded."""
    return all(
        _file_change(scan, fi) is None for fi in {p[0] for p in scan["partitions"][partition]}
    )


def _lines_from_marks(
    scan: dict, partition: int, marks: LineMarks, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """File index, start and end of each position's line (-1 past the end or before 0):
    each read from the mark at or before it, a mark's lines scanned once for all of them."""
    file_of = np.full(len(pos), -1, dtype=np.int32)
    starts_of = np.full(len(pos), -1, dtype=np.int64)
    ends_of = starts_of.copy()
    if not marks.covers(int(pos.max()) + 1 if len(pos) else 0):
        raise _MarksWrong(f"marks of the first {marks.total} rows only")
    inside = np.flatnonzero((pos >= 0) & (pos < marks.total))
    if not len(inside):
        return file_of, starts_of, ends_of
    mark = np.searchsorted(marks.rows, pos[inside], side="right") - 1
    pieces = scan["partitions"][partition]
    for m in np.unique(mark).tolist():
        ks = inside[mark == m]
        first, offset = int(marks.rows[m]), int(marks.offsets[m])
        piece = pieces[int(marks.pieces[m])]
        fi = piece[0]
        path = scan["files"][fi][0]
        _check_line_start(scan, piece, offset)
        want = int(pos[ks].max()) - first + 1
        s, e, _ = _kept_lines(scan, piece, want, offset, _MARK_STEP)
        if len(s) < want:
            raise _MarksWrong(f"{path} has fewer lines after offset {offset} than marked")
        local = pos[ks] - first
        file_of[ks], starts_of[ks], ends_of[ks] = fi, s[local], e[local]
    return file_of, starts_of, ends_of


def _piece_lines(
    path: str,
    start: int,
    length: int,
    size: int,
    max_lines: int | None = None,
    begin_at: int | None = None,
    step: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Start and end (terminator excluded) of every line a piece owns, and None; or, given
    `max_lines`, of its first lines (at least that many) and, if it owns more, the byte its
    next line starts at. `begin_at`: a line start to begin from instead of the piece's
    first line (going on from such a byte). `step`: bytes per pass when `max_lines` is
    given (default `_STEP`)."""
    empty = np.array([], dtype=np.int64)
    if size == 0:
        return empty, empty, None
    end = start + length
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if begin_at is not None:
            begin = begin_at
        elif start > 0:
            brk = _first_break(mm, start, size)
            if brk < 0:
                return empty, empty, None
            begin = brk + 1
        else:
            begin = 0
        if begin > end or begin >= size:
            return empty, empty, None
        # Breaks from `begin` through the one ending the last line that starts <= end.
        brk = _first_break(mm, end, size) if end < size else -1
        stop = size if brk < 0 else brk + 1
        # memchr finds a piece without any "\r" (the usual case) far faster than numpy
        # compares every byte: the lone "\r" breaks and the "\r\n" ends are then skipped.
        any_cr = mm.find(b"\r", begin, stop) >= 0
        buf = np.frombuffer(mm, dtype=np.uint8, count=stop - begin, offset=begin)
        # A rare row needs the lines up to it only: then the piece is scanned in smaller
        # steps, stopping at the step that holds enough lines.
        step = _CHUNK if max_lines is None else step or _STEP
        breaks: list[np.ndarray] = []
        found, whole = 0, True
        try:
            for i in range(0, len(buf), step):
                breaks.append(_breaks(buf, i, i + step, any_cr))
                found += len(breaks[-1])
                if max_lines is not None and found >= max_lines and i + step < len(buf):
                    whole = False
                    break
            nl_pos = np.concatenate(breaks) + begin if breaks else empty
            if not whole:  # complete lines only: up to the last break found
                stop = int(nl_pos[-1]) + 1
        finally:
            del buf
    if whole:
        line_starts = np.concatenate(([begin], nl_pos + 1))
        line_ends = np.concatenate((nl_pos, [size]))  # the last may have no terminator
    else:
        line_starts = np.concatenate(([begin], nl_pos[:-1] + 1))
        line_ends = nl_pos
    keep = (line_starts <= end) & (line_starts < size)
    line_starts, line_ends = line_starts[keep], line_ends[keep]
    more = None if whole else stop
    if not any_cr:
        return line_starts.astype(np.int64), line_ends.astype(np.int64), more
    return line_starts.astype(np.int64), _strip_cr(path, line_starts, line_ends), more


def _first_break(mm: mmap.mmap, pos: int, size: int) -> int:
    """The first line break at or after `pos`, as Hadoop's line reader (Spark's, without
    `lineSep`) breaks lines: a "\n", or a "\r" not followed by one ("\r\n" breaks at
    its "\n"); -1 if there is none. Two memchr calls, the second bounded by the first."""
    nl = mm.find(b"\n", pos)
    cr = mm.find(b"\r", pos, size if nl < 0 else nl)
    return cr if cr >= 0 and cr + 1 != nl else nl


def _breaks(buf: np.ndarray, lo: int, hi: int, any_cr: bool) -> np.ndarray:
    """Indexes in `buf[lo:hi]` (relative to `buf`) of its line breaks (see `_first_break`);
    `buf` ends after a break or at the end of the file, so a "\r" as its last byte is
    lone."""
    part = buf[lo:hi]
    nl = np.flatnonzero(part == 0x0A) + lo
    if not any_cr:
        return nl
    cr = np.flatnonzero(part == 0x0D) + lo
    nxt = cr + 1
    inside = nxt < len(buf)
    lone = np.ones(len(cr), dtype=bool)
    lone[inside] = buf[nxt[inside]] != 0x0A
    if not lone.any():
        return nl
    return np.sort(np.concatenate((nl, cr[lone])))


def _strip_cr(path: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Ends before a "\\r" of a "\\r\\n" terminator."""
    if not len(ends):
        return ends.astype(np.int64)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        arr = np.frombuffer(mm, dtype=np.uint8)
        try:
            prev = ends - 1
            ok = prev >= starts
            cr = np.zeros(len(ends), dtype=bool)
            cr[ok] = arr[prev[ok]] == 0x0D
        finally:
            del arr
    return (ends - cr).astype(np.int64)


def _drop_lines(
    scan: dict, path: str, starts: np.ndarray, ends: np.ndarray, first_piece: bool
) -> tuple[np.ndarray, np.ndarray]:
    """CSV / JSON lines: drop blank (and comment) lines, and a CSV file's header."""
    fmt = scan["format"]
    opts = scan.get("options", {})
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        arr = np.frombuffer(mm, dtype=np.uint8)
        try:
            # Lines of zero length have no bytes: reduceat would report the next byte.
            nonempty = ends > starts
            keep = _has_content(arr, fmt, starts, ends, nonempty)
            comment = opts.get("comment")
            if fmt == "csv" and comment:
                c = ord(comment)
                first = np.zeros(len(starts), dtype=bool)
                first[nonempty] = arr[starts[nonempty]] == c
                keep &= ~first
            if fmt == "json":
                _refuse_json_arrays(arr, starts[keep], ends[keep], path)
        finally:
            del arr
    starts, ends = starts[keep], ends[keep]
    if fmt == "csv" and opts.get("header") and first_piece and len(starts):
        starts, ends = starts[1:], ends[1:]
    return starts, ends


def _is_content(fmt: str, values: np.ndarray) -> np.ndarray:
    # CSV drops lines Java's trim() empties; JSON lines Jackson finds no token in.
    return values > 0x20 if fmt == "csv" else ~np.isin(values, _JSON_SPACE)


def _has_content(
    arr: np.ndarray, fmt: str, starts: np.ndarray, ends: np.ndarray, nonempty: np.ndarray
) -> np.ndarray:
    """Whether each line holds a byte that is not blank (CSV) / JSON whitespace."""
    has = np.zeros(len(starts), dtype=bool)
    if not nonempty.any():
        return has
    # A line whose first byte is content has content: only the rest need every byte looked
    # at, so a piece costs a byte per line here rather than a pass over all its bytes.
    has[nonempty] = _is_content(fmt, arr[starts[nonempty]])
    rest = np.flatnonzero(nonempty & ~has)
    if len(rest) <= _FEW_LINES:
        for k in rest.tolist():
            has[k] = bool(_is_content(fmt, arr[int(starts[k]) : int(ends[k])]).any())
        return has
    lo, hi = int(starts[0]), int(ends[-1])
    region = arr[lo:hi]
    content = _is_content(fmt, region)
    idx = starts[nonempty] - lo
    # reduceat spans [idx[k], idx[k+1]): the same as the line plus its terminator, which holds
    # no content byte.
    has[nonempty] = np.logical_or.reduceat(content, idx) if len(region) else idx < 0
    return has


def _refuse_json_arrays(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, path: str) -> None:
    first = arr[starts]
    lead_space = np.isin(first, _JSON_SPACE)
    bad = first == ord("[")
    for k in np.flatnonzero(lead_space).tolist():  # rare: find the first non-space byte
        line = bytes(arr[int(starts[k]) : int(ends[k])]).lstrip(b" \t\r\n")
        bad[k] = line.startswith(b"[")
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise BadInput(
            f"{path}: the JSON line at byte {int(starts[k])} holds a top-level array, which "
            "Spark reads as several rows; such files cannot be traced by line"
        )
