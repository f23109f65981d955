"""`provrepo export`: events and lineage edges as Parquet or JSON-lines tables, read-only."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from .. import TableExport
from ._args import Subparsers, add_json_flag, open_read_only, positive_int
from ._output import Output

EXIT_OK = 0


def cmd_export(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        export = repo.export_jsonl if args.format == "jsonl" else repo.export_parquet
        rep = export(
            args.out,
            run=args.run,
            from_id=args.from_id,
            progress=not args.quiet,
            chunk_events=args.chunk_events,
        )
    out.result(rep.to_dict(), lambda: _text(rep))
    for lo, hi in rep.skipped:
        out.note(f"ids {lo}..{hi - 1} no longer exist (aged off): they are in no file")
    return EXIT_OK


def _text(rep: TableExport) -> Iterator[str]:
    ids = f"ids {rep.first_id}..{rep.next_id - 1}" if rep.next_id > rep.first_id else "no new ids"
    how = "resumed" if rep.resumed else "exported"
    yield (
        f"{how} {ids}: {rep.events:,} events and {rep.edges:,} edges of "
        f"{len(rep.runs)} run(s) into {len(rep.files)} {rep.format} file(s) under {rep.out} "
        f"in {rep.seconds:.1f} s"
    )


def register(sub: Subparsers) -> None:
    """Add the export command to the `provrepo` parser."""
    p = sub.add_parser(
        "export",
        help="events and lineage edges as Parquet (or JSON-lines) tables for DuckDB, Spark",
        description="Writes OUT/events/ (one row per event) and OUT/edges/ (child, parent "
        "record ids), Hive-partitioned by run_id. OUT keeps an export cursor: running the "
        "command again (after a kill, or later) goes on from where the last one stopped.",
    )
    p.add_argument("repo")
    p.add_argument("out", help="output directory (created; an earlier export there goes on)")
    p.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    p.add_argument("--run", metavar="R", help="only this run's events")
    p.add_argument(
        "--from-id", type=positive_int, default=None, help="first event id of a new export (1)"
    )
    p.add_argument(
        "--chunk-events",
        type=positive_int,
        default=None,
        help="ids per committed step (16,000,000): what a kill costs to redo",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_flag(p, "the summary as one JSON object")
    p.set_defaults(func=cmd_export)
