"""Commands the agent adds to `provrepo` (through the `provrepo.commands` entry point)."""

from __future__ import annotations

import argparse


def _lines(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1_000 <= n <= 50_000_000:
        raise argparse.ArgumentTypeError(f"{text!r}: use 1000..50000000 lines")
    return n


def cmd_demo(args) -> int:
    from repository import BadInput

    from ._java import java_problem

    problem = java_problem()
    if problem is not None:  # before anything is written
        raise BadInput(f"the demo runs PySpark, and {problem}")
    from ._demo import run_demo

    return run_demo(args.repo, args.lines)


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="run a PySpark pipeline with lineage capture, then trace it (needs Java 17+)"
    )
    p.add_argument("--repo", default="provrepo-demo", help="where (default ./provrepo-demo)")
    p.add_argument("--lines", type=_lines, default=300_000, help="log lines to generate")
    p.set_defaults(func=cmd_demo)
