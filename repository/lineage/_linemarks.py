"""A stored sparse line index of DataFrame line-format scans (CSV, JSON lines, text).

A scan row is named by its position among its partition's kept lines, so finding row p
means counting the lines before it: a scan of up to a whole 128 MB piece. Line marks say,
for one (run, capture point, partition), the row number and byte offset of the first kept
line of every piece and of every `EVERY`-th kept line after it, and how many rows the
partition has: a trace then seeks to the mark at or before its row and reads a few KB.
Marks may cover a prefix of the partition only (`complete` False: its first `total` rows),
as a trace made them from the lines it scanned anyway; a later trace beyond that prefix
scans on from the last mark and stores the longer marks.

Marks are derived data (invariant 1), kept in `<repository>/scans/`, one file per
partition, written atomically by an owner (read-only opens never write) and checksummed,
deleted by the owner once the run's lineage has aged off.
A file that is missing, torn, corrupt, or made from another scan plan (its files' sizes and
mtimes, pieces and reader options are in the digest it holds) is not used: the trace scans
the lines as before, and an owner makes it again. The source files themselves are checked
against their recorded size and mtime before any read (`SourceChanged`), marks or not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from journals import TMP_SUFFIX, makedirs_durable, write_atomic

log = logging.getLogger("provrepo.lineage")

# Kept lines between two marks of a piece: a trace reads at most this many lines (~130 KB
# of TPC-H's lineitem); a mark costs 24 bytes (~0.2 MB per GB of lines at ~130 B a line).
EVERY = 1024
_MAGIC = b"PRVLMK01"
_SUFFIX = ".marks"


@dataclass(frozen=True)
class LineMarks:
    """One partition's marks: `rows[k]` is the row number of the kept line starting at byte
    `offsets[k]` of piece `pieces[k]` (ascending rows; every piece with rows starts with a
    mark); `total` is how many rows the partition has (`complete`), or how many of its
    first rows the marks cover (a prefix: the partition has at least that many)."""

    rows: np.ndarray
    pieces: np.ndarray
    offsets: np.ndarray
    total: int
    complete: bool = True

    def covers(self, need: int | None) -> bool:
        """Whether the marks cover the partition's first `need` rows (None: all of them)."""
        return self.complete or (need is not None and need <= self.total)

    @property
    def nbytes(self) -> int:
        """Bytes held, for cache budgets."""
        return int(self.rows.nbytes + self.pieces.nbytes + self.offsets.nbytes) + 64


def plan_digest(run: str, cp: int, partition: int, scan: dict) -> str:
    """What marks were made from: the run, capture point, partition, and the scan's format,
    reader options, files (path, size, mtime) and pieces."""
    plan = {
        "run": run,
        "cp": cp,
        "partition": partition,
        "format": scan["format"],
        "options": scan.get("options", {}),
        "files": scan.get("source_files", scan["files"]),  # as listed (gzip: not the copy)
        "pieces": scan["partitions"][partition],
    }
    text = json.dumps(plan, sort_keys=True, default=str).encode()
    return hashlib.blake2b(text, digest_size=16).hexdigest()


class LineMarkStore:
    """Line marks files under `directory`; `writable` (the repository's owner) saves them."""

    def __init__(self, directory: str, writable: bool, sync: bool = False) -> None:
        self.directory = directory
        self.writable = writable
        self.sync = sync

    def _path(self, run: str, digest: str) -> str:
        # The run's own prefix: its marks go when it has aged off (`forget_runs_but`).
        return os.path.join(self.directory, f"{_run_tag(run)}-{digest}{_SUFFIX}")

    def forget_runs_but(self, live: set[str]) -> int:
        """Delete the marks of runs not in `live` (the runs whose lineage is still stored);
        the owner only. Returns how many files went."""
        if not self.writable:
            return 0
        tags = {_run_tag(r) for r in live}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 0
        gone = 0
        for name in names:
            # A crash mid-write leaves `<name>.tmp`: it goes with its run's marks.
            ours = name.endswith(_SUFFIX) or name.endswith(_SUFFIX + TMP_SUFFIX)
            if ours and name.split("-", 1)[0] not in tags:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.directory, name))
                    gone += 1
        return gone

    def path(self, run: str, cp: int, partition: int, scan: dict) -> str:
        """The file that holds (or would hold) the partition's marks."""
        return self._path(run, plan_digest(run, cp, partition, scan))

    def load(self, run: str, cp: int, partition: int, scan: dict) -> LineMarks | None:
        """The partition's marks, or None if there are none usable (missing, torn, corrupt,
        or made from another plan: those are logged and ignored)."""
        digest = plan_digest(run, cp, partition, scan)
        path = self._path(run, digest)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("line marks %s unreadable (%s): scanning the lines instead", path, e)
            return None
        marks = _decode(blob, digest, len(scan["partitions"][partition]))
        if marks is None:
            log.warning("line marks %s are damaged: scanning the lines instead", path)
        return marks

    def save(self, run: str, cp: int, partition: int, scan: dict, marks: LineMarks) -> None:
        """Write the partition's marks (atomically: a reader sees the old file or the new)."""
        if not self.writable:
            raise PermissionError("line marks are written by the repository's owner only")
        digest = plan_digest(run, cp, partition, scan)
        makedirs_durable(self.directory)
        write_atomic(self._path(run, digest), _encode(marks, digest), self.sync)


def _run_tag(run: str) -> str:
    return hashlib.blake2b(run.encode(), digest_size=8).hexdigest()


def _encode(marks: LineMarks, digest: str) -> bytes:
    head = json.dumps(
        {
            "digest": digest,
            "count": len(marks.rows),
            "total": marks.total,
            "complete": marks.complete,
        }
    )
    body = b"".join(
        (
            head.encode() + b"\n",
            np.ascontiguousarray(marks.rows, dtype="<i8").tobytes(),
            np.ascontiguousarray(marks.pieces, dtype="<i8").tobytes(),
            np.ascontiguousarray(marks.offsets, dtype="<i8").tobytes(),
        )
    )
    return _MAGIC + hashlib.blake2b(body, digest_size=16).digest() + body


def verify_line_marks(directory: str) -> tuple[list[str], int]:
    """Check every marks file under `directory` (a repository's `scans/`): whole (magic,
    checksum) and consistent in itself; the plan it was made from is checked when a trace
    loads it. Returns (problems, files checked). A damaged file is never used (a trace
    scans instead), so this reports it only; a crash's `.tmp` leftover is not a problem (it
    goes with its run)."""
    problems: list[str] = []
    checked = 0
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return problems, 0
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        path = os.path.join(directory, name)
        checked += 1
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError as e:
            problems.append(f"{path}: line marks unreadable: {e.strerror}")
            continue
        digest = _digest_of(blob)
        if digest is None or not name.endswith(f"-{digest}{_SUFFIX}"):
            problems.append(f"{path}: line marks damaged (not whole, or named for another plan)")
        elif _decode(blob, digest, None) is None:
            problems.append(f"{path}: line marks inconsistent (rows, pieces or offsets)")
    return problems, checked


def _digest_of(blob: bytes) -> str | None:
    """The plan digest a whole (checksum-verified) marks file says it was made from."""
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 16:
        return None
    check, body = blob[len(_MAGIC) : len(_MAGIC) + 16], blob[len(_MAGIC) + 16 :]
    if hashlib.blake2b(body, digest_size=16).digest() != check:
        return None
    try:
        digest = json.loads(body[: body.find(b"\n")]).get("digest")
    except (ValueError, AttributeError):
        return None
    return digest if isinstance(digest, str) else None


def _decode(blob: bytes, digest: str, n_pieces: int | None) -> LineMarks | None:
    """The marks in `blob` if it is whole, made from plan `digest`, and consistent (with a
    plan of `n_pieces` pieces; None: pieces not checked against a plan)."""
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 16:
        return None
    check, body = blob[len(_MAGIC) : len(_MAGIC) + 16], blob[len(_MAGIC) + 16 :]
    if hashlib.blake2b(body, digest_size=16).digest() != check:
        return None
    nl = body.find(b"\n")
    try:
        head: Any = json.loads(body[:nl])
        count, total = int(head["count"]), int(head["total"])
        # Files written before prefixes existed hold whole partitions' marks.
        complete = head.get("complete", True)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(complete, bool):
        return None
    if head.get("digest") != digest or count < 0 or len(body) != nl + 1 + 24 * count:
        return None
    arrays = np.frombuffer(body, dtype="<i8", offset=nl + 1).reshape(3, count)
    rows, pieces, offsets = (a.astype(np.int64) for a in arrays)
    # Rows ascend from 0 (when there are any) and stay below the total; pieces are the
    # plan's, in order; offsets are bytes of a file.
    if count and (
        rows[0] != 0
        or (np.diff(rows) <= 0).any()
        or rows[-1] >= total
        or (np.diff(pieces) < 0).any()
        or pieces[0] < 0
        or (n_pieces is not None and pieces[-1] >= n_pieces)
        or (offsets < 0).any()
    ):
        return None
    # No marks: a partition without rows; a prefix holds at least its first row's mark.
    if not count and (total or not complete):
        return None
    return LineMarks(rows, pieces, offsets, total, complete)
