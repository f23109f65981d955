"""Packed int64 columns: the arrays inside lineage batches.

Three codecs, all vectorized with numpy (no per-value Python work):

- RANGE: an arithmetic progression (base, step) with no data at all. Record ids of a capture
  point's partition are positions 0..N-1, so most id columns cost nothing.
- PLAIN: `base + values`, values little-endian unsigned in the narrowest width that holds
  `max - min`. This is what writers put in journals: cheap to make on the capture path.
- DELTA: zigzag deltas, byte-shuffled (byte plane by plane) in the narrowest width. This is the
  storage form in event logs: sorted ids delta-encode to mostly-zero high planes, which zstd then
  squeezes (measured on word-count lineage: ~9 bits per association against ~15 for PLAIN).
"""

from __future__ import annotations

import msgspec
import numpy as np

RANGE, PLAIN, DELTA = 0, 1, 2
_WIDTHS = (1, 2, 4, 8)
_LE = {w: np.dtype(f"<u{w}") for w in _WIDTHS}  # storage is little-endian on every host


def _width_for(span: int) -> int:
    for w in _WIDTHS:
        if span < (1 << (8 * w)):
            return w
    return 8


class IntColumn(msgspec.Struct, array_like=True, gc=False, frozen=True):
    """A packed column of int64 values. Use `from_array` / `to_array`; the fields are the codec."""

    codec: int
    n: int
    base: int
    width: int  # bytes per value; the step for RANGE
    data: bytes = b""

    @classmethod
    def from_range(cls, r: range) -> IntColumn:
        return cls(RANGE, len(r), r.start, r.step, b"")

    @classmethod
    def from_array(cls, values) -> IntColumn:
        """Pack an array of ints (RANGE when it is a progression, else PLAIN)."""
        arr = np.ascontiguousarray(values, dtype=np.int64)
        n = len(arr)
        if n == 0:
            return cls(RANGE, 0, 0, 1, b"")
        first = int(arr[0])
        if n == 1:
            return cls(RANGE, 1, first, 1, b"")
        step = int(arr[1]) - first
        if n == 2 or (arr[1:] - arr[:-1] == step).all():
            return cls(RANGE, n, first, step, b"")
        lo = int(arr.min())
        span = int(arr.max()) - lo
        w = _width_for(span)
        packed = (arr - np.int64(lo)).astype(_LE[w])
        return cls(PLAIN, n, lo, w, packed.tobytes())

    def to_array(self) -> np.ndarray:
        """The values as a fresh-or-readonly int64 numpy array."""
        if self.codec == RANGE:
            return self.base + self.width * np.arange(self.n, dtype=np.int64)
        dt = _LE[self.width]
        if self.codec == PLAIN:
            raw = np.frombuffer(self.data, dtype=dt, count=self.n)
            return raw.astype(np.int64) + np.int64(self.base)
        if self.codec == DELTA:
            planes = np.frombuffer(self.data, dtype=np.uint8, count=self.n * self.width)
            z = (
                planes.reshape(self.width, self.n)
                .T.copy()
                .view(dt)
                .reshape(self.n)
                .astype(np.uint64)
            )
            deltas = (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)
            out = np.cumsum(deltas, dtype=np.int64)
            out += np.int64(self.base)
            return out
        raise ValueError(f"unknown int column codec {self.codec}")

    def compacted(self) -> IntColumn:
        """The DELTA (storage) form of a PLAIN column; RANGE and small columns stay as they are."""
        if self.codec != PLAIN or self.n < 4:
            return self
        arr = self.to_array()
        deltas = np.empty_like(arr)
        deltas[0] = 0
        np.subtract(arr[1:], arr[:-1], out=deltas[1:])
        base = int(arr[0])
        z = ((deltas << 1) ^ (deltas >> 63)).view(np.uint64)
        w = _width_for(int(z.max()))
        if w > self.width:
            return self
        packed = z.astype(_LE[w])
        data = packed.view(np.uint8).reshape(self.n, w).T.tobytes()
        return IntColumn(DELTA, self.n, base, w, data)

    def slice(self, start: int, stop: int) -> IntColumn:
        """Values [start, stop) as a column of their own."""
        start, stop = max(0, start), min(self.n, stop)
        if self.codec == RANGE:
            return IntColumn(
                RANGE, max(0, stop - start), self.base + start * self.width, self.width
            )
        return IntColumn.from_array(self.to_array()[start:stop])

    def __len__(self) -> int:
        return self.n
