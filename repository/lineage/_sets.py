"""Sets of record ids as sorted int64 arrays, in linear time where the ids allow it.

A trace level is a union of gathered parent (or child) arrays. numpy's `unique` sorts or
hashes every element (~50-150 ns each here); record ids are (capture point, partition,
position) with dense positions, so a bitmap over the partitions' position ranges dedups and
sorts them in a few ns per id. Sorting remains the fallback when the ids are too sparse.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from journals import MAX_POSITION

POSITION_BITS = MAX_POSITION.bit_length()
EMPTY = np.zeros(0, dtype=np.int64)
_SMALL = 2048  # below this, a sort is as quick as anything
_MAX_BITMAP = 1 << 28  # bytes of scratch a bitmap may take (bools)


def sorted_unique(arr: np.ndarray) -> np.ndarray:
    """Distinct values of `arr`, ascending (a sort and one comparison pass)."""
    if len(arr) < 2:
        return np.array(arr, dtype=np.int64)
    a = np.sort(arr)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def unique_ids(chunks: list[np.ndarray] | np.ndarray) -> np.ndarray:
    """Distinct record ids of all the chunks, ascending."""
    if isinstance(chunks, np.ndarray):
        chunks = [chunks]
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return EMPTY
    if _disjoint_runs(chunks):  # e.g. one partition's rows each: nothing to merge
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    arr = np.asarray(arr, dtype=np.int64)
    if len(arr) < _SMALL:
        return sorted_unique(arr)
    hi = arr >> POSITION_BITS
    pos = arr & MAX_POSITION
    h0, h1 = int(hi.min()), int(hi.max())
    width = int(pos.max()) + 1
    if h1 - h0 > 1 << 20:
        return sorted_unique(arr)
    # Dense numbering of the partitions present, then one bitmap over (partition, position).
    present = np.bincount(hi - h0) > 0 if h1 > h0 else np.ones(1, dtype=bool)
    rank = np.cumsum(present) - 1
    n_parts = int(present.sum())
    size = n_parts * width
    if size > _MAX_BITMAP or size > 32 * len(arr):
        return sorted_unique(arr)
    bits = np.zeros(size, dtype=bool)
    bits[rank[hi - h0] * width + pos] = True
    slots = np.flatnonzero(bits)
    parts = np.flatnonzero(present) + h0
    return (parts[slots // width] << POSITION_BITS) | (slots % width)


def _disjoint_runs(chunks: list[np.ndarray]) -> bool:
    """Whether the chunks are each strictly ascending and, in list order, each above the
    last (then their concatenation is already the set). Sorts the list in place by first
    value; checks at ~1 ns a value."""
    chunks.sort(key=lambda c: int(c[0]))
    if any(int(a[-1]) >= int(b[0]) for a, b in pairwise(chunks)):
        return False
    return all(len(c) < 2 or bool((c[1:] > c[:-1]).all()) for c in chunks)


def contains(sorted_set: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each value, whether it is in `sorted_set` (ascending, distinct)."""
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    idx = np.searchsorted(sorted_set, values)
    idx[idx == len(sorted_set)] = 0
    return sorted_set[idx] == values


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Values of `a` (ascending, distinct) that are not in `b` (ascending, distinct)."""
    return a[~contains(b, a)]


def concat_sorted(parts: list[np.ndarray]) -> np.ndarray:
    """The union of ascending distinct arrays: a concatenation when their ranges do not
    overlap (levels of a trace at different capture points), else a merge by sort."""
    parts = sorted((p for p in parts if len(p)), key=lambda p: int(p[0]))
    if not parts:
        return EMPTY
    if all(int(a[-1]) < int(b[0]) for a, b in pairwise(parts)):
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    return unique_ids(parts)


def equal_runs(keys: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal values in `keys` (grouping a sorted array)."""
    if not len(keys):
        return []
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(keys)]
    return list(pairwise(bounds))


def gather_ranges(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of values[lo[k]:hi[k]] for all k, vectorized."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=values.dtype)
    if len(lo) == 1:
        return values[int(lo[0]) : int(hi[0])]
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return values[starts + np.arange(total)]
