"""Event-log blocks: independently decompressible zstd frames of ~block_size uncompressed bytes.

A block is a msgpack list of entries, each holding a contiguous run of event ids:
- `EventRun`: rich events, kept in their journal encoding (copied, never re-encoded);
- `BatchSlice`: a slice of a lineage batch, its columns in compact (delta) form.
On disk a block is `comp_len(u32) crc32(u32)` then the zstd frame, so `verify` can check it and a
reader needs nothing but its offset.
"""

from __future__ import annotations

import struct
import threading
import zlib
from bisect import bisect_right
from collections.abc import Iterator

import msgspec
import zstandard

from journals import LineageBatch, ProvenanceEvent, decode_event

from ._errors import RepositoryError

BLOCK_HEADER = struct.Struct("<II")
MAX_BLOCK = 1 << 30


class EventRun(msgspec.Struct, tag=1, array_like=True, gc=False):
    first_id: int
    events: list[msgspec.Raw]

    @property
    def count(self) -> int:
        return len(self.events)

    def event(self, event_id: int) -> ProvenanceEvent:
        ev = decode_event(self.events[event_id - self.first_id])
        ev.event_id = event_id
        return ev

    def iter_events(self, start_id: int, stop_id: int) -> Iterator[ProvenanceEvent]:
        first = self.first_id
        lo, hi = max(0, start_id - first), min(len(self.events), stop_id - first)
        dec = decode_event
        for i in range(lo, hi):
            ev = dec(self.events[i])
            ev.event_id = first + i
            yield ev


class BatchSlice(msgspec.Struct, tag=2, array_like=True, gc=False):
    first_id: int
    batch: LineageBatch

    @property
    def count(self) -> int:
        return len(self.batch)

    def event(self, event_id: int) -> ProvenanceEvent:
        return self.batch.event(event_id - self.first_id, event_id)

    def iter_events(self, start_id: int, stop_id: int) -> Iterator[ProvenanceEvent]:
        first = self.first_id
        return self.batch.iter_events(first, max(0, start_id - first), stop_id - first)


Entry = EventRun | BatchSlice
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(list[Entry])
_local = threading.local()


class BlockError(RepositoryError):
    """A block failed its checksum, did not decompress, or did not decode."""


def _compressor(level: int) -> zstandard.ZstdCompressor:
    # zstd contexts are not thread-safe: one per thread per level.
    cache = getattr(_local, "comp", None)
    if cache is None:
        cache = _local.comp = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dec", None)
    if d is None:
        d = _local.dec = zstandard.ZstdDecompressor()
    return d


def encode_entries(entries: list[Entry]) -> bytes:
    return _ENCODER.encode(entries)


def compress_block(raw: bytes, level: int) -> bytes:
    """Header + zstd frame for one block's encoded entries."""
    comp = _compressor(level).compress(raw)
    return BLOCK_HEADER.pack(len(comp), zlib.crc32(comp)) + comp


def decode_block(framed: bytes | memoryview, where: str) -> list[Entry]:
    """Check, decompress and decode one framed block (header included)."""
    if len(framed) < BLOCK_HEADER.size:
        raise BlockError(f"{where}: truncated block header")
    length, crc = BLOCK_HEADER.unpack_from(framed, 0)
    comp = framed[BLOCK_HEADER.size : BLOCK_HEADER.size + length]
    if len(comp) != length:
        raise BlockError(f"{where}: block truncated ({len(comp)} of {length} bytes)")
    if zlib.crc32(comp) != crc:
        raise BlockError(f"{where}: block fails its crc32")
    try:
        raw = _decompressor().decompress(comp)
        return _DECODER.decode(raw)
    except (zstandard.ZstdError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BlockError(f"{where}: block does not decode: {e}") from e


def entry_for(entries: list[Entry], event_id: int) -> Entry | None:
    """The entry of a decoded block that holds `event_id`, if any."""
    firsts = [e.first_id for e in entries]
    i = bisect_right(firsts, event_id) - 1
    if i < 0:
        return None
    e = entries[i]
    return e if event_id < e.first_id + e.count else None
