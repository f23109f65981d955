"""The driver side of the journal stream (`journals._stream`): a TCP server that takes journals
from Spark executors that cannot reach the repository's containers, seals each one into a
container (flush, fsync, rename) and only then acknowledges it, so a task that returns has its
lineage durable here (README Guarantee 7).

- It binds the address the driver already uses for Spark (`spark.driver.host`), or loopback.
- A client must prove it holds the per-application secret (HMAC over a fresh nonce; the
  secret never crosses the wire and is never logged); others are refused and counted.
- Memory is bounded: at most `max_connections` connections are served at once, each through
  one fixed buffer (frames go to the journal file in pieces); further clients wait in the
  listen backlog, and a client whose data is not being read blocks in `send` (TCP flow
  control): back-pressure, never unbounded buffering.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from journals import (
    JournalWriter,
    StreamError,
    StreamReceiver,
    WriterSpec,
    server_handshake,
)

log = logging.getLogger("provrepo.repository")

MAX_CONNECTIONS = 32
BUFFER_SIZE = 256 * 1024
HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0  # a connection silent this long is dropped (its journal with it)


@dataclass
class ReceiverStats:
    """What the journal receiver did (for tests, benchmarks and `stats`)."""

    connections: int = 0
    refused: int = 0  # clients without the secret
    journals_sealed: int = 0
    journals_dropped: int = 0  # streams that ended before their seal, or were bad
    bytes_received: int = 0
    frames_received: int = 0
    last_error: str | None = None


class JournalReceiver:
    """Accepts journal streams on (bind_host or host, port); `address` is what clients are
    told (`host`, the bound port). Start with `start()`, stop with `stop()`."""

    def __init__(
        self,
        open_journal: Callable[[str], JournalWriter],
        host: str,
        port: int = 0,
        *,
        bind_host: str | None = None,
        max_connections: int | None = None,
        buffer_size: int | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self._open_journal = open_journal
        self._secret = secrets.token_bytes(32)
        self.max_connections = max_connections or MAX_CONNECTIONS
        self.buffer_size = buffer_size or BUFFER_SIZE
        self.idle_timeout = idle_timeout
        self.stats = ReceiverStats()
        self._stats_lock = threading.Lock()
        bind = bind_host or host
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self._server = socket.create_server((bind, port), family=family, backlog=128)
        self._server.settimeout(0.5)  # the accept loop looks at `_stopping` this often
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._stopping = threading.Event()
        self._live: dict[socket.socket, threading.Thread] = {}
        self._live_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def secret_hex(self) -> str:
        """The per-application secret, for the writer spec shipped with the tasks only."""
        return self._secret.hex()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._accept_loop, name="provrepo-receiver", daemon=True
        )
        self._thread.start()
        log.info("journal receiver listening on %s:%d", *self.address)

    def stop(self) -> None:
        """Stop accepting; connections still streaming are cut (their journals dropped)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self._server.close()
        with self._live_lock:
            live = list(self._live.items())
        for conn, _ in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for _, thread in live:
            thread.join(timeout=30)

    # -- serving -----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue  # every slot busy: clients wait in the backlog (back-pressure)
            try:
                conn, peer = self._server.accept()
            except TimeoutError:
                self._slots.release()
                continue
            except OSError as e:
                self._slots.release()
                if not self._stopping.is_set():
                    log.error("journal receiver cannot accept: %s", e)
                    self._stopping.wait(1.0)
                continue
            thread = threading.Thread(
                target=self._serve, args=(conn, peer), name="provrepo-receiver-conn", daemon=True
            )
            with self._live_lock:
                self._live[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket, peer: tuple) -> None:
        rx: StreamReceiver | None = None
        try:
            self._count(connections=1)
            conn.settimeout(HANDSHAKE_TIMEOUT)
            if not server_handshake(conn, self._secret):
                self._count(refused=1)
                log.warning(
                    "journal receiver refused a client at %s: it does not hold this "
                    "application's secret",
                    _peer(peer),
                )
                return
            conn.settimeout(self.idle_timeout)
            rx = StreamReceiver(
                conn,
                self._open_journal,
                bytearray(self.buffer_size),
                on_sealed=lambda _path: self._count(journals_sealed=1),
            )
            rx.run()
        except (StreamError, OSError) as e:
            # A task that failed or an executor that died closes before sealing: its
            # journal was never sealed, so nothing of it is merged (only whole attempts are).
            self._count(journals_dropped=1, last_error=str(e))
            log.info("journal stream from %s dropped: %s", _peer(peer), e)
        except Exception as e:  # never let one client's problem end the receiver
            self._count(journals_dropped=1, last_error=str(e))
            log.exception("journal stream from %s failed", _peer(peer))
        finally:
            if rx is not None:
                self._count(
                    bytes_received=rx.bytes_received,
                    frames_received=rx.frames_received,
                )
            with contextlib.suppress(OSError):
                conn.close()
            with self._live_lock:
                self._live.pop(conn, None)
            self._slots.release()

    def _count(self, last_error: str | None = None, **deltas: int) -> None:
        with self._stats_lock:
            for name, d in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + d)
            if last_error is not None:
                self.stats.last_error = last_error


def _peer(peer: tuple) -> str:
    return f"{peer[0]}:{peer[1]}" if len(peer) >= 2 else str(peer)


def files_spec(containers: list[str], sync: str, journals_per_container: int) -> WriterSpec:
    """A spec whose writers are files in the containers (the driver's own journals)."""
    return WriterSpec(
        containers=list(containers), sync=sync, journals_per_container=journals_per_container
    )
