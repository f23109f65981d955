"""Argument types and repository openers shared by the CLI's command modules."""

from __future__ import annotations

import argparse
import math
from typing import TypeAlias

from .. import (
    BadInput,
    ProvenanceRepository,
    RecordRef,
    format_record_id,
    parse_duration,
    parse_record_id,
    parse_record_ref,
    parse_size,
)

# What `add_subparsers()` returns: each command module's `register(sub)` adds its parsers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


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
    try:
        return parse_record_id(text)
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def record_ref(text: str) -> RecordRef:
    """A record id as `record_id` takes it, or FILE@OFFSET: the text-input line holding that
    byte of that file (resolved against the repository later)."""
    try:
        return parse_record_ref(text)
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def triple(rid: int) -> str:
    """A record id as capture_point:partition:position."""
    return format_record_id(rid)
