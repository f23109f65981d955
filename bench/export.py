"""Table export benchmark: `repo.export_parquet` against pyarrow writing the same tables.

    .venv/bin/python bench/export.py [--runs 3] [--text-mb 64] [--events 300000]

Workloads (generated, in a temporary directory deleted at the end):
- lineage: a word count's columnar lineage over a Zipf text, journaled as Spark tasks would
  (bench/storage.py's generator): per input partition a RECEIVE batch (one record per line,
  byte offsets) and a combiner JOIN batch (CSR parents: the lines holding each word), per
  reduce partition a JOIN batch;
- narrow lineage: a filter-and-map pipeline (grep-like): per partition a RECEIVE batch of
  lines (byte offsets), a FORK batch of the third of them that pass (one parent each) and the
  action's SEND batch over those (one parent each): about one edge per record;
- rich events shaped like tests/_events.py `make_event` (attributes, a parent, a location).

For each, interleaved runs of:
- provrepo: `repo.export_parquet(OUT)` (events/ and edges/ tables, from the stored logs);
- primitive: `pyarrow.parquet.write_table` of the very tables the export wrote (read back into
  memory beforehand), with the same writer settings: the cost of writing those columns at all;
- (rich events) naive: `repo.get_events` (one Python object per event), then the same columns
  built from the objects and written by pyarrow: what an export without columnar reads costs;
- (rich events) msgspec: the typed decode of the same events into objects, nothing else: the
  floor of any export that makes one Python object per event.
Rates are lineage records (rows of the events table) per second; ratios are provrepo's rate
over the primitive's (1.00x = as fast as writing the columns). The export runs on several
threads (parsing, reading ahead, two events writers, an edges writer) and the primitive on
one, so on a loaded machine wall time mostly measures the share of the cores each got: the
CPU figures (process CPU seconds, all threads) are the work each does, whatever the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import interleaved, median, report
from storage import journal_task, make_event, make_vocab, make_zipf_text, word_count_lineage

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


def open_repo(path: str) -> ProvenanceRepository:
    return ProvenanceRepository.open(
        path, RepositoryConfig(sync="none", rollover_interval="1h", rollover_debounce="1h")
    )


def tables_of(out: str) -> dict[str, list[pa.Table]]:
    """The tables an export wrote, one per file, in memory (the primitive's input)."""
    found: dict[str, list[pa.Table]] = {"events": [], "edges": []}
    for table in found:
        for d, _, files in sorted(os.walk(os.path.join(out, table))):
            for name in sorted(files):
                if name.endswith(".parquet"):
                    # the arrow schema stored in the file: dictionary columns come back as such
                    found[table].append(pq.read_table(os.path.join(d, name)))
    return found


def write_like_export(tables: dict[str, list[pa.Table]], out: str) -> None:
    """Primitive: pyarrow writes the same tables with the export's settings."""
    from repository._tableexport import ROW_GROUP_ROWS
    from repository._tables import WRITER_OPTIONS

    os.makedirs(out, exist_ok=True)
    for name, tabs in tables.items():
        for k, t in enumerate(tabs):
            t = t.drop_columns([c for c in t.column_names if c == "run_id"])
            pq.write_table(
                t,
                os.path.join(out, f"{name}-{k}.parquet"),
                row_group_size=ROW_GROUP_ROWS,
                **WRITER_OPTIONS[name],
            )


def naive_export(repo: ProvenanceRepository, first: int, stop: int, out: str) -> None:
    """get_events -> Python objects -> columns -> pyarrow (what the columnar path replaces)."""
    from repository._tables import EVENTS_SCHEMA

    os.makedirs(out, exist_ok=True)
    writer = None
    pos = first
    with gc_paused():
        while pos < stop:
            evs = repo.get_events(pos, min(100_000, stop - pos))
            if not evs:
                break
            pos = evs[-1].event_id + 1
            cols = [
                pa.array([e.event_id for e in evs], pa.int64()),
                pa.array([e.event_time_ns // 1000 for e in evs], pa.int64()).view(
                    pa.timestamp("us", tz="UTC")
                ),
                pa.array([e.event_type.value for e in evs]).dictionary_encode(),
                pa.array([e.component_id for e in evs]).dictionary_encode(),
                pa.array([e.component_type for e in evs]).dictionary_encode(),
                pa.array([e.partition for e in evs], pa.int32()),
                pa.array([e.attempt for e in evs], pa.int64()),
                pa.array([e.record_id for e in evs], pa.int64()),
                pa.array([e.location.uri if e.location else None for e in evs]).dictionary_encode(),
                pa.array([e.location.offset if e.location else None for e in evs], pa.int64()),
                pa.array([e.location.length if e.location else None for e in evs], pa.int64()),
                pa.array(
                    [list(e.attributes.items()) for e in evs], pa.map_(pa.string(), pa.string())
                ),
                pa.array([e.details for e in evs], pa.string()),
            ]
            t = pa.Table.from_arrays(cols, schema=EVENTS_SCHEMA)
            if writer is None:
                writer = pq.ParquetWriter(
                    os.path.join(out, "naive.parquet"), t.schema, compression="zstd"
                )
            writer.write_table(t)
    if writer is not None:
        writer.close()


def bench(
    name: str,
    repo: ProvenanceRepository,
    root: str,
    runs: int,
    naive: bool,
    encoded: bytes | None = None,
) -> None:
    first, stop = 1, repo.max_event_id + 1
    n = stop - first
    outs = iter(range(1_000_000))

    def fresh(tag: str) -> str:
        d = os.path.join(root, f"{tag}-{next(outs)}")
        return d

    cpu: dict[str, list[float]] = {"provrepo": [], "pyarrow": []}

    def mine() -> None:
        out = fresh("export")
        c = time.process_time()
        repo.export_parquet(out)
        cpu["provrepo"].append(time.process_time() - c)
        shutil.rmtree(out)

    probe = fresh("probe")
    result = repo.export_parquet(probe)
    tables = tables_of(probe)
    edges = result.edges
    shutil.rmtree(probe)

    def primitive() -> None:
        out = fresh("pyarrow")
        c = time.process_time()
        write_like_export(tables, out)
        cpu["pyarrow"].append(time.process_time() - c)
        shutil.rmtree(out)

    fns = {"provrepo": mine, "pyarrow": primitive}
    if naive:

        def slow() -> None:
            out = fresh("naive")
            naive_export(repo, first, stop, out)
            shutil.rmtree(out)

        fns["naive"] = slow
    if encoded is not None:
        decoder = msgspec.msgpack.Decoder(list[ProvenanceEvent])

        def decode() -> None:
            with gc_paused():
                decoder.decode(encoded)

        fns["msgspec"] = decode
    times = interleaved(fns, runs)
    prim = n / median(times["pyarrow"])
    ours = n / median(times["provrepo"])
    print(f"\n{name}: {n:,} events, {edges:,} edges")
    report("primitive: pyarrow writes the same tables", prim / 1e6, "M rec/s")
    goal = "goal >= 1 M/s" if name.startswith("rich") else "goal >= 10 M/s"
    report(
        "provrepo export_parquet (events + edges)",
        ours / 1e6,
        "M rec/s",
        goal,
        f"{ours / prim:5.2f}x of pyarrow",
    )
    report("  the same in edges", edges / median(times["provrepo"]) / 1e6, "M edges/s")
    prim_cpu, ours_cpu = n / median(cpu["pyarrow"]), n / median(cpu["provrepo"])
    report("  CPU: pyarrow writing the tables", prim_cpu / 1e6, "M rec/CPU-s")
    report(
        "  CPU: provrepo, all its threads",
        ours_cpu / 1e6,
        "M rec/CPU-s",
        "",
        f"{ours_cpu / prim_cpu:5.2f}x of pyarrow",
    )
    if naive:
        slow_rate = n / median(times["naive"])
        report(
            "naive: get_events -> objects -> pyarrow",
            slow_rate / 1e6,
            "M rec/s",
            "",
            f"{ours / slow_rate:5.2f}x faster than naive",
        )
    if encoded is not None:
        dec = n / median(times["msgspec"])
        report(
            "primitive: msgspec decode into objects only",
            dec / 1e6,
            "M rec/s",
            "",
            f"provrepo {ours / dec:5.2f}x of it",
        )


def section(
    name: str,
    root: str,
    subdir: str,
    fill: Callable[[ProvenanceRepository], object],
    runs: int,
    naive: bool = False,
    encoded: bytes | None = None,
) -> None:
    """A repository filled by `fill` (journals, then one rollover), benchmarked, closed."""
    repo = open_repo(os.path.join(root, subdir))
    try:
        fill(repo)
        repo.rollover()
        bench(name, repo, root, runs, naive, encoded)
    finally:
        repo.close()


def journal_narrow(repo: ProvenanceRepository, lines: int, partitions: int, seed: int) -> None:
    """The lineage a captured `textFile(...).filter(f).map(g).collect()` journals."""
    rng = np.random.default_rng(seed)
    spec = repo.writer_spec()
    t = time.time_ns()
    per = lines // partitions
    for p in range(partitions):
        src, out, sent = (record_id_base(cp, p) for cp in (1, 2, 3))
        kept = np.flatnonzero(rng.random(per) < 1 / 3)
        one = np.ones(len(kept), np.int64)
        common = {"event_time_ns": t, "run_id": "narrow-1", "partition": p, "attempt": 0}
        batches = [
            LineageBatch.build(
                **common,
                event_type=EventType.RECEIVE,
                component_id="textFile#0",
                component_type="textFile",
                record_ids=range(src, src + per),
                offsets=np.cumsum(np.r_[0, rng.integers(20, 120, per)]),
                location=Location("file:///data/log.txt"),
            ),
            LineageBatch.build(
                **common,
                event_type=EventType.FORK,
                component_id="filter#1",
                component_type="filter",
                record_ids=range(out, out + len(kept)),
                parent_counts=one,
                parent_ids=src + kept,
            ),
            LineageBatch.build(
                **common,
                event_type=EventType.SEND,
                component_id="collect#2",
                component_type="collect",
                record_ids=range(sent, sent + len(kept)),
                parent_counts=one,
                parent_ids=out + np.arange(len(kept)),
            ),
        ]
        with JournalWriter.open(spec, tag=f"narrow{p}") as w:
            for b in batches:
                w.append(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median); >= 3")
    ap.add_argument("--text-mb", type=float, default=64.0, help="Zipf text size, MB")
    ap.add_argument("--vocab", type=int, default=50_000, help="vocabulary size")
    ap.add_argument("--partitions", type=int, default=6, help="map (and reduce) tasks")
    ap.add_argument("--events", type=int, default=500_000, help="rich events")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--dir", default=None, help="parent of the temporary data directory")
    ap.add_argument("--records", type=int, default=6_000_000, help="lines of the narrow run")
    ap.add_argument("--only", default="lineage,narrow,rich", help="sections to run")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be at least 3 (figures are medians of interleaved runs)")
    root = tempfile.mkdtemp(prefix="provrepo-bench-export-", dir=args.dir)
    print(
        f"bench/export.py: median of {args.runs} interleaved runs; python "
        f"{sys.version.split()[0]}, pyarrow {pa.__version__}, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}; data in {root}"
    )
    print(f"  {'figure':<44} {'value':>12} {'unit':<10} {'ratio':<28} goal")
    only = set(args.only.split(","))
    try:
        if "lineage" in only:
            rng = np.random.default_rng(args.seed)
            vocab = make_vocab(np.random.default_rng(args.seed + 1), args.vocab)
            z, _text = make_zipf_text(rng, 1.1, vocab, int(args.text_mb * 1e6))
            del _text
            tasks = word_count_lineage(z, args.partitions)

            def word_count(repo: ProvenanceRepository) -> None:
                spec = repo.writer_spec()
                for task in tasks:
                    journal_task(spec, task, "file:///data/zipf.txt", time.time_ns()).seal()

            name = f"lineage: word count over {z.text_bytes / 1e6:.0f} MB of Zipf text"
            section(name, root, "lineage", word_count, args.runs)
        if "narrow" in only:
            name = f"narrow lineage: filter + map over {args.records:,} lines"
            section(
                name,
                root,
                "narrow",
                lambda repo: journal_narrow(repo, args.records, args.partitions, args.seed),
                args.runs,
            )
        if "rich" in only:
            t0 = time.time_ns()
            events = [make_event(i, t0) for i in range(args.events)]
            encoded = msgspec.msgpack.encode(events)

            def rich(repo: ProvenanceRepository) -> None:
                with JournalWriter.open(repo.writer_spec(), tag="rich") as w:
                    for a in range(0, args.events, 1000):
                        w.append(events[a : a + 1000])

            section("rich events (make_event)", root, "rich", rich, args.runs, True, encoded)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
