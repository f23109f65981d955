"""Without Java 17+, Spark tests skip with the reason and `provrepo demo` says what is needed
(exit 2, one line), rather than failing with a launcher's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import java_problem

ROOT = Path(__file__).resolve().parent.parent


def env_without_java() -> dict[str, str]:
    """This environment with every PATH entry that holds a `java` removed, and no JAVA_HOME."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(
        d for d in path if d and not os.access(os.path.join(d, "java"), os.X_OK)
    )
    return env


def test_spark_tests_skip_with_the_reason_when_java_is_missing():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/test_agent_failures.py"],
        cwd=ROOT, env=env_without_java(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Java 17+ is needed" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary
    assert "error" not in summary


def test_demo_without_java_exits_2_in_one_line(tmp_path):
    where = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "repository.cli", "demo", "--repo", str(where)],
        env=env_without_java(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Java 17+ is needed" in lines[0], done.stderr
    assert done.stdout == ""
    assert not where.exists()  # nothing written


@pytest.mark.parametrize(
    ("banner", "major"),
    [('openjdk version "11.0.2" 2019-01-15', 11), ('java version "1.8.0_292"', 8),
     ('openjdk version "17.0.15" 2025-04-15', None), ('openjdk version "21" 2023-09-19', None)],
)  # fmt: skip
def test_java_version_as_pyspark_finds_it(tmp_path, monkeypatch, banner, major):
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))  # PySpark's launcher prefers JAVA_HOME
    problem = java_problem()
    if major is None:
        assert problem is None
    else:
        assert problem is not None and f"is Java {major}" in problem and "17+" in problem
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nothing"))
    assert "has no bin/java" in java_problem()
