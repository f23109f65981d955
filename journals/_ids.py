"""Record ids: (capture point, partition, position) packed into one non-negative int64.

A trace hop is then arithmetic and array lookups, never string matching. Layout (high to low):
14 bits capture point, 18 bits partition, 31 bits position (63 bits, sign bit clear).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

CP_BITS, PARTITION_BITS, POSITION_BITS = 14, 18, 31
MAX_CAPTURE_POINT = (1 << CP_BITS) - 1
MAX_PARTITION = (1 << PARTITION_BITS) - 1
MAX_POSITION = (1 << POSITION_BITS) - 1
_PART_SHIFT = POSITION_BITS
_CP_SHIFT = POSITION_BITS + PARTITION_BITS


def pack_record_id(capture_point: int, partition: int, position: int) -> int:
    """The record id of `position` in `partition` at `capture_point`; raises if out of range."""
    if not 0 <= capture_point <= MAX_CAPTURE_POINT:
        raise ValueError(f"capture point {capture_point} out of range 0..{MAX_CAPTURE_POINT}")
    if not 0 <= partition <= MAX_PARTITION:
        raise ValueError(f"partition {partition} out of range 0..{MAX_PARTITION}")
    if not 0 <= position <= MAX_POSITION:
        raise ValueError(f"position {position} out of range 0..{MAX_POSITION}")
    return (capture_point << _CP_SHIFT) | (partition << _PART_SHIFT) | position


def unpack_record_id(record_id: int) -> tuple[int, int, int]:
    """(capture point, partition, position) of a record id."""
    if record_id < 0:
        raise ValueError(f"record id {record_id} is negative")
    return (
        record_id >> _CP_SHIFT,
        (record_id >> _PART_SHIFT) & MAX_PARTITION,
        record_id & MAX_POSITION,
    )


def record_id_base(capture_point: int, partition: int) -> int:
    """The id of position 0: ids of a partition's records are base + position."""
    return pack_record_id(capture_point, partition, 0)


def unpack_record_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorized `unpack_record_id` over an int64 array."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids >> _CP_SHIFT, (ids >> _PART_SHIFT) & MAX_PARTITION, ids & MAX_POSITION


def unique_ids(ids: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Sorted distinct values of an int64 array (or of several, as one set). numpy 2.4's
    `np.unique` hashes integers and takes ~15x as long as a sort; record ids do better still:
    chunks that are each ascending and do not overlap (a partition's rows) are concatenated
    without any pass, and ids with dense positions are deduplicated by a bitmap over the
    positions of the partitions present (a few ns an id). One sort is the fallback."""
    chunks = [ids] if isinstance(ids, np.ndarray) else list(ids)
    chunks = [np.asarray(c, dtype=np.int64) for c in chunks if len(c)]
    if not chunks:
        return np.zeros(0, dtype=np.int64)
    if _disjoint_runs(chunks):
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    if len(arr) >= _SMALL and int(arr.min()) >= 0:
        bitmap = _bitmap_unique(arr)
        if bitmap is not None:
            return bitmap
    s = np.sort(arr)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    out: np.ndarray = s[keep]
    return out


_SMALL = 2048  # ids below which a sort is as quick as anything
_MAX_BITMAP = 1 << 28  # bytes of scratch a bitmap may take (bools)


def _bitmap_unique(arr: np.ndarray) -> np.ndarray | None:
    """`unique_ids` of non-negative record ids by a bitmap over (partition present, position);
    None when that bitmap would be too large or too sparse to pay."""
    hi = arr >> _PART_SHIFT
    h0, h1 = int(hi.min()), int(hi.max())
    if h1 - h0 > 1 << 20:
        return None
    pos = arr & MAX_POSITION
    width = int(pos.max()) + 1
    present = np.bincount(hi - h0) > 0 if h1 > h0 else np.ones(1, dtype=bool)
    size = int(present.sum()) * width
    if size > _MAX_BITMAP or size > 32 * len(arr):
        return None
    rank = np.cumsum(present) - 1
    bits = np.zeros(size, dtype=bool)
    bits[rank[hi - h0] * width + pos] = True
    slots = np.flatnonzero(bits)
    parts = np.flatnonzero(present) + h0
    out: np.ndarray = (parts[slots // width] << _PART_SHIFT) | (slots % width)
    return out


def _disjoint_runs(chunks: list[np.ndarray]) -> bool:
    """Whether the chunks are each strictly ascending and, once ordered by their first value
    (the list is sorted so, in place), each above the last: then their concatenation is the
    set. Checks at ~1 ns a value."""
    chunks.sort(key=lambda c: int(c[0]))
    if any(int(a[-1]) >= int(b[0]) for a, b in pairwise(chunks)):
        return False
    return all(len(c) < 2 or bool((c[1:] > c[:-1]).all()) for c in chunks)


def group_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted distinct values, each value's index into them, their counts): `np.unique` with
    return_inverse and return_counts, by one stable argsort (see `unique_ids`)."""
    ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    first = np.empty(len(s), dtype=bool)
    first[:1] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    index = np.cumsum(first) - 1
    inverse = np.empty(len(ids), dtype=np.int64)
    inverse[order] = index
    return s[first], inverse, np.bincount(index, minlength=int(first.sum()))


def isin_sorted(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """Which of `values` occur in `sorted_unique` (ascending, distinct): a binary search each,
    where `np.isin` sorts both arrays together."""
    values = np.asarray(values, dtype=np.int64)
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_unique, values)
    at[at == len(sorted_unique)] = 0
    found: np.ndarray = sorted_unique[at] == values
    return found
