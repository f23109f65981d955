"""`provrepo trace`, `runs` and `culprits`: lineage over stored events, read-only;
`provrepo mark-lines` makes line marks, so it takes the owner lock (exit 2 while another
process owns the repository)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import numpy as np

from journals import unpack_record_ids

from .. import RunInfo, jsonable, resolve_records
from ._args import (
    add_json_flag,
    non_negative_int,
    open_owner,
    open_read_only,
    positive_int,
    record_ref,
)
from ._output import Output


def cmd_trace(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        index = repo.lineage
        # FILE@OFFSET names the line at every read of the file in the run.
        run, rids = resolve_records(index, args.record_id, args.run)
        ids, hops = index.trace(run, np.array(rids, dtype=np.int64), args.forward, args.depth)
        if not len(ids):  # an empty answer is an answer: say so rather than print nothing
            out.note(
                "no output depends on it" if args.forward else "it was made from no source record"
            )
        if args.limit is not None:
            ids = ids[: args.limit]
        info = index.run_info(run)
        events = index.events(run, ids)
        data = index.record_data(run, ids) if args.data else None
        cps, parts, poss = unpack_record_ids(ids)
        rows = []
        for k, rid in enumerate(ids.tolist()):
            cp = info.capture_points.get(int(cps[k]))
            ev = events[k]
            row = {
                "run_id": run,
                "record_id": rid,
                "capture_point": int(cps[k]),
                "component_id": cp.component_id if cp else None,
                "component_type": cp.component_type if cp else None,
                "partition": int(parts[k]),
                "position": int(poss[k]),
                "event_id": ev.event_id if ev else None,
                "event_type": ev.event_type.value if ev else None,
                "hops": hops,
            }
            if ev is not None and ev.location is not None:
                loc = ev.location
                row["location"] = {"uri": loc.uri, "offset": loc.offset, "length": loc.length}
            if data is not None:
                row["data"] = jsonable(data[k])
            rows.append(row)
        out.json_lines(rows)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        index = repo.lineage
        infos = [index.run_info(r) for r in index.runs()]
    out.result([_run_dict(i) for i in infos], lambda: _runs_text(infos))
    return 0


def _run_dict(i: RunInfo) -> dict[str, Any]:
    return {
        "run_id": i.run_id,
        "events": [i.first_event_id, i.last_event_id],
        "records": i.records,
        "capture_points": [
            {
                "capture_point": c.number,
                "component_id": c.component_id,
                "component_type": c.component_type,
                "event_type": c.event_type,
                "parents": c.parents,
                "dependency": c.dependency,
                "records": c.records,
                "associations": c.associations,
            }
            for c in i.capture_points.values()
        ],
    }


def _runs_text(infos: list[RunInfo]) -> Iterator[str]:
    if not infos:
        yield "no lineage runs"
    for i in infos:
        yield f"{i.run_id}  events {i.first_event_id}..{i.last_event_id}  {i.records:,} records"
        for c in i.capture_points.values():
            parents = ",".join(map(str, c.parents)) or "-"
            yield (
                f"  cp {c.number:<4} {c.component_id:<28} {c.component_type:<14} "
                f"{c.event_type:<8} {c.records:>12,} records {c.associations:>12,} parents  "
                f"<- {parents} ({c.dependency})"
            )


def cmd_culprits(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        if args.run is not None:
            repo.lineage.run_info(args.run)  # NotFound names the runs there are
        culprits = repo.culprits(args.run, with_data=args.data)
        rows = []
        for c in culprits:
            row = c.to_dict()
            if not args.data:
                row.pop("data")
            else:
                row["data"] = jsonable(row["data"])
            rows.append(row)
        out.json_lines(rows)
    return 0


def cmd_mark_lines(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_owner(args.repo) as repo:
        index = repo.lineage
        runs = [args.run] if args.run is not None else index.runs()
        made = {run: index.mark_scan_lines(run) for run in runs}
    out.result(
        {"partitions": made},
        lambda: [f"{run}: line marks for {n} partition(s)" for run, n in made.items()],
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser("trace", help="trace a record back to its inputs (or forward), JSON lines")
    p.add_argument("repo")
    p.add_argument(
        "record_id",
        type=record_ref,
        help="a record id, cp:partition:position, or FILE@OFFSET (the input line holding it)",
    )
    p.add_argument("--forward", action="store_true", help="trace to the outputs it reached")
    p.add_argument("--depth", type=positive_int, default=None, help="hops (default: all)")
    p.add_argument("--data", action="store_true", help="include raw data (re-read or captured)")
    p.add_argument("--run", default=None, help="run id (default: the newest run with the record)")
    p.add_argument("--limit", type=non_negative_int, default=None, help="at most this many")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("culprits", help="input records whose processing raised (FAIL events)")
    p.add_argument("repo")
    p.add_argument("--run", default=None, help="one run (default: every run)")
    p.add_argument("--data", action="store_true", help="include each record's raw data")
    p.set_defaults(func=cmd_culprits)

    p = sub.add_parser(
        "mark-lines",
        help="store line marks of CSV / JSON / text scans (the owner's): rare rows read fast",
    )
    p.add_argument("repo")
    p.add_argument("--run", default=None, help="one run (default: every run)")
    add_json_flag(p, "the partitions marked per run, as one JSON object")
    p.set_defaults(func=cmd_mark_lines)

    p = sub.add_parser("runs", help="lineage runs, their capture points and record counts")
    p.add_argument("repo")
    add_json_flag(p, "JSON lines instead of text")
    p.set_defaults(func=cmd_runs)
