"""Input splits of text files, computed as Hadoop's (old API) FileInputFormat does for
`sc.textFile`, so a captured pipeline has the same partitions as the vanilla one."""

from __future__ import annotations

import glob
import os
from urllib.parse import urlparse

LOCAL_BLOCK_SIZE = 32 * 1024 * 1024  # Hadoop's fs.local.block.size default
SPLIT_SLOP = 1.1


class UnsupportedInput(ValueError):
    """The path is not something the capture agent can read with byte offsets."""


def local_path(path: str) -> str:
    """A local filesystem path from a plain path or a file:// URI; other schemes fail loud."""
    if "://" in path:
        u = urlparse(path)
        if u.scheme != "file":
            raise UnsupportedInput(
                f"textFile({path!r}): only local or shared-filesystem paths (file://) can be "
                f"captured with byte offsets; {u.scheme}:// is not supported"
            )
        return u.path
    return path


def list_input_files(path: str) -> list[str]:
    """Files named by a path, a comma-separated list, a directory or a glob, in Hadoop's
    order: globs sorted, a directory's entries in the directory's own order (its local
    listStatus, as os.listdir's; vanilla `textFile` reads them so); hidden files and files
    starting with '_' or '.' are skipped."""
    files: list[str] = []
    for part in path.split(","):
        p = local_path(part.strip())
        matches = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not matches:
            raise FileNotFoundError(f"textFile: input path does not exist: {p}")
        for m in matches:
            if os.path.isdir(m):
                files.extend(
                    os.path.join(m, n)
                    for n in os.listdir(m)
                    if not n.startswith(("_", ".")) and os.path.isfile(os.path.join(m, n))
                )
            elif os.path.isfile(m):
                files.append(m)
            else:
                raise FileNotFoundError(f"textFile: input path does not exist: {m}")
    for f in files:
        if f.endswith((".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")):
            raise UnsupportedInput(
                f"textFile: compressed input {f} cannot be re-read by line (of the compressed "
                "inputs, gzip is supported with lineage); decompress it first"
            )
    return files


def compute_splits(
    files: list[str], min_partitions: int, block_size: int = LOCAL_BLOCK_SIZE
) -> list[tuple[str, int, int]]:
    """(path, start, length) splits, as mapred.FileInputFormat.getSplits."""
    sizes = [os.path.getsize(f) for f in files]
    total = sum(sizes)
    goal = total // max(min_partitions, 1)
    splits: list[tuple[str, int, int]] = []
    for f, length in zip(files, sizes):
        if length == 0 or f.endswith(".gz"):  # gzip: not splittable, read whole
            splits.append((os.path.abspath(f), 0, length))
            continue
        split_size = max(1, min(goal, block_size))
        remaining = length
        while remaining / split_size > SPLIT_SLOP:
            splits.append((os.path.abspath(f), length - remaining, split_size))
            remaining -= split_size
        if remaining:
            splits.append((os.path.abspath(f), length - remaining, remaining))
    return splits
