"""The typed capture plan and the planner every capture front-end shares, without Spark:
a front-end names nodes, registers capture points, wraps its actions, and gets back a
`LineageRDD` of what an action emitted; the repository reads the run descriptor it journals."""

from __future__ import annotations

import pytest
from _events import lineage_batch

from agent._plan import ParallelSource, PlanNode, UnionStart
from agent._planner import Planner
from agent._spec import NarrowOp
from journals import record_id_base
from repository import BadInput


def test_a_front_end_records_a_run_through_the_planner(repo):
    planner = Planner(repo, "run-p", app="app", spark_version="0")
    assert [planner.node_name("scan"), planner.node_name("scan")] == ["scan#0", "scan#1"]
    src = planner.capture_point("scan#0", "scan", "RECEIVE", [], "source", 1, path="t.csv")
    out = planner.capture_point("collect#2", "collect", "SEND", [src.number], "narrow", 1)
    assert (src.number, out.number) == (1, 2)  # 0 names the run descriptor
    with planner.action(out):
        # What a front-end's task would journal: three outputs, each from one source record.
        base, parent = record_id_base(out.number, 0), record_id_base(src.number, 0)
        for cp, ids, parents in [
            (src, range(parent, parent + 3), None),
            (out, range(base, base + 3), [[parent + i] for i in range(3)]),
        ]:
            repo.register_events(
                lineage_batch(
                    ids,
                    parents=parents,
                    run="run-p",
                    component=cp.component_id,
                    component_type=cp.component_type,
                    event_type=cp.event_type,
                )
            )
    lin = planner.lineage_of(out)
    assert lin.record_ids.tolist() == list(range(base, base + 3))
    assert lin.go_back().record_ids.tolist() == list(range(parent, parent + 3))
    info = repo.lineage.run_info("run-p")
    assert info.descriptor["app"] == "app" and info.descriptor["version"] == 1
    got = {n: (c.component_id, c.parents, c.dependency) for n, c in info.capture_points.items()}
    assert got == {1: ("scan#0", [], "source"), 2: ("collect#2", [1], "narrow")}
    assert info.descriptor["capture_points"][0]["path"] == "t.csv"  # extra fields kept


def test_a_failed_action_still_describes_the_run(repo):
    planner = Planner(repo, "run-f")
    cp = planner.capture_point("collect#0", "collect", "SEND", [], "source", 1)
    with pytest.raises(RuntimeError), planner.action(cp):
        raise RuntimeError("the job failed")
    repo.rollover()
    assert repo.lineage.run_info("run-f").descriptor["version"] == 1
    with pytest.raises(BadInput, match="not an action"):
        planner.output_node(cp)  # a failed action registers no output


def _source(name: str, cp_number: int) -> PlanNode:
    from agent._spec import CapturePoint

    cp = CapturePoint(cp_number, name, "parallelize", "RECEIVE")
    return PlanNode("source", name, 2, start=ParallelSource(cp, rdd=None))


def test_plan_chains_and_capture_points():
    from agent._spec import CapturePoint

    a, b = _source("a", 1), _source("b", 2)
    m = PlanNode.narrow(a, "map#3", NarrowOp("map", str))
    f = PlanNode.narrow(m, "filter#4", NarrowOp("filter", bool))
    assert f.chain() == (a, (m.op, f.op)) and f.capture_points() == [1]
    assert f.segment_dependency() == "narrow"
    group = CapturePoint(5, "mapPartitions#5", "mapPartitions", "JOIN")
    g = PlanNode.narrow(f, "mapPartitions#5", NarrowOp("mapPartitions", iter, group_cp=group))
    assert PlanNode.narrow(g, "map#6", NarrowOp("map", str)).capture_points() == [5]
    u = PlanNode("union", "union#7", 4, (f, b), start=UnionStart())
    assert u.capture_points() == [1, 2] and u.segment_dependency() == "union"
    assert PlanNode.narrow(u, "map#8", NarrowOp("map", str)).chain()[0] is u
    with pytest.raises(ValueError):
        PlanNode("shuffle", "x", 1)  # a segment start needs its start
    with pytest.raises(ValueError):
        m.segment_start()
