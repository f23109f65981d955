"""UI benchmark: API latency on the demo repository, graph drawing time in headless Chromium,
and the trace endpoint on a trace of a million records.

    .venv/bin/python bench/ui.py [--lines 360000] [--runs 30] [--draws 5] [--big 1000000]
                                 [--repo DIR] [--no-browser]

1. The demo pipeline (`provrepo demo`'s, 360,000 log lines by default, so that one error code
   has ~1,000 log lines behind it and another ~10,000) is captured into a repository (or
   `--repo` reuses one). A `UiServer` serves it on loopback; requests go over HTTP with
   keep-alive, as the page sends them.
2. API p50 over `--runs` requests, interleaved with its base, the facade call it wraps
   (`repo.search(...)`; for traces `lineage.trace` + `record_data`, the CLI's
   `provrepo trace --data`), so the ratio is what HTTP, JSON and the picture cost on top.
   Traces are cold (the server's walk cache is cleared before each request). Goal: <= 200 ms
   for search and for a 1,000-record trace with every record shipped as a node.
3. Headless Chromium (Debian's): time from navigation to the drawn graph of the ~10,000-record
   trace (the page's own mark, `document.body.dataset.graph === "ready"`), default picture and
   with a source partition expanded to 1,000 record nodes; median of `--draws`. Goal: <= 2 s.
4. A synthetic run whose output traces back to `--big` source records: the trace endpoint's
   time (cold) and peak Python memory (tracemalloc: numpy reports to it), the answer's size,
   against `lineage.trace` alone (the base).

Prints `uptime` first: figures measured under load are noisy; ratios within one run count.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from urllib.parse import quote

import numpy as np
from _common import median, percentile, report

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import _browser
from _events import cp, write_run

from journals import record_id_base
from repository import ProvenanceRepository, RepositoryConfig, format_record_id
from repository.ui import UiServer


class Client:
    """One keep-alive connection, as a browser tab uses."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, path: str) -> tuple[float, bytes]:
        t = time.perf_counter()
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status} {body[:200]!r}")
        return time.perf_counter() - t, body


def demo_repo(root: str, lines: int) -> str:
    from agent._demo import run_demo

    path = os.path.join(root, "demo")
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        run_demo(path, lines)
    print(f"demo repository: {lines:,} log lines captured in {time.perf_counter() - t:.0f} s")
    return path


def outputs_by_trace_size(repo: ProvenanceRepository) -> tuple[str, list[tuple[int, int]]]:
    """(run, [(backward trace size, collect output record)]) of the newest run."""
    index = repo.lineage
    run = index.latest_run()
    info = index.run_info(run)
    (collect,) = [c.number for c in info.capture_points.values() if c.component_type == "collect"]
    out = []
    for rid in index.all_records(run, collect).tolist():
        total, frontier = 1, np.array([rid])
        while len(frontier):
            frontier = index.parents(run, frontier)
            total += len(frontier)
        out.append((total, rid))
    return run, sorted(out)


def closest(sizes: list[tuple[int, int]], target: int) -> tuple[int, int]:
    return min(sizes, key=lambda s: abs(s[0] - target))


def api_latency(server: UiServer, repo: ProvenanceRepository, runs: int) -> None:
    run, sizes = outputs_by_trace_size(repo)
    n1k, r1k = closest(sizes, 1_000)
    client = Client(server.port)
    fail = repo.search(event_types="FAIL", limit=1)
    cases = {
        "search: newest 100": ("/api/search?limit=100", lambda: repo.search(limit=100)),
        "search: type FAIL, 1000": (
            "/api/search?type=FAIL&limit=1000",
            lambda: repo.search(event_types="FAIL", limit=1000),
        ),
        "search: query SEND AND partition 0-1": (
            "/api/search?" + "query=" + quote("type:SEND AND partition:[0 TO 1]"),
            lambda: repo.search(query="type:SEND AND partition:[0 TO 1]"),
        ),
        "event: a culprit's FAIL event": (
            f"/api/events/{fail[0].event_id}",
            lambda: repo.event_data(repo.get_event(fail[0].event_id)),
        ),
    }
    trace_path = f"/api/trace/{format_record_id(r1k)}?run={quote(run)}&collapse=5000&limit=5000"

    def trace_base():
        ids, _ = repo.lineage.trace(run, np.array([r1k]))
        repo.lineage.record_data(run, repo.lineage.reachable(run, np.array([r1k])))
        return ids

    cases[f"trace: {n1k:,} records, all as nodes"] = (trace_path, trace_base)
    print(f"\nAPI p50 over {runs} requests (cold traces), base = the facade call it wraps:")
    for name, (path, base) in cases.items():
        api_t, base_t = [], []
        for _ in range(runs):
            server.api.graphs.clear_cache()
            api_t.append(client.get(path)[0])
            t = time.perf_counter()
            base()
            base_t.append(time.perf_counter() - t)
        p50, p99 = median(api_t) * 1e3, percentile(api_t, 99) * 1e3
        ratio = f"{p50 / max(median(base_t) * 1e3, 1e-3):.1f}x base ({median(base_t) * 1e3:.1f} ms)"
        report(name + f" (p99 {p99:.0f} ms)", p50, "ms p50", "<= 200 ms", ratio)
    _, body = client.get(trace_path)
    shipped = json.loads(body)
    print(
        f"  (the {n1k:,}-record trace ships {len(shipped['nodes']):,} nodes, "
        f"{len(shipped['edges']):,} edges, {len(body) / 1024:.0f} KiB)"
    )


def draw_times(server: UiServer, repo: ProvenanceRepository, draws: int) -> None:
    if not _browser.available():
        print(f"\nbrowser: skipped ({_browser.MISSING})")
        return
    run, sizes = outputs_by_trace_size(repo)
    n10k, r10k = closest(sizes, 10_000)
    base = server.url.rstrip("/")
    link = f"/?record={format_record_id(r10k)}&run={quote(run)}"
    pages = {
        f"{n10k:,}-record trace, default picture": link,
        f"{n10k:,}-record trace, 1,000 record nodes": link + "&expand=1:0",
    }
    ready = "document.body.dataset.graph === 'ready'"
    driver = _browser.chrome()
    try:
        print(f"\nheadless Chromium, median of {draws} loads (navigation start to graph drawn):")
        driver.get(base + link)  # warm the browser's cache of the static files once
        _browser.wait_for(driver, ready, 60)
        times: dict[str, list[float]] = {k: [] for k in pages}
        nodes: dict[str, str] = {}
        for _ in range(draws):
            for name, path in pages.items():
                server.api.graphs.clear_cache()
                driver.get(base + path)
                _browser.wait_for(driver, ready, 120)
                times[name].append(driver.execute_script("return performance.now()") / 1e3)
                nodes[name] = driver.execute_script("return document.body.dataset.graphNodes")
        for name, ts in times.items():
            report(f"{name} ({nodes[name]} nodes)", median(ts), "s", "<= 2 s")
    finally:
        _browser.close(driver)


def big_trace(root: str, n: int) -> None:
    parts = 8
    per = n // parts
    cps = [
        cp(1, "textFile#0", "textFile", dependency="source"),
        cp(2, "reduceByKey#1.combine", "combiner", [1], "narrow", "JOIN"),
        cp(3, "reduceByKey#1", "reducer", [2], "shuffle", "JOIN"),
        cp(4, "collect#2", "collect", [3], "narrow", "SEND"),
    ]
    records: dict = {(1, p): per for p in range(parts)}
    for p in range(parts):
        records[(2, p)] = [list(range(record_id_base(1, p), record_id_base(1, p) + per))]
    records[(3, 0)] = [[record_id_base(2, p) for p in range(parts)]]
    records[(4, 0)] = [[record_id_base(3, 0)]]
    path = os.path.join(root, "big")
    with ProvenanceRepository.open(path, RepositoryConfig(sync="none")) as repo:
        write_run(repo, "big", cps, records)
    with ProvenanceRepository.open(path, read_only=True) as repo, UiServer(path, port=0) as srv:
        srv.start()
        client = Client(srv.port)
        rid = format_record_id(record_id_base(4, 0))
        tracemalloc.start()
        api_t, base_t = [], []
        for _ in range(3):
            srv.api.graphs.clear_cache()
            tracemalloc.reset_peak()
            t, body = client.get(f"/api/trace/{rid}?run=big")
            api_t.append(t)
            peak = tracemalloc.get_traced_memory()[1]
            t = time.perf_counter()
            ids, _ = repo.lineage.trace("big", np.array([record_id_base(4, 0)]))
            base_t.append(time.perf_counter() - t)
        tracemalloc.stop()
        got = json.loads(body)
        print(f"\ntrace endpoint on a {got['records']:,}-record trace (cold, median of 3):")
        report(
            "time",
            median(api_t),
            "s",
            "",
            f"{median(api_t) / median(base_t):.1f}x lineage.trace ({median(base_t):.2f} s)",
        )
        report("peak Python memory during the request", peak / 2**20, "MiB")
        report(
            f"answer: {len(got['nodes'])} nodes, {len(got['edges'])} edges",
            len(body) / 1024,
            "KiB",
            "bounded",
        )
        assert len(ids) == n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=360_000, help="demo log lines")
    ap.add_argument("--runs", type=int, default=30, help="API requests per figure")
    ap.add_argument("--draws", type=int, default=5, help="page loads per drawing figure")
    ap.add_argument("--big", type=int, default=1_000_000, help="records of the big trace")
    ap.add_argument("--repo", help="an existing demo repository (default: make one)")
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    if args.runs < 3 or args.draws < 1:
        ap.error("--runs must be at least 3, --draws at least 1")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    root = tempfile.mkdtemp(prefix="provrepo-bench-ui-")
    try:
        path = args.repo or demo_repo(root, args.lines)
        with ProvenanceRepository.open(path, read_only=True) as repo, UiServer(path, port=0) as srv:
            srv.start()
            api_latency(srv, repo, args.runs)
            if not args.no_browser:
                draw_times(srv, repo, args.draws)
        big_trace(root, args.big)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
