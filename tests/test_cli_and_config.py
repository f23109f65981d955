"""Bad configuration and bad command lines: a clear one-line error, exit code 2, no traceback,
nothing stored changed. Read-only commands beside a live owner; export cursors across reopens."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _events import make_event
from _faults import TESTS, tree_hash, wait_for_line

from repository import (
    ConfigError,
    ProvenanceRepository,
    RepositoryConfig,
    RepositoryLocked,
)
from repository.cli import main as cli

PROVREPO = os.path.join(os.path.dirname(sys.executable), "provrepo")

BAD_CONFIG = [
    ("containers", []),
    ("containers", ["a", "a"]),
    ("containers", [""]),
    ("containers", 5),
    ("journals_per_container", 0),
    ("journals_per_container", 65),
    ("journals_per_container", "2"),
    ("journals_per_container", True),
    ("rollover_interval", "soon"),
    ("rollover_interval", 0),
    ("rollover_interval", -3),
    ("rollover_interval", float("inf")),
    ("rollover_interval", float("nan")),
    ("rollover_debounce", "-1s"),
    ("block_size", "1KiB"),
    ("block_size", "1GiB"),
    ("block_size", "sixty"),
    ("block_size", float("inf")),
    ("block_size", "9" * 400),
    ("zstd_level", 0),
    ("zstd_level", 23),
    ("zstd_level", 3.0),
    ("max_storage_time", 0),
    ("max_storage_time", "forever"),
    ("max_storage_time", float("inf")),
    ("max_storage_bytes", 0),
    ("max_storage_bytes", "lots"),
    ("sync", "always"),
    ("sync", None),
    ("indexed_attributes", ["1bad"]),
    ("indexed_attributes", [5]),
    ("indexed_attributes", 5),
    ("index_shard_size", "1KiB"),
    ("compression_threads", 0),
]


@pytest.mark.parametrize(
    ("field", "value"), BAD_CONFIG, ids=[f"{f}={v!r}"[:40] for f, v in BAD_CONFIG]
)
def test_bad_config_value_names_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        RepositoryConfig(**{field: value})


def test_good_config_values_parse():
    c = RepositoryConfig(rollover_interval="15m", block_size="128KiB", max_storage_bytes="10GB")
    assert (c.rollover_interval, c.block_size, c.max_storage_bytes) == (900.0, 131072, 10**10)
    assert RepositoryConfig.from_json(c.to_json()) == c


@pytest.fixture
def stored(tmp_path) -> str:
    """A repository holding 50 committed events, closed."""
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, RepositoryConfig(sync="none")) as repo:
        repo.register_events([make_event(i) for i in range(50)])
        assert repo.rollover() == 50
    return root


DAMAGED_JSON = [
    (b"", "not valid JSON"),
    (b'{"containers": [', "not valid JSON"),
    (b"\xff\xfe\x00\x01garbage", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"colour": "blue"}', "unknown configuration key"),
    (b'{"block_size": "huge"}', "block_size: "),
    (b'{"rollover_interval": Infinity}', "rollover_interval: "),
    (b'{"containers": 7}', "containers: "),
]


@pytest.mark.parametrize(("content", "message"), DAMAGED_JSON)
def test_damaged_repository_json(stored, capsys, content, message):
    path = os.path.join(stored, "repository.json")
    with open(path, "wb") as f:
        f.write(content)
    before = tree_hash(stored)
    before_but_lock = tree_hash(stored, ignore=("owner.lock",))
    capsys.readouterr()
    assert cli(["stats", stored]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err
    assert err.startswith("provrepo: error: ") and "Traceback" not in err
    with pytest.raises(ConfigError):
        ProvenanceRepository.open(stored, read_only=True)
    assert tree_hash(stored) == before
    with pytest.raises(ConfigError, match=message):
        ProvenanceRepository.open(stored)  # the owner refuses too, and lets go of the lock
    # Taking the lock wrote our pid into owner.lock; nothing else may have changed.
    assert tree_hash(stored, ignore=("owner.lock",)) == before_but_lock
    with open(path, "wb") as f:
        f.write(json.dumps(RepositoryConfig(sync="none").to_json()).encode())
    with ProvenanceRepository.open(stored) as repo:  # and it was free: not locked by the failure
        assert repo.max_event_id == 50


def bad_argvs(repo: str, missing: str) -> list[list[str]]:
    return [
        [],
        ["nosuch", repo],
        ["events"],
        ["events", repo, "--from-id", "0"],
        ["events", repo, "--from-id", "x"],
        ["events", repo, "--limit", "-1"],
        ["events", repo, "--bogus"],
        ["events", repo, "extra"],
        ["event", repo],
        ["event", repo, "abc"],
        ["event", repo, "0"],
        ["event", repo, "51"],  # unknown id
        ["event", repo, str(10**30)],
        ["stats", missing],
        ["stats", os.path.join(repo, "repository.json")],  # a file, not a repository
        ["verify", missing],
        ["events", missing],
        ["event", missing, "1"],
    ]


def test_bad_arguments_exit_2_and_change_nothing(stored, tmp_path, capsys):
    missing = str(tmp_path / "no-such-repo")
    before = tree_hash(stored)
    for argv in bad_argvs(stored, missing):
        capsys.readouterr()
        assert cli(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "", argv
        assert err.startswith("provrepo: error: ") and err.count("\n") == 1, (argv, err)
        assert "Traceback" not in err and "provrepo:" not in err[len("provrepo: error: ") :]
    assert "no event with id 51" in (cli(["event", stored, "51"]), capsys.readouterr()[1])[1]
    assert tree_hash(stored) == before
    assert not os.path.exists(missing)  # a read never creates a repository


def test_good_arguments(stored, capsys):
    capsys.readouterr()
    assert cli(["events", stored, "--from-id", "3", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["event_id"] for x in lines] == [3, 4]
    assert [json.loads(x)["record_id"] for x in lines] == [2, 3]
    assert cli(["stats", stored, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["events"], stats["max_event_id"], stats["owner"]) == (50, 50, None)


def test_real_command_line(stored, tmp_path):
    before = tree_hash(stored)
    for argv, message in [
        (["event", stored, "999"], "no event with id 999"),
        (["stats", str(tmp_path / "nowhere")], "no provenance repository"),
        (["events", stored, "--limit", "many"], "'many' is not an integer"),
    ]:
        run = subprocess.run([PROVREPO, *argv], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2, run
        assert run.stdout == "" and run.stderr.count("\n") == 1 and message in run.stderr, run
        assert "Traceback" not in run.stderr
    assert tree_hash(stored) == before


def test_read_only_commands_beside_a_live_owner(tmp_path, capsys):
    root = str(tmp_path / "repo")
    owner = subprocess.Popen(
        [sys.executable, os.path.join(TESTS, "_owner_child.py"), root, "200"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, pid, max_id = wait_for_line(owner, "owning").split()
        assert (int(pid), int(max_id)) == (owner.pid, 200)
        capsys.readouterr()
        assert cli(["stats", root]) == 0
        out = capsys.readouterr().out
        assert f"pid {owner.pid} " in out and "200 (200 rich" in out
        assert cli(["events", root, "--from-id", "198", "--limit", "10"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [json.loads(x)["event_id"] for x in lines] == [198, 199, 200]
        assert cli(["event", root, "7"]) == 0
        assert json.loads(capsys.readouterr().out)["record_id"] == 6
        assert cli(["verify", root]) == 0
        assert capsys.readouterr().out.startswith("ok: 1 logs")
        with pytest.raises(RepositoryLocked, match=rf"pid {owner.pid} "):
            ProvenanceRepository.open(root)
        assert cli(["event", root, "201"]) == 2  # read-only: sees what the owner committed
    finally:
        out, err = owner.communicate(input="", timeout=60)  # EOF on its stdin: it closes
    assert owner.returncode == 0, err
    assert out.strip() == "closed"
    with ProvenanceRepository.open(root, start_threads=False) as repo:  # free again
        assert repo.max_event_id == 200


def test_export_cursor_resumes_exactly_after_reopen(tmp_path, config):
    root = str(tmp_path / "repo")
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        repo.register_events([make_event(i) for i in range(250)])
        repo.rollover()
        cur = repo.cursor("export")
        first = cur.read(100)
        assert [e.event_id for e in first.events] == list(range(1, 101))
        cur.commit(first)
        unstored = cur.read(100)  # read, but the consumer dies before storing it
        assert [e.event_id for e in unstored.events] == list(range(101, 201))
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        cur = repo.cursor("export")
        assert cur.position == 101
        again = cur.read(100)
        assert [e.event_id for e in again.events] == list(range(101, 201))
        assert [e.record_id for e in again.events] == list(range(100, 200))
        cur.commit(again)
        rest = cur.read(100)
        assert [e.event_id for e in rest.events] == list(range(201, 251))
        cur.commit(rest)
        empty = cur.read(100)
        assert (empty.events, empty.next_id, empty.skipped) == ([], 251, [])
        cur.commit(empty)
        repo.register_events([make_event(i) for i in range(1000, 1010)])
        repo.rollover()
        assert repo.cursor("other").position == 1  # cursors are independent
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        cur = repo.cursor("export")
        assert cur.position == 251
        late = cur.read(100)
        assert [(e.event_id, e.record_id) for e in late.events] == [
            (251 + k, 1000 + k) for k in range(10)
        ]
        cur.commit(late)
        with pytest.raises(ValueError, match="cannot move back"):
            cur.commit(5)
    with ProvenanceRepository.open(root, config, start_threads=False) as repo:
        assert repo.cursor("export").position == 261
