"""Rich events to Arrow columns without a Python object per event.

Rich events are stored as msgspec's msgpack of `ProvenanceEvent` (array_like: one 13-element
array per event). Decoding them one object at a time costs about a microsecond an event (and
as much again to turn the objects into columns), which caps an export near 1 M events/s. Here
a whole set of events is parsed field by field with numpy, every event's read position
advancing in lockstep, and strings become Arrow string views into the stored bytes (no copy).

Each event's end is known from the block's length table, so anything the vectorized parser does
not take (an unexpected type byte, more than `MAX_ITEMS` parents or attributes, an unsigned
value beyond int64, a parse that does not end exactly at the event's end) is decoded by
msgspec instead, and its values patched in: the result is always what msgspec would decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from journals import decode_event

MAX_ITEMS = 64  # parents / attributes per event parsed in lockstep; more: decoded by msgspec
_FIELDS = 13  # ProvenanceEvent's fields, in order (array_like)
PAD = 16  # bytes after the data, so fixed-width gathers never leave the buffer


def _tables() -> tuple[np.ndarray, ...]:
    """Per type byte: int width (-1 not an int, 0 a fixint), int signedness; string header
    size (0 not a string), string length width; array/map header size and count width."""
    iw = np.full(256, -1, np.int64)
    iw[0x00:0x80] = 0
    iw[0xE0:0x100] = 0
    for tag, w in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
        iw[tag] = w
    isig = np.zeros(256, bool)
    for tag, w in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
        iw[tag] = w
        isig[tag] = True
    sh = np.zeros(256, np.int64)  # string: header bytes (0 = not a string)
    sw = np.zeros(256, np.int64)  # string: width of the length after the tag (0 = in the tag)
    sh[0xA0:0xC0] = 1
    for tag, w in ((0xD9, 1), (0xDA, 2), (0xDB, 4)):
        sh[tag], sw[tag] = 1 + w, w
    return iw, isig, sh, sw


_INT_W, _INT_SIGNED, _STR_HEAD, _STR_W = _tables()


def _container_tables(fix_lo: int, w16: int, w32: int) -> tuple[np.ndarray, np.ndarray]:
    head = np.zeros(256, np.int64)
    width = np.zeros(256, np.int64)
    head[fix_lo : fix_lo + 16] = 1
    head[w16], width[w16] = 3, 2
    head[w32], width[w32] = 5, 4
    return head, width


_ARR_HEAD, _ARR_W = _container_tables(0x90, 0xDC, 0xDD)
_MAP_HEAD, _MAP_W = _container_tables(0x80, 0xDE, 0xDF)


@dataclass
class Spans:
    """A string column as spans of the stored bytes: (start, length, present) per value."""

    start: np.ndarray
    length: np.ndarray
    present: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Spans:
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool))

    def select(self, idx: np.ndarray) -> Spans:
        return Spans(self.start[idx], self.length[idx], self.present[idx])


@dataclass
class RichColumns:
    """Columns of n rich events: numbers as numpy arrays, strings as `Spans` of `data` (turned
    into Arrow string views by `strings`), attributes and parents as CSR (per-event counts,
    then the items in event order)."""

    n: int
    data: np.ndarray  # the stored bytes (and any appended by the msgspec fallback), padded
    event_id: np.ndarray
    time_ns: np.ndarray
    partition: np.ndarray
    attempt: np.ndarray
    record_id: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    has_location: np.ndarray
    spans: dict[str, Spans]  # event_type run_id component_id component_type uri details
    parent_counts: np.ndarray
    parents: np.ndarray
    attr_counts: np.ndarray
    attr_keys: Spans
    attr_values: Spans
    fallback: int = 0  # events decoded by msgspec rather than in lockstep

    def strings(self, name: str) -> pa.Array:
        """String column `name` (or `attr_keys`, `attr_values`) as Arrow string views."""
        sp = getattr(self, name) if name.startswith("attr_") else self.spans[name]
        return string_views(self.data, sp.start, sp.length, sp.present)

    def same_string(self, name: str) -> str | None:
        """The value of string column `name` when every event has that same one (and there
        is at least one event), else None: compared 8 bytes at a time, no hashing (a group
        of events mostly belongs to one run)."""
        sp = self.spans[name]
        if not self.n or not sp.present.all():
            return None
        size = int(sp.length[0])
        if (sp.length != size).any():
            return None
        words = unaligned(self.data, "<u8")
        for k in range(0, size, 8):
            w = words[sp.start + k]
            if size - k < 8:
                w &= _LOW[size - k]
            if (w != w[0]).any():
                return None
        first = int(sp.start[0])
        return bytes(self.data[first : first + size]).decode()

    def select(self, idx: np.ndarray) -> RichColumns:
        """Events `idx` (ascending) only."""
        pidx = _csr_items(self.parent_counts, idx)
        aidx = _csr_items(self.attr_counts, idx)
        return RichColumns(
            n=len(idx),
            data=self.data,
            event_id=self.event_id[idx],
            time_ns=self.time_ns[idx],
            partition=self.partition[idx],
            attempt=self.attempt[idx],
            record_id=self.record_id[idx],
            offset=self.offset[idx],
            length=self.length[idx],
            has_location=self.has_location[idx],
            spans={k: v.select(idx) for k, v in self.spans.items()},
            parent_counts=self.parent_counts[idx],
            parents=self.parents[pidx],
            attr_counts=self.attr_counts[idx],
            attr_keys=self.attr_keys.select(aidx),
            attr_values=self.attr_values.select(aidx),
        )


def _csr_items(counts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Indexes of the items of CSR rows `rows` (row lengths `counts`), in row order."""
    ends = np.cumsum(counts)
    lens = counts[rows]
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first = ends[rows] - lens
    return np.repeat(first - (np.cumsum(lens) - lens), lens) + np.arange(total)


class _Parser:
    """Lockstep reads over the events still `ok`; a bad read turns an event's `ok` off.

    Each read first looks at the range of the type bytes: when they are all of one kind (all
    fixints, all fixstrs, one and the same tag: the usual case, events of one run look
    alike) it takes a path of a few whole-array operations; otherwise the general one, which
    handles every tag per event. Both give the same values."""

    def __init__(self, buf: np.ndarray, starts: np.ndarray) -> None:
        self.buf = buf
        self.be = unaligned(buf, ">u8")
        self.p = starts.copy()
        self.ok = np.ones(len(starts), bool)
        self.limit = len(buf) - PAD

    def _tag(self) -> tuple[np.ndarray, int, int]:
        tag = self.buf[self.p]
        if not len(tag):
            return tag, 0, 0
        return tag, int(tag.min()), int(tag.max())

    def _after_tag(self, w: np.ndarray) -> np.ndarray:
        """The `w`-byte (0, 1, 2, 4 or 8) big-endian unsigned value after each tag byte;
        read only where w > 0 (most values are in their tag byte)."""
        out = np.zeros(len(w), np.uint64)
        idx = np.flatnonzero(w > 0)
        if len(idx) == len(w):
            return self.be[self.p + 1].astype(np.uint64) >> (64 - 8 * w).astype(np.uint64)
        if len(idx):
            raw = self.be[self.p[idx] + 1].astype(np.uint64)
            out[idx] = raw >> (64 - 8 * w[idx]).astype(np.uint64)
        return out

    def _after_tag_all(self, w: int) -> np.ndarray:
        """The `w`-byte (1, 2, 4 or 8) big-endian unsigned value after every tag byte."""
        u: np.ndarray = self.be[self.p + 1].astype(np.uint64)
        if w < 8:
            u >>= np.uint64(64 - 8 * w)
        return u

    def _advance(self, size: np.ndarray | int) -> None:
        nxt = self.p + size
        if len(nxt) and int(nxt.max()) <= self.limit:  # nothing runs past the data
            self.p = nxt
            return
        self.ok &= nxt <= self.limit
        self.p = np.where(self.ok, nxt, self.p)

    def int_(self) -> np.ndarray:
        tag, lo, hi = self._tag()
        if hi < 0x80:  # positive fixints: the value is the tag
            self._advance(1)
            return tag.astype(np.int64)
        if lo >= 0xE0:  # negative fixints
            self._advance(1)
            return tag.astype(np.int64) - 256
        w = int(_INT_W[lo])
        if lo == hi and w > 0:  # one tag: one width, one signedness
            u = self._after_tag_all(w)
            if _INT_SIGNED[lo]:
                if w < 8:  # sign-extend: shift the value to the top, shift back down
                    u <<= np.uint64(64 - 8 * w)
                    v = u.view(np.int64)
                    v >>= 64 - 8 * w
                else:
                    v = u.view(np.int64)
            else:
                if w == 8:  # past int64: not an int64 column value, msgspec decodes it
                    self.ok &= u < np.uint64(1 << 63)
                v = u.view(np.int64)
            self._advance(1 + w)
            return v
        return self._int_any(tag)

    def _int_any(self, tag: np.ndarray) -> np.ndarray:
        w = _INT_W[tag]
        self.ok &= w >= 0
        w = np.maximum(w, 0)
        u = self._after_tag(w)
        sign = _INT_SIGNED[tag]
        # Unsigned 8-byte values past int64 cannot be an int64 column: msgspec decodes them.
        self.ok &= ~((w == 8) & ~sign & (u >= np.uint64(1 << 63)))
        v = u.view(np.int64)
        s = np.flatnonzero(sign & (w < 8))
        if len(s):  # sign-extend int8/16/32: shift the value to the top, shift back down
            sh = (64 - 8 * w[s]).astype(np.uint64)
            v[s] = (u[s] << sh).view(np.int64) >> sh.astype(np.int64)
        fix = np.flatnonzero(w == 0)
        if len(fix):
            t = tag[fix].astype(np.int64)
            v[fix] = np.where(t >= 0xE0, t - 256, t)
        self._advance(1 + w)
        return v

    def str_(self, nullable: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, length, present) of a string at each position (nil allowed if nullable)."""
        tag, lo, hi = self._tag()
        if _STR_HEAD[lo] == 1 and _STR_HEAD[hi] == 1:  # fixstrs (0xa0-0xbf): length in tag
            n = (tag & 0x1F).astype(np.int64)
            start = self.p + 1
            self._advance(1 + n)
            return start, n, np.ones(len(tag), bool)
        if lo == hi and _STR_HEAD[lo] > 1:  # str8/16/32, all alike
            head = int(_STR_HEAD[lo])
            n = self._after_tag_all(int(_STR_W[lo])).astype(np.int64)
            start = self.p + head
            self._advance(head + n)
            return start, n, np.ones(len(tag), bool)
        if nullable and lo == hi == 0xC0:  # all nil
            start = self.p + 1
            self._advance(1)
            return start, np.zeros(len(tag), np.int64), np.zeros(len(tag), bool)
        head = _STR_HEAD[tag]
        nil = (tag == 0xC0) if nullable else np.zeros(len(tag), bool)
        self.ok &= (head > 0) | nil
        w = _STR_W[tag]
        n = np.where(w == 0, tag & 0x1F, self._after_tag(w).astype(np.int64))
        n[nil | (head == 0)] = 0
        start = self.p + np.maximum(head, 1)
        self._advance(np.where(nil, 1, head + n))
        return start, n, ~nil

    def count(self, head_t: np.ndarray, width_t: np.ndarray, nullable: bool = False):
        """(count, present) of an array or map header (nil allowed if nullable)."""
        tag, lo, hi = self._tag()
        if head_t[lo] == 1 and lo >> 4 == hi >> 4:  # fixarrays / fixmaps: count in tag
            self._advance(1)
            return (tag & 0x0F).astype(np.int64), np.ones(len(tag), bool)
        head = head_t[tag]
        nil = (tag == 0xC0) if nullable else np.zeros(len(tag), bool)
        self.ok &= (head > 0) | nil
        w = width_t[tag]
        c = np.where(w == 0, tag & 0x0F, self._after_tag(w).astype(np.int64))
        c[nil | (head == 0)] = 0
        self._advance(np.where(nil, 1, head))
        return c, ~nil

    def sub(self, idx: np.ndarray) -> _Parser:
        """A parser over the events `idx` only (for variable-length items); this one when
        `idx` is every event."""
        if len(idx) == len(self.p):
            return self
        s = _Parser.__new__(_Parser)
        s.buf, s.be, s.limit = self.buf, self.be, self.limit
        s.p, s.ok = self.p[idx], self.ok[idx].copy()
        return s

    def merge(self, idx: np.ndarray, s: _Parser) -> None:
        if s is not self:
            self.p[idx] = s.p
            self.ok[idx] = s.ok


def decode_rich(data: bytes, starts: np.ndarray, ends: np.ndarray, event_ids: np.ndarray):
    """Columns of the rich events encoded at data[starts[k]:ends[k]] (ids `event_ids`).
    `data` is copied once with `PAD` bytes appended unless it already has them after the
    last event."""
    n = len(starts)
    if n and len(data) - PAD >= int(np.max(ends)):
        buf = np.frombuffer(data, dtype=np.uint8)  # the caller left room: no copy
    else:
        buf = np.frombuffer(data + bytes(PAD), dtype=np.uint8)
    ps = _Parser(buf, np.asarray(starts, np.int64))
    cnt, _ = ps.count(_ARR_HEAD, _ARR_W)
    ps.ok &= cnt == _FIELDS
    time_ns = ps.int_()
    strs = {
        k: Spans(*ps.str_(False))
        for k in ("event_type", "run_id", "component_id", "component_type")
    }
    partition = ps.int_()
    attempt = ps.int_()
    record_id = ps.int_()
    # parents: an array of ints, read level by level over the events that have that many
    pcount, _ = ps.count(_ARR_HEAD, _ARR_W)
    ps.ok &= pcount <= MAX_ITEMS
    pcount = np.where(ps.ok, pcount, 0)
    p_ev, p_lvl, p_val = [], [], []
    for j in range(int(pcount.max()) if n else 0):
        idx = np.flatnonzero(pcount > j)
        s = ps.sub(idx)
        p_val.append(s.int_())
        ps.merge(idx, s)
        p_ev.append(idx)
        p_lvl.append(np.full(len(idx), j))
    # attributes: a map of strings to strings, the same way
    acount, _ = ps.count(_MAP_HEAD, _MAP_W)
    ps.ok &= acount <= MAX_ITEMS
    acount = np.where(ps.ok, acount, 0)
    a_ev, a_lvl, a_key, a_val = [], [], [], []
    for j in range(int(acount.max()) if n else 0):
        idx = np.flatnonzero(acount > j)
        s = ps.sub(idx)
        a_key.append(s.str_(False))
        a_val.append(s.str_(False))
        ps.merge(idx, s)
        a_ev.append(idx)
        a_lvl.append(np.full(len(idx), j))
    # location: nil, or [uri, offset, length]
    lcount, has_loc = ps.count(_ARR_HEAD, _ARR_W, nullable=True)
    ps.ok &= ~has_loc | (lcount == 3)
    offset = np.zeros(n, np.int64)
    length = np.zeros(n, np.int64)
    strs["uri"] = Spans.empty(n)
    li = np.flatnonzero(has_loc & ps.ok)
    if len(li):
        s = ps.sub(li)
        us, ul, _ = s.str_(False)
        offset[li] = s.int_()
        length[li] = s.int_()
        ps.merge(li, s)
        strs["uri"].start[li], strs["uri"].length[li], strs["uri"].present[li] = us, ul, True
    strs["details"] = Spans(*ps.str_(True))
    ps.int_()  # the stored event_id (0): ids come from positions
    ok = ps.ok & (ps.p == np.asarray(ends, np.int64))

    parents = _Entries(p_ev, p_lvl, [p_val])
    attrs = _Entries(a_ev, a_lvl, [*_spans(a_key), *_spans(a_val)])
    bad = np.flatnonzero(~ok)
    extra = bytearray()
    if len(bad):
        # What the lockstep parse did not take: msgspec decodes it, values are patched in;
        # its strings are appended after the stored bytes, so spans address them alike.
        base = len(data)

        def put(col: str, k: int, value: str | None) -> None:
            st = strs[col]
            if value is None:
                st.present[k] = False
                st.length[k] = 0
                return
            raw = value.encode()
            st.start[k], st.length[k], st.present[k] = base + len(extra), len(raw), True
            extra.extend(raw)

        parents.drop(bad)
        attrs.drop(bad)
        for k in bad.tolist():
            ev = decode_event(data[int(starts[k]) : int(ends[k])])
            time_ns[k], partition[k], attempt[k] = ev.event_time_ns, ev.partition, ev.attempt
            record_id[k] = ev.record_id
            put("event_type", k, ev.event_type.value)
            put("run_id", k, ev.run_id)
            put("component_id", k, ev.component_id)
            put("component_type", k, ev.component_type)
            put("details", k, ev.details)
            pcount[k] = len(ev.parent_ids)
            for j, v in enumerate(ev.parent_ids):
                parents.add(k, j, v)
            acount[k] = len(ev.attributes)
            for j, (key, val) in enumerate(ev.attributes.items()):
                kraw, vraw = key.encode(), val.encode()
                ks = base + len(extra)
                extra.extend(kraw)
                attrs.add(k, j, ks, len(kraw), ks + len(kraw), len(vraw))
                extra.extend(vraw)
            loc = ev.location
            has_loc[k] = loc is not None
            put("uri", k, None if loc is None else loc.uri)
            offset[k] = 0 if loc is None else loc.offset
            length[k] = 0 if loc is None else loc.length
    if extra:
        buf = np.frombuffer(data + bytes(extra) + bytes(PAD), dtype=np.uint8)
    pv = parents.sorted(pcount)
    av = attrs.sorted(acount)
    ones = np.ones(len(av[0]), bool)
    return RichColumns(
        n=n,
        data=buf,
        event_id=np.asarray(event_ids, np.int64),
        time_ns=time_ns,
        partition=partition,
        attempt=attempt,
        record_id=record_id,
        offset=offset,
        length=length,
        has_location=has_loc,
        spans=strs,
        parent_counts=pcount,
        parents=pv[0],
        attr_counts=acount,
        attr_keys=Spans(av[0], av[1], ones),
        attr_values=Spans(av[2], av[3], ones),
        fallback=len(bad),
    )


def _spans(spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[list[np.ndarray]]:
    return [[s[0] for s in spans], [s[1] for s in spans]]


class _Entries:
    """Variable-length items (parents, attributes) read level by level: (event, level, values)
    parts, ordered by event then level at the end."""

    def __init__(self, ev: list, lvl: list, cols: list) -> None:
        self.ev, self.lvl = ev, lvl
        self.cols = [list(c) for c in cols]
        self.extra: list[tuple[int, ...]] = []

    def drop(self, events: np.ndarray) -> None:
        for i, ev in enumerate(self.ev):
            keep = ~np.isin(ev, events)
            self.ev[i], self.lvl[i] = ev[keep], self.lvl[i][keep]
            for c in self.cols:
                c[i] = c[i][keep]

    def add(self, event: int, level: int, *values: int) -> None:
        self.extra.append((event, level, *values))

    def sorted(self, counts: np.ndarray) -> list[np.ndarray]:
        """Each column's values ordered by event, then level (`counts`: items per event). An
        item's place is its event's first place plus its level: a scatter, no sort."""
        ev = [*self.ev]
        lvl = [*self.lvl]
        cols = [[*c] for c in self.cols]
        if self.extra:
            x = np.array(self.extra, dtype=np.int64).reshape(len(self.extra), -1)
            ev.append(x[:, 0])
            lvl.append(x[:, 1])
            for i, c in enumerate(cols):
                c.append(x[:, 2 + i])
        if not ev:
            return [np.zeros(0, np.int64) for _ in self.cols]
        total = int(counts.sum())
        n = len(counts)
        if not self.extra and all(len(e) == n for e in ev) and len(ev) * n == total:
            # Every event has the same number of items: levels interleave.
            return [np.stack(c, axis=1).reshape(total).astype(np.int64, copy=False) for c in cols]
        first = np.cumsum(counts) - counts
        where = first[np.concatenate(ev)] + np.concatenate(lvl)
        assert len(where) == total, "every item of every event, once"
        out = []
        for c in cols:
            col = np.empty(total, np.int64)
            col[where] = np.concatenate(c)
            out.append(col)
        return out


def unaligned(buf: np.ndarray, dtype: str) -> np.ndarray:
    """`buf` read as `dtype` at every byte offset: element q is the value whose first byte is
    buf[q] (strides of one byte; numpy copies unaligned values on access)."""
    dt = np.dtype(dtype)
    return np.ndarray((len(buf) - dt.itemsize + 1,), dt, buffer=buf, strides=(1,))


_LOW = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)  # low k bytes


def string_views(
    buf: np.ndarray, start: np.ndarray, length: np.ndarray, present: np.ndarray
) -> pa.Array:
    """An Arrow string-view array of the spans buf[start:start+length] (null where not
    present; `buf` ends in at least 16 bytes of padding, which no span covers). A view is 16
    bytes: the length (u32), then the string itself when it has at most 12 bytes, else its
    first 4 bytes, a buffer index (0) and its offset (u32)."""
    n = len(start)
    if not present.all():
        length = np.where(present, length, 0)
        start = np.where(present, start, 0)
    le8 = unaligned(buf, "<u8")
    lo = (le8[start] & _LOW[np.minimum(length, 4)]) << np.uint64(32)
    lo |= length.astype(np.uint64)
    hi = le8[start + 4] & _LOW[np.clip(length - 4, 0, 8)]
    long = np.flatnonzero(length > 12)
    if len(long):
        hi[long] = start[long].astype(np.uint64) << np.uint64(32)  # buffer 0, offset
    views = np.empty((n, 2), np.uint64)
    views[:, 0], views[:, 1] = lo, hi
    validity = None if present.all() else pa.py_buffer(np.packbits(present, bitorder="little"))
    whole = pa.py_buffer(buf)
    return pa.Array.from_buffers(pa.string_view(), n, [validity, pa.py_buffer(views), whole])
