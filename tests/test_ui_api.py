"""The UI's JSON API, trace graphs and HTTP server, on a hand-built run (no Spark, no browser).

Trace pictures are checked against a brute-force walk of the known parent lists: every
record and association shown alone, and, collapsed, every group's count and every
aggregated edge's association count. The server is checked for what it must refuse: bad
input (a 4xx JSON line, never a 500), other methods, a foreign Host header, path traversal.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, deque

import pytest
from _events import cp, write_run

from journals import EventType, ProvenanceEvent, record_id_base, unpack_record_id
from repository import BadInput, NotFound, ProvenanceRepository, RepositoryConfig
from repository.ui import Api, UiServer, serve_ui

RUN = "run-ui"
PARTS, N, KEYS = 3, 40, 5
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def fmt(rid: int) -> str:
    return "{}:{}:{}".format(*unpack_record_id(rid))


def build(repo) -> dict[int, list[int]]:
    """source cp 1 (3 x 40 values) -> map cp 2 (narrow: i % 7 == 0 dropped, i % 11 == 0 twice)
    -> reduceByKey cp 3 (shuffle, 5 keys over 2 partitions) -> collect cp 4. Returns each
    record's parents."""
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "flatMap#1", "flatMap", [1]),
        cp(3, "reduceByKey#2", "reducer", [2], "shuffle", "JOIN"),
        cp(4, "collect#3", "collect", [3], "narrow", "SEND"),
    ]
    parents: dict[int, list[int]] = {}
    records: dict = {}
    values: dict = {}
    by_key: dict[int, list[int]] = {}
    for p in range(PARTS):
        records[(1, p)] = N
        values[(1, p)] = [f"line {p}:{i} key=k{(p * N + i) % KEYS}" for i in range(N)]
        if p == 1:
            values[(1, p)][3] = XSS
        kids = []
        for i in range(N):
            src = record_id_base(1, p) + i
            parents[src] = []
            for _ in range(0 if i % 7 == 0 else 2 if i % 11 == 0 else 1):
                rid = record_id_base(2, p) + len(kids)
                kids.append([src])
                parents[rid] = [src]
                by_key.setdefault((p * N + i) % KEYS, []).append(rid)
        records[(2, p)] = kids
    for part in range(2):
        keys = [k for k in range(KEYS) if k % 2 == part]
        records[(3, part)] = [sorted(by_key[k]) for k in keys]
        records[(4, part)] = [[record_id_base(3, part) + j] for j in range(len(keys))]
        for j, k in enumerate(keys):
            parents[record_id_base(3, part) + j] = sorted(by_key[k])
            parents[record_id_base(4, part) + j] = [record_id_base(3, part) + j]
    write_run(repo, RUN, cps, records, values=values)
    return parents


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = tmp_path_factory.mktemp("ui") / "repo"
    config = RepositoryConfig(sync="none", rollover_interval=3600)
    with ProvenanceRepository.open(path, config) as repo:
        parents = build(repo)
        fail = ProvenanceEvent(
            event_time_ns=time.time_ns(),
            event_type=EventType.FAIL,
            run_id=RUN,
            component_id="parallelize#0",
            component_type="failure",
            partition=1,
            attempt=0,
            record_id=record_id_base(1, 1) + 3,
            parent_ids=[record_id_base(1, 1) + 3],
            attributes={"exception": "ValueError", "message": "bad"},
        )
        repo.register_events([fail])
        repo.rollover()
        repo.wait_for_index()
    ro = ProvenanceRepository.open(path, read_only=True)
    yield {"path": str(path), "api": Api(ro), "parents": parents}
    ro.close()


def walk(parents: dict[int, list[int]], root: int, forward: bool, depth=None):
    """Brute force: records and (parent, child) associations reached from `root`."""
    children: dict[int, list[int]] = {}
    for c, ps in parents.items():
        for p in ps:
            children.setdefault(p, []).append(c)
    seen, edges, todo = {root}, Counter(), deque([(root, 0)])
    while todo:
        r, d = todo.popleft()
        if depth is not None and d >= depth:
            continue
        nxt = children.get(r, []) if forward else parents.get(r, [])
        for x in nxt:
            edges[(r, x) if forward else (x, r)] += 1
            if x not in seen:
                seen.add(x)
                todo.append((x, d + 1))
    return seen, edges


def picture(api, rid, **params) -> dict:
    q = {k: v if isinstance(v, list) else [str(v)] for k, v in params.items()}
    return api.trace(fmt(rid), q)


def outputs(parents):
    return sorted(r for r in parents if unpack_record_id(r)[0] == 4)


def test_every_trace_shown_alone_matches_brute_force(world):
    api, parents = world["api"], world["parents"]
    roots = outputs(parents) + [r for r in parents if unpack_record_id(r)[0] in (1, 2)][::9]
    for root in roots:
        for direction in ("backward", "forward", "both"):
            got = picture(api, root, direction=direction, collapse=5000, limit=5000)
            want, edges = set(), Counter()
            for fwd in {"backward": [False], "forward": [True], "both": [False, True]}[direction]:
                s, e = walk(parents, root, fwd)
                want |= s
                edges += e
            assert all(n["kind"] == "record" for n in got["nodes"])
            assert {n["record_id"] for n in got["nodes"]} == want
            assert got["records"] == len(want) and not got["truncated"]
            shown = Counter()
            ids = {n["id"]: n["record_id"] for n in got["nodes"]}
            for e in got["edges"]:
                shown[(ids[e["source"]], ids[e["target"]])] += e["count"]
            assert shown == edges
            (r,) = [n for n in got["nodes"] if n["root"]]
            assert r["record_id"] == root


def test_collapsed_groups_and_edges_count_exactly(world):
    api, parents = world["api"], world["parents"]
    root = outputs(parents)[0]
    recs, edges = walk(parents, root, False)
    got = picture(api, root, collapse=4)
    node_of = {}
    for n in got["nodes"]:
        if n["kind"] == "record":
            node_of[n["record_id"]] = n["id"]
    groups = {n["id"]: n for n in got["nodes"] if n["kind"] == "group"}
    want_groups = Counter()
    for r in recs:
        if r not in node_of:
            c, p, _ = unpack_record_id(r)
            node_of[r] = f"g{c}:{p}"
            want_groups[f"g{c}:{p}"] += 1
    assert {g: n["count"] for g, n in groups.items()} == dict(want_groups)
    assert want_groups, "the source and map levels hold more than 4 records: they collapse"
    want_edges = Counter()
    for (p, c), k in edges.items():
        want_edges[(node_of[p], node_of[c])] += k
    assert {(e["source"], e["target"]): e["count"] for e in got["edges"]} == dict(want_edges)
    assert got["collapsed_records"] == sum(want_groups.values())


def test_limit_expand_and_hops(world):
    api, parents = world["api"], world["parents"]
    root = outputs(parents)[0]
    recs, _ = walk(parents, root, False)
    small = picture(api, root, limit=3)
    alone = [n for n in small["nodes"] if n["kind"] == "record"]
    assert len(alone) <= 3 and any(n["root"] for n in alone)
    # The root and the records hopped from are always shown, even past the limit.
    (reducer,) = parents[root]
    tiny = picture(api, root, limit=1, hop=[f"backward:{fmt(reducer)}"])
    assert {n["record_id"] for n in tiny["nodes"] if n["kind"] == "record"} == {root, reducer}
    counted = len(alone) + sum(n["count"] for n in small["nodes"] if n["kind"] == "group")
    assert counted == len(recs)  # nothing lost: the rest is in groups

    # Expanding a group shows its records alone, as far as the limit allows.
    collapsed = picture(api, root, collapse=4)
    key = next(n["group"] for n in collapsed["nodes"] if n["kind"] == "group")
    members = {r for r in recs if "{}:{}".format(*unpack_record_id(r)[:2]) == key}
    full = picture(api, root, collapse=4, expand=[key])
    assert members <= {n.get("record_id") for n in full["nodes"]}
    assert not full["truncated"]
    alone_before = sum(n["kind"] == "record" for n in collapsed["nodes"])
    capped = picture(api, root, collapse=4, expand=[key], limit=alone_before + 2)
    shown = {n.get("record_id") for n in capped["nodes"]} & members
    assert len(shown) == 2 and capped["truncated"]
    (rest,) = [n for n in capped["nodes"] if n.get("group") == key]
    assert rest["rest"] and rest["count"] == len(members) - 2

    # Depth 1 from an output: its parent only, marked as having more; a hop goes one further.
    one = picture(api, root, depth=1)
    (parent,) = parents[root]
    assert {n["record_id"] for n in one["nodes"]} == {root, parent}
    (pn,) = [n for n in one["nodes"] if n["record_id"] == parent]
    assert pn["more"] == ["backward"]
    hopped = picture(api, root, depth=1, hop=[f"backward:{fmt(parent)}"], collapse=5000)
    assert {n["record_id"] for n in hopped["nodes"]} == {root, parent, *parents[parent]}
    (pn,) = [n for n in hopped["nodes"] if n["record_id"] == parent]
    assert pn["more"] == []


def test_overlapping_expansions_count_each_association_once(world):
    """Hops over records the trace already expanded (either way) add nothing twice."""
    api, parents = world["api"], world["parents"]
    root = outputs(parents)[0]
    (reducer,) = parents[root]
    mapped = parents[reducer][0]
    (source,) = parents[mapped]
    hops = [f"backward:{fmt(reducer)}", f"forward:{fmt(source)}", f"forward:{fmt(mapped)}"]
    got = picture(api, root, direction="both", collapse=5000, limit=5000, hop=hops)
    recs, edges = walk(parents, root, False)
    for extra, fwd in ((source, True), (mapped, True)):
        more, e = walk(parents, extra, fwd, depth=1)
        recs |= more
        for pair, k in e.items():
            edges[pair] = max(edges[pair], k)  # the same association, not a second one
    ids = {n["id"]: n["record_id"] for n in got["nodes"]}
    assert set(ids.values()) == recs
    shown = Counter()
    for e in got["edges"]:
        shown[(ids[e["source"]], ids[e["target"]])] += e["count"]
    assert shown == edges


def test_layout_is_layered_by_capture_point(world):
    api, parents = world["api"], world["parents"]
    got = picture(api, outputs(parents)[0], collapse=5000)
    xs = {}
    for n in got["nodes"]:
        xs.setdefault(n["capture_point"], set()).add(n["x"])
    assert all(len(v) == 1 for v in xs.values())
    order = [cp_ for cp_, _ in sorted(xs.items(), key=lambda kv: min(kv[1]))]
    assert order == [1, 2, 3, 4]
    ys = [(n["x"], n["y"]) for n in got["nodes"]]
    assert len(set(ys)) == len(ys), "no two nodes on the same spot"


def test_a_big_trace_ships_a_bounded_picture(tmp_path):
    n, parts = 60_000, 4
    cps = [
        cp(1, "textFile#0", "textFile", dependency="source"),
        cp(2, "reduceByKey#1", "reducer", [1], "shuffle", "JOIN"),
    ]
    records = {(1, p): n // parts for p in range(parts)}
    records[(2, 0)] = [[record_id_base(1, p) + i for p in range(parts) for i in range(n // parts)]]
    with ProvenanceRepository.open(tmp_path / "r", RepositoryConfig(sync="none")) as repo:
        write_run(repo, "big", cps, records)
        got = Api(repo).trace("2:0:0", {})
    assert got["records"] == n + 1
    assert len(got["nodes"]) == 1 + parts and len(got["edges"]) == parts
    assert sum(x["count"] for x in got["nodes"] if x["kind"] == "group") == n
    assert len(json.dumps(got)) < 10_000


def test_runs_run_view_events_and_search(world):
    api = world["api"]
    (r,) = api.runs({})["runs"]
    assert r["run_id"] == RUN and r["culprits"] == 1 and len(r["capture_points"]) == 4
    view = api.run(RUN, {})
    assert [n["capture_point"] for n in view["nodes"]] == [1, 2, 3, 4]
    parents = world["parents"]
    assoc = Counter()
    for c, ps in parents.items():
        for p in ps:
            assoc[(unpack_record_id(p)[0], unpack_record_id(c)[0])] += 1
    assert {(e["source"], e["target"]): e["associations"] for e in view["edges"]} == dict(assoc)
    (culprit,) = view["culprits"]
    assert culprit["record"] == "1:1:3" and culprit["data"] == XSS
    assert {n["capture_point"]: n["culprits"] for n in view["nodes"]}[1] == 1

    # An event: all fields, raw data, parents and children as exact ids.
    src = record_id_base(1, 0) + 1
    ev = api.search({"component": ["flatMap#1"], "limit": ["1000"]})["events"]
    (child,) = [e for e in ev if e["parent_ids"] == [src]]
    got = api.event(str(child["event_id"]), {})
    assert got["parents"][0]["record"] == "1:0:1" and got["lineage_record"]
    (reducer,) = got["children"]
    assert reducer["record"].startswith("3:") and reducer["event_id"]
    parent = api.event(str(got["parents"][0]["event_id"]), {})
    assert parent["data"] == "line 0:1 key=k1" and parent["children_total"] == 1

    # Search: the facade's predicates, exclusions as query clauses.
    fails = api.search({"type": ["FAIL"]})
    assert fails["count"] == 1 and fails["events"][0]["record"] == "1:1:3"
    no_fail = api.search({"exclude_type": ["FAIL"], "run": [RUN], "limit": ["10000"]})
    assert no_fail["count"] > 100 and all(e["event_type"] != "FAIL" for e in no_fail["events"])
    only = api.search({"query": ["type:FAIL"], "exclude_component": ["parallelize#0"]})
    assert only["count"] == 0


def test_run_view_marks_mining_suspects(tmp_path):
    """A map task that emits 25 records for three of its inputs (Newt's fault) is marked."""
    cps = [
        cp(1, "parallelize#0", "parallelize", dependency="source"),
        cp(2, "flatMap#1", "flatMap", [1]),
    ]
    records = {}
    for p in range(4):
        records[(1, p)] = 50
        records[(2, p)] = [
            [record_id_base(1, p) + i]
            for i in range(50)
            for _ in range(25 if p == 3 and i in (4, 17, 30) else 1)
        ]
    with ProvenanceRepository.open(tmp_path / "r", RepositoryConfig(sync="none")) as repo:
        write_run(repo, "faulty", cps, records)
        view = Api(repo).run("faulty", {})
    marked = {n["capture_point"]: n["suspects"] for n in view["nodes"]}
    assert marked == {1: 0, 2: 1}
    (s,) = view["suspects"]
    assert (s["capture_point"], s["partition"], s["rank"]) == (2, 3, 1)
    assert set(s["outlier_examples"]) == {"1:3:4", "1:3:17", "1:3:30"}


BAD = [
    ("/api/trace/1:0:0", {"direction": ["sideways"]}, 400),
    ("/api/trace/1:0:0", {"depth": ["0"]}, 400),
    ("/api/trace/1:0:0", {"depth": ["x"]}, 400),
    ("/api/trace/1:0:0", {"collapse": ["0"]}, 400),
    ("/api/trace/1:0:0", {"limit": ["999999"]}, 400),
    ("/api/trace/1:0:0", {"expand": ["nope"]}, 400),
    ("/api/trace/1:0:0", {"hop": ["sideways:1:0:0"]}, 400),
    ("/api/trace/1:0:0", {"hop": ["backward:9:9:9"]}, 404),
    ("/api/trace/1:0:0", {"run": ["nope"]}, 404),
    ("/api/trace/1:0:0", {"bogus": ["1"]}, 400),
    ("/api/trace/9:0:0", {}, 404),
    ("/api/trace/1:0:99999", {}, 404),
    ("/api/trace/-5", {}, 400),
    ("/api/trace/99999999999999999999999", {}, 400),
    ("/api/trace/abc", {}, 400),
    ("/api/trace/%2Fno%2Fsuch@5", {}, 404),
    ("/api/trace/1:0:0", {"direction": ["forward", "backward"]}, 400),
    ("/api/events/0", {}, 400),
    ("/api/events/abc", {}, 400),
    ("/api/events/99999999", {}, 404),
    ("/api/runs/nope", {}, 404),
    ("/api/search", {"query": ["type:("]}, 400),
    ("/api/search", {"query": ["attrs.nope:x"]}, 400),
    ("/api/search", {"from": ["yesterday-ish"]}, 400),
    ("/api/search", {"type": ["NOPE"]}, 400),
    ("/api/search", {"limit": ["-1"]}, 400),
    ("/api/search", {"oldest_first": ["maybe"]}, 400),
    ("/api/search", {"attr": ["novalue"]}, 400),
    ("/api/search", {"exclude_type": ['x"y']}, 400),
    ("/api/nope", {}, 404),
    ("/api/runs/a/b", {}, 404),
    ("/api/events", {}, 404),
]


@pytest.mark.parametrize("path,params,status", BAD)
def test_bad_input_is_one_line_and_4xx(world, path, params, status):
    with pytest.raises(BadInput) as e:
        world["api"].route(path, params)
    assert (404 if isinstance(e.value, NotFound) else 400) == status
    assert "\n" not in str(e.value) and str(e.value)


# -- the HTTP server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(world):
    with UiServer(world["path"], "127.0.0.1", 0) as s:
        s.start()
        yield s


def raw(server, request: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def get(server, path: str, host: str | None = None, method: str = "GET"):
    host = f"127.0.0.1:{server.port}" if host is None else host
    req = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    return raw(server, req.encode())


def test_serves_page_api_and_security_headers(server):
    status, headers, body = get(server, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"/static/app.js" in body
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    for path in ("/static/app.js", "/static/vendor/cytoscape.min.js", "/static/app.css"):
        status, headers, body = get(server, path)
        assert status == 200 and len(body) > 1000, path
    status, headers, body = get(server, "/api/runs")
    assert status == 200 and json.loads(body)["runs"][0]["run_id"] == RUN
    assert headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "path",
    [
        "/static/../_server.py",
        "/static/%2e%2e/_server.py",
        "/static/%2E%2E%2F_server.py",
        "/static/..%2f..%2f_api.py",
        "/static/%252e%252e/_server.py",
        "/static/vendor/../../_server.py",
        "/static//etc/passwd",
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/static/..\\_server.py",
        "/static/app.js%00.css",
        "/static/",
        "/static/vendor",
    ],
)
def test_no_path_traversal(server, path):
    status, headers, body = get(server, path)
    assert status == 404 and headers["content-type"].startswith("application/json")
    assert b"import" not in body and b"root:" not in body
    assert list(json.loads(body)) == ["error"]


@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "evil.example", "127.0.0.1:1", "localhost.evil.example:{port}", ""],
)
def test_foreign_host_header_is_refused(server, host):
    status, _, body = get(server, "/api/runs", host=host.format(port=server.port))
    assert status == 403 and "DNS rebinding" in json.loads(body)["error"]
    for ok in (f"127.0.0.1:{server.port}", f"localhost:{server.port}"):
        assert get(server, "/api/runs", host=ok)[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "FOO"])
def test_only_get(server, method):
    status, headers, body = get(server, "/api/runs", method=method)
    assert status == 405 and headers["allow"] == "GET"
    if method != "HEAD":
        assert "GET only" in json.loads(body)["error"]


def test_malformed_requests_get_json_errors(server):
    status, _, body = raw(server, b"GET /a b HTTP/1.1\r\n\r\n")
    assert status == 400 and "error" in json.loads(body)
    status, _, body = get(server, "http://127.0.0.1/api/runs")
    assert status == 400
    for path, params, want in BAD:
        from urllib.parse import urlencode

        q = urlencode(params, doseq=True)
        status, _, body = get(server, path + ("?" + q if q else ""))
        assert status == want, path
        (line,) = json.loads(body).values()
        assert "\n" not in line


def test_a_live_owner_is_seen(tmp_path):
    """serve_ui beside the owner: read-only, and later rollovers show up."""
    with ProvenanceRepository.open(tmp_path / "r", RepositoryConfig(sync="none")) as repo:
        ui = serve_ui(repo)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=10)
            conn.request("GET", "/api/info")
            assert json.loads(conn.getresponse().read())["events"] == 0
            write_run(repo, "late", [cp(1, "p#0", "parallelize", dependency="source")], {(1, 0): 3})
            time.sleep(0.6)  # the API refreshes its view at most twice a second
            conn.request("GET", "/api/runs")
            assert [r["run_id"] for r in json.loads(conn.getresponse().read())["runs"]] == ["late"]
            assert ui.repo.read_only
        finally:
            ui.close()


# -- provrepo ui ----------------------------------------------------------------------------


PROVREPO = os.path.join(os.path.dirname(sys.executable), "provrepo")


def test_cli_prints_url_serves_and_exits_cleanly_on_ctrl_c(world):
    proc = subprocess.Popen(
        [PROVREPO, "ui", world["path"], "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        port = int(url.rsplit(":", 1)[1].rstrip("/"))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/info")
        assert json.loads(conn.getresponse().read())["path"] == world["path"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_warns_beyond_loopback(world):
    proc = subprocess.Popen(
        [PROVREPO, "ui", world["path"], "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].rstrip("/"))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/runs")  # an IP literal names a wildcard-bound server
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
        conn.request("GET", "/api/runs", headers={"Host": f"evil.example:{port}"})
        assert conn.getresponse().status == 403
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert "no authentication" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(
    "args",
    [["ui", "/no/such/repo"], ["ui", "{repo}", "--port", "70000"], ["ui", "{repo}", "--port", "x"]],
)
def test_cli_bad_input_exits_2(world, args):
    args = [a.format(repo=world["path"]) for a in args]
    done = subprocess.run([PROVREPO, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
