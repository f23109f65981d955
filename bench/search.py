"""Search benchmark: indexing throughput and index lag per rollover; time-range search latency.

    .venv/bin/python bench/search.py [--runs 3] [--big 10000000] [--queries 200] [--dir DIR]

Index lag is the time from the end of a rollover (its listener call) until its events are
searchable (Tantivy commit + reload + manifest), as the repository's indexing thread measures it
(`stats().index_lag_seconds`). Goal: <= 2 s per 1 M lineage records.

Search: a repository of 10 M events (10 rollovers of 1 M lineage records plus some rich FAIL
events, spread over 10 hours of event time); queries are random 1 %-of-span time windows, top
100 newest first. Its base is the raw Tantivy range query (the same overlap query, top 100 by
time, over the same shard) measured interleaved in the same run. Goal: p50 <= 20 ms.

Every figure is the median over `--runs` runs; data is generated in a temporary directory that
is deleted afterwards (unless --dir is given).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

import numpy as np
import tantivy
from _common import median, percentile, report

from indexer import Predicates, candidate_spans
from indexer._query import overlap
from indexer._schema import SPAN_SCHEMA
from journals import EventType, JournalWriter, LineageBatch, ProvenanceEvent, record_id_base
from repository import ProvenanceRepository, RepositoryConfig

BATCH = 10_000  # lineage records per batch (a Spark task's capture point: often far more)
RICH = 2_000  # rich FAIL events per rollover
HOUR = 3_600 * 10**9
T0 = 1_700_000_000 * 10**9
# The rollover thread runs (and so does the indexing thread) but never merges on its own:
# each measured rollover is the explicit rollover() call, holding exactly what was written.
CONFIG = RepositoryConfig(
    rollover_interval=3600, rollover_debounce=3600, indexed_attributes=("host",)
)
COMPONENTS = [("textFile#0", "textFile", "RECEIVE", 1), ("map#1", "map", "FORK", 2)]
COMPONENTS += [("reduceByKey#2", "reduceByKey", "JOIN", 3)]
MUST = tantivy.Occur.Must


def write_rollover(
    repo: ProvenanceRepository,
    records: int,
    t0: int,
    t1: int,
    seed: int,
    batch: int = BATCH,
    rich: int = RICH,
) -> None:
    """Journal `records` lineage records (batches of `batch`, one parent each) and `rich` rich
    events with times in [t0, t1), as Spark tasks would (several journals)."""
    rng = np.random.default_rng(seed)
    spec = repo.writer_spec()
    batches = records // batch
    per_journal = max(1, batches // 8)
    w = JournalWriter.open(spec, tag="bench")
    for b in range(batches):
        if b and b % per_journal == 0:
            w.seal()
            w = JournalWriter.open(spec, tag="bench")
        comp, ctype, etype, cp = COMPONENTS[b % 3]
        part = b // 3
        n = batch
        w.append(
            LineageBatch.build(
                event_time_ns=int(rng.integers(t0, t1)),
                event_type=EventType(etype),
                run_id=f"run-{seed}",
                component_id=comp,
                component_type=ctype,
                partition=part,
                attempt=0,
                record_ids=range(record_id_base(cp, part), record_id_base(cp, part) + n),
                parent_counts=np.ones(n, dtype=np.int64),
                # Parents in no particular order (a shuffle's output): real column data.
                parent_ids=record_id_base(max(cp - 1, 0), part) + rng.permutation(n),
                attributes={"host": f"w{part % 4}"},
            )
        )
    fails = [
        ProvenanceEvent(
            event_time_ns=int(t),
            event_type=EventType.FAIL,
            run_id=f"run-{seed}",
            component_id="map#1",
            component_type="map",
            partition=i % 16,
            attempt=0,
            record_id=i,
            parent_ids=[i],
            attributes={"host": f"w{i % 4}", "error": "ValueError: bad line"},
        )
        for i, t in enumerate(np.sort(rng.integers(t0, t1, rich)))
    ]
    for k in range(0, len(fails), 10_000):
        w.append(fails[k : k + 10_000])
    w.seal()


def index_lag(repo: ProvenanceRepository, records: int, t0: int, t1: int, seed: int, **kw):
    """(rollover seconds, index lag seconds, events) of one rollover of `records` records."""
    write_rollover(repo, records, t0, t1, seed, **kw)
    t = time.perf_counter()
    n = repo.rollover()
    rolled = time.perf_counter() - t
    if not repo.wait_for_index(600):
        raise RuntimeError("index did not catch up")
    return rolled, repo.stats().index_lag_seconds, n


def per_record_docs_rate(n: int = 100_000) -> float:
    """Per-record Tantivy documents per second (the granularity the design avoids)."""
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", indexed=True, fast=True)
    sb.add_integer_field("time", indexed=True, fast=True)
    for f in ("type", "run", "component"):
        sb.add_text_field(f, tokenizer_name="raw")
    idx = tantivy.Index(sb.build())
    w = idx.writer(100_000_000, 2)
    t = time.perf_counter()
    for i in range(n):
        w.add_json(f'{{"id":{i},"time":{T0 + i},"type":"JOIN","run":"run-1","component":"map#1"}}')
    w.commit()
    return n / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big", type=int, default=10_000_000, help="records of the big rollovers")
    ap.add_argument("--queries", type=int, default=200, help="searches per run")
    ap.add_argument("--dir", help="work here (kept) instead of a temporary directory")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="provrepo-bench-search-")
    os.makedirs(work, exist_ok=True)
    print(f"provrepo search benchmark: {args.runs} runs, median of each figure ({work})")
    try:
        return run(work, args)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


def run(work: str, args) -> int:
    # -- index lag: 10 rollovers of 1 M records (these make the 10 M-event search repo) -----
    repo = ProvenanceRepository.open(os.path.join(work, "search"), CONFIG)
    lags, rolls = [], []
    for h in range(10):
        rolled, lag, _ = index_lag(repo, 1_000_000, T0 + h * HOUR, T0 + (h + 1) * HOUR, h)
        lags.append(lag)
        rolls.append(rolled)
    events = repo.stats().events
    print(f"\nindexing ({events:,} events in 10 rollovers of 1 M lineage records + {RICH} rich)")
    report("rollover of 1 M records (merge, for scale)", median(rolls), "s")
    report(
        "index lag, 1 M records",
        median(lags),
        "s",
        "goal <= 2 s",
        f"max {max(lags):.3f} s of {len(lags)}",
    )
    report("indexing throughput, 1 M records", 1_000_000 / median(lags) / 1e6, "M ev/s")
    per_rec = per_record_docs_rate()
    report(
        "per-record Tantivy docs (what spans avoid)",
        per_rec / 1e3,
        "k docs/s",
        ratio=f"1 M would lag {1e6 / per_rec:.1f} s",
    )

    # -- search over the 10 M-event repository --------------------------------------------
    shards = repo._index.shards
    span = (T0, T0 + 10 * HOUR)
    width = (span[1] - span[0]) // 100
    st = repo.stats()
    print(
        f"\nsearch: {st.events:,} events, {st.index_shards} shard(s), "
        f"{st.index_bytes / 1e6:.2f} MB of index; random 1 %-of-span time windows, "
        f"{args.queries} per run, top 100 newest first"
    )
    fail = tantivy.Query.term_query(SPAN_SCHEMA, "type", "FAIL")
    for label, types in (("time range", None), ("time range + type FAIL", ["FAIL"])):
        rng = random.Random(1)
        ours_p50, ours_p99, raw_p50, raw_p99, cands = [], [], [], [], []
        for _ in range(args.runs):
            ours, raw = [], []
            for _q in range(args.queries):
                lo = rng.randrange(span[0], span[1] - width)
                hi = lo + width
                # Raw Tantivy: the same query, top 100 by time, over the same shards.
                t = time.perf_counter()
                q = overlap("time", lo, hi, True, False)
                if types:
                    q = tantivy.Query.boolean_query([(MUST, q), (MUST, fail)])
                for info in shards.overlapping(lo, hi):
                    shards.searcher(info).search(
                        q, 100, count=False, order_by_field="max_time", order=tantivy.Order.Desc
                    )
                raw.append(time.perf_counter() - t)
                t = time.perf_counter()
                got = repo.search(start=lo, end=hi, event_types=types, limit=100)
                ours.append(time.perf_counter() - t)
                assert got and all(lo <= e.event_time_ns < hi for e in got)
                if _q == 0:
                    preds = Predicates(start_ns=lo, end_ns=hi, event_types=types)
                    cands.append(sum(1 for _ in candidate_spans(shards, preds)))
            ours_p50.append(percentile(ours, 50))
            ours_p99.append(percentile(ours, 99))
            raw_p50.append(percentile(raw, 50))
            raw_p99.append(percentile(raw, 99))
        print(f"  [{label}: ~{median(cands):.0f} candidate spans per window]")
        r50 = median(ours_p50) / median(raw_p50)
        r99 = median(ours_p99) / median(raw_p99)
        report(f"raw Tantivy query p50 ({label}; base)", median(raw_p50) * 1e3, "ms")
        report(f"raw Tantivy query p99 ({label})", median(raw_p99) * 1e3, "ms")
        goal = "goal <= 20 ms" if types is None else ""
        report(
            f"search top-100 p50 ({label})", median(ours_p50) * 1e3, "ms", goal, f"{r50:.1f}x raw"
        )
        report(f"search top-100 p99 ({label})", median(ours_p99) * 1e3, "ms", "", f"{r99:.1f}x raw")
    repo.close()
    shutil.rmtree(os.path.join(work, "search"), ignore_errors=True)

    # -- index lag for rollovers of args.big records ---------------------------------------
    repo = ProvenanceRepository.open(os.path.join(work, "big"), CONFIG)
    big_lags, big_rolls = [], []
    for r in range(args.runs):
        rolled, lag, _ = index_lag(repo, args.big, T0 + r * HOUR, T0 + (r + 1) * HOUR, 100 + r)
        big_lags.append(lag)
        big_rolls.append(rolled)
    repo.close()
    m = args.big / 1e6
    print(f"\nindexing, rollovers of {m:g} M lineage records ({args.runs} runs)")
    report(f"rollover of {m:g} M records (merge, for scale)", median(big_rolls), "s")
    report(
        f"index lag, {m:g} M records",
        median(big_lags),
        "s",
        f"goal <= {2 * m:g} s",
        f"{median(big_lags) / m:.3f} s per 1 M",
    )
    report(f"indexing throughput, {m:g} M records", args.big / median(big_lags) / 1e6, "M ev/s")

    # -- the shapes spans help least: rich events only, and tiny lineage batches -----------
    print(f"\nindex lag, adverse rollovers of 1 M events ({args.runs} runs)")
    repo = ProvenanceRepository.open(os.path.join(work, "adverse"), CONFIG)
    for label, kw in (
        ("1 M rich (driver-side) events", {"records": 0, "rich": 1_000_000}),
        ("1 M records in batches of 100", {"records": 1_000_000, "batch": 100, "rich": 0}),
    ):
        lags = []
        for r in range(args.runs):
            t0 = T0 + (20 + r) * HOUR
            _, lag, n = index_lag(repo, t0=t0, t1=t0 + HOUR, seed=200 + r, **kw)
            assert n == 1_000_000, n
            lags.append(lag)
        report(f"index lag, {label}", median(lags), "s", "goal <= 2 s", f"max {max(lags):.3f} s")
    st = repo.stats()
    repo.close()
    print(f"  [{st.events:,} events in {st.logs} logs; spans per log are capped]")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
