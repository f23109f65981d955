"""`provrepo events`, `event`, `stats` and `verify`: the event store, read-only."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

from .. import NotFound, RepositoryStats, VerifyReport
from ._args import Subparsers, add_json_flag, non_negative_int, open_read_only, positive_int
from ._output import Output

EXIT_OK, EXIT_FAIL = 0, 1


def cmd_events(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        batch = repo.export(args.from_id, args.limit)
        out.json_lines(ev.to_dict() for ev in batch.events)
        for lo, hi in batch.skipped:
            out.note(f"ids {lo}..{hi - 1} no longer exist (aged off)")
    return EXIT_OK


def cmd_event(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        ev = repo.get_event(args.id)
        if ev is None:
            lo = repo.min_event_id
            have = f"ids {lo}..{repo.max_event_id}" if lo is not None else "no events"
            raise NotFound(f"no event with id {args.id} in {repo.path} (it holds {have})")
        out.json_lines([ev.to_dict()])
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        stats = repo.stats()
    out.result(stats.to_dict(), lambda: _stats_text(stats))
    return EXIT_OK


def _stats_text(st: RepositoryStats) -> Iterator[str]:
    def when(ns: int | None) -> str:
        return "-" if not ns else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))

    lo = st.first_event_id
    yield f"repository       {st.path}"
    yield f"owner            {st.owner or 'none (not open)'}"
    yield (
        f"events           {st.events:,} ({st.rich_events:,} rich, "
        f"{st.lineage_records:,} lineage records)"
    )
    ids = "-" if lo is None else f"{lo}..{st.max_event_id}"
    yield f"event ids        {ids}"
    oldest, newest = when(st.oldest_event_time_ns), when(st.newest_event_time_ns)
    yield f"event times      {oldest} .. {newest}"
    yield (
        f"event logs       {st.logs} ({st.blocks} blocks, "
        f"{_human(st.log_bytes)} + {_human(st.toc_bytes)} toc)"
    )
    yield (
        f"search index     {st.index_shards} shard(s), {_human(st.index_bytes)}, "
        f"{st.events_not_indexed:,} events not indexed yet"
    )
    yield (
        f"journals pending {st.journals_pending} sealed "
        f"({_human(st.journal_bytes_pending)}), "
        f"{st.journals_open} open, {st.quarantined_journals} quarantined"
    )


def cmd_verify(args: argparse.Namespace) -> int:
    out: Output = args.output
    with open_read_only(args.repo) as repo:
        report = repo.verify()
    summary = _verify_summary(report)
    if report.problems:
        out.text(report.problems)
        out.stderr(f"verify: {len(report.problems)} problem(s) in {summary}")
        return EXIT_FAIL
    out.text([f"ok: {summary}"])
    return EXIT_OK


def _verify_summary(r: VerifyReport) -> str:
    return (
        f"{r.logs} logs, {r.blocks} blocks, {r.events:,} events, "
        f"{r.forward_files} forward indexes, {r.line_marks} line marks files, "
        f"{r.journals} sealed journals, {r.frames} frames"
    )


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def register(sub: Subparsers) -> None:
    """Add the events, event, stats and verify commands to the `provrepo` parser."""
    p = sub.add_parser("events", help="export events by id, as JSON lines")
    p.add_argument("repo")
    p.add_argument("--from-id", type=positive_int, default=1, help="first event id (default 1)")
    p.add_argument("--limit", type=non_negative_int, default=100, help="at most this many (100)")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("event", help="one event by id, as JSON")
    p.add_argument("repo")
    p.add_argument("id", type=positive_int)
    p.set_defaults(func=cmd_event)

    p = sub.add_parser("stats", help="event count, id range, files, bytes, journals pending")
    p.add_argument("repo")
    add_json_flag(p, "one JSON object instead of text")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("verify", help="check every frame, block and toc (exit 1 on problems)")
    p.add_argument("repo")
    p.set_defaults(func=cmd_verify)
