"""A lineage lookup right after an action sees the action's lineage: the public entry points
merge what the action asked to merge first (an action only asks the rollover thread)."""

from __future__ import annotations

from operator import add
from pathlib import Path

import numpy as np
import pytest

from agent import LineageContext
from journals import unpack_record_ids
from repository import ProvenanceRepository, RepositoryConfig

pytestmark = pytest.mark.spark


def write_log(path) -> tuple[list[str], list[int]]:
    lines = [f"{i:03d} code={'E' if i != 13 else 'X'}{i % 3}" for i in range(40)]
    offsets, at = [], 0
    for x in lines:
        offsets.append(at)
        at += len(x) + 1
    path.write_text("".join(x + "\n" for x in lines))
    return lines, offsets


def run_pipeline(spark, repo, path) -> tuple[str, dict]:
    """One action; returns the run id and what the driver returned."""

    def parse(line: str) -> tuple[str, int]:  # nested: shipped to workers by value
        code = line.split("code=")[1]
        if not code.startswith("E"):
            raise ValueError(f"bad code {code!r}")
        return code, 1

    lc = LineageContext(spark, repo, on_error="skip")
    counts = lc.textFile(str(path), 2).map(parse).reduceByKey(add)
    return lc.run_id, dict(counts.collect())


# Each entry point, called first thing after an action: (name, call(lineage, run, ref)).
ENTRY_POINTS = {
    "runs": lambda lin, repo, run, ref: run in lin.runs(),
    "latest_run": lambda lin, repo, run, ref: lin.latest_run() == run,
    "run_info": lambda lin, repo, run, ref: lin.run_info(run).records == ref["records"],
    "descriptor": lambda lin, repo, run, ref: lin.descriptor(run)["run_id"] == run,
    "record_at": lambda lin, repo, run, ref: (
        lin.record_at(run, ref["path"], ref["offset"]) == ref["line_record"]
    ),
    "partitions": lambda lin, repo, run, ref: lin.partitions(run, 1) == [0, 1],
    "locs": lambda lin, repo, run, ref: len(lin.locs(run, 1, 0)) >= 1,
    "all_records": lambda lin, repo, run, ref: np.array_equal(
        lin.all_records(run, ref["out_cp"]), ref["outputs"]
    ),
    "event_ids": lambda lin, repo, run, ref: bool(lin.event_ids(run, ref["outputs"]).all()),
    "events": lambda lin, repo, run, ref: None not in lin.events(run, ref["outputs"]),
    "record_data": lambda lin, repo, run, ref: (
        lin.record_data(run, ref["sources"]) == ref["source_lines"]
    ),
    "parents": lambda lin, repo, run, ref: len(lin.parents(run, ref["outputs"])) > 0,
    "children": lambda lin, repo, run, ref: len(lin.children(run, ref["sources"])) > 0,
    "trace": lambda lin, repo, run, ref: (
        set(lin.trace(run, ref["outputs"])[0].tolist()) == ref["traced"]
    ),
    "reachable": lambda lin, repo, run, ref: (
        ref["traced"] <= set(lin.reachable(run, ref["outputs"]).tolist())
    ),
    "parent_lists": lambda lin, repo, run, ref: (
        len(lin.parent_lists(run, ref["outputs"])) == len(ref["outputs"])
    ),
    "first_children": lambda lin, repo, run, ref: (
        lin.first_children(run, ref["sources"], ref["child_cp"]) == ref["first_children"]
    ),
    "culprits": lambda lin, repo, run, ref: (
        [c.data for c in repo.culprits(run, True)] == [ref["bad_line"]]
    ),
    "mine": lambda lin, repo, run, ref: repo.mine(run).run_instances > 0,
}


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The answers, from a run merged explicitly; every run of the pipeline has the same
    capture points and record ids, only the run id differs."""
    d = tmp_path_factory.mktemp("fresh")
    path = d / "server.log"
    lines, offsets = write_log(path)
    with ProvenanceRepository.open(d / "ref", RepositoryConfig(sync="none")) as repo:
        run, result = run_pipeline(spark, repo, path)
        repo.rollover()
        lin = repo.lineage
        info = lin.run_info(run)
        out_cp = max(info.capture_points)  # the collect
        outputs = lin.all_records(run, out_cp)
        traced = lin.trace(run, outputs)[0]
        sources = traced[:5]
        line_record = lin.record_at(run, str(path), offsets[7] + 3)
        child_cp = next(c.number for c in info.capture_points.values() if 1 in c.parents)
        ref = {
            "path": str(path),
            "offset": offsets[7] + 3,
            "line_record": line_record,
            "records": info.records,
            "out_cp": out_cp,
            "outputs": outputs,
            "traced": set(traced.tolist()),
            "sources": sources,
            "source_lines": lin.record_data(run, sources),
            "bad_line": lines[13],
            "child_cp": child_cp,
            "first_children": lin.first_children(run, sources, child_cp),
        }
    # Brute force, for the answers this test leans on.
    assert result == {
        f"E{k}": sum(1 for i in range(40) if i != 13 and i % 3 == k) for k in (0, 1, 2)
    }
    assert lin.record_data(run, np.array([line_record]))[0] == lines[7]
    assert int(unpack_record_ids(np.array([line_record]))[0][0]) == 1
    assert len(set(ref["source_lines"])) == 5 and set(ref["source_lines"]) <= set(lines)
    assert len(ref["first_children"]) == 5
    assert len(traced) == 39  # every line but the garbled one feeds an output
    return ref


@pytest.mark.parametrize("threads", [False, True], ids=["no-threads", "threads"])
def test_every_lineage_entry_point_sees_the_action_that_just_ended(
    spark, tmp_path, reference, threads
):
    """Without the rollover thread, only the lookup itself can merge: it must. With it, a
    lookup must not race it (it waits for a merge under way)."""
    path = tmp_path / "server.log"
    path.write_bytes(Path(reference["path"]).read_bytes())
    ref = dict(reference, path=str(path))
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(tmp_path / "repo", config, start_threads=threads) as repo:
        failed = []
        for name, call in ENTRY_POINTS.items():
            run, _ = run_pipeline(spark, repo, path)
            try:
                if not call(repo.lineage, repo, run, ref):
                    failed.append(name)
            except Exception as e:  # e.g. NotFound: "no lineage run ... (runs: none)"
                failed.append(f"{name}: {type(e).__name__}: {e}")
        assert failed == []
