"""Table of contents of an event log: where each block starts and which event id it starts with.

`<firstId>.toc` = magic b"PRVT", version(u8), 3 reserved bytes, crc32(u32) of the body, then the
msgpack body. Beyond the block table it carries what readers need without opening the log:
the id range, time bounds (per log and per block, for age-off and time-range search), the
journals merged into the log (for recovery), and a directory of lineage batches (record id
ranges to event ids, so a trace hop is a lookup, not a scan).
"""

from __future__ import annotations

import struct
import zlib

import msgspec

from ._errors import RepositoryError

TOC_MAGIC = b"PRVT"
TOC_VERSION = 1
_HEAD = struct.Struct("<4sB3xI")


class BatchRef(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """Where one lineage batch's records landed: record ids [record_start + k*record_step] got
    event ids [first_event_id + k] for k < count. record_step 0: ids are not a progression."""

    run_id: str
    component_id: str
    component_type: str
    event_type: str
    partition: int
    attempt: int
    first_event_id: int
    count: int
    record_start: int
    record_step: int
    associations: int = 0


class Toc(msgspec.Struct, gc=False):
    version: int
    first_id: int
    next_id: int  # one past the last event id: the log holds [first_id, next_id)
    created_ns: int
    min_time_ns: int
    max_time_ns: int
    prov_size: int
    journals: list[str]
    block_offsets: list[int]
    block_first_ids: list[int]
    block_min_time_ns: list[int]
    block_max_time_ns: list[int]
    batches: list[BatchRef] = []
    rich_events: int = 0
    skipped_records: int = 0  # records of duplicate task attempts, dropped at merge

    @property
    def count(self) -> int:
        return self.next_id - self.first_id

    def block_span(self, i: int) -> tuple[int, int]:
        """(offset, length) in bytes of block i in the log file."""
        start = self.block_offsets[i]
        end = self.block_offsets[i + 1] if i + 1 < len(self.block_offsets) else self.prov_size
        return start, end - start


_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder(Toc)


class TocError(RepositoryError):
    """A .toc file is missing, damaged, or of an unknown version."""


def encode_toc(toc: Toc) -> bytes:
    body = _ENC.encode(toc)
    return _HEAD.pack(TOC_MAGIC, TOC_VERSION, zlib.crc32(body)) + body


def decode_toc(data: bytes, where: str) -> Toc:
    if len(data) < _HEAD.size:
        raise TocError(f"{where}: truncated table of contents")
    magic, version, crc = _HEAD.unpack_from(data, 0)
    if magic != TOC_MAGIC:
        raise TocError(f"{where}: not a table of contents")
    if version != TOC_VERSION:
        raise TocError(f"{where}: table of contents version {version} is not supported")
    body = data[_HEAD.size :]
    if zlib.crc32(body) != crc:
        raise TocError(f"{where}: table of contents fails its crc32")
    try:
        toc = _DEC.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise TocError(f"{where}: table of contents does not decode: {e}") from e
    n = len(toc.block_offsets)
    if not (
        len(toc.block_first_ids) == len(toc.block_min_time_ns) == len(toc.block_max_time_ns) == n
    ):
        raise TocError(f"{where}: table of contents has columns of different lengths")
    return toc


def read_toc(path: str) -> Toc:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise TocError(f"{path}: cannot read: {e.strerror}") from e
    return decode_toc(data, path)
