"""Argument types and output helpers shared by the CLI's command modules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

import msgspec

from ._config import parse_duration
from ._errors import BadInput
from ._repository import ProvenanceRepository

_json = msgspec.json.Encoder()


def open_read_only(path: str) -> ProvenanceRepository:
    """Open an existing repository for reading (no lock: works beside a running owner)."""
    return ProvenanceRepository.open(path, read_only=True)


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


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def print_json_lines(items: Iterable[dict]) -> None:
    out = sys.stdout.buffer
    for item in items:
        out.write(_json.encode(item))
        out.write(b"\n")
    out.flush()
