"""kill -9 of a process in the middle of a rollover, at chosen points and at random moments.

After each crash the parent reopens the repository and checks invariants 2 and 3 exactly: every
sealed event is present once, ids committed before the crash are unchanged, ids are 1..N with no
gap, and no id is ever handed out twice, not even after the newest log is deleted by hand.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from _events import make_event
from _faults import child, files_under, lineage_batch, wait_for_line

from journals import JournalWriter, WriterSpec
from repository import ProvenanceRepository, RepositoryConfig
from repository.cli import main as cli

# Small blocks so a few thousand events make many of them; sync stays "seal" (the default).
CONFIG = RepositoryConfig(block_size="4KiB", rollover_interval=3600)


def open_repo(root: str) -> ProvenanceRepository:
    return ProvenanceRepository.open(root, start_threads=False)


def committed_repo(root: str) -> tuple[dict[int, int], WriterSpec]:
    """A repository with one committed log (rich events and a batch): (id -> record id, spec)."""
    with ProvenanceRepository.open(root, CONFIG, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(300)])
        repo.register_events(lineage_batch(range(10_000, 10_200), component="setup"))
        assert repo.rollover() == 500
        snapshot = {e.event_id: e.record_id for e in repo.get_events(1, 10_000)}
        return snapshot, repo.writer_spec()


def write_pending(spec: WriterSpec, base: int, journals: int = 4, rich: int = 150) -> list[int]:
    """Seal `journals` journals (rich events and a batch each); their record ids in merge order
    (journals by name, i.e. creation order; frames in file order)."""
    out: list[int] = []
    for j in range(journals):
        first = base + j * 100_000
        with JournalWriter.open(spec, tag="pending") as w:
            w.append([make_event(i) for i in range(first, first + rich)])
            batch = range(first + 50_000, first + 50_000 + 2 * rich)
            w.append(lineage_batch(batch, component=f"pending-{base}", partition=j))
        out += [*range(first, first + rich), *batch]
    return out


def high_water(root: str) -> int:
    with open(os.path.join(root, "state", "next_event_id"), encoding="ascii") as f:
        return int(f.read())


def check_recovered(root: str, before: dict[int, int], pending: list[int]) -> dict[int, int]:
    """Reopen after a crash and check the exact outcome; returns id -> record id of all events."""
    total = len(before) + len(pending)
    with open_repo(root) as repo:  # recovery, then the interrupted rollover redone
        events = repo.get_events(1, 10 * total)
        got = {e.event_id: e.record_id for e in events}
        assert [e.event_id for e in events] == list(range(1, total + 1))
        assert {i: got[i] for i in before} == before  # committed ids unchanged
        assert [got[i] for i in range(len(before) + 1, total + 1)] == pending
        assert repo.max_event_id == total
        assert high_water(root) == total + 1
        assert files_under(os.path.join(root, "logs"), ".tmp") == []
        assert files_under(os.path.join(root, "state"), ".tmp") == []
        assert [os.listdir(c) for c in repo.containers] == [[] for _ in repo.containers]
        assert not os.path.exists(os.path.join(root, "quarantine"))
        toc_names = files_under(os.path.join(root, "logs"), ".toc")
        assert [n[: -len(".toc")] + ".prov" for n in toc_names] == files_under(
            os.path.join(root, "logs"), ".prov"
        )
    assert cli(["verify", root]) == 0
    return got


def check_ids_never_reused(root: str, total: int) -> None:
    """Delete the newest log by hand: the ids it held must still never come back."""
    logs = os.path.join(root, "logs")
    newest = max(int(n[: -len(".prov")]) for n in os.listdir(logs) if n.endswith(".prov"))
    for suffix in (".prov", ".toc"):
        os.unlink(os.path.join(logs, f"{newest}{suffix}"))
    with open_repo(root) as repo:
        assert repo.max_event_id == total
        assert repo.get_event(total) is None
        repo.register_events([make_event(i) for i in range(900_000, 900_010)])
        assert repo.rollover() == 10
        got = repo.get_events(newest, 100)
        assert [e.event_id for e in got] == list(range(total + 1, total + 11))
        assert [e.record_id for e in got] == list(range(900_000, 900_010))
    with open_repo(root) as repo:
        assert repo.max_event_id == total + 10


def crash_rollover(root: str, point: str) -> None:
    proc = child("_crash_child.py", "rollover", root, point)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"child did not die at {point}: {out} {err}"


def _exists(root: str, name: str) -> bool:
    return os.path.exists(os.path.join(root, "logs", name))


@pytest.mark.parametrize(
    "point",
    [
        "mid-log",  # half the blocks of the log written
        "toc-half",  # log written, toc half written then death
        "before-log-rename",  # toc renamed into place, log still .prov.tmp
        "after-log-rename",  # committed, but the id high-water mark not yet raised
        "before-retire",  # committed and mark raised, no journal deleted yet
        "mid-retire",  # one journal deleted, the others not
    ],
)
def test_kill_rollover_at(tmp_path, point):
    root = str(tmp_path / "repo")
    before, spec = committed_repo(root)
    pending = write_pending(spec, 100_000)
    first = len(before) + 1
    crash_rollover(root, point)

    # The crash left what it should have at that point (so the seam really fired there).
    committed = point in ("after-log-rename", "before-retire", "mid-retire")
    assert _exists(root, f"{first}.prov") == committed
    assert _exists(root, f"{first}.toc") == (committed or point == "before-log-rename")
    assert _exists(root, f"{first}.prov.tmp") == (not committed)
    assert _exists(root, f"{first}.toc.tmp") == (point == "toc-half")
    left = sum(len(os.listdir(c)) for c in spec.containers)
    assert left == (3 if point == "mid-retire" else 4)
    assert high_water(root) == (first + len(pending) if point.endswith("retire") else first)

    total = len(check_recovered(root, before, pending))
    check_ids_never_reused(root, total)


def test_kill_rollover_at_random_moments(tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    root = str(tmp_path / "repo")
    before, spec = committed_repo(root)
    killed = 0
    # How long the child's rollover of a round's ~18k events takes varies with the machine's
    # load (~0.07 s idle): aim inside the last uncut rollover's duration, so that kills land
    # even on a fast machine, and go on for more rounds until at least two did.
    window = 0.1
    for round_ in range(12):
        pending = write_pending(spec, 1_000_000 * (round_ + 1), journals=6, rich=1_000)
        proc = child("_crash_child.py", "rollover", root, "none")
        wait_for_line(proc, "ready")
        t0 = time.monotonic()
        time.sleep(rng.uniform(0.0, window))
        proc.kill()
        out, _ = proc.communicate(timeout=60)
        if proc.returncode == -signal.SIGKILL and "done" not in out:
            killed += 1
        else:  # finished before the kill: it took less than we waited
            window = max(0.005, (time.monotonic() - t0) * 0.8)
        try:
            before = check_recovered(root, before, pending)
        except AssertionError as e:
            raise AssertionError(f"round {round_}, seed {seed}: {e}") from e
        if round_ >= 4 and killed >= 2:
            break
    assert killed >= 2, f"seed {seed}: only {killed} rollover children were killed mid-way"
