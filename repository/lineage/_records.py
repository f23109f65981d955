"""Record references as people write them: an integer id, `cp:partition:position`, or
`FILE@OFFSET` (the text-input line holding that byte), resolved against a repository's runs.

Shared by every front-end (the CLI, the UI) so a reference means the same thing everywhere.
"""

from __future__ import annotations

import re

import numpy as np

from journals import pack_record_id, unpack_record_id

from .._errors import BadInput, NotFound
from ._index import LineageIndex

_TRIPLE = re.compile(r"^(\d+):(\d+):(\d+)$")
_AT = re.compile(r"^(.+)@(\d+)$")

RecordRef = int | tuple[str, int]


def parse_record_id(text: str) -> int:
    """A record id: a non-negative integer, or capture_point:partition:position."""
    m = _TRIPLE.match(text.strip())
    try:
        if m:
            return pack_record_id(int(m[1]), int(m[2]), int(m[3]))
        value = int(text)
    except ValueError as e:
        raise BadInput(f"{text!r} is not a record id: {e}") from None
    if not 0 <= value < 1 << 63:
        raise BadInput(f"{text!r} is not a record id: out of range 0..2**63-1")
    return value


def parse_record_ref(text: str) -> RecordRef:
    """A record id as `parse_record_id` takes it, or (path, offset) for FILE@OFFSET."""
    m = _AT.match(text)
    if m and not _TRIPLE.match(text.strip()):
        return m[1], int(m[2])
    return parse_record_id(text)


def format_record_id(record_id: int) -> str:
    """`cp:partition:position`: exact where an integer would not be (JavaScript's doubles)."""
    cp, part, pos = unpack_record_id(record_id)
    return f"{cp}:{part}:{pos}"


def resolve_records(
    index: LineageIndex, ref: RecordRef, run: str | None = None
) -> tuple[str, list[int]]:
    """(run, record ids) of a reference: the record an id names, or, for FILE@OFFSET, every
    record of the run whose line holds that byte (a file read twice in one run has one per
    read). Without `run`: the newest run that stores the record (or read that byte).
    NotFound when none does, or `run` is unknown."""
    if isinstance(ref, tuple):
        path, offset = ref
        at = index.find_records_at(path, offset, run)
        if at is None:
            raise NotFound(f"{'run ' + run if run else 'no run'} read byte {offset} of {path}")
        return at
    what = f"{ref} ({format_record_id(ref)})"
    if run is None:
        found = index.newest_run_with(ref)
        if found is None:
            raise NotFound(f"no run stores record {what}")
        return found, [ref]
    index.run_info(run)  # NotFound naming the runs there are
    stored = index.event_ids(run, np.array([ref], dtype=np.int64))[0]
    if not stored and not index.is_scan_row(run, ref):
        raise NotFound(f"run {run} stores no record {what}")
    return run, [ref]


def resolve_record(index: LineageIndex, ref: RecordRef, run: str | None = None) -> tuple[str, int]:
    """(run, the first record) of `resolve_records`."""
    found, rids = resolve_records(index, ref, run)
    return found, rids[0]
