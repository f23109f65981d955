"""Spark's Python workers run the capture code under an interpreter that can import it.

PySpark starts workers with PYSPARK_PYTHON, or "python3" on the PATH: from a virtualenv that is
another interpreter, without provrepo. In local mode the agent's functions run the driver's
interpreter instead; on a cluster, workers that cannot import the capture modules fail the
capture before any job, in one line.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from operator import add
from pathlib import Path

import pytest

from agent import LineageContext
from agent._interpreter import CAPTURE_MODULES, check_capture_python, same_interpreter
from repository import BadInput, ProvenanceRepository, RepositoryConfig

ROOT = Path(__file__).resolve().parent.parent


def readme_capture_example() -> str:
    """The README's "Capturing lineage from PySpark" example, as a user would copy it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Capturing lineage from PySpark") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def write_server_log(path: Path, n: int = 400) -> list[str]:
    lines = []
    for i in range(n):
        level = "ERROR" if i % 3 == 0 else "INFO"
        lines.append(f"2026-01-01T00:00:{i % 60:02d} host{i % 5} {level} code=E50{i % 4} req={i}")
    path.write_text("".join(x + "\n" for x in lines))
    return lines


def path_without(*dirs: str) -> str:
    drop = {os.path.abspath(d) for d in dirs}
    return os.pathsep.join(
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and os.path.abspath(d) not in drop
    )


@pytest.mark.spark
def test_readme_example_runs_from_a_plain_virtualenv(tmp_path):
    """A new user: `python3 -m venv .venv && .venv/bin/pip install -e .`, then the README's
    example run as `.venv/bin/python example.py`, PYSPARK_PYTHON unset, the venv not on the
    PATH (so "python3" is an interpreter without provrepo)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # As the README says (wheels from pip's cache: ~10 s).
    subprocess.run([py, "-m", "pip", "install", "-q", "-e", str(ROOT)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = path_without(os.path.dirname(sys.executable), str(venv / "bin"))
    work = tmp_path / "work"
    work.mkdir()
    lines = write_server_log(work / "server.log", 200)  # show() prints up to 20
    python3 = shutil.which("python3", path=env["PATH"])
    plain = python3 and subprocess.run([python3, "-c", "import agent._worker"], cwd=work, env=env)
    if plain and plain.returncode == 0:
        pytest.skip("python3 on this PATH imports provrepo itself: no virtualenv gap to close")
    (work / "example.py").write_text(readme_capture_example())
    done = subprocess.run(
        [py, "example.py"], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # show() prints each traced log line, raw: exactly the E503 error lines.
    want = sorted(x for x in lines if " ERROR " in x and "code=E503" in x)
    got = sorted(re.findall(r"'(2026-[^']*)'", done.stdout))
    assert got == want
    assert "ModuleNotFoundError" not in done.stderr


@pytest.fixture
def workers_without_provrepo(spark):
    """The shared local session, its workers' interpreter made one that cannot start: only
    functions built under the driver's interpreter can run."""
    sc = spark.sparkContext
    saved = sc.pythonExec
    sc.pythonExec = "/nonexistent/provrepo-test/python3"
    try:
        yield sc
    finally:
        sc.pythonExec = saved


@pytest.mark.spark
def test_every_job_of_the_agent_runs_the_driver_interpreter(
    spark, workers_without_provrepo, tmp_path, caplog
):
    text = tmp_path / "server.log"
    lines = write_server_log(text, 300)
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with (
        caplog.at_level(logging.INFO, logger="provrepo.agent"),
        ProvenanceRepository.open(tmp_path / "repo", config) as repo,
    ):
        lc = LineageContext(spark, repo)
        LineageContext(spark, repo)  # decided once per SparkContext: said once
        said = [r.getMessage() for r in caplog.records if r.name == "provrepo.agent"]
        assert len(said) == 1
        assert "/nonexistent/provrepo-test/python3" in said[0] and sys.executable in said[0]

        errors = lc.textFile(str(text), 3).filter(lambda x: " ERROR " in x)
        codes = errors.map(lambda x: (x.split("code=")[1][:4], 1))
        counts = codes.reduceByKey(add)
        want: dict[str, int] = {}
        for x in lines:
            if " ERROR " in x:
                want[x.split("code=")[1][:4]] = want.get(x.split("code=")[1][:4], 0) + 1
        assert dict(counts.collect()) == want  # collect, shuffle
        # Replays on Spark: selective from a trace, and exclusive.
        bad = counts.lineage().filter(lambda kv: kv[0] == "E503")
        assert lc.replay(bad.go_back_all(), local=False) == [("E503", want["E503"])]
        rest = dict(lc.replay(counts, exclude=bad.go_back_all()))
        assert rest == {k: v for k, v in want.items() if k != "E503"}
        assert counts.count() == len(want)
        assert len(errors.take(5)) == 5  # runJob
        assert counts.sortByKey().keys().collect() == sorted(want)  # range sampling jobs
        hosts = lc.parallelize([(f"E50{i}", f"h{i}") for i in range(4)], 2)
        assert sorted(counts.join(hosts).collect()) == sorted(
            (k, (v, f"h{k[-1]}")) for k, v in want.items()
        )
        assert sorted(errors.union(errors).distinct().collect()) == sorted(
            x for x in lines if " ERROR " in x
        )
        out = tmp_path / "out"
        counts.saveAsTextFile(str(out))
        assert len([p for p in out.iterdir() if p.name.startswith("part-")]) >= 1


@pytest.mark.spark
def test_cluster_workers_without_provrepo_fail_before_the_job(spark, tmp_path, monkeypatch):
    """On a cluster the workers are asked to import the capture modules: a worker that cannot
    stops LineageContext with one line naming the interpreter and what to set."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "master", "spark://cluster.example:7077")
    assert check_capture_python(sc) is None  # this interpreter's workers can capture
    monkeypatch.setattr(sc, "pythonExec", str(bare / "bin" / "python"))
    with ProvenanceRepository.open(tmp_path / "repo", RepositoryConfig(sync="none")) as repo:
        with pytest.raises(BadInput) as e:
            LineageContext(spark, repo)
        assert repo.stats().events == 0  # no job ran through the agent, nothing written
    msg = str(e.value)
    assert "\n" not in msg
    assert str(bare / "bin" / "python") in msg and "PYSPARK_PYTHON" in msg
    assert CAPTURE_MODULES[0] in msg and "ModuleNotFoundError" in msg


def test_a_virtualenv_is_not_its_base_interpreter(tmp_path):
    """Another virtualenv's bin/python resolves to the very binary this one runs, but finds
    another site-packages: to Spark's workers it is another interpreter."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    other = str(venv / "bin" / "python")
    assert os.path.realpath(other) == os.path.realpath(sys.executable)  # the trap
    assert not same_interpreter(other)
    assert same_interpreter(sys.executable)
    here = os.path.dirname(os.path.abspath(sys.executable))
    for name in ("python", "python3"):  # this environment under another name
        path = os.path.join(here, name)
        if os.path.realpath(path) == os.path.realpath(sys.executable):
            assert same_interpreter(path)
    assert not same_interpreter("/nonexistent/python3")
