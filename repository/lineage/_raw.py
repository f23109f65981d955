"""Raw input records re-read by byte range: text lines named by (file, offset), as Titian's
HadoopLineageRDD named them, so traces and culprits show the line itself."""

from __future__ import annotations

import atexit
import gzip
import json
import mmap
import os
import shutil
import tempfile
import threading
import zlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from journals import prefetch_ranges

_GUNZIP_LOCK = threading.Lock()
_GUNZIPPED: dict[tuple[str, int, int], tuple[str, int]] = {}
_GUNZIP_DIR: list[str] = []


def gunzipped(path: str, size: int, mtime_ns: int) -> tuple[str, int]:
    """(path, size) of the gzip file `path`'s decompressed copy, made once per process in a
    temporary directory removed at exit, keyed by the file's size and mtime (as listed when
    it was read); OSError if it cannot be decompressed."""
    key = (path, size, mtime_ns)
    with _GUNZIP_LOCK:
        hit = _GUNZIPPED.get(key)
        if hit is not None:
            return hit
        if not _GUNZIP_DIR:
            _GUNZIP_DIR.append(tempfile.mkdtemp(prefix="provrepo-gunzip-"))
            atexit.register(shutil.rmtree, _GUNZIP_DIR[0], True)
        copy = os.path.join(_GUNZIP_DIR[0], f"{len(_GUNZIPPED)}.txt")
        try:
            with gzip.open(path, "rb") as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise OSError(f"{path}: {e}") from e
        _GUNZIPPED[key] = (copy, os.path.getsize(copy))
        return _GUNZIPPED[key]


def _bytes_of(uri: str) -> str:
    """The local path to read a text input's bytes at: the file's, or a gzip file's (".gz":
    Spark reads it whole through Hadoop's codec) decompressed copy, whose offsets its
    records carry."""
    path = urlparse(uri).path if uri.startswith("file://") else uri
    if not path.endswith(".gz"):
        return path
    st = os.stat(path)
    return gunzipped(path, st.st_size, st.st_mtime_ns)[0]


def read_ranges(uri: str, spans: Sequence[tuple[int, ...]]) -> list[str | None]:
    """The records at (offset, length) spans of a local/shared file, decoded, without their
    line terminators; None for every span if the file cannot be read."""
    try:
        with open(_bytes_of(uri), "rb") as f:
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
    out: list[str | None] = []
    try:
        # pread, not a map: a map's faulted-in pages (and their read-ahead) count as the
        # driver's resident memory, hundreds of MB for a trace touching a large file.
        with open(_bytes_of(uri), "rb") as f:
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
