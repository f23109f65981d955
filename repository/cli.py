"""The `provrepo` command line.

Errors are one line on stderr: exit 2 for bad input (malformed arguments, unknown ids, bad
config, no repository), 1 for a failure inside the repository, never a traceback (set
PROVREPO_DEBUG=1 to see one). Read-only commands open the repository without its lock, so they
work beside a running driver that owns it.

Upper layers add commands through the `provrepo.commands` entry-point group: each entry point
is a function `register(subparsers)` that adds parsers whose `func(args) -> int` does the work.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from ._cli_common import (
    non_negative_int,
    open_read_only,
    positive_int,
    print_json_lines,
)
from ._cli_index import register as register_index_commands
from ._cli_lineage import register as register_lineage_commands
from ._cli_mine import register as register_mine_command
from ._errors import BadInput, NotFound, RepositoryError, RepositoryLocked

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(BadInput):
    """Malformed command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        raise CliError(f"{self.prog}: {message}")


# -- commands ------------------------------------------------------------------------------


def cmd_events(args) -> int:
    with open_read_only(args.repo) as repo:
        batch = repo.export(args.from_id, args.limit)
        print_json_lines(ev.to_dict() for ev in batch.events)
        for lo, hi in batch.skipped:
            print(f"provrepo: note: ids {lo}..{hi - 1} no longer exist (aged off)", file=sys.stderr)
    return EXIT_OK


def cmd_event(args) -> int:
    with open_read_only(args.repo) as repo:
        ev = repo.get_event(args.id)
        if ev is None:
            lo = repo.min_event_id
            have = f"ids {lo}..{repo.max_event_id}" if lo is not None else "no events"
            raise NotFound(f"no event with id {args.id} in {repo.path} (it holds {have})")
        print_json_lines([ev.to_dict()])
    return EXIT_OK


def cmd_stats(args) -> int:
    with open_read_only(args.repo) as repo:
        stats = repo.stats()
    if args.json:
        print_json_lines([stats])
        return EXIT_OK
    import time

    def when(ns):
        return "-" if not ns else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))

    lo = stats["first_event_id"]
    print(f"repository       {stats['path']}")
    print(f"owner            {stats['owner'] or 'none (not open)'}")
    print(
        f"events           {stats['events']:,} ({stats['rich_events']:,} rich, "
        f"{stats['lineage_records']:,} lineage records)"
    )
    ids = "-" if lo is None else f"{lo}..{stats['max_event_id']}"
    print(f"event ids        {ids}")
    oldest, newest = when(stats["oldest_event_time_ns"]), when(stats["newest_event_time_ns"])
    print(f"event times      {oldest} .. {newest}")
    print(
        f"event logs       {stats['logs']} ({stats['blocks']} blocks, "
        f"{_human(stats['log_bytes'])} + {_human(stats['toc_bytes'])} toc)"
    )
    print(
        f"search index     {stats['index_shards']} shard(s), {_human(stats['index_bytes'])}, "
        f"{stats['events_not_indexed']:,} events not indexed yet"
    )
    print(
        f"journals pending {stats['journals_pending']} sealed "
        f"({_human(stats['journal_bytes_pending'])}), "
        f"{stats['journals_open']} open, {stats['quarantined_journals']} quarantined"
    )
    return EXIT_OK


def cmd_verify(args) -> int:
    from ._layout import Layout
    from ._verify import verify

    with open_read_only(args.repo) as repo:
        problems, counts = verify(Layout(repo.path), repo.containers)
    summary = (
        f"{counts['logs']} logs, {counts['blocks']} blocks, {counts['events']:,} events, "
        f"{counts['journals']} sealed journals, {counts['frames']} frames"
    )
    if problems:
        for p in problems:
            print(p)
        print(f"verify: {len(problems)} problem(s) in {summary}", file=sys.stderr)
        return EXIT_FAIL
    print(f"ok: {summary}")
    return EXIT_OK


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="provrepo",
        description="A persistent provenance repository for record-level Spark lineage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

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
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("verify", help="check every frame, block and toc (exit 1 on problems)")
    p.add_argument("repo")
    p.set_defaults(func=cmd_verify)

    register_index_commands(sub)  # search, reindex, age-off
    register_lineage_commands(sub)  # trace, runs
    register_mine_command(sub)  # mine
    for register in _plugins():
        register(sub)
    return parser


def _plugins() -> list[Callable]:
    try:
        eps = entry_points(group="provrepo.commands")
    except TypeError:  # Python 3.10 without the selectable API
        eps = entry_points().get("provrepo.commands", [])
    out = []
    for ep in sorted(eps, key=lambda e: e.name):
        try:
            out.append(ep.load())
        except Exception as e:  # a broken plugin must not take the core commands down
            print(
                f"provrepo: warning: command plugin {ep.name} failed to load: {e}", file=sys.stderr
            )
    return out


def main(argv: list[str] | None = None) -> int:
    debug = bool(os.environ.get("PROVREPO_DEBUG"))
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except SystemExit as e:  # --help
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_OK
    except (BadInput, RepositoryLocked) as e:
        if debug:
            raise
        print(f"provrepo: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("provrepo: interrupted", file=sys.stderr)
        return 130
    except (RepositoryError, OSError) as e:
        if debug:
            raise
        print(f"provrepo: failed: {_one_line(e)}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as e:
        if debug:
            raise
        print(f"provrepo: internal error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return EXIT_FAIL


def _one_line(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
