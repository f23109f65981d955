"""The journal stream from executors to the driver's receiver (issue 14), without Spark: a seal
is acknowledged only once the journal is sealed in a container; clients without the secret
are refused; damaged, truncated or abandoned streams leave nothing; memory stays bounded
whatever the frame size; "auto" streams only where the containers are not the repository's."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import tracemalloc

import msgspec
import numpy as np
import pytest

import repository._receiver as receiver_module
from journals import (
    MARKER_NAME,
    OPEN_SUFFIX,
    SEALED_SUFFIX,
    EventType,
    JournalError,
    JournalReader,
    JournalWriter,
    LineageBatch,
    StreamError,
    StreamJournalWriter,
    WriterSpec,
    containers_visible,
    use_stream,
)
from journals._codec import FRAME_HEADER, KIND_BATCH, frame_header
from journals._stream import Ack, Open, Seal, control_frame, read_control
from repository import BadInput, ConfigError, ProvenanceRepository, RepositoryConfig


def batch(n: int, partition: int = 0, attempt: int = 1, run: str = "run-1") -> LineageBatch:
    return LineageBatch.build(
        event_time_ns=time.time_ns(),
        event_type=EventType.RECEIVE,
        run_id=run,
        component_id="parallelize#0",
        component_type="parallelize",
        partition=partition,
        attempt=attempt,
        record_ids=range(partition << 20, (partition << 20) + n),
    )


@pytest.fixture
def repo(tmp_path, config):
    """No background rollover: the tests look at the sealed journals themselves."""
    with ProvenanceRepository.open(tmp_path / "repo", config, start_threads=False) as r:
        yield r


@pytest.fixture
def rrepo(repo):
    """A repository with its journal receiver running on loopback."""
    repo.start_receiver("127.0.0.1")
    return repo


def encoded(b: LineageBatch) -> bytes:
    """A batch frame's payload, as a writer encodes it."""
    buf = bytearray(KIND_BATCH)
    msgspec.msgpack.Encoder().encode_into(b, buf, 1)
    return bytes(buf)


def journals_in(repo, suffix: str = SEALED_SUFFIX) -> list[str]:
    return sorted(n for c in repo.containers for n in os.listdir(c) if n.endswith(suffix))


def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_streamed_journal_is_sealed_in_a_container_and_merged(rrepo):
    spec = rrepo.writer_spec("socket")
    w = JournalWriter.open(spec, tag="p0")
    assert isinstance(w, StreamJournalWriter)
    w.append_batch(batch(100))
    w.append_events([])  # nothing: no frame
    name = w.seal()
    assert journals_in(rrepo) == [name]
    frames = JournalReader(os.path.join(rrepo.containers[0], name)).scan()
    assert [len(f.payload) for f in frames] == [100]
    assert rrepo.rollover() == 100
    assert rrepo.get_event(100).record_id == 99
    assert rrepo.receiver_stats.journals_sealed == 1


def test_the_acknowledgement_waits_for_the_seal(rrepo, monkeypatch):
    """seal() returns only once the journal is renamed into place (fsynced before that, as
    every sealed journal): a slow disk delays the task, it never loses its lineage."""
    real_rename = os.rename
    order = []

    def slow_rename(src, dst):
        if str(dst).endswith(SEALED_SUFFIX):
            time.sleep(0.3)
            real_rename(src, dst)
            order.append("renamed")
        else:
            real_rename(src, dst)

    monkeypatch.setattr("journals._writer.os.rename", slow_rename)
    w = JournalWriter.open(rrepo.writer_spec("socket"))
    w.append_batch(batch(10))
    name = w.seal()
    order.append("acknowledged")
    assert order == ["renamed", "acknowledged"]
    assert journals_in(rrepo) == [name]


def test_a_client_without_the_secret_is_refused(rrepo, caplog):
    spec = rrepo.writer_spec("socket")
    caplog.set_level(logging.DEBUG)
    flipped = spec.secret[:-1] + ("1" if spec.secret[-1] == "0" else "0")
    for wrong in ("", "00" * 32, flipped):
        bad = WriterSpec(spec.containers, transport="socket", receiver=spec.receiver, secret=wrong)
        with pytest.raises(JournalError):
            w = JournalWriter.open(bad)
            w.append_batch(batch(5))
            w.seal()
    # A raw client that sends garbage instead of the proof is refused as well.
    with socket.create_connection(spec.receiver, timeout=5) as s:
        s.recv(40)
        s.sendall(b"x" * 32)
        assert s.recv(4) == b"NO\0\0"
    wait_for(lambda: rrepo.receiver_stats.refused == 3)  # "" never got to connect
    assert journals_in(rrepo) == [] and journals_in(rrepo, OPEN_SUFFIX) == []
    assert "refused" in caplog.text
    # The secret is in no log line and no repr.
    w = JournalWriter.open(spec)
    w.append_batch(batch(5))
    w.seal()
    assert spec.secret not in caplog.text
    assert spec.secret not in repr(spec) and "hidden" in repr(spec)


def _raw_client(spec: WriterSpec) -> socket.socket:
    """A client that passed the handshake, for writing hand-made streams."""
    w = StreamJournalWriter.connect(spec, "raw")
    return w._sock


def test_a_damaged_frame_leaves_nothing_and_the_client_is_told(rrepo):
    spec = rrepo.writer_spec("socket")
    sock = _raw_client(spec)
    payload = bytearray(KIND_BATCH + b"\x00" * 1000)
    header = frame_header(payload)
    payload[500] ^= 0xFF  # damaged on the way: its crc32 no longer matches
    sock.sendall(header + payload + control_frame(Seal(1, 16 + 1001)))
    reply = sock.recv(4096)
    assert b"crc32" in reply
    sock.close()
    wait_for(lambda: rrepo.receiver_stats.journals_dropped == 1)
    assert journals_in(rrepo) == [] and journals_in(rrepo, OPEN_SUFFIX) == []


def test_a_seal_that_does_not_match_what_arrived_is_refused(rrepo):
    spec = rrepo.writer_spec("socket")
    sock = _raw_client(spec)
    payload = KIND_BATCH + b"\x01" * 100
    sock.sendall(frame_header(payload) + payload + control_frame(Seal(2, 16 + 101)))
    assert b"SEAL says 2 frames" in sock.recv(4096)
    sock.close()
    wait_for(lambda: rrepo.receiver_stats.journals_dropped == 1)
    assert journals_in(rrepo) == [] and journals_in(rrepo, OPEN_SUFFIX) == []


@pytest.mark.parametrize("cut", ["before-seal", "inside-a-frame"])
def test_a_stream_that_ends_before_its_seal_leaves_nothing(rrepo, cut):
    """What a task attempt killed mid-way (or its executor dying) leaves: nothing."""
    spec = rrepo.writer_spec("socket")
    w = JournalWriter.open(spec)
    w.append_batch(batch(50))
    if cut == "inside-a-frame":
        payload = KIND_BATCH + b"\x02" * 5000
        w._sock.sendall(frame_header(payload) + payload[:100])
    w.abort()
    wait_for(lambda: rrepo.receiver_stats.journals_dropped == 1)
    assert journals_in(rrepo) == [] and journals_in(rrepo, OPEN_SUFFIX) == []
    assert rrepo.rollover() == 0


def test_a_seal_that_fails_in_the_driver_fails_the_writer(rrepo, monkeypatch):
    real_rename = os.rename

    def no_space(src, dst):
        if str(dst).endswith(SEALED_SUFFIX):
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr("journals._writer.os.rename", no_space)
    w = JournalWriter.open(rrepo.writer_spec("socket"))
    w.append_batch(batch(10))
    with pytest.raises(JournalError, match=r"could not seal: cannot seal.*No space"):
        w.seal()


def test_the_receiver_gone_fails_the_writer(repo):
    repo.start_receiver("127.0.0.1")
    spec = repo.writer_spec("socket")
    repo.stop_receiver()
    with pytest.raises(JournalError, match="cannot reach the journal receiver"):
        JournalWriter.open(spec)


def test_memory_stays_bounded_whatever_the_frame_size(rrepo):
    """A 48 MiB frame passes through one fixed buffer: the receiver's peak allocation while
    it takes the frame is a small fraction of it (it never holds a frame whole)."""
    spec = rrepo.writer_spec("socket")
    n = 6_000_000
    ids = np.random.default_rng(0).integers(0, 2**62, n)
    big = LineageBatch.build(
        event_time_ns=time.time_ns(),
        event_type=EventType.JOIN,
        run_id="run-1",
        component_id="reduceByKey#1",
        component_type="reducer",
        partition=0,
        attempt=1,
        record_ids=range(n),
        parent_counts=np.ones(n, dtype=np.int64),
        parent_ids=ids,
    )
    payload = encoded(big)
    assert len(payload) > 40 * 2**20
    sock = _raw_client(spec)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        sock.sendall(frame_header(payload))
        sock.sendall(payload)
        sock.sendall(control_frame(Seal(1, FRAME_HEADER.size + len(payload))))
        reply = read_control(sock)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sock.close()
    assert isinstance(reply, Ack)
    assert peak < 4 * 2**20, f"receiver peak {peak / 2**20:.1f} MiB"
    frames = JournalReader(os.path.join(rrepo.containers[0], reply.journal)).scan()
    assert [len(f.payload) for f in frames] == [n]


def test_clients_beyond_the_connection_bound_wait(repo, monkeypatch):
    """Back-pressure: with every connection slot busy a new client is not served (it waits
    in the backlog) until one frees up; nothing is buffered for it."""
    monkeypatch.setattr(receiver_module, "MAX_CONNECTIONS", 1)
    repo.start_receiver("127.0.0.1")
    spec = repo.writer_spec("socket")
    first = JournalWriter.open(spec)
    first.append_batch(batch(10, partition=0))
    with pytest.raises(JournalError, match="timed out"):
        StreamJournalWriter.connect(spec, timeout=1.0)
    result = {}

    def second():
        w = StreamJournalWriter.connect(spec, timeout=30)
        w.append_batch(batch(10, partition=1))
        result["name"] = w.seal()

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.5)
    assert "name" not in result  # still waiting for the slot
    first.seal()
    t.join(30)
    assert "name" in result
    assert len(journals_in(repo)) == 2


def test_auto_writes_files_only_where_the_containers_are_the_repositorys(rrepo, tmp_path):
    spec = rrepo.writer_spec("auto")
    assert containers_visible(spec) and not use_stream(spec)
    w = JournalWriter.open(spec)
    assert isinstance(w, JournalWriter)
    w.append_batch(batch(3))
    w.seal()
    assert rrepo.receiver_stats.connections == 0
    # An executor that sees a directory of the same name that is not the repository's (its
    # own local disk), or none at all, streams.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / MARKER_NAME).write_text("some other repository's token")
    for containers in ([str(elsewhere)], [str(tmp_path / "missing")]):
        other = WriterSpec(
            containers,
            transport="auto",
            receiver=spec.receiver,
            container_token=spec.container_token,
            secret=spec.secret,
        )
        assert use_stream(other)
        w = JournalWriter.open(other)
        assert isinstance(w, StreamJournalWriter)
        w.append_batch(batch(3))
        w.seal()
    # Without a receiver, "auto" and "shared" write files; "socket" cannot be asked for.
    rrepo.stop_receiver()
    assert not use_stream(rrepo.writer_spec("auto"))
    with pytest.raises(BadInput, match="needs a journal receiver"):
        rrepo.writer_spec("socket")


def test_one_connection_may_carry_several_journals(rrepo):
    sock = _raw_client(rrepo.writer_spec("socket"))  # OPEN sent
    for part in range(3):
        payload = encoded(batch(5, partition=part))
        if part:
            sock.sendall(control_frame(Open(f"p{part}")))
        seal = control_frame(Seal(1, FRAME_HEADER.size + len(payload)))
        sock.sendall(frame_header(payload) + payload + seal)
        assert isinstance(read_control(sock), Ack)
    sock.close()
    assert len(journals_in(rrepo)) == 3
    assert rrepo.rollover() == 15


def test_transport_settings_are_checked():
    with pytest.raises(ConfigError, match="transport"):
        RepositoryConfig(transport="nfs")
    with pytest.raises(ConfigError, match="transport_port"):
        RepositoryConfig(transport_port=70000)
    assert RepositoryConfig.from_json(RepositoryConfig(transport="socket").to_json()).transport == (
        "socket"
    )


def test_each_receiver_start_writes_new_container_markers(tmp_path):
    cfg = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(tmp_path / "r", cfg) as repo:
        repo.start_receiver()
        first = repo.writer_spec("auto")
        repo.stop_receiver()
        assert not any(os.path.exists(os.path.join(c, MARKER_NAME)) for c in repo.containers)
        repo.start_receiver()
        second = repo.writer_spec("auto")
        assert first.container_token != second.container_token
        assert containers_visible(second) and not containers_visible(first)


def test_a_stream_error_is_a_journal_error():
    assert issubclass(StreamError, JournalError)
