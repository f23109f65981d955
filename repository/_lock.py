"""One owning process per repository directory: an flock that dies with its process."""

from __future__ import annotations

import fcntl
import os
import socket
import time

from ._errors import RepositoryLocked

_PROBE_GRACE = 0.25  # seconds an owner waits out a reader's probe


class OwnerLock:
    """Exclusive, non-blocking flock on `<repo>/owner.lock`, holding the owner's pid and host.

    The kernel drops the lock when the owner dies (even by kill -9), so a stale lock file never
    blocks a restart.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # A read-only command probing for an owner holds a shared lock for microseconds
        # (is_held_by_other): retry briefly rather than mistake it for an owner.
        deadline = time.monotonic() + _PROBE_GRACE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                owner = self.describe_owner() or "unknown owner"
                os.close(fd)
                raise RepositoryLocked(os.path.dirname(self.path), owner) from None
        os.ftruncate(fd, 0)
        since = time.strftime("%Y-%m-%dT%H:%M:%S")
        info = f"pid {os.getpid()} on {socket.gethostname()} since {since}\n"
        os.write(fd, info.encode())
        self._fd = fd

    def describe_owner(self) -> str | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def is_held_by_other(self) -> bool:
        """True if a live process other than this one holds the lock (checked without taking it)."""
        if self._fd is not None:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
