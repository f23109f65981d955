"""Raw input records re-read by byte range: text lines named by (file, offset), as Titian's
HadoopLineageRDD named them, so traces and culprits show the line itself."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from journals import prefetch_ranges


def read_ranges(uri: str, spans: Sequence[tuple[int, ...]]) -> list[str | None]:
    """The records at (offset, length) spans of a local/shared file, decoded, without their
    line terminators; None for every span if the file cannot be read."""
    path = urlparse(uri).path if uri.startswith("file://") else uri
    try:
        with open(path, "rb") as f:
            if len(spans) > 8 and os.fstat(f.fileno()).st_size:
                # Many records: slice a read-only map instead of a seek and a read each.
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    return [
                        mm[o : o + max(0, n)].rstrip(b"\r\n").decode("utf-8", "replace")
                        for o, n, *_ in spans
                    ]
            out: list[str | None] = []
            for offset, length, *_ in spans:
                f.seek(offset)
                out.append(f.read(max(0, length)).rstrip(b"\r\n").decode("utf-8", "replace"))
            return out
    except (OSError, ValueError):
        return [None] * len(spans)


def read_in_groups(
    uri: str, starts: Sequence[int], ends: Sequence[int], which: Sequence[int]
) -> list[str | None]:
    """Line `which[k]` of the group of consecutive lines at bytes [starts[k], ends[k]) for
    each k, decoded and without its terminator as `read_ranges` gives it; None where the file
    no longer holds it (changed since it was read) or cannot be read."""
    path = urlparse(uri).path if uri.startswith("file://") else uri
    out: list[str | None] = []
    try:
        # pread, not a map: a map's faulted-in pages (and their read-ahead) count as the
        # driver's resident memory, hundreds of MB for a trace touching a large file.
        with open(path, "rb") as f:
            fd = f.fileno()
            prefetch_ranges(fd, zip(starts, ends))
            for s, e, j in zip(starts, ends, which):
                data = os.pread(fd, e - s, s)
                pieces = data.split(b"\n", j + 1)
                if len(data) != e - s or len(pieces) <= j:
                    out.append(None)  # the file changed since it was read
                else:
                    out.append(pieces[j].rstrip(b"\r\n").decode("utf-8", "replace"))
    except OSError:
        return [None] * len(starts)
    return out


def read_range(uri: str, offset: int, length: int) -> str | None:
    """The bytes of one record in a local/shared file, decoded, without its line terminator."""
    return read_ranges(uri, [(offset, length)])[0]


def jsonable(value: Any) -> Any:
    """A record's raw data as JSON carries it: the value itself when JSON can hold it (text
    lines, numbers, lists), otherwise its repr (tuples of bytes, objects)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
