"""Journals over a socket, for executors that cannot reach the repository's containers.

The executor streams the same framed journal it would have written to a file; the driver's
receiver (`repository`) checks every frame as it arrives, writes it to a journal in a
container, and answers a seal only once that journal is sealed there (flush, fsync, rename):
a task that returns after `seal()` has its lineage durable in the repository.

One connection carries journals one after another:

    server -> client   HELLO   b"PRVS", version (u8), 3 reserved bytes, a 32-byte nonce
    client -> server   AUTH    HMAC-SHA256(secret, AUTH_CONTEXT + nonce): 32 bytes
    server -> client   b"OK\\0\\0", or b"NO\\0\\0" and the connection closes
    client -> server   OPEN {tag}, journal frames (as in a file), SEAL {frames, bytes}
    server -> client   ACK {journal} once sealed, or ERROR {message} (and it closes)

Control messages are framed like journal frames (length, payload crc32, header crc32) under
their own magic, so one parser reads the stream and every byte on it is checksummed; the
journal frames keep the checksums their writer computed, which rollover checks again.
A stream that ends before SEAL, or any bad byte, leaves nothing: the open journal is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import struct
import threading
import zlib
from collections.abc import Callable

import msgspec

from ._codec import FRAME_HEADER, FRAME_MAGIC, MAX_FRAME_PAYLOAD, frame_header, parse_frame_header
from ._writer import FrameWriter, JournalError, JournalWriter, WriterSpec

PROTOCOL_VERSION = 1
HELLO_MAGIC = b"PRVS"
NONCE_BYTES = 32
HELLO = struct.Struct(f"<4sB3x{NONCE_BYTES}s")
AUTH_CONTEXT = b"provrepo journal stream v1 client"
ACCEPTED, REFUSED = b"OK\0\0", b"NO\0\0"
CONTROL_MAGIC = 0x43525650  # b"PVRC" little-endian
MAX_CONTROL_PAYLOAD = 64 * 1024
MARKER_NAME = ".provrepo-container"  # in each container: the owner's token

DEFAULT_TIMEOUT = 120.0  # seconds a socket operation may wait (connect, send, the ack)


class StreamError(JournalError):
    """The journal stream broke: refused, closed early, a bad checksum or message."""


# -- control messages -------------------------------------------------------------------------


class Open(msgspec.Struct, tag=True):
    tag: str = ""


class Seal(msgspec.Struct, tag=True):
    frames: int
    bytes: int  # journal frame bytes (headers and payloads) sent since OPEN


class Ack(msgspec.Struct, tag=True):
    journal: str  # the sealed journal's file name


class Error(msgspec.Struct, tag=True):
    message: str


Control = Open | Seal | Ack | Error
_CONTROL: msgspec.msgpack.Decoder[Control] = msgspec.msgpack.Decoder(Control)
_ENCODE = msgspec.msgpack.Encoder()


def control_frame(msg: Control) -> bytes:
    payload = _ENCODE.encode(msg)
    return frame_header(payload, CONTROL_MAGIC) + payload


def _decode_control(payload: bytes | memoryview) -> Control:
    try:
        return _CONTROL.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise StreamError(f"bad control message: {e}") from e


# -- the handshake ----------------------------------------------------------------------------


def client_proof(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, AUTH_CONTEXT + nonce, hashlib.sha256).digest()


def server_handshake(sock: socket.socket, secret: bytes) -> bool:
    """Challenge a new client; True if it proved it holds `secret` (it is told either way).
    The secret itself never crosses the wire."""
    nonce = os.urandom(NONCE_BYTES)
    sock.sendall(HELLO.pack(HELLO_MAGIC, PROTOCOL_VERSION, nonce))
    proof = recv_exact(sock, 32)
    if proof is None or not hmac.compare_digest(proof, client_proof(secret, nonce)):
        with contextlib.suppress(OSError):
            sock.sendall(REFUSED)
        return False
    sock.sendall(ACCEPTED)
    return True


def client_handshake(sock: socket.socket, secret: bytes, where: str) -> None:
    hello = recv_exact(sock, HELLO.size)
    if hello is None:
        raise StreamError(f"journal receiver at {where} closed the connection")
    magic, version, nonce = HELLO.unpack(hello)
    if magic != HELLO_MAGIC or version != PROTOCOL_VERSION:
        raise StreamError(f"{where} is not a provrepo journal receiver (protocol v1)")
    sock.sendall(client_proof(secret, nonce))
    if recv_exact(sock, len(ACCEPTED)) != ACCEPTED:
        raise StreamError(
            f"journal receiver at {where} refused this client: it does not hold this "
            "application's secret"
        )


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly n bytes, or None if the peer closed first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


# -- the executor side ------------------------------------------------------------------------


class StreamJournalWriter(FrameWriter):
    """A journal streamed to the driver's receiver: `seal()` returns once the receiver has
    sealed it into a container (durable), and raises `JournalError` if it could not.
    Sends block while the receiver is behind (TCP flow control is the back-pressure)."""

    def __init__(self, sock: socket.socket, where: str, tag: str = "") -> None:
        super().__init__()
        self._sock = sock
        self.where = where
        self._state = "open"
        self._frame_bytes = 0
        self.journal: str | None = None
        self._send(control_frame(Open(tag)))

    @classmethod
    def connect(
        cls, spec: WriterSpec, tag: str = "", timeout: float = DEFAULT_TIMEOUT
    ) -> StreamJournalWriter:
        """Connect to `spec.receiver`, prove the secret, and open a journal there."""
        if spec.receiver is None or not spec.secret:
            raise JournalError("writer spec names no journal receiver")
        host, port = spec.receiver
        where = f"{host}:{port}"
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise StreamError(
                e.errno, f"cannot reach the journal receiver at {where}: {e.strerror or e}"
            ) from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client_handshake(sock, bytes.fromhex(spec.secret), where)
            return cls(sock, where, tag)
        except StreamError:
            sock.close()
            raise
        except (OSError, ValueError) as e:  # a timeout, a reset; a malformed secret
            sock.close()
            raise StreamError(f"journal receiver at {where} did not answer: {e}") from e

    def _send(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._sock.sendall(data)
        except OSError as e:
            self._state = "broken"
            raise StreamError(
                e.errno, f"journal stream to {self.where} broke: {self._why(e)}"
            ) from e

    def _why(self, e: OSError) -> str:
        """The receiver's own ERROR message when it sent one before closing."""
        with contextlib.suppress(OSError, StreamError):
            self._sock.settimeout(1.0)
            msg = read_control(self._sock)
            if isinstance(msg, Error):
                return msg.message
        return str(e.strerror or e)

    def _write_frame(self, payload: bytes | bytearray, records: int) -> None:
        if self._state != "open":
            raise JournalError(f"journal stream to {self.where} is {self._state}")
        self._send(frame_header(payload))
        self._send(payload)
        self._counted(len(payload), records)
        self._frame_bytes += FRAME_HEADER.size + len(payload)

    def seal(self) -> str:
        """Ask the receiver to seal; returns the sealed journal's name once it is durable."""
        if self._state != "open":
            raise JournalError(f"journal stream to {self.where} is {self._state}")
        self._send(control_frame(Seal(self.frames, self._frame_bytes)))
        try:
            reply = read_control(self._sock)
        except (OSError, StreamError) as e:
            self._state = "broken"
            raise StreamError(f"no seal acknowledgement from {self.where}: {e}") from e
        finally:
            self._sock.close()
        if isinstance(reply, Ack):
            self._state = "sealed"
            self.journal = reply.journal
            return reply.journal
        self._state = "broken"
        why = reply.message if isinstance(reply, Error) else f"unexpected {type(reply).__name__}"
        raise StreamError(f"journal receiver at {self.where} could not seal: {why}")

    def abort(self) -> None:
        """Drop the journal: closing before SEAL makes the receiver delete it."""
        if self._state in ("sealed", "aborted"):
            return
        self._state = "aborted"
        with contextlib.suppress(OSError):
            self._sock.close()

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    def __repr__(self) -> str:
        return f"StreamJournalWriter({self.where}, {self._state}, frames={self.frames})"


def read_control(sock: socket.socket) -> Control:
    head = recv_exact(sock, FRAME_HEADER.size)
    if head is None:
        raise StreamError("connection closed")
    parsed = parse_frame_header(head, CONTROL_MAGIC)
    if parsed is None or parsed[0] > MAX_CONTROL_PAYLOAD:
        raise StreamError("damaged control message header")
    length, crc = parsed
    payload = recv_exact(sock, length) if length else b""
    if payload is None:
        raise StreamError("connection closed inside a control message")
    if zlib.crc32(payload) != crc:
        raise StreamError("control message fails its crc32")
    return _decode_control(payload)


# -- choosing the transport (executor side) ---------------------------------------------------

_visible_lock = threading.Lock()
_visible: dict[tuple[tuple[str, ...], str], bool] = {}


def containers_visible(spec: WriterSpec) -> bool:
    """Every container of `spec` is this repository's own directory, seen from here: it holds
    the marker with the token the owner wrote when it opened. A directory of the same name
    that is not the repository's (another host's local disk) does not count. Decided once per
    process and repository opening."""
    key = (tuple(spec.containers), spec.container_token)
    with _visible_lock:
        known = _visible.get(key)
    if known is not None:
        return known
    seen = bool(spec.container_token)
    for c in spec.containers if seen else ():
        try:
            with open(os.path.join(c, MARKER_NAME), encoding="ascii") as f:
                seen = f.read().strip() == spec.container_token
        except (OSError, ValueError):
            seen = False
        if not seen:
            break
    if seen:  # and writable: a read-only mount of the containers cannot take journals
        seen = all(os.access(c, os.W_OK | os.X_OK) for c in spec.containers)
    with _visible_lock:
        _visible[key] = seen
    return seen


def use_stream(spec: WriterSpec) -> bool:
    """Whether a writer opened from `spec` streams to the receiver (else: a file)."""
    if spec.transport == "socket":
        return True
    if spec.transport == "auto" and spec.receiver is not None:
        return not containers_visible(spec)
    return False


# -- the driver side: one connection's journals -----------------------------------------------


class StreamReceiver:
    """Reads one authenticated connection's journals into journal files and seals each one
    before acknowledging it. Memory is one fixed buffer, whatever the frames' sizes: frame
    payloads go to the file in pieces, their crc32 computed on the way and checked before the
    next frame is read; a bad one aborts the journal (it was never sealed, so nothing of it
    is merged)."""

    def __init__(
        self,
        sock: socket.socket,
        open_journal: Callable[[str], JournalWriter],
        buffer: bytearray,
        on_sealed: Callable[[str], object] | None = None,
    ) -> None:
        self._sock = sock
        self._open = open_journal
        self._on_sealed = on_sealed
        self._buf = memoryview(buffer)
        self.bytes_received = 0
        self.frames_received = 0
        self.sealed: list[str] = []

    def run(self) -> None:
        """Serve journals until the client closes; raises StreamError on a bad stream (the
        journal being received is deleted, and the client told why when it can be)."""
        while True:
            head = self._header(allow_eof=True)
            if head is None:
                return
            msg = self._control(head)
            if not isinstance(msg, Open):
                raise self._fail(f"expected OPEN, got {type(msg).__name__}")
            writer = self._open(msg.tag)
            try:
                self._receive(writer)
            except BaseException:
                writer.abort()
                raise

    def _receive(self, writer: JournalWriter) -> None:
        frames = nbytes = 0
        while True:
            head = self._header(allow_eof=False)
            assert head is not None
            parsed = parse_frame_header(head, FRAME_MAGIC)
            if parsed is None:
                msg = self._control(head)
                if not isinstance(msg, Seal):
                    raise self._fail(f"expected a frame or SEAL, got {type(msg).__name__}")
                if (msg.frames, msg.bytes) != (frames, nbytes):
                    raise self._fail(
                        f"SEAL says {msg.frames} frames / {msg.bytes} bytes, "
                        f"{frames} / {nbytes} arrived"
                    )
                try:
                    path = writer.seal()  # flush, fsync, rename, fsync dir: durable
                except JournalError as e:
                    raise self._fail(f"cannot seal: {e}") from e
                self.sealed.append(path)
                if self._on_sealed is not None:
                    self._on_sealed(path)
                self._sock.sendall(control_frame(Ack(os.path.basename(path))))
                return
            length, crc = parsed
            writer.write_raw(head)
            self._payload(writer, length, crc)
            frames += 1
            nbytes += FRAME_HEADER.size + length
            self.frames_received += 1

    def _header(self, allow_eof: bool) -> bytes | None:
        head = recv_exact(self._sock, FRAME_HEADER.size)
        if head is None:
            if allow_eof:
                return None
            raise StreamError("the client closed before sealing (its journal is dropped)")
        self.bytes_received += len(head)
        return head

    def _control(self, head: bytes) -> Control:
        parsed = parse_frame_header(head, CONTROL_MAGIC)
        if parsed is None or parsed[0] > MAX_CONTROL_PAYLOAD:
            raise self._fail("damaged frame header")
        length, crc = parsed
        payload = recv_exact(self._sock, length) if length else b""
        if payload is None:
            raise StreamError("the client closed inside a control message")
        self.bytes_received += length
        if zlib.crc32(payload) != crc:
            raise self._fail("control message fails its crc32")
        return _decode_control(payload)

    def _payload(self, writer: JournalWriter, length: int, crc: int) -> None:
        """Copy one frame payload to the journal in buffer-sized pieces, checking its crc."""
        if length > MAX_FRAME_PAYLOAD:
            raise self._fail("frame too large")
        buf, left, running = self._buf, length, 0
        while left:
            k = self._sock.recv_into(buf[: min(left, len(buf))])
            if k == 0:
                raise StreamError("the client closed inside a frame (its journal is dropped)")
            piece = buf[:k]
            running = zlib.crc32(piece, running)
            writer.write_raw(piece)
            left -= k
            self.bytes_received += k
        if running != crc:
            raise self._fail("frame payload fails its crc32")

    def _fail(self, message: str) -> StreamError:
        """Tell the client why (best effort) and return the error to raise."""
        with contextlib.suppress(OSError):
            self._sock.sendall(control_frame(Error(message)))
        return StreamError(message)
