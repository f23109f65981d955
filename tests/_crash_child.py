"""Child processes for the crash tests: they are killed with SIGKILL, by the parent or by
themselves at a chosen point, so nothing here ever cleans up.

    writer CONTAINERS_JSON WRITER JOURNALS   seal JOURNALS journals, then append to one more forever
    rollover REPO POINT                       open REPO as owner (which rolls over), dying at POINT
    loop REPO BASE                            as owner: seal journals, roll over every 3rd, forever
    ageoff REPO BASE MAX_BYTES                the same, and an age-off pass after every rollover
    soakwriter SPEC_JSON WRITER SECONDS       seal journals of WRITER's records until SECONDS pass

Acknowledgements go to stdout once what they name is durable: "sealed J" (journal J's
records, `loop_records`), "rolled N" (events 1..N merged), "ageoff" (a pass starts).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from _events import make_event
from _faults import lineage_batch

from journals import JournalWriter, WriterSpec


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def writer_records(writer: int, journal: int) -> tuple[list[int], list[int]]:
    """(rich record ids, batch record ids) of one sealed journal of one writer child."""
    base = writer * 1_000_000 + journal * 1_000
    return list(range(base, base + 40)), list(range(base + 500, base + 500 + 60))


def loop_records(base: int, journal: int) -> list[int]:
    """Record ids of journal `journal` of a loop child, in append (and so merge) order: 30
    rich events, a lineage batch of 50 records, then 20 rich events."""
    first = base + journal * 100
    return list(range(first, first + 100))


def append_loop_journal(w: JournalWriter, base: int, journal: int) -> None:
    ids = loop_records(base, journal)
    w.append([make_event(i) for i in ids[:30]])
    w.append(lineage_batch(ids[30:80], partition=journal))
    w.append([make_event(i) for i in ids[80:]])


def run_loop(repo_path: str, base: int, max_bytes: int | None = None) -> None:
    """Own the repository; seal journals, roll over every third one, forever (until killed).
    With `max_bytes`, an age-off pass to that size follows each rollover."""
    from repository import ProvenanceRepository, RepositoryConfig

    config = RepositoryConfig(rollover_interval=3600, block_size="4KiB")
    repo = ProvenanceRepository.open(repo_path, config, start_threads=False)
    spec = repo.writer_spec()
    print("ready", flush=True)
    j = 0
    while True:
        w = JournalWriter.open(spec, tag="loop")
        append_loop_journal(w, base, j)
        w.seal()
        print(f"sealed {j}", flush=True)
        j += 1
        if j % 3 == 0:
            repo.rollover()
            print(f"rolled {repo.max_event_id}", flush=True)
            if max_bytes is not None:
                print("ageoff", flush=True)
                repo.age_off(max_bytes=max_bytes)


def run_soak_writer(spec: WriterSpec, writer: int, seconds: float) -> None:
    """Seal journals of 100-500 events until `seconds` pass; "sealed LO HI" after each (its
    records are writer * 10**8 + [LO, HI))."""
    import random

    rng = random.Random(writer)
    deadline = time.monotonic() + seconds
    seq = 0
    while time.monotonic() < deadline:
        n = rng.randrange(100, 500)
        base = writer * 10**8
        with JournalWriter.open(spec, tag=f"soak{writer}") as w:
            for lo in range(seq, seq + n, 100):
                w.append([make_event(base + i) for i in range(lo, min(seq + n, lo + 100))])
        print(f"sealed {seq} {seq + n}", flush=True)
        seq += n
        time.sleep(rng.uniform(0.05, 0.2))  # ~1-2k events/s a writer: a soak, not a flood
    print("done", flush=True)


def run_writer(containers: list[str], writer: int, journals: int) -> None:
    spec = WriterSpec(containers, sync="seal")
    for j in range(journals):
        rich, batch = writer_records(writer, j)
        with JournalWriter.open(spec, tag=f"w{writer}") as w:
            w.append([make_event(i) for i in rich[:20]])
            w.append(lineage_batch(batch, partition=writer * 100 + j))
            w.append([make_event(i) for i in rich[20:]])
    w = JournalWriter.open(spec, tag=f"w{writer}-unsealed")
    base = writer * 1_000_000 + 900_000
    k, first = 0, True
    while True:  # until killed: frames reach the disk in buffer-sized (torn) pieces
        w.append([make_event(base + k + i) for i in range(100)])
        w.append(lineage_batch(range(base + k, base + k + 1000), partition=999))
        if first:
            w._file.flush()
            print("appending", flush=True)
            first = False
        # Ids stay in writer * 1M + [900k, 1M) however long the parent takes to kill us
        # (the test tells unsealed records by that range).
        k = (k + 1000) % 100_000
        time.sleep(0.002)  # a few MB/s: the parent has time to look before the disk fills


class _KillingOs:
    """`os` for repository._eventlog, dying around the rename of the log (the commit point)."""

    def __init__(self, after: bool) -> None:
        self._after = after

    def __getattr__(self, name: str):
        return getattr(os, name)

    def rename(self, src: str, dst: str) -> None:
        if src.endswith(".prov.tmp"):
            if self._after:
                os.rename(src, dst)
            die()
        os.rename(src, dst)


class _HalfFile:
    """A file that writes half of what it is given, makes it durable, and dies."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "wb")  # noqa: SIM115 - the process dies holding it

    def __enter__(self) -> _HalfFile:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def write(self, data: bytes) -> None:
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        os.fsync(self._f.fileno())
        die()


class _ForwardOs:
    """`os` for repository.lineage._forward: dies instead of putting the forward index in
    place, or puts a torn one (half its bytes) in place and dies."""

    def __init__(self, torn: bool) -> None:
        self._torn = torn

    def __getattr__(self, name: str):
        return getattr(os, name)

    def replace(self, src: str, dst: str) -> None:
        if src.endswith(".fwd.tmp"):
            if self._torn:
                os.truncate(src, os.path.getsize(src) // 2)
                os.replace(src, dst)
            die()
        os.replace(src, dst)


def install(point: str) -> None:
    import repository._eventlog as eventlog
    import repository._rollover as rollover
    import repository.lineage._forward as forward
    from repository._rollover import retire_journals

    if point in ("before-forward-rename", "forward-torn"):
        forward.os = _ForwardOs(torn=point == "forward-torn")
    elif point in ("before-log-rename", "after-log-rename"):
        eventlog.os = _KillingOs(after=point == "after-log-rename")
    elif point == "toc-half":

        def opener(path, mode="r", *args, **kw):
            if str(path).endswith(".toc.tmp"):
                return _HalfFile(path)
            return open(path, mode, *args, **kw)

        eventlog.open = opener
    elif point == "mid-log":
        real = eventlog.LogWriter._drain_one
        calls = []

        def drain(self) -> None:
            real(self)
            calls.append(1)
            if len(calls) == 2:
                self._file.flush()
                die()

        eventlog.LogWriter._drain_one = drain
    elif point == "before-retire":
        rollover.retire_journals = lambda *a, **k: die()
    elif point == "mid-retire":

        def retire(layout, journals, damaged, sync) -> None:
            retire_journals(layout, journals[:1], damaged, sync)
            die()

        rollover.retire_journals = retire
    elif point != "none":
        raise SystemExit(f"unknown crash point {point}")


def run_rollover(repo: str, point: str) -> None:
    from repository import ProvenanceRepository

    install(point)
    print("ready", flush=True)
    r = ProvenanceRepository.open(repo, start_threads=False)  # rolls over pending journals
    print(f"done {r.max_event_id}", flush=True)
    r.close()


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        run_writer(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "rollover":
        run_rollover(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "loop":
        run_loop(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "ageoff":
        run_loop(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "soakwriter":
        run_soak_writer(WriterSpec(**json.loads(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]}")
