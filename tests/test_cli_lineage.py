"""`provrepo runs / trace / culprits` on a real captured run, checked against brute force, and
`provrepo demo` end to end (the README's first command)."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys

import numpy as np
import pytest

from agent import LineageContext
from journals import unpack_record_ids
from repository.cli import main as cli

pytestmark = pytest.mark.spark

LINES = [
    f"{i} {'alpha beta' if i % 3 else 'beta gamma'} {'oops' if i == 7 else ''}" for i in range(30)
]


@pytest.fixture
def run(lc, tmp_path):
    """A skip-policy word count over a text file (line 7 raises); returns (lc, path, counts)."""
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n")
    skipping = LineageContext(lc.sc, lc.repo, on_error="skip")

    def words(line: str) -> list[str]:
        if "oops" in line:
            raise ValueError("cannot parse " + line.split()[0])
        return line.split()[1:]

    counts = skipping.textFile(str(path), 2).flatMap(words).map(lambda w: (w, 1))
    counts = counts.reduceByKey(operator.add, 2)
    out = dict(counts.collect())
    assert out == {"alpha": 19, "beta": 29, "gamma": 10}
    skipping.repo.rollover()  # the action only asked for one; the CLI reads what is committed
    return skipping, str(path), counts


def json_lines(capsys) -> list[dict]:
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_runs_lists_capture_points(run, capsys):
    lc, _, _ = run
    capsys.readouterr()
    assert cli(["runs", str(lc.repo.path), "--json"]) == 0
    (info,) = [r for r in json_lines(capsys) if r["run_id"] == lc.run_id]
    types = {c["component_type"]: c["records"] for c in info["capture_points"]}
    assert types["textFile"] == 30 and types["reducer"] == 3 and types["collect"] == 3


def test_trace_back_and_forward_match_brute_force(run, capsys):
    lc, path, counts = run
    repo = str(lc.repo.path)
    lin = counts.lineage()
    for rid, (word, _) in zip(lin.record_ids.tolist(), lin.collect()):
        capsys.readouterr()
        assert cli(["trace", repo, str(rid), "--data"]) == 0
        got = sorted(r["data"] for r in json_lines(capsys))
        assert got == sorted(x for x in LINES if word in x.split()[1:] and "oops" not in x)
    # Forward from the line holding a byte in the middle of line 4, named by file@offset.
    with open(path, "rb") as f:
        raw = f.read()
    start = raw.index(b"\n4 ") + 1
    capsys.readouterr()
    assert cli(["trace", repo, f"{path}@{start + 3}", "--forward", "--data"]) == 0
    rows = json_lines(capsys)
    outputs = [r for r in rows if r["component_type"] == "collect"]
    assert sorted(r["data"][0] for r in outputs) == ["alpha", "beta"]
    # Backward from that line is itself, with its location.
    capsys.readouterr()
    assert cli(["trace", repo, f"{path}@{start}", "--data"]) == 0
    (row,) = json_lines(capsys)
    assert row["data"] == LINES[4] and row["location"]["offset"] == start
    cp, part, pos = (int(x[0]) for x in unpack_record_ids(np.array([row["record_id"]])))
    assert (row["capture_point"], row["partition"], row["position"]) == (cp, part, pos)
    # Line 7 raised and was skipped: no output depends on it, and the CLI says so.
    start = raw.index(b"\n7 ") + 1
    capsys.readouterr()
    assert cli(["trace", repo, f"{path}@{start}", "--forward"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == "provrepo: note: no output depends on it\n"


def test_culprits_cli_shows_the_raw_line(run, capsys):
    lc, _, _ = run
    capsys.readouterr()
    assert cli(["culprits", str(lc.repo.path), "--run", lc.run_id, "--data"]) == 0
    (row,) = json_lines(capsys)
    assert row["exception"] == "ValueError" and row["message"] == "cannot parse 7"
    assert row["data"] == LINES[7]


def test_bad_record_references_exit_2(run, capsys, tmp_path):
    lc, path, _ = run
    repo = str(lc.repo.path)
    for argv in (
        ["trace", repo, "123456789"],
        ["trace", repo, f"{path}@{10**9}"],
        ["trace", repo, f"{tmp_path / 'other.txt'}@0"],
        ["trace", repo, "1:2:x"],
        ["trace", repo, "0", "--run", "no-such-run"],
        ["culprits", repo, "--run", "no-such-run"],
    ):
        capsys.readouterr()
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("provrepo: error: ") and err.count("\n") == 1, (argv, err)


def test_demo_runs_end_to_end(tmp_path):
    """The README's newcomer command, on a small log (its own SparkSession, a subprocess)."""
    provrepo = os.path.join(os.path.dirname(sys.executable), "provrepo")
    out = subprocess.run(
        [provrepo, "demo", "--repo", str(tmp_path / "demo"), "--lines", "3000"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Try:" in out.stdout and "provrepo ui " in out.stdout
    assert cli(["verify", str(tmp_path / "demo")]) == 0


def test_a_line_read_twice_is_traced_from_both_reads(lc, tmp_path, capsys):
    """A CSV file read twice in one run (two scans, self-joined): FILE@OFFSET names its line
    at both reads, so `trace --forward` from it reaches the outputs of either side, `trace`
    back from it gives both records (the same line), and the UI's graph starts from both."""
    from repository.ui import Api

    rows = [(k, k % 3) for k in range(12)]
    path = tmp_path / "t.csv"
    path.write_text("k,g\n" + "".join(f"{k},{g}\n" for k, g in rows))
    a = lc.read.csv(str(path), header=True, schema="k INT, g INT")
    b = lc.read.csv(str(path), header=True, schema="k INT, g INT")
    out = a.join(b, a.g == b.g).select(a.k.alias("x"), b.k.alias("y")).collect()
    lc.repo.rollover()
    repo, line = str(lc.repo.path), 4  # the line of k == 4
    offset = len("k,g\n") + sum(len(f"{k},{g}\n") for k, g in rows[:line]) + 1
    capsys.readouterr()
    assert cli(["trace", repo, f"{path}@{offset}", "--forward", "--data", "--run", lc.run_id]) == 0
    reached = [r for r in json_lines(capsys) if r["component_type"] == "collect"]
    want = [(r.x, r.y) for r in out if line in (r.x, r.y)]
    assert sorted(tuple(r["data"]) for r in reached) == sorted(want)
    assert cli(["trace", repo, f"{path}@{offset}", "--data", "--run", lc.run_id]) == 0
    back = json_lines(capsys)
    assert [r["data"] for r in back] == ["4,1", "4,1"]
    assert len({r["capture_point"] for r in back}) == 2
    picture = Api(lc.repo).trace(f"{path}@{offset}", {"direction": ["forward"], "run": [lc.run_id]})
    roots = {n["record_id"] for n in picture["nodes"] if n["root"]}
    assert roots == {r["record_id"] for r in back}
    shown = [n for n in picture["nodes"] if n["capture_point"] == reached[0]["capture_point"]]
    assert sorted(n["record_id"] for n in shown) == sorted(r["record_id"] for r in reached)
