"""Journal readers: every complete, checksum-valid frame, and a report of what was not.

- A torn tail (the writer died mid-frame) ends the scan cleanly; it is reported with the offset
  and the number of bytes dropped.
- A frame whose payload fails its checksum is reported with file and offset and skipped; the
  frames after it are still read, because its header (own checksum) says where it ends.
- A damaged header is reported and the reader resynchronizes on the next intact frame header.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from ._codec import (
    FILE_HEADER,
    FILE_MAGIC,
    FRAME_HEADER,
    FRAME_MAGIC_BYTES,
    EventsPayload,
    decode_payload,
    parse_frame_header,
)
from ._model import LineageBatch, ProvenanceEvent

log = logging.getLogger("provrepo.journals")


@dataclass(frozen=True)
class JournalProblem:
    """Something a reader could not use: which file, where, what, and how many bytes it cost."""

    path: str
    offset: int
    kind: str  # "torn-tail" | "bad-checksum" | "bad-header" | "bad-payload" | "bad-file-header"
    message: str
    bytes_skipped: int = 0

    def __str__(self) -> str:
        return f"{self.path}@{self.offset}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class Frame:
    """One intact frame: its byte offset in the journal and its decoded payload."""

    offset: int
    payload: EventsPayload | LineageBatch

    @property
    def records(self) -> int:
        p = self.payload
        return p.count if isinstance(p, EventsPayload) else len(p)

    def events(self) -> list[ProvenanceEvent]:
        """The frame's records as per-record events (event ids not yet assigned: 0)."""
        p = self.payload
        return p.decode() if isinstance(p, EventsPayload) else p.events()


class JournalReader:
    """Reads one journal file (sealed or not). Iterate for `Frame`s; see `problems` after."""

    def __init__(self, path: str, data: bytes | None = None) -> None:
        self.path = path
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        self._data = data
        self.problems: list[JournalProblem] = []
        self.valid_length = 0  # offset just past the last intact frame
        self._scanned = False

    @classmethod
    def open(cls, path: str) -> JournalReader:
        return cls(path)

    @property
    def size(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Frame]:
        return self.frames()

    def frames(self) -> Iterator[Frame]:
        """Every intact frame in file order. Problems are collected in `self.problems`."""
        self.problems = []
        data, n = self._data, len(self._data)
        mv = memoryview(data)
        if n < len(FILE_HEADER) or data[:4] != FILE_MAGIC:
            what = "file is shorter than its header" if n < len(FILE_HEADER) else "no journal magic"
            self._problem(0, "bad-file-header", what, n if n < len(FILE_HEADER) else 0)
            if n < len(FILE_HEADER):
                self._scanned = True
                return
        pos = len(FILE_HEADER)
        self.valid_length = pos
        while pos < n:
            if n - pos < FRAME_HEADER.size:
                self._problem(pos, "torn-tail", "incomplete frame header at end of file", n - pos)
                break
            hdr = parse_frame_header(mv[pos : pos + FRAME_HEADER.size])
            if hdr is None:
                nxt = self._resync(pos + 1)
                if nxt < 0:
                    self._problem(
                        pos, "torn-tail", "damaged or partial frame header at end", n - pos
                    )
                    break
                self._problem(pos, "bad-header", "damaged frame header; resynchronized", nxt - pos)
                pos = nxt
                continue
            length, crc = hdr
            start, end = pos + FRAME_HEADER.size, pos + FRAME_HEADER.size + length
            if end > n:
                self._problem(
                    pos, "torn-tail", f"frame of {length} bytes cut at {n - start}", n - pos
                )
                break
            payload = mv[start:end]
            if zlib.crc32(payload) != crc:
                self._problem(pos, "bad-checksum", "frame payload fails its crc32", end - pos)
                pos = end
                continue
            try:
                decoded = decode_payload(payload)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
                self._problem(pos, "bad-payload", f"frame payload does not decode: {e}", end - pos)
                pos = end
                continue
            yield Frame(pos, decoded)
            pos = end
            self.valid_length = end
        self._scanned = True

    def events(self) -> Iterator[ProvenanceEvent]:
        """Every record of every intact frame, as per-record events (event ids 0)."""
        for frame in self.frames():
            yield from frame.events()

    def scan(self) -> list[Frame]:
        """Read the whole journal now; returns its intact frames."""
        return list(self.frames())

    def _resync(self, start: int) -> int:
        data = self._data
        pos = data.find(FRAME_MAGIC_BYTES, start)
        while pos >= 0:
            if len(data) - pos >= FRAME_HEADER.size and parse_frame_header(
                memoryview(data)[pos : pos + FRAME_HEADER.size]
            ):
                return pos
            pos = data.find(FRAME_MAGIC_BYTES, pos + 1)
        return -1

    def _problem(self, offset: int, kind: str, message: str, skipped: int) -> None:
        p = JournalProblem(self.path, offset, kind, message, skipped)
        self.problems.append(p)
        log.warning(
            "journal %s: %s at offset %d (%d bytes skipped)", self.path, kind, offset, skipped
        )
