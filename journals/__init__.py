"""Journals: the event model, its codec, and append-only journal files (writers and readers).

This package imports nothing else of provrepo, and nothing heavy: Spark Python workers import it
(the journal stream to the driver, `_stream`, is the standard library: socket, hmac).
"""

from ._codec import EventsPayload, decode_event, decode_events
from ._columns import IntColumn
from ._files import (
    TMP_SUFFIX,
    dir_bytes,
    file_bytes,
    fsync_dir,
    listdir,
    makedirs_durable,
    prefetch_ranges,
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
from ._lazy import lazy_exports
from ._loop import BackgroundLoop
from ._model import EventType, LineageBatch, Location, ProvenanceEvent
from ._reader import JournalProblem, JournalReader
from ._stream import (
    MARKER_NAME,
    StreamError,
    StreamJournalWriter,
    StreamReceiver,
    containers_visible,
    server_handshake,
    use_stream,
)
from ._writer import (
    OPEN_SUFFIX,
    SEALED_SUFFIX,
    SYNC_POLICIES,
    TRANSPORTS,
    JournalError,
    JournalWriter,
    WriterSpec,
    host_tag,
)

__all__ = [
    "MARKER_NAME",
    "MAX_PARTITION",
    "MAX_POSITION",
    "OPEN_SUFFIX",
    "SEALED_SUFFIX",
    "SYNC_POLICIES",
    "TMP_SUFFIX",
    "TRANSPORTS",
    "BackgroundLoop",
    "EventType",
    "EventsPayload",
    "IntColumn",
    "JournalError",
    "JournalProblem",
    "JournalReader",
    "JournalWriter",
    "LineageBatch",
    "Location",
    "ProvenanceEvent",
    "StreamError",
    "StreamJournalWriter",
    "StreamReceiver",
    "WriterSpec",
    "containers_visible",
    "decode_event",
    "decode_events",
    "dir_bytes",
    "file_bytes",
    "fsync_dir",
    "gc_paused",
    "group_ids",
    "host_tag",
    "isin_sorted",
    "lazy_exports",
    "listdir",
    "makedirs_durable",
    "pack_record_id",
    "prefetch_ranges",
    "record_id_base",
    "server_handshake",
    "unique_ids",
    "unpack_record_id",
    "unpack_record_ids",
    "use_stream",
    "write_atomic",
]
