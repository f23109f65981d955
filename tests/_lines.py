"""Lines as Spark's line reader (Hadoop's LineRecordReader, no `lineSep`) splits them: a line
ends at `\\n`, `\\r\\n` or a lone `\\r`; a split (start, length) reads the lines that start in
(start, start + length] (from 0 for the first split). The reference the line-reading tests
compare the repository's line reader with."""

from __future__ import annotations

import random

EOLS = ("\n", "\r\n", "mixed")


def join_lines(lines: list[str], eol: str, seed: int = 0) -> bytes:
    """`lines`, each followed by `eol`; "mixed": by `\\n`, `\\r\\n` or `\\r` at random (a
    `\\r` before an empty line becomes `\\n`, which would otherwise be the `\\r\\n` ending
    the line before it)."""
    if eol != "mixed":
        return (eol.join(lines) + eol).encode()
    rng = random.Random(seed)
    out = []
    for i, line in enumerate(lines):
        end = rng.choice(("\n", "\r\n", "\r"))
        if end == "\r" and i + 1 < len(lines) and not lines[i + 1]:
            end = "\n"
        out.append(line + end)
    return "".join(out).encode()


def line_starts(data: bytes) -> list[int]:
    """Where each line starts: 0, and after each `\\n` and each `\\r` not before a `\\n`
    (a `\\r\\n` ends one line: its `\\n` does); not at the end of the data."""
    starts = [0] if data else []
    for i, c in enumerate(data):
        lone_cr = c == 13 and data[i + 1 : i + 2] != b"\n"
        if (c == 10 or lone_cr) and i + 1 < len(data):
            starts.append(i + 1)
    return starts


def line_at(data: bytes, start: int) -> str:
    """The line starting at `start`, without its terminator."""
    end = start
    while end < len(data) and data[end] not in (10, 13):
        end += 1
    return data[start:end].decode()


def split_starts(data: bytes, start: int, length: int) -> list[int]:
    """Where the lines a split reads start, in order."""
    end = start + length
    return [p for p in line_starts(data) if (p <= end if start == 0 else start < p <= end)]


def split_lines(data: bytes, start: int, length: int) -> list[str]:
    """The lines a split reads, in order."""
    return [line_at(data, p) for p in split_starts(data, start, length)]
