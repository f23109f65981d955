"""Journal framing and frame payloads.

File:    b"PRVJ" version(u8) 3 reserved bytes, then frames.
Frame:   magic(u32) payload_len(u32) payload_crc32(u32) header_crc32(u32), then the payload.
Payload: one kind byte, then msgpack:
           b"E": [min_event_time_ns, max_event_time_ns, [event, ...]]  (rich events)
           b"B": LineageBatch                                          (columnar lineage)

The header has its own checksum so a reader can tell a torn or damaged header (resync by
scanning for the next magic) from a damaged payload (skip exactly that frame).
"""

from __future__ import annotations

import struct
import zlib

import msgspec

from ._model import LineageBatch, ProvenanceEvent

FILE_MAGIC = b"PRVJ"
FILE_VERSION = 1
FILE_HEADER = FILE_MAGIC + bytes([FILE_VERSION, 0, 0, 0])
FRAME_MAGIC = 0x46525650  # b"PVRF" little-endian
FRAME_HEADER = struct.Struct("<IIII")
FRAME_MAGIC_BYTES = struct.pack("<I", FRAME_MAGIC)
MAX_FRAME_PAYLOAD = 1 << 30
KIND_EVENTS = b"E"
KIND_BATCH = b"B"

_RAW_EVENTS = msgspec.msgpack.Decoder(tuple[int, int, list[msgspec.Raw]])
_BATCH = msgspec.msgpack.Decoder(LineageBatch)
_EVENT = msgspec.msgpack.Decoder(ProvenanceEvent)


def frame_header(payload: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte header of a frame carrying `payload`."""
    head = struct.pack("<III", FRAME_MAGIC, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head))


def parse_frame_header(buf: bytes | memoryview) -> tuple[int, int] | None:
    """(payload length, payload crc) if `buf` (16 bytes) is an intact frame header, else None."""
    magic, length, crc, hcrc = FRAME_HEADER.unpack(buf)
    if magic != FRAME_MAGIC or zlib.crc32(bytes(buf[:12])) != hcrc or length > MAX_FRAME_PAYLOAD:
        return None
    return length, crc


class EventsPayload(msgspec.Struct, gc=False):
    """A decoded rich-events frame: event bytes kept encoded (`Raw`) until someone needs them."""

    min_time_ns: int
    max_time_ns: int
    events: list[msgspec.Raw]

    def decode(self) -> list[ProvenanceEvent]:
        dec = _EVENT.decode
        return [dec(r) for r in self.events]


def decode_payload(payload: bytes | memoryview) -> EventsPayload | LineageBatch:
    """Decode a frame payload; raises msgspec.DecodeError / ValueError if it is not one."""
    kind = bytes(payload[:1])
    body = payload[1:]
    if kind == KIND_EVENTS:
        lo, hi, raws = _RAW_EVENTS.decode(body)
        return EventsPayload(lo, hi, raws)
    if kind == KIND_BATCH:
        return _BATCH.decode(body)
    raise ValueError(f"unknown frame kind {kind!r}")


def decode_event(raw: bytes | msgspec.Raw) -> ProvenanceEvent:
    """Decode one encoded `ProvenanceEvent`."""
    return _EVENT.decode(raw)
