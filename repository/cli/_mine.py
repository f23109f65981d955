"""`provrepo mine`: anomaly mining over a run's stored lineage (read-only)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from .. import ActorInstance, MineReport, NotFound, ProvenanceRepository
from ._args import (
    Subparsers,
    add_json_flag,
    open_read_only,
    positive_float,
    positive_int,
    record_id,
    triple,
)
from ._output import Output


def _pick_run(repo: ProvenanceRepository, run: str | None, ids: list[int]) -> str:
    index = repo.lineage
    if run is not None:
        return run  # mine() checks it and names the runs there are
    if not ids:
        return index.latest_run()
    found = index.newest_run_with(ids[0])
    if found is None:
        raise NotFound(f"no run of {repo.path} stores record {ids[0]}; give --run")
    return found


def cmd_mine(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        bad, good = args.bad or None, args.good or None
        run = _pick_run(repo, args.run, (bad or []) + (good or []))
        options = {} if args.threshold is None else {"threshold": args.threshold}
        report = repo.mine(run, bad, good, **options)
    rows = list(report.instances if args.all else report.suspects)
    if args.limit is not None:
        rows = rows[: args.limit]
    out.result(_mine_dict(report, rows), lambda: _mine_text(report, rows))
    return 0


def _mine_dict(report: MineReport, rows: list[ActorInstance]) -> dict[str, Any]:
    ranks = {id(i): r for r, i in enumerate(report.instances, 1)}
    return {
        **report.to_dict(),
        "instances": [{"rank": ranks[id(i)], **i.to_dict()} for i in rows],
    }


def _mine_text(report: MineReport, rows: list[ActorInstance]) -> Iterator[str]:
    scope = {
        "all": "every actor instance",
        "bad": f"instances on the trace of {len(report.bad_outputs)} bad output(s)",
        "bad+good": (
            f"instances on the trace of {len(report.bad_outputs)} bad output(s), ranked "
            f"against {len(report.good_outputs)} good one(s)"
        ),
    }[report.mode]
    yield (
        f"run {report.run_id}: {len(report.instances)} of {report.run_instances} actor "
        f"instances ({scope}); {len(report.suspects)} suspect(s), score >= "
        f"{report.threshold:g}"
    )
    for note in report.notes:
        yield f"note: {note}"
    if not rows:
        return
    ranks = {id(i): r for r, i in enumerate(report.instances, 1)}
    contrast = report.mode == "bad+good"
    head = (
        f"{'rank':>4} {'score':>7}  {'actor instance (C <- P [partition])':<40} {'inputs':>7} "
        f"{'mult':>7} {'(med)':>7} {'sel':>5} {'(med)':>6} {'outl':>5} "
        f"{'z_mult':>7} {'z_sel':>6} {'z_outl':>6}"
    )
    yield head + ("  bad/good out-degree" if contrast else "")
    for i in rows:
        name = f"{i.component_id} <- {i.parent_component_id} [{i.partition}]"
        line = (
            f"{ranks[id(i)]:>4} {i.score:>7.1f}{'*' if i.suspect else ' '} {name:<40} "
            f"{i.inputs:>7} {i.multiplicity:>7.2f} {_opt(i.typical_multiplicity, 7, 2)} "
            f"{i.selectivity:>5.2f} {_opt(i.typical_selectivity, 6, 2)} {i.outlying_inputs:>5} "
            f"{i.z_multiplicity:>7.1f} {i.z_selectivity:>6.1f} {i.z_outlying:>6.1f}"
        )
        if contrast:
            line += f"  {_opt(i.bad_multiplicity, 0, 1)} / {_opt(i.good_out_degree, 0, 1)}"
        yield line
        examples = i.trace_examples or i.outlier_examples
        if examples:
            what = "inputs on the bad trace" if i.trace_examples else "outlying inputs"
            yield f"{'':>14}{what}: {' '.join(triple(r) for r in examples)}"


def _opt(v: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def register(sub: Subparsers) -> None:
    """Add the mine command to the `provrepo` parser."""
    p = sub.add_parser(
        "mine",
        help="rank a run's actor instances by anomalous output multiplicity (Newt's mine)",
    )
    p.add_argument("repo")
    p.add_argument("--run", default=None, help="run id (default: the newest run)")
    p.add_argument(
        "--bad", nargs="+", type=record_id, metavar="ID", help="bad outputs: winnow to their trace"
    )
    p.add_argument(
        "--good", nargs="+", type=record_id, metavar="ID", help="good outputs: rank bad vs. good"
    )
    p.add_argument("--threshold", type=positive_float, default=None, help="suspect score (3.5)")
    p.add_argument("--all", action="store_true", help="every instance considered, not suspects")
    p.add_argument("--limit", type=positive_int, default=None, help="at most this many rows")
    add_json_flag(p, "one JSON object instead of text")
    p.set_defaults(func=cmd_mine)
