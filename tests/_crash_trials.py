"""Randomized kill -9 trials and the soak, shared by `bench/crash.py` (hundreds of kills, a
5-minute soak) and the test suite (a few of each).

Kinds of kill, each of a child process at a random moment (or just after a random one of the
moments that matter, announced by the child), then the repository is reopened and checked:

- `writer`: an owner that seals journals and rolls over in a loop (`_crash_child.py loop`).
- `index`: an owner inside an index commit (`_index_crash_child.py loop`).
- `ageoff`: an owner in an age-off pass (`_crash_child.py ageoff`).
- `spark`: a Spark Python worker in the middle of a captured task (attempt 0; Spark retries).

After each: every event whose seal (or rollover) was acknowledged is present exactly once
(or was aged off, oldest first), ids are unique, one-up and never reused, searches equal a
brute-force filter of the logs, and a Spark job's lineage is exactly one attempt's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _crash_child import loop_records
from _faults import child
from _search_data import brute

from repository import ProvenanceRepository, RepositoryConfig
from repository._ageoff import storage_bytes

TESTS = os.path.dirname(os.path.abspath(__file__))
SOAK_STRIDE = 10**8  # a soak writer's records: writer * SOAK_STRIDE + seq


@dataclass
class _Outcome:
    sealed: int = 0  # acknowledged events (or lineage records) checked
    lost: int = 0
    duplicated: int = 0
    problems: list[str] = field(default_factory=list)  # any other broken promise

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.problems)


@dataclass
class Tally(_Outcome):
    """What one kind of trial found: kills that hit, acknowledged events checked, and how
    many of those were lost or came back twice."""

    kind: str = ""
    kills: int = 0

    def line(self) -> str:
        return (
            f"{self.kind:<8} kills {self.kills:>4}  sealed events {self.sealed:>9,}  "
            f"lost {self.lost}  duplicated {self.duplicated}  problems {len(self.problems)}"
        )


# -- child processes ---------------------------------------------------------------------------


def _read_until(proc: subprocess.Popen, lines: list[str], prefix: str, count: int) -> bool:
    """Collect the child's lines until `count` of them started with `prefix`; False if the
    child ended first."""
    assert proc.stdout is not None
    seen = 0
    while seen < count:
        line = proc.stdout.readline()
        if not line:
            return False
        lines.append(line.strip())
        seen += line.startswith(prefix)
    return True


def _kill(proc: subprocess.Popen, lines: list[str], tally: Tally) -> bool:
    """SIGKILL the child, collect the rest of what it printed; True if the kill hit it."""
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    lines.extend(x.strip() for x in out.splitlines())
    if proc.returncode != -signal.SIGKILL:
        tally.problems.append(f"child ended by itself ({proc.returncode}): {err[-500:]}")
        return False
    tally.kills += 1
    return True


def _acks(lines: list[str], word: str) -> list[int]:
    return [int(x.split()[1]) for x in lines if x.startswith(word + " ")]


# -- checks ------------------------------------------------------------------------------------


@dataclass
class _History:
    """What earlier trials on one repository saw: event id -> (record, type), the highest id
    acknowledged, records acknowledged in merge order."""

    events: dict[int, tuple[int, str]] = field(default_factory=dict)
    max_id: int = 0
    acked: list[int] = field(default_factory=list)


def _check_reopened(
    root: str, history: _History, tally: Tally, aged_off: bool = False, unique: bool = True
) -> None:
    """Reopen (recovery, then the interrupted rollover) and check; `unique`: record ids name
    events (so a record twice is a duplicate)."""
    with ProvenanceRepository.open(root, start_threads=False) as repo:
        events = repo.get_events(1, 10**8)
        ids = [e.event_id for e in events]
        lo = ids[0] if ids else repo.max_event_id + 1
        if ids != list(range(lo, lo + len(ids))) or (not aged_off and lo != 1):
            tally.problems.append(f"{root}: event ids are not one-up from {lo}")
        if repo.max_event_id < history.max_id:
            tally.problems.append(f"{root}: max id {repo.max_event_id} < acked {history.max_id}")
        for e in events:
            seen = history.events.get(e.event_id)
            if seen is not None and seen != (e.record_id, e.event_type.value):
                tally.problems.append(f"{root}: event id {e.event_id} now names another event")
                break
        if not aged_off and len(events) < len(history.events):
            tally.problems.append(f"{root}: {len(history.events) - len(events)} events vanished")
        history.events.update({e.event_id: (e.record_id, e.event_type.value) for e in events})
        history.max_id = max(history.max_id, repo.max_event_id)

        present = Counter(e.record_id for e in events)
        if unique:
            tally.duplicated += sum(n - 1 for n in present.values() if n > 1)
        missing = [r for r in history.acked if r not in present]
        if aged_off:  # age-off deletes oldest first: only a prefix of the acked may be gone
            first = next((i for i, r in enumerate(history.acked) if r in present), None)
            gone = len(history.acked) if first is None else first
            missing = [r for r in history.acked[gone:] if r not in present]
            skipped = repo.export(1, 1).skipped
            # With no log left, export reports the gap once a later event proves it (it
            # cannot tell aged-off ids from ones a log not scanned yet holds): [] is right too.
            right = [[(1, lo)], []] if not events else [[(1, lo)]]
            if lo > 1 and skipped not in right:
                tally.problems.append(f"{root}: export from 1 skipped {skipped}, not [(1, {lo})]")
        tally.lost += len(missing)

        if not repo.wait_for_index(60):
            tally.problems.append(f"{root}: index did not catch up")
        for kwargs in ({"event_types": ["SEND"]}, {}):
            got = [e.event_id for e in repo.search(limit=10**7, newest_first=False, **kwargs)]
            want = brute(events, limit=10**7, newest_first=False, **kwargs)
            if got != want:
                tally.problems.append(f"{root}: search {kwargs} differs from the logs")
            tally.duplicated += len(got) - len(set(got))


# -- kinds -------------------------------------------------------------------------------------


def writer_trials(workdir: Path, trials: int, rng: random.Random, per_repo: int = 10) -> Tally:
    """Kill an owner that seals journals and rolls over in a loop, at random moments."""
    return _loop_trials("writer", workdir, trials, rng, per_repo, max_bytes=None)


def ageoff_trials(workdir: Path, trials: int, rng: random.Random, per_repo: int = 10) -> Tally:
    """Kill an owner just inside one of its age-off passes (it ages off after each rollover
    to a small size limit, so every pass deletes logs)."""
    return _loop_trials("ageoff", workdir, trials, rng, per_repo, max_bytes=40_000)


def _loop_trials(
    kind: str, workdir: Path, trials: int, rng: random.Random, per_repo: int, max_bytes
) -> Tally:
    tally = Tally(kind=kind)
    history = _History()
    root = ""
    for k in range(trials):
        if k % per_repo == 0:
            root = str(workdir / f"{kind}-{k // per_repo}")
            history = _History()
        base = (k + 1) * 1_000_000
        lines: list[str] = []
        if max_bytes is None:
            proc = child("_crash_child.py", "loop", root, str(base))
            ok = _read_until(proc, lines, "ready", 1)
            time.sleep(rng.uniform(0.0, 0.6))
        else:
            proc = child("_crash_child.py", "ageoff", root, str(base), str(max_bytes))
            ok = _read_until(proc, lines, "ageoff", rng.randrange(1, 5))
            time.sleep(rng.uniform(0.0, 0.004))  # a pass takes a few ms
        if not ok:
            _kill(proc, lines, tally)
            continue
        if not _kill(proc, lines, tally):
            continue
        acked = [r for j in _acks(lines, "sealed") for r in loop_records(base, j)]
        tally.sealed += len(acked)
        history.acked.extend(acked)
        history.max_id = max([history.max_id, *_acks(lines, "rolled")])
        _check_reopened(root, history, tally, aged_off=max_bytes is not None)
    return tally


def index_trials(workdir: Path, trials: int, rng: random.Random, per_repo: int = 10) -> Tally:
    """Kill an owner just inside one of its index commits (it rolls over and indexes in a
    loop, announcing each commit)."""
    tally = Tally(kind="index")
    history = _History()
    root = ""
    env = dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in range(trials):
        if k % per_repo == 0:
            root = str(workdir / f"index-{k // per_repo}")
            history = _History()
        lines: list[str] = []
        proc = child("_index_crash_child.py", root, "loop", env=env)
        # Just after a commit starts, or after Tantivy committed and before the checkpoint.
        moment = rng.choice(("commit", "manifest"))
        ok = _read_until(proc, lines, "ready", 1) and _read_until(
            proc, lines, moment, rng.randrange(1, 6)
        )
        if ok:
            time.sleep(rng.uniform(0.0, 0.005))
        if not _kill(proc, lines, tally) or not ok:
            continue
        filled = _acks(lines, "filled")
        if filled:
            tally.sealed += max(filled) - history.max_id
            history.max_id = max(filled)
        _check_reopened(root, history, tally, unique=False)  # fill() repeats record ids
        with ProvenanceRepository.open(root, read_only=True) as ro:
            with open(os.path.join(root, "index", "manifest.json"), encoding="utf-8") as f:
                checkpoint = json.load(f)["indexed_next_id"]
            if checkpoint != ro.max_event_id + 1:
                tally.problems.append(f"{root}: index checkpoint {checkpoint}, not all indexed")
    return tally


def spark_trials(spark, workdir: Path, trials: int, rng: random.Random) -> Tally:
    """Kill the Python worker running attempt 0 of a random task of a captured word count, at
    a random record, in its map or its reduce stage; Spark retries the task. The lineage
    must equal a run without the kill: per capture point and partition, the same records, of
    one attempt."""
    from operator import add

    from agent import LineageContext

    tally = Tally(kind="spark")
    text = workdir / "spark-words.txt"
    words = ["alpha", "beta", "gamma", "delta", "ERROR", "zeta", "eta", "theta"]
    lines = [
        " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(1 + i % 6)) for i in range(600)
    ]
    text.write_text("".join(x + "\n" for x in lines))
    want = Counter(w for x in lines for w in x.split())

    def run(root: Path, kill: tuple[str, int, int] | None) -> dict | None:
        config = RepositoryConfig(rollover_interval=3600)
        with ProvenanceRepository.open(root, config) as repo:
            lc = LineageContext(spark, repo)
            stage, part, at = kill or ("none", -1, -1)
            pairs = lc.textFile(str(text), 3).flatMap(str.split)
            pairs = pairs.map(_killer(part if stage == "map" else -1, at, pair=True))
            counts = pairs.reduceByKey(add, 3).map(_killer(part if stage == "reduce" else -1, at))
            got = dict(counts.collect())
            if got != want:
                tally.problems.append(f"{root}: word counts differ from vanilla")
            repo.rollover()
            batches = [
                (b.component_id, b.partition, b.attempt, b.count, b.component_type)
                for r in repo.logs()
                for b in r.toc.batches
                if b.run_id == lc.run_id and b.component_type != "lineage-run"
            ]
            # The traced inputs of one key are exactly the lines holding it.
            lin = counts.lineage().filter(lambda kv: kv[0] == "ERROR").go_back_all()
            if sorted(lin.collect()) != sorted(x for x in lines if "ERROR" in x.split()):
                tally.problems.append(f"{root}: the trace of ERROR differs from brute force")
        return {"batches": batches}

    reference = run(workdir / "spark-reference", None)
    assert reference is not None
    expected = Counter()
    keys = Counter()  # records of each reduce task (the post-shuffle capture point's)
    for comp, part, _attempt, count, ctype in reference["batches"]:
        expected[(comp, part)] += count
        if ctype == "reducer":
            keys[part] += count
    if sorted(keys) == [] or sum(keys.values()) != len(want):
        tally.problems.append(f"reference run: reduce-side records {dict(keys)}")
        return tally
    for k in range(trials):
        stage = rng.choice(("map", "reduce"))
        if stage == "map":  # some 700 words a partition
            part, at = rng.randrange(3), rng.randrange(1, 300)
        else:
            part = rng.choice(sorted(keys))
            at = rng.randrange(1, keys[part] + 1)
        got = run(workdir / f"spark-{k}", (stage, part, at))
        if got is None:
            continue
        stored: Counter = Counter()
        attempts: dict[tuple[str, int], set[int]] = {}
        for comp, p, attempt, count, _ in got["batches"]:
            stored[(comp, p)] += count
            attempts.setdefault((comp, p), set()).add(attempt)
        retried = [key for key, a in attempts.items() if key[1] == part and max(a) >= 1]
        if retried:
            tally.kills += 1
        else:
            tally.problems.append(f"trial {k}: no task of partition {part} was retried")
        for key in set(expected) | set(stored):
            tally.lost += max(0, expected[key] - stored[key])
            tally.duplicated += max(0, stored[key] - expected[key])
            if len(attempts.get(key, ())) > 1:
                tally.problems.append(f"trial {k}: {key} kept lineage of attempts {attempts[key]}")
        tally.sealed += sum(stored.values())
    return tally


def _killer(partition: int, at: int, pair: bool = False):
    """A map function that SIGKILLs its own Python worker at record `at` of attempt 0 of task
    `partition` (defined in a function: shipped to the workers by value)."""
    seen = [0]

    def f(x):
        if partition >= 0:
            from pyspark import TaskContext

            tc = TaskContext.get()
            if tc.attemptNumber() == 0 and tc.partitionId() == partition:
                seen[0] += 1
                if seen[0] == at:
                    os.kill(os.getpid(), signal.SIGKILL)
        return (x, 1) if pair else x

    return f


# -- the soak ----------------------------------------------------------------------------------


@dataclass
class SoakReport(_Outcome):
    seconds: float = 0.0
    writers: int = 0
    events: int = 0  # ids assigned
    aged_off: int = 0  # ids deleted by age-off (a prefix)
    exported: int = 0
    skipped: int = 0  # ids the export cursor was told were aged off
    searches: int = 0
    max_bytes: int = 0
    peak_bytes: int = 0

    def line(self) -> str:
        return (
            f"soak     {self.seconds:.0f} s, {self.writers} writers: sealed events "
            f"{self.sealed:,}, aged off {self.aged_off:,}, exported {self.exported:,}, "
            f"skipped {self.skipped:,}, searches {self.searches:,}, lost {self.lost}, "
            f"duplicated {self.duplicated}, problems {len(self.problems)}; "
            f"peak {self.peak_bytes / 1e6:.1f} MB of a {self.max_bytes / 1e6:.1f} MB cap"
        )


def soak(workdir: Path, seconds: float, writers: int = 4, max_bytes: int = 3_000_000) -> SoakReport:
    """`writers` processes seal journals while the owner rolls over, indexes and ages off to
    `max_bytes`, and a reader exports through a cursor and searches. Afterwards: nothing
    acknowledged is lost but what age-off removed (a prefix of the ids, oldest first); the
    cursor skipped exactly the removed ids it had not read; searches equal the logs."""
    rep = SoakReport(seconds=seconds, writers=writers, max_bytes=max_bytes)
    config = RepositoryConfig(
        rollover_interval=0.5, rollover_debounce=0.05, max_storage_bytes=max_bytes
    )
    root = str(workdir / "soak")
    repo = ProvenanceRepository.open(root, config)
    spec = json.dumps({"containers": repo.writer_spec().containers, "sync": "seal"})
    procs = [
        child("_crash_child.py", "soakwriter", spec, str(w), str(seconds)) for w in range(writers)
    ]
    exported: dict[int, int] = {}  # event id -> record
    skipped: set[int] = set()
    stop = threading.Event()

    def read_all() -> None:
        # A reader that naps now and then, so age-off overtakes it and the cursor must say
        # which ids it skipped.
        rng = random.Random(2)
        cursor = repo.cursor("soak")
        while True:
            if not stop.is_set() and rng.random() < 0.05:
                time.sleep(rng.uniform(0, max(1.0, seconds / 10)))
            batch = cursor.read(5000)
            got = [e.event_id for e in batch.events]
            holes = {i for lo, hi in batch.skipped for i in range(lo, hi)}
            if sorted(set(got) | holes) != list(range(batch.first_id, batch.next_id)):
                rep.problems.append(f"export from {batch.first_id}: ids {got[:3]}... with holes")
            for e in batch.events:
                if e.event_id in exported:
                    rep.duplicated += 1
                exported[e.event_id] = e.record_id
            skipped.update(holes)
            cursor.commit(batch)
            if not batch.events and not batch.skipped:
                if stop.is_set():
                    return
                time.sleep(0.05)

    def search_loop() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            t0 = time.time_ns() - rng.randrange(0, 10**10)
            t1 = t0 + rng.randrange(1, 10**10)
            got = repo.search(start=t0, end=t1, limit=rng.choice((10, 1000)))
            rep.searches += 1
            ids = [e.event_id for e in got]
            if len(ids) != len(set(ids)) or any(not t0 <= e.event_time_ns < t1 for e in got):
                rep.problems.append(f"search [{t0}, {t1}) returned duplicates or wrong times")
            rep.peak_bytes = max(rep.peak_bytes, storage_bytes(repo.layout))
            time.sleep(0.02)

    threads = [threading.Thread(target=f, daemon=True) for f in (read_all, search_loop)]
    for t in threads:
        t.start()
    acked: list[int] = []
    for w, p in enumerate(procs):
        out, err = p.communicate(timeout=seconds + 300)
        if p.returncode != 0:
            rep.problems.append(f"soak writer {w} failed: {err[-500:]}")
        for x in out.splitlines():
            if x.startswith("sealed "):
                lo, hi = (int(v) for v in x.split()[1:])
                acked.extend(range(w * SOAK_STRIDE + lo, w * SOAK_STRIDE + hi))
    repo.rollover()
    stop.set()
    for t in threads:
        t.join(timeout=300)
    rep.sealed = len(acked)
    surviving = repo.get_events(1, 10**8)
    ids = [e.event_id for e in surviving]
    first = ids[0] if ids else repo.max_event_id + 1
    rep.events = repo.max_event_id
    rep.aged_off = first - 1
    rep.exported, rep.skipped = len(exported), len(skipped)
    if ids != list(range(first, repo.max_event_id + 1)):
        rep.problems.append("surviving ids are not the newest, one-up: age-off not oldest first")
    if skipped & set(ids) or max(skipped, default=0) >= first:
        rep.problems.append("the cursor skipped ids that were not aged off")
    if set(exported) | skipped != set(range(1, repo.max_event_id + 1)) or set(exported) & skipped:
        rep.problems.append("the cursor's exported and skipped ids do not partition 1..N")
    records = dict(exported)
    for e in surviving:
        if records.setdefault(e.event_id, e.record_id) != e.record_id:
            rep.problems.append(f"event id {e.event_id} names two events")
    seen = Counter(records.values())
    rep.duplicated += sum(n - 1 for n in seen.values() if n > 1)
    missing = len(set(acked) - set(seen))
    rep.lost = max(0, missing - len(skipped))  # only what age-off removed unread may miss
    if repo.max_event_id != len(acked):
        rep.problems.append(f"{repo.max_event_id} ids for {len(acked)} acknowledged events")
    if not repo.wait_for_index(120):
        rep.problems.append("index did not catch up")
    got = [e.event_id for e in repo.search(limit=10**7, newest_first=False)]
    if got != brute(surviving, limit=10**7, newest_first=False):
        rep.problems.append("a search of everything differs from the logs")
    repo.close()
    return rep
