"""Journal writers: append pre-encoded frames to one file; seal = flush + fsync + atomic rename.

One writer per file and no locks shared between processes: every writer (a Spark Python worker,
the driver's pool) creates its own uniquely named file in a container chosen round-robin.
An open journal ends in `.journal.open`; sealing renames it to `.journal`, which is the moment
it becomes durable and visible to the repository's rollover.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import socket
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Literal, TypeVar

import msgspec

from ._codec import FILE_HEADER, KIND_BATCH, KIND_EVENTS, encode_events, frame_header
from ._files import fsync_dir
from ._model import LineageBatch, ProvenanceEvent

SyncPolicy = Literal["seal", "batch", "none"]
SYNC_POLICIES: tuple[str, ...] = ("seal", "batch", "none")
OPEN_SUFFIX = ".journal.open"
SEALED_SUFFIX = ".journal"


def host_tag(hostname: str | None = None) -> str:
    """The host part of journal names: the hostname with only name-safe characters."""
    name = socket.gethostname() if hostname is None else hostname
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)[:40] or "host"


_host = host_tag()
_seq = itertools.count()
_rr = itertools.count(os.getpid())


class JournalError(OSError):
    """A journal could not be written (no space, permissions, writer already sealed...)."""


TRANSPORTS: tuple[str, ...] = ("auto", "shared", "socket")


class WriterSpec(msgspec.Struct, frozen=True):
    """Everything a process needs to write journals into a repository: small and picklable.

    `transport` says where a writer opened from this spec (`JournalWriter.open`) puts its
    journal: "shared" files in `containers`; "socket" a stream to the driver's receiver at
    `receiver` (host, port), which seals it into a container before acknowledging; "auto"
    files when the containers here are this repository's (each holds a marker with
    `container_token`), else the socket. `secret` (hex) is what the receiver asks of its
    clients: it is never shown by `repr`."""

    containers: list[str]
    sync: str = "seal"
    journals_per_container: int = 1
    transport: str = "shared"
    receiver: tuple[str, int] | None = None
    container_token: str = ""
    secret: str = ""

    def __repr__(self) -> str:
        return (
            f"WriterSpec(containers={self.containers!r}, sync={self.sync!r}, "
            f"transport={self.transport!r}, receiver={self.receiver!r}"
            f"{', secret=<hidden>' if self.secret else ''})"
        )

    def files_only(self) -> WriterSpec:
        """This spec writing files into its containers, whatever its transport."""
        return msgspec.structs.replace(
            self, transport="shared", receiver=None, container_token="", secret=""
        )


def journal_name(tag: str = "") -> str:
    """A journal name unique across processes and hosts; sorts in order of creation."""
    pid = os.getpid()
    suffix = f"-{re.sub(r'[^A-Za-z0-9_]', '_', tag)[:32]}" if tag else ""
    return f"{time.time_ns():020d}-{_host}-{pid}-{next(_seq):06d}{suffix}"


_W = TypeVar("_W", bound="FrameWriter")


class FrameWriter:
    """What every journal writer shares: encoding events and lineage batches into frames
    (length, two crc32s), counting them, and the seal-on-success context manager. Subclasses
    say where frames go (`_write_frame`) and what sealing means (`seal`, `abort`)."""

    def __init__(self) -> None:
        self.frames = 0
        self.records = 0
        self.bytes_written = 0
        self._enc = msgspec.msgpack.Encoder()
        self._buf = bytearray()

    @classmethod
    def open(cls, spec: WriterSpec, tag: str = "") -> FrameWriter:
        """A new journal for `spec`'s transport: a file in the next container (round-robin,
        named uniquely), or a stream to the driver's receiver (see `WriterSpec`)."""
        # Imported here: the stream writer subclasses this class.
        from ._stream import StreamJournalWriter, use_stream

        if use_stream(spec):
            return StreamJournalWriter.connect(spec, tag)
        return JournalWriter.create(spec, tag)

    # -- appending ---------------------------------------------------------------------------

    def append(self, items: Sequence[ProvenanceEvent] | LineageBatch) -> None:
        """Append a list of events (one frame) or a lineage batch (one frame)."""
        if isinstance(items, LineageBatch):
            self.append_batch(items)
        else:
            self.append_events(items)

    def append_events(self, events: Iterable[ProvenanceEvent]) -> None:
        """Append rich events as one frame."""
        events = events if isinstance(events, list) else list(events)
        if not events:
            return
        self._write_frame(KIND_EVENTS + encode_events(self._enc, events), len(events))

    def append_batch(self, batch: LineageBatch) -> None:
        """Append a columnar lineage batch as one frame."""
        buf = self._buf
        buf.clear()
        buf += KIND_BATCH
        self._enc.encode_into(batch, buf, 1)
        self._write_frame(buf, len(batch))

    def _write_frame(self, payload: bytes | bytearray, records: int) -> None:
        raise NotImplementedError

    def _counted(self, payload_len: int, records: int) -> None:
        self.frames += 1
        self.records += records
        self.bytes_written += 16 + payload_len

    # -- ending ------------------------------------------------------------------------------

    def seal(self) -> str:
        """Make the journal durable; returns its sealed name."""
        raise NotImplementedError

    def abort(self) -> None:
        """Discard the journal (its records are never merged)."""
        raise NotImplementedError

    @property
    def is_open(self) -> bool:
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self.is_open:
            self.seal()
        else:
            self.abort()


class JournalWriter(FrameWriter):
    """Appends rich events and lineage batches to one journal file, then seals it.

    Use `JournalWriter.open(spec)` (which streams to the driver instead when the spec says
    so, see `WriterSpec`); `append(...)` any number of times; `seal()`. Used as a context
    manager it seals on success and discards the journal on an exception (an unsealed
    journal is never merged, so a failed Spark task attempt leaves no lineage).
    """

    def __init__(self, path: str, sync: str = "seal") -> None:
        if sync not in SYNC_POLICIES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_POLICIES)}; got {sync!r}")
        if not path.endswith(OPEN_SUFFIX):
            raise ValueError(f"an open journal's name ends in {OPEN_SUFFIX}: {path}")
        super().__init__()
        self.path = path
        self.sealed_path = path[: -len(OPEN_SUFFIX)] + SEALED_SUFFIX
        self.sync = sync
        self._state = "open"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            self._file = os.fdopen(fd, "wb", buffering=1 << 20)
            self._file.write(FILE_HEADER)
        except OSError as e:
            raise JournalError(e.errno, f"cannot create journal {path}: {e.strerror}") from e
        self.bytes_written = len(FILE_HEADER)

    @classmethod
    def create(cls, spec: WriterSpec, tag: str = "") -> JournalWriter:
        """A new journal file in the next container (round-robin), named uniquely, whatever
        the spec's transport (the driver's own journals, the receiver's)."""
        if not spec.containers:
            raise ValueError("writer spec has no containers")
        container = spec.containers[next(_rr) % len(spec.containers)]
        return cls(os.path.join(container, journal_name(tag) + OPEN_SUFFIX), spec.sync)

    def _write_frame(self, payload: bytes | bytearray, records: int) -> None:
        self._check_open()
        try:
            self._file.write(frame_header(payload))
            self._file.write(payload)
            if self.sync == "batch":
                self._file.flush()
                os.fsync(self._file.fileno())
        except OSError as e:
            self._state = "broken"
            raise JournalError(e.errno, f"cannot write journal {self.path}: {e.strerror}") from e
        self._counted(len(payload), records)

    def write_raw(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes of frames encoded and checksummed elsewhere (the journal stream's
        receiver, which checks them as they arrive); a part of a frame is fine, as long as
        the journal is sealed only after whole, intact frames."""
        self._check_open()
        try:
            self._file.write(data)
        except OSError as e:
            self._state = "broken"
            raise JournalError(e.errno, f"cannot write journal {self.path}: {e.strerror}") from e
        self.bytes_written += len(data)

    def flush(self) -> None:
        """Hand buffered frames to the OS (visible to readers of the open file, not durable:
        durability is `seal`)."""
        self._check_open()
        try:
            self._file.flush()
        except OSError as e:
            self._state = "broken"
            raise JournalError(e.errno, f"cannot write journal {self.path}: {e.strerror}") from e

    def _check_open(self) -> None:
        if self._state != "open":
            raise JournalError(f"journal {self.path} is {self._state}; it takes no more appends")

    # -- ending ------------------------------------------------------------------------------

    def seal(self) -> str:
        """Flush, fsync (unless sync="none"), and atomically rename: the journal is durable."""
        self._check_open()
        try:
            self._file.flush()
            if self.sync != "none":
                os.fsync(self._file.fileno())
            self._file.close()
            os.rename(self.path, self.sealed_path)
            if self.sync != "none":
                fsync_dir(os.path.dirname(self.sealed_path) or ".")
        except OSError as e:
            self._state = "broken"
            raise JournalError(e.errno, f"cannot seal journal {self.path}: {e.strerror}") from e
        self._state = "sealed"
        return self.sealed_path

    def abort(self) -> None:
        """Discard an unsealed journal (its records are never merged)."""
        if self._state in ("sealed", "aborted"):
            return
        self._state = "aborted"
        with contextlib.suppress(OSError):  # being removed anyway: a failed flush cannot matter
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    def __repr__(self) -> str:
        return f"JournalWriter({self.path!r}, {self._state}, frames={self.frames})"
