"""Child process for the index crash tests: it SIGKILLs itself inside an index commit.

    python _index_crash_child.py REPO POINT

POINT: `manifest` (Tantivy committed, manifest not written), `new-shard` (the same, in a shard
created by that commit), `before-commit` (documents added, nothing committed), or `loop`
(roll over and index forever, until the parent kills it at a random moment).
"""

from __future__ import annotations

import os
import signal
import sys

from _search_data import fill

import indexer._shards as shards_mod
from repository import ProvenanceRepository, RepositoryConfig

CONFIG = RepositoryConfig(rollover_interval=3600, block_size="4KiB", indexed_attributes=("host",))


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(repo_path: str, point: str) -> None:
    threaded = point == "loop"
    repo = ProvenanceRepository.open(repo_path, CONFIG, start_threads=threaded)
    if point == "new-shard":
        repo._index.shards.shard_size = 1  # each commit fills its shard: the next one is new
    fill(repo, seed=1, rollovers=2, late=False)
    if point == "loop":
        print("ready", flush=True)
        k = 0
        while True:
            fill(repo, seed=100 + k, rollovers=1, late=False)
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
