"""Crash trials at scale: randomized kill -9, then reopen and check; and a soak.

    .venv/bin/python bench/crash.py                      # 210 kills and a 5-minute soak
    .venv/bin/python bench/crash.py --kills 5 --soak 20  # a quick run
    .venv/bin/python bench/crash.py --only writer,spark --kills 20

Kinds of kill (each of a fresh child process, at a random moment or just inside a random one
of the moments that matter): `writer` an owner that seals journals and rolls over in a loop;
`index` an owner inside an index commit; `ageoff` an owner in an age-off pass; `spark` a
Spark Python worker in the middle of a captured task (attempt 0 of a random task, at a
random record; Spark retries it). After each kill the repository is reopened and checked:
every acknowledged event present exactly once (or aged off, oldest first), ids one-up and
never reused, searches equal to a brute-force filter of the logs, a Spark job's lineage
exactly one attempt's (equal to a run without the kill).

The soak: writer processes seal journals while the owner rolls over, indexes and ages off to
a small size cap, and a reader exports through a cursor and searches; at the end nothing
acknowledged is lost but what age-off removed (a prefix of the ids), and the cursor skipped
exactly the removed ids it had not read.

Prints kills, acknowledged ("sealed") events, lost and duplicated per kind; exit 1 if any
trial broke a promise. The trial code is `tests/_crash_trials.py` (the test suite runs a few
of each); the children are the crash tests' (`tests/_crash_child.py`,
`tests/_index_crash_child.py`).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import local_spark

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

KINDS = ("writer", "index", "ageoff", "spark")
DEFAULT_KILLS = {"writer": 60, "index": 50, "ageoff": 50, "spark": 50}


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in (*KINDS, "soak")]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"choose from {', '.join((*KINDS, 'soak'))}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--kills",
        type=int,
        default=None,
        help="kills of each kind (default: writer 60, index 50, ageoff 50, spark 50)",
    )
    p.add_argument("--soak", type=float, default=300.0, help="soak seconds (default 300; 0: none)")
    p.add_argument("--soak-writers", type=int, default=4, help="default 4")
    p.add_argument("--soak-cap", type=int, default=3_000_000, help="soak size cap, bytes (3 MB)")
    p.add_argument("--only", type=_kinds, default=None, help="e.g. writer,spark or soak")
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = p.parse_args(argv)
    if (args.kills or 0) < 0 or args.soak < 0 or args.soak_writers < 1 or args.soak_cap < 1:
        p.error("--kills and --soak must not be negative, --soak-writers and --soak-cap positive")

    from _crash_trials import ageoff_trials, index_trials, soak, spark_trials, writer_trials

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    kinds = args.only or [*KINDS, "soak"]
    print(f"seed {seed}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    work = Path(args.dir or tempfile.mkdtemp(prefix="provrepo-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    total = 0
    try:
        for kind in KINDS:
            if kind not in kinds:
                continue
            n = DEFAULT_KILLS[kind] if args.kills is None else args.kills
            if n == 0:
                continue
            rng = random.Random(f"{seed}-{kind}")
            started = time.perf_counter()
            where = work / kind
            where.mkdir(exist_ok=True)
            if kind == "spark":
                # local[2, 4]: a failed task is retried; the killed workers' failures are
                # expected, so Spark's own log stays off.
                spark = local_spark("provrepo-crash", "local[2,4]", "OFF")
                try:
                    tally = spark_trials(spark, where, n, rng)
                finally:
                    spark.stop()
            else:
                trial = {"writer": writer_trials, "index": index_trials, "ageoff": ageoff_trials}
                tally = trial[kind](where, n, rng)
            total += tally.kills
            print(f"{tally.line()}  ({time.perf_counter() - started:.0f} s)", flush=True)
            for problem in tally.problems[:10]:
                print(f"    {problem}")
            failed |= not tally.ok
        if total:
            print(f"kills in all: {total}")
        if "soak" in kinds and args.soak > 0:
            where = work / "soak"
            where.mkdir(exist_ok=True)
            rep = soak(where, args.soak, args.soak_writers, args.soak_cap)
            print(rep.line(), flush=True)
            for problem in rep.problems[:10]:
                print(f"    {problem}")
            failed |= not rep.ok
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("FAILED: a promise was broken (see above)" if failed else "every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
