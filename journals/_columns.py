"""Packed int64 columns: the arrays inside lineage batches.

Five codecs, all vectorized with numpy (no per-value Python work):

- RANGE: an arithmetic progression (base, step) with no data at all. Record ids of a capture
  point's partition are positions 0..N-1, so most id columns cost nothing.
- PLAIN: `base + values`, values little-endian unsigned in the narrowest width that holds
  `max - min`. This is what writers put in journals: cheap to make on the capture path.
- DELTA: zigzag deltas, byte-shuffled (byte plane by plane) in the narrowest width. This is the
  storage form in event logs for columns that mostly climb (offsets, sorted ids): they
  delta-encode to mostly-zero high planes, which zstd then squeezes.
- SHUFFLED: `base + values` like PLAIN, byte-shuffled: the storage form of columns that do not
  climb (CSR parent counts), where deltas would only add noise.
- SEGMENTED: the storage form of a CSR parent column; it needs the row lengths (parent counts)
  to decode (`LineageBatch.parent_array()` passes them). Deltas restart at each row: a row's
  first parent is coded against the previous row's first (rows come in first-appearance
  order, so these climb slowly), the rest as gaps inside the row (gap - 1 when every row
  ascends strictly, else zigzag). Gaps are Rice-coded, with a per-row parameter from the row's
  length and the column's span, when that beats byte-shuffling them (it does for line sets,
  whose gaps are near-geometric; ids that jump between partitions stay shuffled).
  Measured on word-count lineage over a Zipf text (bench/storage.py, s=1.1, 64 MB): combiner
  parents + counts 16.1 % of the text against 19.6 % with DELTA; the information in those line
  sets (given each word's count and first line) is ~14 %.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import numpy as np
from numpy.typing import ArrayLike

RANGE, PLAIN, DELTA, SHUFFLED, SEGMENTED = 0, 1, 2, 3, 4
_WIDTHS = (1, 2, 4, 8)
_LE: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    w: np.dtype(f"<u{w}") for w in _WIDTHS
}  # storage is little-endian on every host


def _width_for(span: int) -> int:
    for w in _WIDTHS:
        if span < (1 << (8 * w)):
            return w
    return 8


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _progression(arr: np.ndarray) -> int | None:
    """The step if `arr` (2+ values) is an arithmetic progression, else None. Rejects on the
    ends and a few values before paying for the full check."""
    n, first = len(arr), int(arr[0])
    step = int(arr[1]) - first
    if not _INT64_MIN <= step <= _INT64_MAX:  # e.g. [-2**62, 2**62]: a RANGE cannot hold it
        return None
    if n == 2 or (
        int(arr[-1]) - first == step * (n - 1)
        and (np.diff(arr[:64]) == step).all()
        and (arr[1:] - arr[:-1] == step).all()
    ):
        return step
    return None


def _zigzag(d: np.ndarray) -> np.ndarray:
    return ((d << 1) ^ (d >> 63)).view(np.uint64)


def _unzigzag(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)
    return out


def _shuffle(u: np.ndarray, w: int) -> bytes:
    """Non-negative values as `w`-byte little-endian ints, byte plane by byte plane."""
    out: bytes = u.astype(_LE[w]).view(np.uint8).reshape(len(u), w).T.tobytes()
    return out


def _unshuffle(
    data: bytes | memoryview, offset: int, n: int, w: int, a: int = 0, b: int | None = None
) -> np.ndarray:
    """Values [a, b) of `n` byte-shuffled `w`-byte values starting at byte `offset`."""
    b = n if b is None else b
    planes = np.frombuffer(data, dtype=np.uint8, count=n * w, offset=offset).reshape(w, n)
    out: np.ndarray = planes[:, a:b].T.copy().view(_LE[w]).reshape(b - a).astype(np.uint64)
    return out


def _row_starts(counts: np.ndarray, n: int) -> np.ndarray:
    """Positions of the first value of every non-empty row (CSR row lengths `counts`)."""
    counts = np.asarray(counts, dtype=np.int64)
    if int(counts.sum()) != n or (counts.size and counts.min() < 0):
        raise ValueError(f"row lengths must be non-negative and sum to {n}")
    starts: np.ndarray = np.cumsum(counts) - counts
    return starts[counts > 0]


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
    def from_array(cls, values: ArrayLike) -> IntColumn:
        """Pack an array of ints (RANGE when it is a progression, else PLAIN)."""
        arr = np.ascontiguousarray(values, dtype=np.int64)
        n = len(arr)
        if n == 0:
            return cls(RANGE, 0, 0, 1, b"")
        first = int(arr[0])
        if n == 1:
            return cls(RANGE, 1, first, 1, b"")
        step = _progression(arr)
        if step is not None:
            return cls(RANGE, n, first, step, b"")
        lo = int(arr.min())
        return cls._plain(arr, lo, _width_for(int(arr.max()) - lo))

    @classmethod
    def _plain(cls, arr: np.ndarray, lo: int, w: int) -> IntColumn:
        # Subtract straight into the narrow output: one pass (this runs on the capture path).
        packed = np.empty(len(arr), dtype=_LE[w])
        np.subtract(arr, np.int64(lo), out=packed, casting="unsafe")
        return cls(PLAIN, len(arr), lo, w, packed.tobytes())

    @classmethod
    def stored(cls, values: ArrayLike, counts: np.ndarray | None = None) -> IntColumn:
        """The storage form of `values` in one step: what `from_array(values).compacted(counts)`
        gives, without packing to PLAIN and unpacking again (rollover cuts every batch into
        block slices and stores each)."""
        arr = np.ascontiguousarray(values, dtype=np.int64)
        n = len(arr)
        if n < 4 or _progression(arr) is not None:
            return cls.from_array(arr)
        if counts is not None:
            return _segmented(arr, _row_starts(counts, n))
        lo = int(arr.min())
        w = _width_for(int(arr.max()) - lo)
        deltas = np.empty_like(arr)
        deltas[0] = 0
        np.subtract(arr[1:], arr[:-1], out=deltas[1:])
        # Deltas pay off only when they are smaller than the values' spread (sorted ids,
        # offsets); for unordered columns (counts) they double the noise.
        if np.abs(deltas).sum(dtype=np.float64) >= (arr - lo).sum(dtype=np.float64):
            return cls(SHUFFLED, n, lo, w, _shuffle(arr - lo, w))
        z = _zigzag(deltas)
        wd = _width_for(int(z.max()))
        if wd > w:
            return cls._plain(arr, lo, w)
        return cls(DELTA, n, int(arr[0]), wd, _shuffle(z, wd))

    def to_array(self, counts: np.ndarray | None = None) -> np.ndarray:
        """The values as a fresh-or-readonly int64 numpy array. A SEGMENTED column needs its
        CSR row lengths (`counts`); `LineageBatch.parent_array()` passes them."""
        if self.codec == RANGE:
            return self.base + self.width * np.arange(self.n, dtype=np.int64)
        if self.codec == PLAIN:
            raw = np.frombuffer(self.data, dtype=_LE[self.width], count=self.n)
            out: np.ndarray = raw.astype(np.int64) + np.int64(self.base)
            return out
        if self.codec == SHUFFLED:
            out = _unshuffle(self.data, 0, self.n, self.width).astype(np.int64)
            out += np.int64(self.base)
            return out
        if self.codec == DELTA:
            out = np.cumsum(_unzigzag(_unshuffle(self.data, 0, self.n, self.width)))
            out += np.int64(self.base)
            return out
        if self.codec == SEGMENTED:
            if counts is None:
                raise ValueError("a SEGMENTED column decodes only with its row lengths (counts)")
            return self._segmented_array(np.asarray(counts, dtype=np.int64))
        raise ValueError(f"unknown int column codec {self.codec}")

    def compacted(self, counts: np.ndarray | None = None) -> IntColumn:
        """The storage form of a PLAIN column (RANGE and small columns stay as they are):
        DELTA when the values mostly climb, else SHUFFLED; SEGMENTED when `counts` (CSR row
        lengths) are given, for a parent column."""
        if self.codec != PLAIN or self.n < 4:
            return self
        return IntColumn.stored(self.to_array(), counts)

    def take(self, start: int, stop: int) -> np.ndarray:
        """Values [start, stop) as int64, decoding no more than the codec needs (a DELTA
        column decodes its prefix; PLAIN, SHUFFLED and RANGE only the values asked for)."""
        start, stop = max(0, start), min(self.n, stop)
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        if self.codec == RANGE:
            return self.base + self.width * np.arange(start, stop, dtype=np.int64)
        w = self.width
        if self.codec == PLAIN:
            raw = np.frombuffer(self.data, dtype=_LE[w], count=stop - start, offset=start * w)
            values: np.ndarray = raw.astype(np.int64) + np.int64(self.base)
            return values
        if self.codec == SHUFFLED:
            out = _unshuffle(self.data, 0, self.n, w, start, stop).astype(np.int64)
            out += np.int64(self.base)
            return out
        if self.codec == DELTA:
            out = np.cumsum(_unzigzag(_unshuffle(self.data, 0, self.n, w, 0, stop)))[start:]
            out += np.int64(self.base)
            return out
        return self.to_array()[start:stop]  # SEGMENTED: raises, it needs its row lengths

    def progression(self) -> int | None:
        """The step when the column is stored as an arithmetic progression (its values are
        `base + step * i`, no data), else None."""
        return self.width if self.codec == RANGE else None

    def at(self, indexes: np.ndarray) -> np.ndarray:
        """The values at `indexes` (each in [0, n)) as int64, decoding no more than the codec
        needs: RANGE, PLAIN and SHUFFLED read only those values, DELTA its prefix up to the
        last one asked for (a lookup of a few entries of a slice)."""
        idx = np.asarray(indexes, dtype=np.int64)
        if not len(idx):
            return np.zeros(0, dtype=np.int64)
        if int(idx.min()) < 0 or int(idx.max()) >= self.n:
            raise IndexError(f"index outside a column of {self.n} values")
        w = self.width
        if self.codec == RANGE:
            out: np.ndarray = self.base + w * idx
            return out
        if self.codec == PLAIN:
            raw = np.frombuffer(self.data, dtype=_LE[w], count=self.n)
            out = raw[idx].astype(np.int64) + np.int64(self.base)
            return out
        if self.codec == SHUFFLED:
            planes = np.frombuffer(self.data, dtype=np.uint8, count=self.n * w).reshape(w, self.n)
            out = planes[:, idx].T.copy().view(_LE[w]).reshape(len(idx)).astype(np.int64)
            out += np.int64(self.base)
            return out
        if self.codec == DELTA:
            out = self.take(0, int(idx.max()) + 1)[idx]
            return out
        return self.to_array()[idx]  # SEGMENTED: raises, it needs its row lengths

    def row(self, counts: np.ndarray, r: int) -> np.ndarray:
        """The values of CSR row `r` (row lengths `counts`), decoding little beyond that row:
        what a point lookup of one record's parents needs."""
        counts = np.asarray(counts, dtype=np.int64)
        a, c = int(counts[:r].sum()), int(counts[r])
        if self.codec != SEGMENTED:
            return self.take(a, a + c)
        if c == 0:
            return np.zeros(0, dtype=np.int64)
        nonempty = counts > 0
        ns, rank = int(np.count_nonzero(nonempty)), int(np.count_nonzero(nonempty[:r]))
        ws, strict, wg, scale = _unpack_params(self.width)
        first = np.cumsum(_unzigzag(_unshuffle(self.data, 0, ns, ws, 0, rank + 1)))[-1:]
        first += np.int64(self.base)
        g0, m = a - rank, c - 1  # gaps of earlier rows; gaps of this row
        if m == 0:
            return first
        if scale:
            lens = counts[nonempty]
            kr = _rice_k(scale, lens)
            row_bits = kr * (lens - 1)
            nbits, bit0 = int(row_bits.sum()), int(row_bits[:rank].sum())
            rice = memoryview(self.data)[ns * ws :]
            if m <= _SMALL_ROW:
                g = _rice_row(rice, int(kr[rank]), m, nbits, bit0, g0)
            else:
                g = _rice_decode(rice, np.full(m, kr[rank], dtype=np.int64), nbits, bit0, g0)
        else:
            g = _unshuffle(self.data, ns * ws, self.n - ns, wg, g0, g0 + m)
        # In place: a hot key's row has 10^5-10^6 values, and every temporary of that size
        # costs its allocation and page faults again.
        d = np.empty(c, dtype=np.int64)
        d[0] = first[0]
        if strict:
            d[1:] = g
            d[1:] += 1
        else:
            d[1:] = _unzigzag(g)
        return np.cumsum(d, out=d)

    def _segmented_array(self, counts: np.ndarray) -> np.ndarray:
        n = self.n
        starts = _row_starts(counts, n)
        ns, ng = len(starts), n - len(starts)
        ws, strict, wg, scale = _unpack_params(self.width)
        if ng == 0:
            g = np.zeros(0, np.uint64)
        elif scale:
            lens = counts[counts > 0]
            k = np.repeat(_rice_k(scale, lens), lens - 1)
            g = _rice_decode(memoryview(self.data)[ns * ws :], k, int(k.sum()))
        else:
            g = _unshuffle(self.data, ns * ws, ng, wg)
        gd = g.astype(np.int64) + 1 if strict else _unzigzag(g)
        # One running sum over steps: in-row gaps, and at each row start the step from the
        # previous row's last value (first-value delta minus that row's gap total).
        d = np.empty(n, dtype=np.int64)
        in_row = np.ones(n, dtype=bool)
        in_row[starts] = False
        d[in_row] = gd
        cg = np.zeros(ng + 1, dtype=np.int64)
        np.cumsum(gd, out=cg[1:])
        before = cg[starts - np.arange(ns)]  # gap total before each row
        jumps = _unzigzag(_unshuffle(self.data, 0, ns, ws))
        jumps[1:] -= before[1:] - before[:-1]
        jumps[0] = self.base
        d[starts] = jumps
        return np.cumsum(d, out=d)

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


# -- SEGMENTED ---------------------------------------------------------------------------------
# `width` packs the parameters: first-value width (bits 0-3) | strict (bit 4) | gap width for
# shuffled gaps (bits 5-8) | Rice scale A (bits 9+; 0 = gaps byte-shuffled, not Rice-coded).
_MAX_K = 56  # Rice low parts are read through 8-byte windows at any bit offset


def _pack_params(ws: int, strict: bool, wg: int, scale: int) -> int:
    return ws | int(strict) << 4 | wg << 5 | scale << 9


def _unpack_params(width: int) -> tuple[int, bool, int, int]:
    return width & 15, bool(width >> 4 & 1), width >> 5 & 15, width >> 9


def _rice_k(scale: int, lens: np.ndarray) -> np.ndarray:
    """Rice parameter per row: floor(log2(scale / len)), at least 0, computed in integers
    (frexp's exponent is an exact bit length) so encoder and decoder always agree."""
    ratio = np.maximum(np.int64(scale) // np.maximum(lens, 1), 1)
    k: np.ndarray = np.frexp(ratio.astype(np.float64))[1].astype(np.int64) - 1
    return k


def _segmented(arr: np.ndarray, starts: np.ndarray) -> IntColumn:
    """SEGMENTED form of `arr` whose rows begin at `starts` (see the module docstring)."""
    n = len(arr)
    first = arr[starts]
    fd = np.empty_like(first)
    fd[0] = 0
    np.subtract(first[1:], first[:-1], out=fd[1:])
    zf = _zigzag(fd)
    in_row = np.ones(n, dtype=bool)
    in_row[starts] = False
    d = np.empty_like(arr)
    d[0] = 0
    np.subtract(arr[1:], arr[:-1], out=d[1:])
    gaps = d[in_row]
    strict = bool(gaps.size == 0 or gaps.min() >= 1)
    g = (gaps - 1).view(np.uint64) if strict else _zigzag(gaps)
    ws = _width_for(int(zf.max()))
    wg = _width_for(int(g.max())) if g.size else 1
    head = _shuffle(zf, ws)
    if g.size:
        lens = np.diff(np.append(starts, n))
        rice = _rice_plan(arr, lens, g, wg)
        if rice is not None:
            scale, k, q = rice
            return IntColumn(
                SEGMENTED,
                n,
                int(first[0]),
                _pack_params(ws, strict, wg, scale),
                head + _rice_encode(g, k, q),
            )
        head += _shuffle(g, wg)
    return IntColumn(SEGMENTED, n, int(first[0]), _pack_params(ws, strict, wg, 0), head)


def _rice_plan(
    arr: np.ndarray, lens: np.ndarray, g: np.ndarray, wg: int
) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(scale, k per gap as uint64, the gaps' high parts) if Rice coding beats byte-shuffled
    gaps for this column, else None.

    A row of c parents spread over a range of U ids has gaps of mean ~U/c, nearly geometric
    (word occurrences over lines), for which Rice with k = log2(ln2 * mean) is within a few
    percent of the entropy. Rows whose gaps are not like that (ids spanning partitions, with
    huge gaps that carry few bits) are cheaper byte-shuffled: the choice compares the exact Rice
    size with the order-0 entropy of the shuffled byte planes (about what zstd will get).
    """
    span = int(arr.max()) - int(arr.min()) + 1
    scale = min(max(1, int(0.69 * span)), 1 << 62)
    # k repeated per gap straight in uint64 (the shifts' type), and q kept for the encoder:
    # each is a pass over every gap, and rollover encodes every lineage batch's parents.
    k = np.repeat(_rice_k(scale, lens).astype(np.uint64), lens - 1)
    if int(k.max()) > _MAX_K:
        return None
    q = g >> k
    rice_bits = float(k.sum()) + float(q.sum(dtype=np.float64)) + len(g)
    if rice_bits > 64.0 * len(g):
        return None
    # Entropy per plane from a sample of ~4k gaps: a bias of ~0.05 bit per plane at most.
    sample = g[:: max(1, len(g) // 4096)]
    planes = sample.astype(_LE[wg]).view(np.uint8).reshape(len(sample), wg)
    shuffled_bits = 0.0
    for j in range(wg):
        freq = np.bincount(planes[:, j], minlength=256)
        p = freq[freq > 0] / len(sample)
        shuffled_bits -= float((p * np.log2(p)).sum()) * len(g)
    # zstd lands ~5-15 % above the order-0 entropy (measured on word-count lineage).
    return (scale, k, q) if rice_bits < 1.05 * shuffled_bits else None


def _rice_encode(g: np.ndarray, k64: np.ndarray, q: np.ndarray) -> bytes:
    """Low parts (k bits each, packed LSB-first) then high parts in unary (q zeros, a one);
    `k64` the parameters (uint64), `q` the gaps' high parts (g >> k64)."""
    n = len(g)
    low = g & ((np.uint64(1) << k64) - np.uint64(1))
    k = k64.view(np.int64)
    off = np.cumsum(k) - k
    nbits = int(off[-1] + k[-1]) if n else 0
    words = np.zeros(nbits // 64 + 2, dtype=np.uint64)
    # Each low part lands in one 64-bit word and spills into the next (an empty spill when it
    # fits: (x >> 1) >> 63 - s is x >> 64 - s, 0 for s == 0). Offsets ascend, so a word's
    # pieces are adjacent: OR them together with reduceat.
    w0 = off >> 6
    sh = (off & 63).astype(np.uint64)
    groups = np.flatnonzero(np.diff(w0, prepend=-1))
    at = w0[groups]
    words[at] |= np.bitwise_or.reduceat(low << sh, groups)
    spill = (low >> np.uint64(1)) >> (np.uint64(63) - sh)
    words[at + 1] |= np.bitwise_or.reduceat(spill, groups)
    low_bytes = words.astype("<u8").tobytes()[: (nbits + 7) // 8]
    ones = np.cumsum(q.astype(np.int64) + 1) - 1
    bits = np.zeros(int(ones[-1]) + 1, dtype=np.uint8)
    bits[ones] = 1
    return low_bytes + np.packbits(bits, bitorder="little").tobytes()


_SMALL_ROW = 64  # rows with at most this many gaps are looked up in plain Python


def _rice_row(data: memoryview, k: int, m: int, nbits: int, bit0: int, gap0: int) -> np.ndarray:
    """The m gaps (all with parameter k) from gap number gap0 of a Rice stream, for one short
    row: Python ints over a few bytes instead of a dozen numpy calls on tiny arrays (numpy's
    per-call cost dominates a point lookup)."""
    nlow = (nbits + 7) // 8
    x = int.from_bytes(data[bit0 >> 3 : (bit0 + m * k + 7) >> 3], "little") >> (bit0 & 7)
    mask = (1 << k) - 1
    low = [(x >> (j * k)) & mask for j in range(m)]
    # Ones number gap0-1 .. gap0+m-1 of the unary stream end the gaps before and in the row.
    unary = np.frombuffer(data, dtype=np.uint8, offset=nlow)
    ones_upto = np.cumsum(_popcount(unary), dtype=np.int64)  # ones in bytes [0, i]
    first_byte = int(np.searchsorted(ones_upto, gap0, side="left")) if gap0 else 0
    last_byte = int(np.searchsorted(ones_upto, gap0 + m, side="left"))
    if last_byte >= len(unary):
        raise ValueError("SEGMENTED column: Rice stream is truncated")
    skipped = int(ones_upto[first_byte - 1]) if first_byte else 0
    y = int.from_bytes(data[nlow + first_byte : nlow + last_byte + 1], "little")
    pos = []
    while y:
        lsb = y & -y
        pos.append(lsb.bit_length() - 1)
        y ^= lsb
    want = gap0 - skipped  # index in `pos` of one number gap0
    prev = pos[want - 1] if want else -1
    ends = pos[want : want + m]
    if len(ends) < m:
        raise ValueError("SEGMENTED column: Rice stream is truncated")
    q = [b - a - 1 for a, b in zip([prev, *ends[:-1]], ends)]
    return np.array([(qj << k) | lj for qj, lj in zip(q, low)], dtype=np.uint64)


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
_popcount = getattr(np, "bitwise_count", _POPCOUNT.__getitem__)  # the ufunc: numpy >= 2.0


def _rice_decode(
    data: memoryview, k: np.ndarray, nbits: int, bit0: int = 0, gap0: int = 0
) -> np.ndarray:
    """Gaps gap0 .. gap0+len(k)-1 of a Rice stream whose low parts take `nbits` in all; `k`
    are those gaps' parameters and `bit0` where their low parts start. Reads only the bytes
    those gaps occupy (a point lookup decodes one row of a slice)."""
    n = len(k)
    nlow = (nbits + 7) // 8
    # In place where it can be (see `row`); k and the offsets are non-negative, so their
    # uint64 views are their values.
    k64 = k.view(np.uint64) if k.dtype == np.int64 else k.astype(np.uint64)
    off = np.cumsum(k)
    off -= k
    off += bit0 & 63
    # Low parts: each spans at most two aligned 64-bit words; (x << 63 - s) << 1 is x << 64 - s
    # without the undefined shift by 64 when s == 0.
    lo, hi = (bit0 >> 6) * 8, min(nlow, (bit0 + int(k.sum()) + 7) // 8)
    words = np.zeros((hi - lo) // 8 + 2, dtype=np.uint64)
    words.view(np.uint8)[: hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
    if sys.byteorder == "big":  # pragma: no cover - storage is little-endian
        words.byteswap(inplace=True)
    w = off >> 6
    sh = (off & 63).view(np.uint64)
    low = words[w]
    low >>= sh
    w += 1
    up = words[w]
    np.subtract(np.uint64(63), sh, out=sh)
    up <<= sh
    up <<= np.uint64(1)
    low |= up
    del up, w, sh
    mask = np.left_shift(np.uint64(1), k64)
    mask -= np.uint64(1)
    low &= mask
    # High parts in unary: gap j ends at the j-th one. Find the bytes holding ones gap0-1 ..
    # gap0+n-1 by popcount, then the ones' positions there (a bool view: nonzero is fast).
    unary = np.frombuffer(data, dtype=np.uint8, offset=nlow)
    first_byte, skipped = 0, 0
    if gap0:
        ones_upto = np.cumsum(_popcount(unary), dtype=np.int64)  # ones in bytes [0, i]
        first_byte = int(np.searchsorted(ones_upto, gap0, side="left"))  # holds one gap0-1
        last_byte = int(np.searchsorted(ones_upto, gap0 + n, side="left"))
        skipped = int(ones_upto[first_byte - 1]) if first_byte else 0
        unary = unary[first_byte : last_byte + 1]
    bits = np.unpackbits(unary, bitorder="little")
    ones = np.flatnonzero(bits.view(np.bool_))
    want = gap0 - skipped  # index in `ones` of one number gap0
    if want < 0 or len(ones) < want + n:
        raise ValueError("SEGMENTED column: Rice stream is truncated")
    prev = ones[want - 1] if want else -1
    q = np.diff(ones[want : want + n], prepend=prev)
    q -= 1
    out: np.ndarray = q.view(np.uint64)
    out <<= k64
    out |= low
    return out
