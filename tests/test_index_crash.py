"""kill -9 inside an index commit, then reopen: search results are exact, with no duplicates.

The manifest (the checkpoint) is written after the Tantivy commit; a crash between the two
leaves documents past the checkpoint, which the next open deletes and adds again in one commit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import tantivy
from _search_data import BASE, HOUR, brute

from repository import ProvenanceRepository

TESTS = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(TESTS, "_index_crash_child.py")


def run_child(repo: str, point: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, CHILD, repo, point],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def manifest(repo: str) -> dict:
    with open(os.path.join(repo, "index", "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def docs_past_checkpoint(repo: str) -> int:
    """Span documents in any shard directory for logs at or past the checkpoint."""
    root = os.path.join(repo, "index")
    checkpoint = manifest(repo)["indexed_next_id"]
    n = 0
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            continue
        index = tantivy.Index.open(path)
        q = tantivy.Query.range_query(
            index.schema, "log", tantivy.FieldType.Integer, checkpoint, None
        )
        n += index.searcher().search(q, 1).count
    return n


def assert_exact(repo_path: str) -> None:
    with ProvenanceRepository.open(repo_path, start_threads=False) as repo:
        events = repo.get_events(1, 1_000_000)
        got = [e.event_id for e in repo.search(limit=1_000_000)]
        assert len(got) == len(set(got)), "duplicate search results"
        assert got == brute(events, limit=1_000_000)
        checks = [
            ({"event_types": ["FAIL", "JOIN"]}, None, None),
            (
                {"start": BASE + HOUR // 2, "end": BASE + 2 * HOUR, "newest_first": False},
                None,
                None,
            ),
            (
                {},
                "attrs.host:w1 AND NOT run:run-a",
                lambda e: e.attributes.get("host") == "w1" and e.run_id != "run-a",
            ),
        ]
        for kwargs, query, test in checks:
            got = repo.search(query=query, limit=100_000, **kwargs)
            assert [e.event_id for e in got] == brute(events, test=test, limit=100_000, **kwargs)
        st = repo.stats()
        assert st.events_not_indexed == 0
        assert manifest(repo_path)["indexed_next_id"] == repo.max_event_id + 1


@pytest.mark.parametrize("point", ["manifest", "new-shard", "before-commit"])
def test_kill_inside_index_commit(tmp_path, point):
    repo = str(tmp_path / "repo")
    r = run_child(repo, point)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert "armed" in r.stdout and "survived" not in r.stdout
    shards_before = {s["name"] for s in manifest(repo)["shards"]}
    on_disk = {n for n in os.listdir(os.path.join(repo, "index")) if n != "manifest.json"}
    if point == "manifest":
        assert docs_past_checkpoint(repo) > 0  # the crash left what recovery must redo
    if point == "new-shard":
        assert on_disk - shards_before  # a shard the manifest never heard of
    assert_exact(repo)
    after = {s["name"] for s in manifest(repo)["shards"]}
    assert after == {n for n in os.listdir(os.path.join(repo, "index")) if n != "manifest.json"}


def test_kill_at_random_moments_while_indexing(tmp_path):
    repo = str(tmp_path / "repo")
    rng = random.Random(5)
    env = dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for _ in range(3):
        p = subprocess.Popen(
            [sys.executable, CHILD, repo, "loop"], stdout=subprocess.PIPE, text=True, env=env
        )
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        p.kill()
        p.wait()
        assert_exact(repo)
