"""Journals: the event model, its codec, and append-only journal files (writers and readers).

This package imports nothing else of provrepo, and nothing heavy: Spark Python workers import it.
"""

from ._codec import EventsPayload, decode_event, decode_events
from ._files import (
    TMP_SUFFIX,
    dir_bytes,
    file_bytes,
    fsync_dir,
    listdir,
    makedirs_durable,
    write_atomic,
)
from ._gc import gc_paused
from ._ids import (
    MAX_PARTITION,
    MAX_POSITION,
    group_ids,
    isin_sorted,
    pack_record_id,
    record_id_base,
    unique_ids,
    unpack_record_id,
    unpack_record_ids,
)
from ._loop import BackgroundLoop
from ._model import EventType, LineageBatch, Location, ProvenanceEvent
from ._reader import JournalProblem, JournalReader
from ._writer import (
    OPEN_SUFFIX,
    SEALED_SUFFIX,
    SYNC_POLICIES,
    JournalError,
    JournalWriter,
    WriterSpec,
    host_tag,
)

__all__ = [
    "MAX_PARTITION",
    "MAX_POSITION",
    "OPEN_SUFFIX",
    "SEALED_SUFFIX",
    "SYNC_POLICIES",
    "TMP_SUFFIX",
    "BackgroundLoop",
    "EventType",
    "EventsPayload",
    "JournalError",
    "JournalProblem",
    "JournalReader",
    "JournalWriter",
    "LineageBatch",
    "Location",
    "ProvenanceEvent",
    "WriterSpec",
    "decode_event",
    "decode_events",
    "dir_bytes",
    "file_bytes",
    "fsync_dir",
    "gc_paused",
    "group_ids",
    "host_tag",
    "isin_sorted",
    "listdir",
    "makedirs_durable",
    "pack_record_id",
    "record_id_base",
    "unique_ids",
    "unpack_record_id",
    "unpack_record_ids",
    "write_atomic",
]
