"""An owning process for the CLI tests: opens REPO (threads running), merges EVENTS events,
prints "owning <pid> <max id>", and holds the repository until its stdin closes.

    _owner_child.py REPO EVENTS
"""

from __future__ import annotations

import os
import sys

from _events import make_event

from repository import ProvenanceRepository, RepositoryConfig

if __name__ == "__main__":
    config = RepositoryConfig(rollover_interval=0.2, rollover_debounce=0.05)
    with ProvenanceRepository.open(sys.argv[1], config) as repo:
        repo.register_events([make_event(i) for i in range(int(sys.argv[2]))])
        repo.rollover()
        print(f"owning {os.getpid()} {repo.max_event_id}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin
    print("closed", flush=True)
