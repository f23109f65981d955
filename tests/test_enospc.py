"""A full disk (ENOSPC), injected under the journal and log writers and for real on a tiny tmpfs:
a clear error naming the file, nothing half-written left behind, nothing merged twice later."""

from __future__ import annotations

import errno
import io
import os
import subprocess

import pytest
from _events import make_event
from _faults import files_under, lineage_batch

import journals._writer as jwriter
import repository._eventlog as eventlog
import repository._idgen as idgen
from journals import JournalError, JournalWriter, WriterSpec
from repository import ProvenanceRepository, RepositoryConfig, RolloverError


class FullDisk(io.RawIOBase):
    """A raw file that takes `room` bytes, then fails like a full disk (a short write first)."""

    def __init__(self, fd: int, room: int) -> None:
        self._fd = fd
        self._room = room

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, b) -> int:
        if self._room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(len(b), self._room)
        os.write(self._fd, bytes(b[:n]))
        self._room -= n
        return n

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _OsWithFullDisk:
    """`os` for journals._writer whose fdopen hands out files on a disk with `room` bytes."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __getattr__(self, name: str):
        return getattr(os, name)

    def fdopen(self, fd: int, mode: str = "rb", buffering: int = -1):
        return io.BufferedWriter(FullDisk(fd, self.room), max(buffering, io.DEFAULT_BUFFER_SIZE))


def full_disk_open(room: int, suffix: str):
    """`open` for repository._eventlog: files ending in `suffix` get `room` bytes."""

    def opener(path, mode="r", *args, **kw):
        if str(path).endswith(suffix) and "w" in mode:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            return io.BufferedWriter(FullDisk(fd, room), 1 << 16)
        return open(path, mode, *args, **kw)

    return opener


# -- journal writer ----------------------------------------------------------------------------


def test_journal_append_on_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(jwriter, "os", _OsWithFullDisk(room=64 * 1024))
    w = JournalWriter.open(WriterSpec([str(tmp_path)], sync="seal"))
    w.append([make_event(i) for i in range(10)])  # buffered: not on disk yet
    with pytest.raises(JournalError) as exc:
        w.append([make_event(i) for i in range(20_000)])  # a frame larger than the buffer
    assert exc.value.errno == errno.ENOSPC
    assert w.path in str(exc.value) and "No space left" in str(exc.value)
    assert not w.is_open
    with pytest.raises(JournalError, match="broken"):  # never sealed with a partial frame
        w.seal()
    assert not os.path.exists(w.sealed_path)
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_journal_seal_on_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(jwriter, "os", _OsWithFullDisk(room=1000))
    w = JournalWriter.open(WriterSpec([str(tmp_path)], sync="seal"))
    w.append([make_event(i) for i in range(100)])  # ~20 KiB, all in the write buffer
    with pytest.raises(JournalError) as exc:
        w.seal()  # the flush finds the disk full
    assert exc.value.errno == errno.ENOSPC and w.path in str(exc.value)
    assert not os.path.exists(w.sealed_path)
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_register_events_on_full_disk_then_space_back(tmp_path, monkeypatch, config):
    with ProvenanceRepository.open(tmp_path / "repo", config, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(500)])
        assert repo.rollover() == 500
        with monkeypatch.context() as m:
            m.setattr(jwriter, "os", _OsWithFullDisk(room=0))
            repo.register_events([make_event(i) for i in range(500, 600)])  # buffered only
            with pytest.raises(JournalError) as exc:
                repo.rollover()  # sealing the driver journal flushes onto the full disk
            assert exc.value.errno == errno.ENOSPC and ".journal.open" in str(exc.value)
            # Not sealed, and not left behind holding space either.
            assert files_under(repo.containers[0]) == []
        assert repo.max_event_id == 500
        repo.register_events([make_event(i) for i in range(600, 650)])
        assert repo.rollover() == 50
        got = repo.get_events(1, 10_000)
        assert [e.event_id for e in got] == list(range(1, 551))
        assert [e.record_id for e in got] == [*range(500), *range(600, 650)]


# -- log writer during rollover ----------------------------------------------------------------


def _pending_journals(spec: WriterSpec, count: int = 3) -> list[int]:
    """Seal `count` journals of rich events and a batch; their record ids in merge order."""
    out: list[int] = []
    for j in range(count):
        with JournalWriter.open(spec) as w:
            rich = range(j * 10_000, j * 10_000 + 2_000)
            w.append([make_event(i) for i in rich])
            batch = range(j * 10_000 + 5_000, j * 10_000 + 8_000)
            w.append(lineage_batch(batch, partition=j))
        out += [*rich, *batch]
    return out


@pytest.mark.parametrize(
    ("suffix", "room"),
    [(".prov.tmp", 0), (".prov.tmp", 50_000), (".toc.tmp", 0), (".toc.tmp", 100)],
    ids=["log-header", "log-blocks", "toc-empty", "toc-half"],
)
def test_rollover_on_full_disk_then_space_back(tmp_path, monkeypatch, suffix, room):
    config = RepositoryConfig(rollover_interval=3600)  # sync="seal": the crash-safe path
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(100_000, 100_100)])
        assert repo.rollover() == 100
        pending = _pending_journals(repo.writer_spec())
        journals = files_under(repo.containers[0])
        assert len(journals) == 3
        with monkeypatch.context() as m:
            m.setattr(eventlog, "open", full_disk_open(room, suffix), raising=False)
            with pytest.raises(RolloverError) as exc:
                repo.rollover()
        msg = str(exc.value)
        assert "No space left on device" in msg
        assert os.path.join(root, "logs", "101.prov") in msg  # names the file it was writing
        # No temp files (the forward index of log 1 is derived from it).
        assert files_under(os.path.join(root, "logs")) == ["1.fwd", "1.prov", "1.toc"]
        assert files_under(repo.containers[0]) == journals  # journals kept
        assert repo.max_event_id == 100 and repo.get_event(101) is None
        assert repo.rollover_stats.last_error == msg

        # Space is back: everything merges, once, with the ids it would have had.
        assert repo.rollover() == len(pending)
        got = repo.get_events(101, 100_000)
        assert [e.event_id for e in got] == list(range(101, 101 + len(pending)))
        assert [e.record_id for e in got] == pending
        assert files_under(repo.containers[0]) == []
    with ProvenanceRepository.open(root, start_threads=False) as repo:
        assert repo.max_event_id == 100 + len(pending)
        assert repo.rollover() == 0


def test_full_disk_when_raising_the_id_mark(tmp_path, monkeypatch, config):
    # The log is committed, then the high-water mark cannot be written: the journals' events
    # are in the log, so they must not be merged a second time by the next rollover.
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        pending = _pending_journals(repo.writer_spec())

        def no_space(*args, **kw):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "state/next_event_id.tmp")

        with monkeypatch.context() as m:
            m.setattr(idgen, "write_atomic", no_space)
            assert repo.rollover() == len(pending)  # the log committed: that is the merge
        assert files_under(repo.containers[0]) == []
        repo.register_events([make_event(777_777)])
        repo.rollover()
        got = repo.get_events(1, 100_000)
        assert [e.event_id for e in got] == list(range(1, len(pending) + 2))
        assert [e.record_id for e in got] == [*pending, 777_777]
    with ProvenanceRepository.open(root, start_threads=False) as repo:
        assert repo.max_event_id == len(pending) + 1
        assert len(repo.get_events(1, 100_000)) == len(pending) + 1


# -- a real full disk --------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (skipped where mounting is not permitted); yields (path, resize)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)

    try:
        yield str(disk), resize
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _incompressible_events(first: int, n: int) -> list:
    events = [make_event(i) for i in range(first, first + n)]
    for e in events:
        e.attributes["noise"] = os.urandom(96).hex()  # so the log is as large as the journals
    return events


def test_real_full_disk(tiny_disk):
    disk, resize = tiny_disk
    root = os.path.join(disk, "repo")
    config = RepositoryConfig(rollover_interval=3600)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        spec = repo.writer_spec()
        sealed: list[int] = []
        for j in range(2):  # ~2 x 300 KiB sealed: the log needs more room than is left
            with JournalWriter.open(spec) as w:
                w.append(_incompressible_events(j * 10_000, 1_000))
            sealed += range(j * 10_000, j * 10_000 + 1_000)
        w = JournalWriter.open(spec)
        with pytest.raises(JournalError) as exc:
            for k in range(1_000):
                w.append(_incompressible_events(50_000 + k * 100, 100))
        assert exc.value.errno == errno.ENOSPC and w.path in str(exc.value)
        assert not os.path.exists(w.sealed_path)
        with pytest.raises(RolloverError, match="No space left on device") as exc:
            repo.rollover()  # the broken journal still fills the disk
        assert os.path.join(root, "logs", "1.prov") in str(exc.value)
        w.abort()
        assert [n for n in os.listdir(os.path.join(root, "logs")) if n.endswith(".tmp")] == []
        assert len(files_under(repo.containers[0], ".journal")) == 2
        assert repo.max_event_id == 0

        resize("16m")  # space is back
        assert repo.rollover() == len(sealed)
        got = repo.get_events(1, 10_000)
        assert [e.event_id for e in got] == list(range(1, len(sealed) + 1))
        assert [e.record_id for e in got] == sealed
        assert files_under(repo.containers[0]) == []
