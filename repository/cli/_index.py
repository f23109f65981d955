"""`provrepo search`, `provrepo reindex` and `provrepo age-off`.

`search` is read-only (no lock: works beside a running owner). `reindex` and `age-off` write,
so they take the owner lock: while another process owns the repository they fail with one
line and exit 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from .. import AgeOffReport, BadInput, ProvenanceRepository
from ._args import (
    Subparsers,
    add_json_flag,
    attribute,
    non_negative_int,
    open_owner,
    open_read_only,
    positive_duration,
    positive_size,
)
from ._output import Output

EXIT_OK, EXIT_FAIL = 0, 1


def cmd_search(args: argparse.Namespace) -> int:
    out: Output = args.output
    attributes = dict(args.attr) if args.attr else None
    with open_read_only(args.repo) as repo:
        events = repo.search(
            start=args.start,
            end=args.end,
            event_types=args.type,
            components=args.component,
            runs=args.run,
            attributes=attributes,
            query=args.query,
            limit=args.limit,
            newest_first=not args.oldest_first,
        )
        out.json_lines(ev.to_dict() for ev in events)
        st = repo.stats()
        if st.events_not_indexed:
            out.note(
                f"{st.events_not_indexed:,} events (ids from {st.indexed_next_id}) are not "
                "indexed yet, so not searched; the owner indexes them shortly, and "
                "`provrepo reindex` rebuilds the index"
            )
    return EXIT_OK


def cmd_reindex(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_owner(args.repo) as repo:
        n = repo.reindex(progress=not args.quiet)
        st = repo.stats()
    out.text([f"reindexed {n:,} events into {st.index_shards} shard(s), {st.index_bytes:,} bytes"])
    return EXIT_OK


def cmd_age_off(args: argparse.Namespace) -> int:
    out: Output = args.output
    if args.max_age is None and args.max_bytes is None:
        # Checked before opening: opening as owner recovers and rolls over (bad input
        # changes nothing).
        config = ProvenanceRepository.stored_config(args.repo)
        if config is None or (config.max_storage_time is None and config.max_storage_bytes is None):
            raise BadInput("no age-off limit: give --max-age or --max-bytes (none is configured)")
    with open_owner(args.repo) as repo:
        rep = repo.age_off(max_age=args.max_age, max_bytes=args.max_bytes)
    out.result(rep.to_dict(), lambda: _age_off_text(rep))
    if rep.unmet:
        out.warn(rep.unmet)
        return EXIT_FAIL
    return EXIT_OK


def _age_off_text(rep: AgeOffReport) -> Iterator[str]:
    ids = ", ".join(f"{lo}..{hi - 1}" for lo, hi in rep.deleted_logs) or "none"
    yield (
        f"deleted {len(rep.deleted_logs)} log(s) ({rep.events_deleted:,} events, ids {ids}) "
        f"and {len(rep.deleted_shards)} index shard(s); "
        f"{rep.bytes_before:,} -> {rep.bytes_after:,} bytes"
    )


def register(sub: Subparsers) -> None:
    """Add the search, reindex and age-off commands to the `provrepo` parser."""
    p = sub.add_parser(
        "search",
        help="events by time range and fields, as JSON lines (newest first)",
        description="Times: ISO-8601 (2025-06-01T12:00:00Z; no zone = local) or relative "
        "(-15m, -2h, -7d, now). --query takes Tantivy syntax over type, run, component, "
        "component_type, partition, attempt, time, id and attrs.NAME (indexed attributes).",
    )
    # Relative times look like options (-15m): let argparse take them as values, as it
    # does negative numbers (`--from=-15m` works in any case).
    p._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[A-Za-z]*$")
    p.add_argument("repo")
    p.add_argument("--from", dest="start", metavar="TIME", help="events at or after TIME")
    p.add_argument("--to", dest="end", metavar="TIME", help="events before TIME")
    p.add_argument("--type", action="append", metavar="T", help="event type (repeatable)")
    p.add_argument("--component", action="append", metavar="C", help="component id (repeatable)")
    p.add_argument("--run", action="append", metavar="R", help="run id (repeatable)")
    p.add_argument(
        "--attr",
        action="append",
        type=attribute,
        metavar="K=V",
        help="attribute equals (repeatable)",
    )
    p.add_argument("--query", metavar="Q", help="Tantivy query over the indexed fields")
    p.add_argument("--limit", type=non_negative_int, default=100, help="at most this many (100)")
    p.add_argument("--oldest-first", action="store_true", help="oldest events first")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("reindex", help="rebuild every search index from the event logs")
    p.add_argument("repo")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("age-off", help="delete the oldest event logs now, by age and/or total size")
    p.add_argument("repo")
    p.add_argument(
        "--max-age", type=positive_duration, metavar="DURATION", help="e.g. 7d (or configured)"
    )
    p.add_argument(
        "--max-bytes", type=positive_size, metavar="SIZE", help="e.g. 10GiB (or configured)"
    )
    add_json_flag(p, "the report as one JSON object")
    p.set_defaults(func=cmd_age_off)
