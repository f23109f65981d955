"""Child process for the export resume tests: `provrepo export` in small chunks, killed with
SIGKILL by itself at a chosen point, or by the parent at a random moment.

    _export_child.py REPO OUT POINT [CHUNK [SEGMENT]]

POINT: rename:N (die right after the N-th file of a chunk is renamed into place, before the
cursor moves), commit:N (die right after the N-th cursor move), slow (no fault; a pause after
each chunk so the parent can kill it anywhere), none. SEGMENT (0: the default): events
files of about that many rows, written in row groups of 64 (rich events parsed 50 at a
time).
"""

from __future__ import annotations

import os
import signal
import sys
import time

CHUNK = 1000  # ids per chunk: the test repository holds ~8,000


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingOs:
    def __init__(self, after: int) -> None:
        self._after = after
        self._n = 0

    def __getattr__(self, name: str):
        return getattr(os, name)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)
        if os.path.basename(dst).startswith("part-"):
            self._n += 1
            if self._n == self._after:
                die()


def install(point: str) -> None:
    import repository._tableexport as tx

    kind, _, n = point.partition(":")
    if kind == "rename":
        tx.os = _KillingOs(int(n))  # type: ignore[assignment]
    elif kind in ("commit", "slow"):
        real = tx._save_state
        calls: list[int] = []

        def save(path, state) -> None:
            real(path, state)
            calls.append(1)
            if kind == "slow":
                time.sleep(0.05)
            elif len(calls) == int(n) + 1:  # the first save only creates the cursor
                die()

        tx._save_state = save  # type: ignore[assignment]
    elif point != "none":
        raise SystemExit(f"unknown point {point}")


if __name__ == "__main__":
    from repository import ProvenanceRepository

    install(sys.argv[3])
    with ProvenanceRepository.open(sys.argv[1], read_only=True) as repo:
        print("ready", flush=True)
        chunk = int(sys.argv[4]) if len(sys.argv) > 4 else CHUNK
        if len(sys.argv) > 5 and int(sys.argv[5]):
            import repository._tableexport as tx

            tx.SEGMENT_ROWS, tx.ROW_GROUP_ROWS, tx._RICH_GROUP = int(sys.argv[5]), 64, 50
        repo.export_parquet(sys.argv[2], chunk_events=chunk)
    print("done", flush=True)
