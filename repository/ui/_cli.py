"""`provrepo ui REPO [--host H] [--port P]`: serve the provenance UI until Ctrl-C."""

from __future__ import annotations

import argparse

from ._server import DEFAULT_HOST, DEFAULT_PORT, serve


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: use 0..65535 (0 picks a free port)")
    return v


def cmd_ui(args: argparse.Namespace) -> int:
    return serve(args.repo, args.host, args.port)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ui",
        help="serve a read-only provenance UI (search, events, lineage graphs, runs)",
        description="Prints the URL, then serves until Ctrl-C. Loopback only unless --host "
        "says otherwise; there is no authentication.",
    )
    p.add_argument("repo")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind ({DEFAULT_HOST})")
    p.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT}; 0: any free)"
    )
    p.set_defaults(func=cmd_ui)
