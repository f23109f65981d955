"""Sets of record ids as sorted int64 arrays (the set itself: `journals.unique_ids`), and
the small array helpers the lineage index and the forward index share."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from journals import MAX_POSITION, isin_sorted, unique_ids

POSITION_BITS = MAX_POSITION.bit_length()
EMPTY = np.zeros(0, dtype=np.int64)


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Values of `a` (ascending, distinct) that are not in `b` (ascending, distinct)."""
    return a[~isin_sorted(a, b)]


def concat_sorted(parts: list[np.ndarray]) -> np.ndarray:
    """The union of ascending distinct arrays: a concatenation when their ranges do not
    overlap (levels of a trace at different capture points), else a merge by sort."""
    parts = sorted((p for p in parts if len(p)), key=lambda p: int(p[0]))
    if not parts:
        return EMPTY
    if all(int(a[-1]) < int(b[0]) for a, b in pairwise(parts)):
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    return unique_ids(parts)


def value_runs(keys: np.ndarray) -> list[tuple[int, int, int]]:
    """(value, start, stop) of each run of equal values in `keys` (grouping a sorted array)."""
    if not len(keys):
        return []
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    stops = np.concatenate((cuts, [len(keys)])).tolist()
    return list(zip(keys[starts].tolist(), starts, stops, strict=True))


def equal_runs(keys: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal values in `keys` (grouping a sorted array)."""
    return [(a, b) for _, a, b in value_runs(keys)]


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
