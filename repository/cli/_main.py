"""The `provrepo` command line.

Errors are one line on stderr: exit 2 for bad input (malformed arguments, unknown ids, bad
config, no repository), 1 for a failure inside the repository, never a traceback (set
PROVREPO_DEBUG=1 to see one). Read-only commands open the repository without its lock, so they
work beside a running driver that owns it.

Commands are grouped one module per group (`_events`, `_export`, `_index`, `_lineage`,
`_mine`); each prints through `args.output`, an `Output` (JSON lines, or text unless the
command has `--json` and was given it). The CLI uses only the public `repository` facade.

Upper layers add commands through the `provrepo.commands` entry-point group: each entry point
is a function `register(subparsers)` that adds parsers whose `func(args) -> int` does the work
(`args.output` is theirs to use too).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import NoReturn, cast

from .. import BadInput, RepositoryError, RepositoryLocked
from ._args import Subparsers
from ._events import register as register_event_commands
from ._export import register as register_export_command
from ._index import register as register_index_commands
from ._lineage import register as register_lineage_commands
from ._mine import register as register_mine_command
from ._output import Output

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(BadInput):
    """Malformed command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage dump
        # main() prints "provrepo: error: ", so only a subcommand's name goes before the message.
        command = self.prog.partition(" ")[2]
        raise CliError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="provrepo",
        description="A persistent provenance repository for record-level Spark lineage.",
    )
    sub = cast(
        Subparsers,
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser),
    )
    sub.required = True

    register_event_commands(sub)  # events, event, stats, verify
    register_export_command(sub)  # export
    register_index_commands(sub)  # search, reindex, age-off
    register_lineage_commands(sub)  # trace, culprits, runs
    register_mine_command(sub)  # mine
    for register in _plugins():
        register(sub)
    return parser


def _plugins() -> list[Callable[[Subparsers], None]]:
    eps = entry_points(group="provrepo.commands")
    out: list[Callable[[Subparsers], None]] = []
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
        args.output = Output(as_json=bool(getattr(args, "json", False)))
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
