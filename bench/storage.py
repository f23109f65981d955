"""Storage-core benchmark: journal ingest, rollover, export, lookup and bytes on disk.

    .venv/bin/python bench/storage.py [--runs 3] [--events 500000] [--text-mb 64]

Every figure is the median of `--runs` runs, measured interleaved with its primitive (the
cheapest thing that does the same work with the same libraries) and printed as a
ratio to it. The script generates its own data in a temporary directory and deletes it.

Workloads:
- rich events shaped like tests/_events.py `make_event` (attributes dict, parent list, location);
- columnar lineage of a word count over a Zipf text, journaled as Spark tasks would: per input
  partition a RECEIVE batch (one record per line, N+1 byte offsets) and a map-side combiner JOIN
  batch (one record per distinct word, parents = the lines holding it, CSR), and per reduce
  partition a JOIN batch (one record per word, parents = the combiner records).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass

import msgspec
import numpy as np
import zstandard
from _common import median, percentile, report, timed

from journals import (
    EventType,
    JournalWriter,
    LineageBatch,
    Location,
    ProvenanceEvent,
    gc_paused,
    record_id_base,
)
from repository import ProvenanceRepository, RepositoryConfig

PAGE = 10_000  # events per get_events call in the export figures
FRAME = 1_000  # rich events per journal frame
CP_SOURCE, CP_COMBINE, CP_REDUCE = 1, 2, 3


# -- rich events ------------------------------------------------------------------------------


def make_event(i: int, t0: int) -> ProvenanceEvent:
    """As tests/_events.py `make_event`, with increasing event times."""
    return ProvenanceEvent(
        event_time_ns=t0 + i * 137,
        event_type=EventType.RECEIVE if i % 3 else EventType.SEND,
        run_id="run-1",
        component_id=f"textFile#{i % 4}",
        component_type="textFile",
        partition=i % 7,
        attempt=0,
        record_id=i,
        parent_ids=[i - 1] if i else [],
        attributes={"host": f"w{i % 3}", "code": f"E{i % 50}"},
        location=Location(uri="file:///data/x.log", offset=i * 80, length=80),
        details=None,
    )


def encode_prefixed(events: list[ProvenanceEvent]) -> list[bytes]:
    """Primitive: msgspec encode + 4-byte length prefix into a bytearray, one per frame."""
    enc = msgspec.msgpack.Encoder()
    pack_into = struct.pack_into
    frames = []
    for a in range(0, len(events), FRAME):
        buf = bytearray()
        for ev in events[a : a + FRAME]:
            pos = len(buf)
            buf += b"\0\0\0\0"
            enc.encode_into(ev, buf, -1)
            pack_into("<I", buf, pos, len(buf) - pos - 4)
        frames.append(bytes(buf))
    return frames


def split_prefixed(buf: bytes) -> list[bytes]:
    out, pos, n = [], 0, len(buf)
    while pos < n:
        (k,) = struct.unpack_from("<I", buf, pos)
        out.append(buf[pos + 4 : pos + 4 + k])
        pos += 4 + k
    return out


def decode_each(raws: list[bytes]) -> int:
    """Primitive: msgspec typed decode, one call per event, in pages that are then dropped
    (as the export loop does with its pages); GC paused per page, as export does."""
    dec = msgspec.msgpack.Decoder(ProvenanceEvent).decode
    n = 0
    for a in range(0, len(raws), PAGE):
        with gc_paused():
            page = [dec(r) for r in raws[a : a + PAGE]]
        n += len(page)
    return n


def zstd_chunks(data: bytes, level: int, chunk: int = 64 * 1024) -> int:
    """Primitive: zstd at `level`, one thread, `chunk`-sized independent frames."""
    comp = zstandard.ZstdCompressor(level=level)
    mv = memoryview(data)
    return sum(len(comp.compress(mv[i : i + chunk])) for i in range(0, len(data), chunk))


# -- Zipf word count lineage -------------------------------------------------------------------


@dataclass
class ZipfText:
    s: float
    vocab: int
    text_bytes: int
    words: int
    lines: int
    letters_per_word: float
    tokens: np.ndarray  # word id per token
    line_of: np.ndarray  # line ordinal per token
    line_offsets: np.ndarray  # lines + 1 byte offsets


def make_vocab(rng: np.random.Generator, n: int) -> list[bytes]:
    """`n` distinct lowercase words, rank 1 first; frequent words short, as in English: length
    ~ 2 + 0.45 log2(rank) + N(0, 1) letters (rank 1: 2, rank 1000: 6.5, rank 100k: 9.5; weighted
    by Zipf frequency ~4-5.5 letters, like English prose)."""
    ranks = np.arange(1, n + 1)
    lens = np.clip(np.rint(2.0 + 0.45 * np.log2(ranks) + rng.normal(0, 1.0, n)), 1, 20)
    lens = lens.astype(np.int64)
    letters = rng.integers(0, 26, int(lens.sum()) + 64 * n, dtype=np.uint8) + ord("a")
    seen: set[bytes] = set()
    out, pos = [], 0
    for k in lens.tolist():
        while True:
            w = letters[pos : pos + k].tobytes()
            pos += k
            if w not in seen:
                break
            k += 1 if k < 3 else 0  # 1- and 2-letter words run out: lengthen on collision
        seen.add(w)
        out.append(w)
    return out


def make_zipf_text(
    rng: np.random.Generator, s: float, vocab: list[bytes], target_bytes: int
) -> tuple[ZipfText, bytes]:
    """A text of ~target_bytes: Zipf(s) over `vocab` (rank order), 5-15 words per line."""
    vocab_size = len(vocab)
    p = np.arange(1, vocab_size + 1, dtype=np.float64) ** -s
    p /= p.sum()
    vlen = np.fromiter((len(w) for w in vocab), dtype=np.int64, count=vocab_size)
    nwords = int(target_bytes / float((p * (vlen + 1)).sum()))
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    tokens = np.searchsorted(cdf, rng.random(nwords), side="right").astype(np.int64)
    per_line = rng.integers(5, 16, nwords // 5 + 1)
    ends = np.cumsum(per_line)
    nlines = int(np.searchsorted(ends, nwords, side="left")) + 1
    per_line = per_line[:nlines]
    per_line[-1] -= int(ends[nlines - 1]) - nwords
    line_of = np.repeat(np.arange(nlines, dtype=np.int64), per_line)
    # Build the bytes without a per-word Python loop: every word is stored followed by a space;
    # gather token spans, then turn each line's last space into a newline.
    flat = np.frombuffer(b"".join(w + b" " for w in vocab), dtype=np.uint8)
    vstart = np.concatenate(([0], np.cumsum(vlen + 1)[:-1]))
    tok_len = vlen[tokens] + 1
    tok_start = np.concatenate(([0], np.cumsum(tok_len)[:-1]))
    total = int(tok_len.sum())
    text = np.empty(total, dtype=np.uint8)
    step = 1 << 20
    for a in range(0, nwords, step):
        b = min(nwords, a + step)
        lens = tok_len[a:b]
        rel = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(
            tok_start[a:b] - tok_start[a], lens
        )
        src = np.repeat(vstart[tokens[a:b]], lens) + rel
        text[tok_start[a] : tok_start[a] + len(src)] = flat[src]
    last_tok = np.cumsum(per_line) - 1
    text[tok_start[last_tok] + tok_len[last_tok] - 1] = ord("\n")
    first_tok = last_tok - per_line + 1
    offsets = np.append(tok_start[first_tok], total).astype(np.int64)
    info = ZipfText(
        s=s,
        vocab=vocab_size,
        text_bytes=total,
        words=nwords,
        lines=nlines,
        letters_per_word=float((tok_len - 1).mean()),
        tokens=tokens,
        line_of=line_of,
        line_offsets=offsets,
    )
    return info, text.tobytes()


@dataclass
class TaskLineage:
    """The numpy arrays one Spark task holds at its end, before it journals them."""

    kind: str  # "map" | "reduce"
    partition: int
    lines: int = 0
    offsets: np.ndarray | None = None
    comb_counts: np.ndarray | None = None
    comb_parents: np.ndarray | None = None
    red_counts: np.ndarray | None = None
    red_parents: np.ndarray | None = None

    @property
    def records(self) -> int:
        if self.kind == "map":
            return self.lines + len(self.comb_counts)
        return len(self.red_counts)

    @property
    def associations(self) -> int:
        return len(self.comb_parents if self.kind == "map" else self.red_parents)

    def arrays(self) -> list[np.ndarray]:
        return [
            a
            for a in (
                self.offsets,
                self.comb_counts,
                self.comb_parents,
                self.red_counts,
                self.red_parents,
            )
            if a is not None
        ]


def word_count_lineage(z: ZipfText, partitions: int) -> list[TaskLineage]:
    """The lineage a captured word count journals: `partitions` map tasks, as many reducers."""
    # Input splits by bytes, as Hadoop's TextInputFormat: a line belongs to the split its
    # first byte falls in.
    bounds = (np.arange(partitions + 1) * z.text_bytes) // partitions
    line_part = np.searchsorted(bounds, z.line_offsets[:-1], side="right") - 1
    first_line = np.searchsorted(line_part, np.arange(partitions + 1), side="left")
    first_tok = np.searchsorted(z.line_of, first_line, side="left")
    tasks: list[TaskLineage] = []
    comb_words, comb_ids = [], []
    for p in range(partitions):
        la, lb = int(first_line[p]), int(first_line[p + 1])
        ta, tb = int(first_tok[p]), int(first_tok[p + 1])
        words = z.tokens[ta:tb]
        local_line = z.line_of[ta:tb] - la
        # Combiner records in order of first appearance (a Python dict's order).
        uniq, first = np.unique(words, return_index=True)
        order = np.argsort(first, kind="stable")
        slot = np.empty(z.vocab, dtype=np.int64)
        slot[uniq[order]] = np.arange(len(uniq))
        pairs = np.unique((slot[words] << 32) | local_line)  # by record, then line; deduped
        rec, line = pairs >> 32, pairs & 0xFFFFFFFF
        tasks.append(
            TaskLineage(
                "map",
                p,
                lines=lb - la,
                offsets=z.line_offsets[la : lb + 1].copy(),
                comb_counts=np.bincount(rec, minlength=len(uniq)),
                comb_parents=record_id_base(CP_SOURCE, p) + line,
            )
        )
        comb_words.append(uniq[order])
        comb_ids.append(record_id_base(CP_COMBINE, p) + np.arange(len(uniq), dtype=np.int64))
    # Reduce side: word -> reducer by a hash; a reducer meets combiner records in map order.
    all_words = np.concatenate(comb_words)
    all_ids = np.concatenate(comb_ids)
    reducer = ((all_words * 2654435761) >> 7) % partitions
    for r in range(partitions):
        mask = reducer == r
        words, ids = all_words[mask], all_ids[mask]
        uniq, first = np.unique(words, return_index=True)
        pos = np.empty(z.vocab, dtype=np.int64)
        pos[uniq[np.argsort(first, kind="stable")]] = np.arange(len(uniq))
        rec = pos[words]
        order = np.lexsort((ids, rec))
        tasks.append(
            TaskLineage(
                "reduce",
                r,
                red_counts=np.bincount(rec, minlength=len(uniq)),
                red_parents=ids[order],
            )
        )
    return tasks


def task_batches(task: TaskLineage, uri: str, t: int) -> dict[str, LineageBatch]:
    """A task's batches by capture point, built from its arrays as the task would build them."""
    common = {
        "event_time_ns": t,
        "run_id": "wordcount-1",
        "attempt": 0,
        "partition": task.partition,
    }
    if task.kind == "reduce":
        base = record_id_base(CP_REDUCE, task.partition)
        return {
            "reducer": LineageBatch.build(
                **common,
                event_type=EventType.JOIN,
                component_id="reduceByKey#3",
                component_type="reducer",
                record_ids=range(base, base + len(task.red_counts)),
                parent_counts=task.red_counts,
                parent_ids=task.red_parents,
            )
        }
    base = record_id_base(CP_SOURCE, task.partition)
    receive = LineageBatch.build(
        **common,
        event_type=EventType.RECEIVE,
        component_id="textFile#1",
        component_type="textFile",
        record_ids=range(base, base + task.lines),
        offsets=task.offsets,
        location=Location(uri),
    )
    base = record_id_base(CP_COMBINE, task.partition)
    combiner = LineageBatch.build(
        **common,
        event_type=EventType.JOIN,
        component_id="combineByKey#2",
        component_type="combiner",
        record_ids=range(base, base + len(task.comb_counts)),
        parent_counts=task.comb_counts,
        parent_ids=task.comb_parents,
    )
    return {"receive": receive, "combiner": combiner}


def journal_task(spec, task: TaskLineage, uri: str, t: int) -> JournalWriter:
    """What a Spark task does at its end: build its batches, append them (then it seals)."""
    w = JournalWriter.open(spec, tag=f"{task.kind}{task.partition}")
    for batch in task_batches(task, uri, t).values():
        w.append(batch)
    w.flush()
    return w


def raw_write_tasks(directory: str, tasks: list[TaskLineage]) -> tuple[float, float]:
    """Primitive for columnar ingest: each task writes its int64 arrays raw, then fsyncs.
    Returns (seconds to write them all, seconds to write and fsync them all)."""
    t = time.perf_counter()
    files = []
    for k, task in enumerate(tasks):
        f = open(os.path.join(directory, f"raw-{k}.bin"), "wb", buffering=1 << 20)  # noqa: SIM115
        for a in task.arrays():
            f.write(a.astype("<i8", copy=False).tobytes())
        f.flush()
        files.append(f)
    written = time.perf_counter() - t
    for f in files:
        os.fsync(f.fileno())
        f.close()
    synced = time.perf_counter() - t
    for k in range(len(tasks)):
        os.unlink(os.path.join(directory, f"raw-{k}.bin"))
    return written, synced


# -- helpers -----------------------------------------------------------------------------------


def open_repo(path: str, level: int, forward_index: bool = True) -> ProvenanceRepository:
    """A repository with its threads (indexing runs on its own thread, as in production) but
    no timed or sealed-journal-triggered rollover: the benchmark calls rollover() itself."""
    config = RepositoryConfig(
        zstd_level=level,
        rollover_interval="1h",
        rollover_debounce="1h",
        forward_index=forward_index,
    )
    return ProvenanceRepository.open(path, config)


def rate(count: int, seconds: list[float]) -> float:
    return count / median(seconds)


def ratio(mine: float, prim: float, what: str) -> str:
    return f"{mine / prim:5.2f}x {what}"


def read_all(repo: ProvenanceRepository, first: int, stop: int) -> int:
    n, pos = 0, first
    while pos < stop:
        page = repo.get_events(pos, min(PAGE, stop - pos))
        if not page:
            break
        n += len(page)
        pos = page[-1].event_id + 1
    return n


def log_bytes(repo: ProvenanceRepository, first_ids: set[int]) -> int:
    total = 0
    for r in repo.logs():
        if r.first_id in first_ids:
            total += os.path.getsize(r.path) + os.path.getsize(r.path[: -len(".prov")] + ".toc")
    return total


def lookup_latency(repo: ProvenanceRepository, ids: list[int]) -> list[float]:
    out = []
    clock = time.perf_counter
    for i in ids:
        t = clock()
        ev = repo.get_event(i)
        out.append(clock() - t)
        if ev is None or ev.event_id != i:
            raise AssertionError(f"lookup of {i} returned {ev!r}")
    return out


def block_latency(repo: ProvenanceRepository, first_id: int, blocks: list[int]) -> list[float]:
    """Primitive for lookup: pread one block by toc offset + zstd decompress it."""
    reader = next(r for r in repo.logs() if r.first_id == first_id)
    fd = os.open(reader.path, os.O_RDONLY)
    dec = zstandard.ZstdDecompressor()
    out = []
    clock = time.perf_counter
    try:
        for b in blocks:
            t = clock()
            off, length = reader.toc.block_span(b)
            framed = os.pread(fd, length, off)
            dec.decompress(framed[8:])
            out.append(clock() - t)
    finally:
        os.close(fd)
    return out


def lookups(repo, first: int, stop: int, n: int, seed: int) -> tuple[list[float], list[float]]:
    """(get_event latencies, block primitive latencies), interleaved in small rounds."""
    rnd = random.Random(seed)
    ids = [rnd.randrange(first, stop) for _ in range(n)]
    reader = next(r for r in repo.logs() if r.first_id <= first < r.next_id)
    nblocks = len(reader.toc.block_offsets)
    blocks = [rnd.randrange(nblocks) for _ in range(n)]
    mine, prim = [], []
    for a in range(0, n, 200):
        mine += lookup_latency(repo, ids[a : a + 200])
        prim += block_latency(repo, reader.first_id, blocks[a : a + 200])
    return mine, prim


def us(x: float) -> float:
    return x * 1e6


def report_lookups(lat: list[float], blat: list[float]) -> None:
    """Latency percentiles over every lookup of every run; ratios are times (lower: better)."""
    b50, b99 = percentile(blat, 50), percentile(blat, 99)
    report("primitive: pread + unzstd 1 block, p50", us(b50), "us")
    report("primitive: pread + unzstd 1 block, p99", us(b99), "us")
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    what = f"get_event, {len(lat):,} random ids"
    report(f"lookup {what}: p50", us(p50), "us", "goal <= 200 us", ratio(p50, b50, "the time"))
    report("lookup get_event p99", us(p99), "us", "", ratio(p99, b99, "the time"))


# -- sections ----------------------------------------------------------------------------------


def bench_rich(root: str, n: int, runs: int, level: int) -> None:
    print(f"\nRich events ({n:,} events like tests/_events.py make_event, frames of {FRAME:,})")
    t0 = time.time_ns()
    events = [make_event(i, t0) for i in range(n)]
    raws = [r for f in encode_prefixed(events) for r in split_prefixed(f)]
    repo = open_repo(os.path.join(root, "rich"), level)
    spec = repo.writer_spec()
    t_enc, t_app, t_seal, t_zstd, t_roll, t_dec, t_exp = ([] for _ in range(7))
    lat, blat, disk, jbytes = [], [], [], []
    clock = time.perf_counter
    try:
        for run in range(runs):
            t_enc.append(timed(lambda: encode_prefixed(events))[0])
            # Ingest: appends (buffered writes, as a task's journal is written), then seal.
            t = clock()
            w = JournalWriter.open(spec, tag="rich")
            for a in range(0, n, FRAME):
                w.append_events(events[a : a + FRAME])
            w.flush()  # the write(2)s count in the append figure, the fsync in seal
            t_app.append(clock() - t)
            w.seal()
            t_seal.append(clock() - t)
            jbytes.append(w.bytes_written)
            with open(w.sealed_path, "rb") as f:
                journal = f.read()
            t_zstd.append(timed(lambda j=journal: zstd_chunks(j, level))[0])
            first = repo.max_event_id + 1
            t = clock()
            merged = repo.rollover()
            t_roll.append(clock() - t)
            repo.wait_for_index()  # not timed: keeps the index thread out of what follows
            assert merged == n, merged
            disk.append(log_bytes(repo, {first}))
            t_dec.append(timed(lambda: decode_each(raws))[0])
            t = clock()
            got = read_all(repo, first, first + n)
            t_exp.append(clock() - t)
            assert got == n, got
            a, b = lookups(repo, first, first + n, 2000, run)
            lat += a
            blat += b
    finally:
        repo.close()
    enc = rate(n, t_enc)
    report("primitive: encode + u32 prefix", enc / 1e6, "M ev/s")
    report(
        "journal append (buffered)",
        rate(n, t_app) / 1e6,
        "M ev/s",
        "goal >= 1.0 M/s",
        ratio(rate(n, t_app), enc, "of encode"),
    )
    report(
        "journal append + seal (fsync)",
        rate(n, t_seal) / 1e6,
        "M ev/s",
        "",
        ratio(rate(n, t_seal), enc, "of encode"),
    )
    zs = rate(n, t_zstd)
    report(f"primitive: zstd-{level} of the journal bytes", zs / 1e6, "M ev/s")
    report(
        "rollover (merge, compress, toc, fsync)",
        rate(n, t_roll) / 1e6,
        "M ev/s",
        "goal >= 1.0 M/s",
        ratio(rate(n, t_roll), zs, "of zstd"),
    )
    dec = rate(n, t_dec)
    report("primitive: typed decode, 1 call/event", dec / 1e6, "M ev/s")
    report(
        f"export get_events (pages of {PAGE:,})",
        rate(n, t_exp) / 1e6,
        "M ev/s",
        "goal >= 1.0 M/s",
        ratio(rate(n, t_exp), dec, "of decode"),
    )
    report_lookups(lat, blat)
    report("journal bytes / event", median(jbytes) / n, "B")
    report("on disk (log + toc) / event", median(disk) / n, "B", "", "")


def bench_lineage(root: str, z: ZipfText, text: bytes, parts: int, runs: int, level: int) -> int:
    tasks = word_count_lineage(z, parts)
    records = sum(t.records for t in tasks)
    assocs = sum(t.associations for t in tasks)
    maps = [t for t in tasks if t.kind == "map"]
    print(
        f"\nColumnar lineage: word count over Zipf s={z.s} text ({z.text_bytes / 1e6:.1f} MB, "
        f"{z.lines:,} lines, {z.words:,} words, {z.letters_per_word:.2f} letters/word), "
        f"{parts} map + {parts} reduce tasks"
    )
    print(
        f"  records {records:,} (lines {sum(t.lines for t in maps):,}, combiner "
        f"{sum(len(t.comb_counts) for t in maps):,}, reducer "
        f"{records - sum(t.records for t in maps):,}); (record, parent) associations {assocs:,}"
    )
    uri = "file:///data/zipf.txt"
    repo = open_repo(os.path.join(root, "lineage"), level)
    # The same rollover without the forward lineage index, interleaved: what the index costs.
    repo_off = open_repo(os.path.join(root, "lineage-nofwd"), level, forward_index=False)
    spec = repo.writer_spec()
    rawdir = os.path.join(root, "raw")
    os.makedirs(rawdir, exist_ok=True)
    t_rawapp, t_raw, t_app, t_ing, t_zstd, t_roll, t_dec, t_exp = ([] for _ in range(8))
    t_roll_off: list[float] = []
    lat, blat, disk, fwd_disk = [], [], [], []
    clock = time.perf_counter
    t0 = time.time_ns()
    sample = None
    try:
        for run in range(runs):
            written, synced = raw_write_tasks(rawdir, tasks)
            t_rawapp.append(written)
            t_raw.append(synced)
            t = clock()
            writers = [journal_task(spec, task, uri, t0) for task in tasks]
            t_app.append(clock() - t)
            for w in writers:
                w.seal()
            t_ing.append(clock() - t)
            journals = b""
            for w in writers:
                with open(w.sealed_path, "rb") as f:
                    journals += f.read()
            t_zstd.append(timed(lambda j=journals: zstd_chunks(j, level))[0])
            for w in [journal_task(repo_off.writer_spec(), task, uri, t0) for task in tasks]:
                w.seal()
            t = clock()
            assert repo_off.rollover() == records
            t_roll_off.append(clock() - t)
            repo_off.wait_for_index()
            first = repo.max_event_id + 1
            t = clock()
            merged = repo.rollover()
            t_roll.append(clock() - t)
            repo.wait_for_index()  # not timed: keeps the index thread out of what follows
            assert merged == records, (merged, records)
            disk.append(log_bytes(repo, {first}))
            fwd_disk.append(os.path.getsize(os.path.join(repo.layout.logs, f"{first}.fwd")))
            if sample is None:  # every 8th record: the mix of the whole log, not its start
                sample = [
                    msgspec.msgpack.encode(e)
                    for a in range(first, first + records, PAGE)
                    for e in repo.get_events(a, min(PAGE, first + records - a))[::8]
                ]
            t_dec.append(timed(lambda s=sample: decode_each(s))[0])
            t_dec[-1] *= records / len(sample)
            t = clock()
            got = read_all(repo, first, first + records)
            t_exp.append(clock() - t)
            assert got == records, got
            a, b = lookups(repo, first, first + records, 2000, run)
            lat += a
            blat += b
    finally:
        repo.close()
        repo_off.close()
    rawapp = rate(records, t_rawapp)
    report("primitive: raw int64 write (buffered)", rawapp / 1e6, "M rec/s")
    app = rate(records, t_app)
    report(
        "journal ingest (build + append, buffered)",
        app / 1e6,
        "M rec/s",
        "goal >= 10 M/s",
        ratio(app, rawapp, "of raw write"),
    )
    report("  the same in associations", rate(assocs, t_app) / 1e6, "M assoc/s")
    raw = rate(records, t_raw)
    report("primitive: raw int64 write + fsync", raw / 1e6, "M rec/s")
    ing = rate(records, t_ing)
    report(
        "journal ingest + seal (fsync)",
        ing / 1e6,
        "M rec/s",
        "",
        ratio(ing, raw, "of raw write+fsync"),
    )
    zs = rate(records, t_zstd)
    report(f"primitive: zstd-{level} of the journal bytes", zs / 1e6, "M rec/s")
    roll_off = rate(records, t_roll_off)
    report(
        "rollover without the forward index",
        roll_off / 1e6,
        "M rec/s",
        "",
        ratio(roll_off, zs, "of zstd"),
    )
    roll = rate(records, t_roll)
    report(
        "rollover (merge, compact, compress, toc, fwd)",
        roll / 1e6,
        "M rec/s",
        "goal >= 1.0 M/s",
        ratio(roll, roll_off, "of it without forward index"),
    )
    dec = rate(records, t_dec)
    report("primitive: typed decode of same as events", dec / 1e6, "M ev/s")
    exp = rate(records, t_exp)
    report(
        f"export get_events (pages of {PAGE:,})",
        exp / 1e6,
        "M ev/s",
        "goal >= 1.0 M/s",
        ratio(exp, dec, "of decode"),
    )
    report_lookups(lat, blat)
    size = median(disk)
    report(
        "on disk (logs + toc) / text bytes",
        100 * size / z.text_bytes,
        "%",
        "goal <= 15 %",
        f"{size * 8 / max(assocs, 1):.2f} bits/assoc",
    )
    fwd = median(fwd_disk)
    report(
        "forward index (derived) / text bytes",
        100 * fwd / z.text_bytes,
        "%",
        "",
        f"{fwd * 8 / max(assocs, 1):.2f} bits/assoc",
    )
    return int(size)


def line_set_bits(tasks: list[TaskLineage]) -> float:
    """Information floor of the combiners' line sets: given each word's count and first line,
    which of the later lines hold it, log2 C(L - first - 1, count - 1) bits per word."""
    lgamma = np.frompyfunc(math.lgamma, 1, 1)
    bits = 0.0
    for t in tasks:
        if t.kind != "map" or not len(t.comb_counts):
            continue
        c = t.comb_counts
        starts = np.cumsum(c) - c
        first = t.comb_parents[starts] - record_id_base(CP_SOURCE, t.partition)
        m = (t.lines - first - 1).astype(np.float64)
        k = (c - 1).astype(np.float64)
        ln = lgamma(m + 1) - lgamma(k + 1) - lgamma(m - k + 1)
        bits += float(ln.astype(np.float64).sum()) / math.log(2)
    return bits


def bench_bytes(
    root: str, rng: np.random.Generator, vocab: list[bytes], s: float, args, level: int
) -> tuple[dict[str, int], ZipfText, float, int]:
    """Bytes on disk for one exponent, by capture point (each rolled over into its own log),
    the combiners' information floor in bytes, and the (line, word) associations."""
    z, _ = make_zipf_text(rng, s, vocab, int(args.text_mb * 1e6))
    tasks = word_count_lineage(z, args.partitions)
    floor = line_set_bits(tasks) / 8
    assocs = sum(len(t.comb_parents) for t in tasks if t.kind == "map")
    batches = [task_batches(task, "file:///data/zipf.txt", 1) for task in tasks]
    config = RepositoryConfig(zstd_level=level, rollover_interval=3600, sync="none")
    parts: dict[str, int] = {}
    path = os.path.join(root, f"bytes-{s}")
    with ProvenanceRepository.open(path, config, start_threads=False) as repo:
        spec = repo.writer_spec()
        for kind in ("receive", "combiner", "reducer"):
            first = repo.max_event_id + 1
            with JournalWriter.open(spec) as w:
                for b in batches:
                    if kind in b:
                        w.append(b[kind])
            repo.rollover()
            parts[kind] = log_bytes(repo, {first})
    shutil.rmtree(path)
    return parts, z, floor, assocs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median); >= 3")
    ap.add_argument("--events", type=int, default=500_000, help="rich events per run")
    ap.add_argument("--text-mb", type=float, default=64.0, help="Zipf text size, MB")
    ap.add_argument("--vocab", type=int, default=100_000, help="vocabulary size")
    ap.add_argument("--partitions", type=int, default=6, help="map (and reduce) tasks")
    ap.add_argument("--exponents", default="1.0,1.1,1.2", help="Zipf exponents for bytes")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--dir", default=None, help="parent of the temporary data directory")
    ap.add_argument("--only", default="rich,lineage,bytes", help="sections to run")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be at least 3 (figures are medians of interleaved runs)")
    level = RepositoryConfig().zstd_level
    root = tempfile.mkdtemp(prefix="provrepo-bench-", dir=args.dir)
    rng = np.random.default_rng(args.seed)
    vocab = make_vocab(np.random.default_rng(args.seed + 1), args.vocab)  # one for every s
    print(
        f"bench/storage.py: median of {args.runs} runs, interleaved with each primitive; "
        f"python {sys.version.split()[0]}, msgspec {msgspec.__version__}, "
        f"zstandard {zstandard.__version__}, {os.cpu_count()} cpus; data in {root}"
    )
    print(f"  {'figure':<44} {'value':>12} {'unit':<10} {'ratio to primitive':<28} goal")
    try:
        only = set(args.only.split(","))
        exps = [float(x) for x in args.exponents.split(",")]
        if "rich" in only:
            bench_rich(root, args.events, args.runs, level)
        if "lineage" in only:
            main_s = 1.1 if 1.1 in exps else exps[0]
            z, text = make_zipf_text(rng, main_s, vocab, int(args.text_mb * 1e6))
            bench_lineage(root, z, text, args.partitions, args.runs, level)
            del text, z
        if "bytes" not in only:
            return
        print(
            f"\nBytes on disk for word-count lineage, by Zipf exponent (vocabulary "
            f"{args.vocab:,}, ~{args.text_mb:g} MB text, {args.partitions} partitions; "
            "goal <= 15 % of the text);\n  floor = information in the combiners' line sets "
            "given each word's count and first line: log2 C(lines after it, count - 1) per word"
        )
        for s in exps:
            parts, z, floor, assocs = bench_bytes(root, rng, vocab, s, args, level)
            pct = 100 / z.text_bytes
            print(
                f"  s={s}: {z.text_bytes / 1e6:.1f} MB, {z.words / 1e6:.2f} M words of "
                f"{z.letters_per_word:.2f} letters, {z.lines:,} lines, {assocs / 1e6:.2f} M "
                "(line, word) associations"
            )
            report("    logs + toc / text", pct * sum(parts.values()), "%", "goal <= 15 %")
            for kind, what in (
                ("receive", "line offsets"),
                ("combiner", "line sets per word"),
                ("reducer", "combiner records per word"),
            ):
                extra = ""
                if kind == "combiner":
                    extra = f"{parts[kind] * 8 / assocs:.2f} bits/assoc; floor {pct * floor:.2f} %"
                report(f"      {kind} ({what})", pct * parts[kind], "%", "", extra)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
