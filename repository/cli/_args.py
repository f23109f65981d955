"""Argument types and repository openers shared by the CLI's command modules."""

from __future__ import annotations

import argparse
import math
import re
from typing import TypeAlias

import numpy as np

from journals import pack_record_id, unpack_record_ids

from .. import BadInput, ProvenanceRepository, parse_duration, parse_size

# What `add_subparsers()` returns: each command module's `register(sub)` adds its parsers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_TRIPLE = re.compile(r"^(\d+):(\d+):(\d+)$")
_AT = re.compile(r"^(.+)@(\d+)$")


def open_read_only(path: str) -> ProvenanceRepository:
    """Open an existing repository for reading (no lock: works beside a running owner)."""
    return ProvenanceRepository.open(path, read_only=True)


def open_owner(path: str) -> ProvenanceRepository:
    """Open an existing repository as its owner, without background threads."""
    return ProvenanceRepository.open(path, create=False, start_threads=False)


def add_json_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--json`: the command's result as JSON lines instead of text (see `Output`)."""
    parser.add_argument("--json", action="store_true", help=help)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return v


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_duration(text: str) -> float:
    v = duration(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


def positive_size(text: str, what: str = "--max-bytes") -> int:
    try:
        v = parse_size(text, what)
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{what} must be positive")
    return v


def attribute(text: str) -> tuple[str, str]:
    """NAME=VALUE."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def record_id(text: str) -> int:
    """A record id: an integer, or capture_point:partition:position."""
    m = _TRIPLE.match(text.strip())
    try:
        if m:
            return pack_record_id(int(m[1]), int(m[2]), int(m[3]))
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: record ids are not negative")
    return value


def record_ref(text: str) -> int | tuple[str, int]:
    """A record id as `record_id` takes it, or FILE@OFFSET: the text-input line holding that
    byte of that file (resolved against the repository later)."""
    m = _AT.match(text)
    if m and not _TRIPLE.match(text.strip()):
        return m[1], int(m[2])
    return record_id(text)


def triple(rid: int) -> str:
    """A record id as capture_point:partition:position."""
    cp, part, pos = (int(x[0]) for x in unpack_record_ids(np.array([rid])))
    return f"{cp}:{part}:{pos}"
