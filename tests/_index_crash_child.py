"""Child process for the index crash tests: it SIGKILLs itself inside an index commit.

    python _index_crash_child.py REPO POINT

POINT: `manifest` (Tantivy committed, manifest not written), `new-shard` (the same, in a shard
created by that commit), `before-commit` (documents added, nothing committed), or `loop`
(roll over and index forever, until the parent kills it at a random moment; it prints
"commit" as each index commit starts, "manifest" before its checkpoint is written, and
"filled N" once events 1..N are merged).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from _search_data import fill

import indexer._shards as shards_mod
from repository import ProvenanceRepository, RepositoryConfig

CONFIG = RepositoryConfig(rollover_interval=3600, block_size="4KiB", indexed_attributes=("host",))


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def say(line: str) -> None:
    """One line in one write: the index thread and the main thread both announce."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(repo_path: str, point: str) -> None:
    threaded = point == "loop"
    repo = ProvenanceRepository.open(repo_path, CONFIG, start_threads=threaded)
    if point == "new-shard":
        repo._index.shards.shard_size = 1  # each commit fills its shard: the next one is new
    fill(repo, seed=1, rollovers=2, late=False)
    if point == "loop":
        print("ready", flush=True)
        real_commit, real_save = shards_mod.ShardSet.commit, shards_mod.ShardSet._save_manifest

        def announced_commit(self, *args, **kwargs):
            say("commit")  # so a parent can aim its kill inside one
            return real_commit(self, *args, **kwargs)

        def announced_save(self, *args, **kwargs):
            # Tantivy has committed, the checkpoint is not written yet: the window recovery
            # exists for. A slow disk here (5 ms) gives a parent's kill a chance to land in it.
            say("manifest")
            time.sleep(0.005)
            return real_save(self, *args, **kwargs)

        shards_mod.ShardSet.commit = announced_commit
        shards_mod.ShardSet._save_manifest = announced_save
        k = 0
        while True:
            fill(repo, seed=100 + k, rollovers=1, late=False)
            say(f"filled {repo.max_event_id}")  # merged: acknowledged
            k += 1
    repo.wait_for_index(10)
    save, commit = shards_mod.ShardSet._save_manifest, shards_mod.ShardSet.commit

    def dying_save(self, m):
        die()

    def dying_commit(self):
        die()

    if point in ("manifest", "new-shard"):
        shards_mod.ShardSet._save_manifest = dying_save
    elif point == "before-commit":
        shards_mod.ShardSet.commit = dying_commit
    print("armed", flush=True)
    fill(repo, seed=2, rollovers=1, late=False)  # its rollover listener indexes, inline: dies
    shards_mod.ShardSet._save_manifest, shards_mod.ShardSet.commit = save, commit
    print("survived", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
