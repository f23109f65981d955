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
from typing import Any

import msgspec
import numpy as np
import zstandard

from journals import LineageBatch, ProvenanceEvent, decode_event, decode_events

from ._errors import RepositoryError

BLOCK_HEADER = struct.Struct("<II")
_LIST_HEAD = struct.Struct(">BI")  # msgpack array32 header
MAX_BLOCK = 1 << 30


class EventRun(msgspec.Struct, tag=1, array_like=True, gc=False):
    """Consecutive rich events. `data` is a msgpack array (5-byte header + the events exactly as
    journaled), so a bulk read decodes it in one call; `lengths` (u16 or u32 per event, whichever
    `width` says) lets a point lookup decode just one event."""

    first_id: int
    width: int
    lengths: bytes
    data: bytes

    @classmethod
    def cut(cls, first_id: int, data: bytes, offsets: np.ndarray, i: int, j: int) -> EventRun:
        """Events i..j-1 of a journal frame (`offsets` as the frame recorded them)."""
        lens = np.diff(offsets[i : j + 1])
        width = 2 if int(lens.max()) < 65536 else 4
        body = data[int(offsets[i]) : int(offsets[j])]
        return cls(first_id, width, lens.astype(f"<u{width}").tobytes(), _array_head(j - i) + body)

    def offsets(self) -> np.ndarray:
        """count + 1 byte offsets into `data`: event k is data[offsets[k]:offsets[k+1]]."""
        offs = np.empty(self.count + 1, dtype=np.int64)
        offs[0] = _LIST_HEAD.size
        np.cumsum(np.frombuffer(self.lengths, dtype=f"<u{self.width}"), out=offs[1:])
        offs[1:] += _LIST_HEAD.size
        return offs

    @property
    def count(self) -> int:
        return len(self.lengths) // self.width

    def event(self, event_id: int) -> ProvenanceEvent:
        k = event_id - self.first_id
        offs = self.offsets()
        ev = decode_event(memoryview(self.data)[offs[k] : offs[k + 1]])
        ev.event_id = event_id
        return ev

    def events(self, start_id: int, stop_id: int) -> list[ProvenanceEvent]:
        """Events with start_id <= id < stop_id (ids set), decoded in one call when most are."""
        first, n = self.first_id, self.count
        lo, hi = max(0, start_id - first), min(n, stop_id - first)
        if lo >= hi:
            return []
        if hi - lo > n // 2:
            events = decode_events(self.data)
            if hi - lo != n:
                events = events[lo:hi]
        else:
            offs = self.offsets()
            mv = memoryview(self.data)
            events = [decode_event(mv[offs[k] : offs[k + 1]]) for k in range(lo, hi)]
        for k, ev in enumerate(events, first + lo):
            ev.event_id = k
        return events


def _array_head(n: int) -> bytes:
    return _LIST_HEAD.pack(0xDD, n)


class BatchSlice(msgspec.Struct, tag=2, array_like=True, gc=False):
    first_id: int
    batch: LineageBatch

    @property
    def count(self) -> int:
        return len(self.batch)

    def event(self, event_id: int) -> ProvenanceEvent:
        return self.batch.event(event_id - self.first_id, event_id)

    def events(self, start_id: int, stop_id: int) -> list[ProvenanceEvent]:
        first = self.first_id
        return self.batch.events(first, max(0, start_id - first), stop_id - first)


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
    return decode_framed(framed, where, _DECODER)


def decode_framed(framed: bytes | memoryview, where: str, decoder: msgspec.msgpack.Decoder) -> Any:
    """`decode_block` with another decoder: a log's derived files use the same framing."""
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
        return decoder.decode(raw)
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
