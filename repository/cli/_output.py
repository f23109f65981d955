"""`Output`: how every command prints, so none of them branches on `--json` itself.

Records go out as JSON lines (one object a line: `provrepo events`, `trace`, `search`, ...).
Results with a text form for people (`stats`, `runs`, `mine`, `age-off`) are printed as text,
or, when the command was given `--json`, as JSON lines of the same data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

_json = msgspec.json.Encoder()

Record = Mapping[str, Any]


class Output:
    """Where a command's results go: stdout as text or JSON lines; notes on stderr."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json

    def json_lines(self, records: Iterable[Record]) -> None:
        """Records as JSON lines, whatever the format asked for (records are data)."""
        out = sys.stdout.buffer
        for record in records:
            out.write(_json.encode(record))
            out.write(b"\n")
        out.flush()

    def result(self, records: Record | Iterable[Record], text: Callable[[], Iterable[str]]) -> None:
        """One result: JSON lines of `records` with `--json`, else the lines `text()` makes."""
        if self.as_json:
            self.json_lines([records] if isinstance(records, Mapping) else records)
        else:
            self.text(text())

    def text(self, lines: Iterable[str]) -> None:
        for line in lines:
            print(line)

    def stderr(self, line: str) -> None:
        print(line, file=sys.stderr)

    def note(self, message: str) -> None:
        self.stderr(f"provrepo: note: {message}")

    def warn(self, message: str) -> None:
        self.stderr(f"provrepo: warning: {message}")
