"""Helpers shared by the fault-matrix tests: sample journals, directory hashes, child processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import _events as events
import numpy as np
from _events import make_event

from journals import JournalReader, JournalWriter, Location

TESTS = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable


def lineage_batch(record_ids, *, component: str = "map#1", partition: int = 0, attempt: int = 0):
    """A columnar batch whose records carry `record_ids` (each with two parents and a location)."""
    n = len(record_ids)
    return events.lineage_batch(
        record_ids,
        parent_counts=np.full(n, 2),
        parent_ids=np.arange(2 * n) + 7,
        component=component,
        component_type="reducer",
        partition=partition,
        attempt=attempt,
        time_ns=1_000 + n,
        offsets=np.arange(n + 1) * 10,
        location=Location("file:///in.txt"),
    )


# Frames of the sample journal: ("E", record ids) rich events, ("B", record ids) a lineage batch.
SAMPLE_FRAMES: list[tuple[str, list[int]]] = [
    ("E", [0, 1, 2]),
    ("B", [100, 101, 102, 103, 104]),
    ("E", [3, 4]),
    ("B", [1000, 1003, 1010, 1011]),  # not a progression: a PLAIN-packed column
    ("E", [5]),
]


def write_sample_journal(directory: str) -> tuple[str, list[int], list[list[int]]]:
    """Seal the sample journal in `directory`: (path, frame start offsets + file size, records
    of each frame)."""
    w = JournalWriter(os.path.join(directory, "sample.journal.open"), sync="none")
    for kind, ids in SAMPLE_FRAMES:
        if kind == "E":
            w.append([make_event(i, t=1_000_000 + i) for i in ids])
        else:
            w.append(lineage_batch(ids))
    path = w.seal()
    frames = JournalReader(path).scan()
    bounds = [f.offset for f in frames] + [os.path.getsize(path)]
    assert [f.records for f in frames] == [len(ids) for _, ids in SAMPLE_FRAMES]
    return path, bounds, [ids for _, ids in SAMPLE_FRAMES]


def tree_hash(root: str, ignore: tuple[str, ...] = ()) -> str:
    """A hash of every file's relative path and content under `root` (what "unchanged" means),
    leaving out files named in `ignore`."""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name in ignore:
                continue
            p = os.path.join(d, name)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def files_under(root: str, suffix: str = "") -> list[str]:
    """Relative paths of the files under `root` whose name ends in `suffix`."""
    out = []
    for d, _, files in os.walk(root):
        out.extend(os.path.relpath(os.path.join(d, n), root) for n in files if n.endswith(suffix))
    return sorted(out)


def child(script: str, *args: str, **kw) -> subprocess.Popen:
    """Start `tests/<script>` in a fresh interpreter (its own process: kill -9 hits only it)."""
    return subprocess.Popen(
        [PYTHON, os.path.join(TESTS, script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def wait_for_line(proc: subprocess.Popen, expect: str) -> str:
    """Read the child's stdout until a line starting with `expect` (fails if the child exits)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"child exited ({proc.wait()}) before {expect!r}: {err}")
        if line.startswith(expect):
            return line.strip()
