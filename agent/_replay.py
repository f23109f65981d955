"""Selective replay and exclusive replay (Newt's replay and ex-replay), capture off.

Selective replay re-runs a pipeline on exactly the records a backward trace found. Only those
source records are read (by byte offset, or from their captured values), and every capture
point downstream keeps only records on the traced paths, so non-monotonic operations (a count
per key) reproduce the traced outputs exactly (Newt section 3.4). Records are recognized in the
replay by what survives subsetting the input -- source positions, keys at keyed aggregations,
parents' original ids at joins and sorts, the k-th output of an input at an action's output --
and carry their original ids through the replay.

Exclusive replay re-runs the whole pipeline with the traced records removed at their capture
point (a source or any intermediate point); upstream of that point the input is the original's,
so records there have their original positional ids.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import unpack_record_ids
from repository import BadInput

from ._interpreter import capture_python
from ._local import can_run_locally, run_local
from ._rdd import UnsupportedOperation
from ._spec import OutputSink, ReplaySpec

if TYPE_CHECKING:
    from ._compile import SparkCompiler
    from ._plan import PlanNode
    from ._planner import Planner
    from ._rdd import CapturedRDD
    from ._spec import CapturePoint
    from ._trace import LineageRDD


@dataclass
class ReplayPlan:
    """What a replay run needs: per-capture-point filters, and for a selective replay the
    source records to read (per source capture point, one list per partition)."""

    spec: ReplaySpec
    sources: dict[int, list[list[tuple[Any, int]]]] = field(default_factory=dict)
    output_cp: CapturePoint | None = None


def selective(
    planner: Planner, compiler: SparkCompiler, lin: LineageRDD, local: bool | None = None
) -> list:
    """Re-run the pipeline that produced `lin`'s traced outputs on exactly `lin`'s records."""
    if lin.origin is None:
        raise BadInput(
            "replay needs records traced back from an action's output (start from "
            "rdd.lineage(), filter and go back); forward traces do not hold every input an "
            "output needs"
        )
    out_cp, origin = lin.origin
    node = planner.output_node(out_cp)
    _refuse_frames(node)
    run = planner.run_id
    index = planner.repo.lineage
    info = index.run_info(run)
    records = lin.record_ids
    allowed = np.union1d(
        np.union1d(index.reachable(run, records), records),
        _downstream_within(index, run, records, np.union1d(index.reachable(run, origin), origin)),
    )
    cps = unpack_record_ids(allowed)[0]
    by_cp = {int(c): allowed[cps == c] for c in np.unique(cps)}
    keep: dict[int, Any] = {}
    sources: dict[int, list] = {}
    for number, cp in info.capture_points.items():
        ids = by_cp.get(number, np.array([], dtype=np.int64))
        kind = cp.component_type
        if cp.dependency == "source":
            sources[number] = _source_records(index, run, ids, max(cp.partitions, 1))
        elif kind == "combiner":
            keep[number] = _combiner_keys(index, run, info, ids)
        elif kind == "reducer":
            keep[number] = {_key(d, cp): int(r) for r, d in _data(index, run, ids)}
        elif kind == "join":
            parents = index.parent_lists(run, ids)
            keep[number] = {tuple(parents[int(r)].tolist()): int(r) for r in ids}
        elif kind in ("cogroup", "sort"):
            parents = index.parent_lists(run, ids)
            keep[number] = {int(p): int(r) for r in ids for p in parents[int(r)].tolist()}
    own_out = int(out_cp.number)
    kept = by_cp.get(own_out, np.array([], dtype=np.int64))
    parents = index.parent_lists(run, kept)
    firsts = index.first_children(
        run, np.concatenate(list(parents.values())) if parents else np.array([]), own_out
    )
    keep[own_out] = (firsts, frozenset(int(x) for x in kept))
    plan = ReplayPlan(ReplaySpec(keep=keep), sources, out_cp)
    sink = OutputSink(out_cp, "collect", capture_values=False)
    if local is not False and can_run_locally(node, plan):
        return run_local(node, sink, plan, compiler.run_id, compiler.on_error)
    if local:
        raise BadInput("this replay cannot run in the driver (it needs Spark's partitioning)")
    return _run(compiler, node, plan)


def exclusive(
    planner: Planner, compiler: SparkCompiler, rdd: CapturedRDD, exclude: LineageRDD
) -> list:
    """Re-run `rdd`'s pipeline on its whole input minus `exclude`'s records, removed at
    their capture point."""
    _refuse_frames(rdd.node)
    ids = exclude.record_ids
    if not len(ids):
        raise BadInput("exclusive replay: nothing to exclude (the trace is empty)")
    info = planner.repo.lineage.run_info(planner.run_id)
    cps = unpack_record_ids(ids)[0]
    numbers = sorted(int(c) for c in np.unique(cps))
    for a in numbers:
        for b in numbers:
            if a != b and _is_ancestor(info, a, b):
                raise BadInput(
                    f"exclusive replay removes records at one stage; capture points {a} and {b} "
                    "lie on one path (trace to a single capture point first)"
                )
    for n in numbers:
        cp = info.capture_points.get(n)
        if cp is not None and cp.component_type == "mapPartitions":
            # Its one record per partition stands for everything f made of the partition:
            # removing it has no record-level meaning, so refuse rather than replay unchanged.
            raise BadInput(
                f"exclusive replay cannot remove records at {cp.component_id} (capture point "
                f"{n}): a mapPartitions capture point with partition lineage has one record per "
                "partition; exclude at its inputs (go_back()) or outputs instead"
            )
    drop = {n: frozenset(ids[cps == n].tolist()) for n in numbers}
    plan = ReplayPlan(ReplaySpec(drop=drop), {}, rdd.last_output)
    return _run(compiler, rdd.node, plan)


def _refuse_frames(node: PlanNode) -> None:
    frames = node.frame_sources()
    if frames:
        raise UnsupportedOperation(
            f"replay of an RDD made from a DataFrame ({frames[0].cp.component_id}): the "
            "RDD agent cannot re-run the DataFrame's query; replay the DataFrame itself"
        )


def _run(compiler: SparkCompiler, node: PlanNode, plan: ReplayPlan) -> list:
    sink = OutputSink(plan.output_cp, "collect", capture_values=False)
    with capture_python(compiler.sc):
        return compiler.build(node, sink, capture=False, replay=plan).collect()


def _downstream_within(index, run: str, records: np.ndarray, region: np.ndarray) -> np.ndarray:
    """The records of `region` (the traced outputs and all their ancestors) that derive from
    `records`. Worked out from parents only (what the backward trace already read): a record
    derives from `records` if one of its parents is one of them or derives from them. This
    avoids forward hops, which scan whole child batches."""
    marked = set(records.tolist())
    candidates = np.setdiff1d(region, records)
    info = index.run_info(run)
    sources = [n for n, c in info.capture_points.items() if c.dependency == "source"]
    candidates = candidates[~np.isin(unpack_record_ids(candidates)[0], sources)]
    parents = index.parent_lists(run, candidates)
    pending = [(r, ps.tolist()) for r, ps in parents.items() if len(ps)]
    changed = True
    while changed and pending:
        changed = False
        rest = []
        for r, ps in pending:
            if any(p in marked for p in ps):
                marked.add(r)
                changed = True
            else:
                rest.append((r, ps))
        pending = rest
    return np.array(sorted(marked), dtype=np.int64)


def _is_ancestor(info, a: int, b: int) -> bool:
    """Is capture point a upstream of capture point b?"""
    stack, seen = [b], set()
    while stack:
        c = stack.pop()
        for p in info.capture_points[c].parents if c in info.capture_points else []:
            if p == a:
                return True
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _data(index, run: str, ids: np.ndarray):
    return zip(ids.tolist(), index.record_data(run, ids))


def _key(datum, cp) -> Any:
    """A reducer record's key from what was captured for it: (key, value), or the key."""
    return datum if cp.captures == "key" else datum[0]


def _source_records(index, run: str, ids: np.ndarray, partitions: int) -> list[list]:
    """Traced source records as (value, original id), one list per original partition."""
    parts: list[list] = [[] for _ in range(partitions)]
    if len(ids):
        _, part, _ = unpack_record_ids(ids)
        for p, rid, value in zip(part.tolist(), ids.tolist(), index.record_data(run, ids)):
            while p >= len(parts):
                parts.append([])
            parts[p].append((value, rid))
    return parts


def _combiner_keys(index, run: str, info, ids: np.ndarray) -> dict:
    """(partition, key) -> combiner record id: a combiner record's key is its reducer's."""
    out: dict = {}
    if not len(ids):
        return out
    children = defaultdict(list)
    for c in info.capture_points.values():
        if c.component_type == "reducer":
            for parent, child in index.first_children(run, ids, c.number).items():
                children[parent].append((child, c))
    reducers = np.array(sorted({ch for v in children.values() for ch, _ in v}), dtype=np.int64)
    data = dict(_data(index, run, reducers)) if len(reducers) else {}
    _, parts, _ = unpack_record_ids(ids)
    for rid, part in zip(ids.tolist(), parts.tolist()):
        for child, cp in children.get(rid, []):
            out[(part, _key(data[child], cp))] = rid
    return out
