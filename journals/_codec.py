"""Journal framing and frame payloads.

File:    b"PRVJ" version(u8) 3 reserved bytes, then frames.
Frame:   magic(u32) payload_len(u32) payload_crc32(u32) header_crc32(u32), then the payload.
Payload: one kind byte, then msgpack:
           b"E": EventsPayload: time bounds, (count+1) u32 offsets, and the events as one
                 msgpack array (decodable in one call; event k is data[offsets[k]:offsets[k+1]])
           b"B": LineageBatch (columnar lineage)

The header has its own checksum so a reader can tell a torn or damaged header (resync by
scanning for the next magic) from a damaged payload (skip exactly that frame).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array

import msgspec
import numpy as np

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

LIST_HEAD = struct.Struct(">BI")  # msgpack array32 header

_BATCH = msgspec.msgpack.Decoder(LineageBatch)
_EVENT = msgspec.msgpack.Decoder(ProvenanceEvent)
_EVENT_LIST = msgspec.msgpack.Decoder(list[ProvenanceEvent])


def frame_header(payload: bytes | bytearray | memoryview, magic: int = FRAME_MAGIC) -> bytes:
    """The 16-byte header of a frame carrying `payload` (`magic`: a journal frame's, or the
    journal stream's control messages')."""
    head = struct.pack("<III", magic, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head))


def parse_frame_header(buf: bytes | memoryview, magic: int = FRAME_MAGIC) -> tuple[int, int] | None:
    """(payload length, payload crc) if `buf` (16 bytes) is an intact header of a frame with
    this magic, else None."""
    found, length, crc, hcrc = FRAME_HEADER.unpack(buf)
    if found != magic or zlib.crc32(bytes(buf[:12])) != hcrc or length > MAX_FRAME_PAYLOAD:
        return None
    return length, crc


class EventsPayload(msgspec.Struct, array_like=True, gc=False):
    """A rich-events frame. The writer records each event's offset as it encodes it, so
    rollover can cut and copy runs of events into blocks without decoding any of them."""

    min_time_ns: int
    max_time_ns: int
    offsets: bytes  # (count+1) little-endian u32 into data
    data: bytes  # msgpack array32 header + the encoded events

    @property
    def count(self) -> int:
        return len(self.offsets) // 4 - 1

    def offsets_array(self) -> np.ndarray:
        return np.frombuffer(self.offsets, dtype="<u4")

    def decode(self) -> list[ProvenanceEvent]:
        return _EVENT_LIST.decode(self.data)


def encode_events(encoder: msgspec.msgpack.Encoder, events: list[ProvenanceEvent]) -> bytes:
    """The body of a rich-events frame (one `encode_into` per event, offsets recorded)."""
    data = bytearray(LIST_HEAD.pack(0xDD, len(events)))
    offsets = array("I")
    add = offsets.append
    enc = encoder.encode_into
    for ev in events:
        add(len(data))
        enc(ev, data, -1)
    add(len(data))
    times = [e.event_time_ns for e in events]
    if sys.byteorder != "little":
        offsets.byteswap()
    return encoder.encode(EventsPayload(min(times), max(times), offsets.tobytes(), bytes(data)))


_EVENTS = msgspec.msgpack.Decoder(EventsPayload)


def decode_payload(payload: bytes | memoryview) -> EventsPayload | LineageBatch:
    """Decode a frame payload; raises msgspec.DecodeError / ValueError if it is not one."""
    kind = bytes(payload[:1])
    body = payload[1:]
    if kind == KIND_EVENTS:
        return _EVENTS.decode(body)
    if kind == KIND_BATCH:
        return _BATCH.decode(body)
    raise ValueError(f"unknown frame kind {kind!r}")


def decode_event(raw: bytes | memoryview) -> ProvenanceEvent:
    """Decode one encoded `ProvenanceEvent`."""
    return _EVENT.decode(raw)


def decode_events(data: bytes | memoryview) -> list[ProvenanceEvent]:
    """Decode a msgpack array of encoded `ProvenanceEvent`s in one call."""
    return _EVENT_LIST.decode(data)
