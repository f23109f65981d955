"""The UI in a real browser (headless Chromium), over a small captured PySpark pipeline.

The page is served read-only beside the repository's owner, as `serve_ui` would in a
notebook. Each test drives the page as a person would (form, clicks, deep links) and checks
what is on screen against brute force over the input lines. Record data holding markup must
stay text: the XSS payloads below would set `document.body.dataset.xss` if they ever ran.
"""

from __future__ import annotations

import json
import operator
import urllib.request
from urllib.parse import quote

import _browser
import pytest

from repository import ProvenanceRepository, RepositoryConfig, format_record_id
from repository.ui import serve_ui

pytestmark = [pytest.mark.spark, pytest.mark.browser]

XSS_VALUE = (
    '<img src=x onerror="document.body.dataset.xss=1"><script>document.body.dataset.xss=2</script>'
)
XSS_CODE = '<img src=x onerror="document.body.dataset.xss=3">'
LINES = [
    f"{i:04d} host{i % 5} "
    + (f"ERROR code=E{100 + i % 3} user=u{i}" if i % 4 else f"INFO ok req={i}")
    for i in range(840)
]
LINES[5] = f"0005 host0 ERROR code=E102 user={XSS_VALUE}"  # a good line whose data is markup
LINES[9] = f"0009 host4 ERROR code={XSS_CODE} user=u9"  # garbled: a culprit holding markup


def expected_lines(code: str) -> list[str]:
    return [x for x in LINES if f"code={code} " in x]


@pytest.fixture(scope="module")
def site(spark, tmp_path_factory):
    if not _browser.available():
        pytest.skip(_browser.MISSING)
    from agent import LineageContext

    tmp = tmp_path_factory.mktemp("ui-browser")
    path = tmp / "server.log"
    path.write_text("\n".join(LINES) + "\n")
    repo = ProvenanceRepository.open(tmp / "repo", RepositoryConfig(sync="none"))
    driver = server = None

    def error_code(line: str) -> tuple[str, int]:  # defined here: Spark pickles it by value
        code = line.split("code=", 1)[1].split(" ", 1)[0]
        if not (len(code) == 4 and code[0] == "E" and code[1:].isdigit()):
            raise ValueError(f"unparseable error code {code!r}")
        return code, 1

    try:
        lc = LineageContext(spark, repo, on_error="skip")
        errors = lc.textFile(str(path), 2).filter(lambda x: " ERROR " in x)
        counts = errors.map(error_code).reduceByKey(operator.add, 2)
        got = dict(counts.collect())
        assert got == {c: len(expected_lines(c)) for c in ("E100", "E101", "E102")}
        repo.rollover()
        repo.wait_for_index()
        lin = counts.lineage()
        outputs = {
            kv[0]: format_record_id(r) for r, kv in zip(lin.record_ids.tolist(), lin.collect())
        }
        raw = path.read_bytes()
        xss_at = raw.index(XSS_VALUE.encode())
        xss_record = repo.lineage.record_at(lc.run_id, str(path), xss_at)
        server = serve_ui(repo)  # read-only, beside the owner
        driver = _browser.chrome()
        yield {
            "base": server.url.rstrip("/"),
            "driver": driver,
            "run": lc.run_id,
            "outputs": outputs,
            "xss_record": format_record_id(xss_record),
            "repo": repo,
        }
    finally:
        if driver is not None:
            _browser.close(driver)
        if server is not None:
            server.close()
        repo.close()


def api(site, path: str) -> dict:
    with urllib.request.urlopen(site["base"] + path, timeout=30) as resp:
        return json.loads(resp.read())


def open_page(site, path: str, ready: str = "document.body.dataset.ready"):
    d = site["driver"]
    d.get(site["base"] + path)
    _browser.wait_for(d, ready)
    return d


def graph_ready(d, previous: str | None = None):
    """Wait for a drawn graph (a new one when `previous` is the last one's node list)."""
    _browser.wait_for(d, "document.body.dataset.graph === 'ready'")
    if previous is not None:
        _browser.wait_for(
            d,
            f"document.body.dataset.graph === 'ready' && "
            f"JSON.stringify(provrepo.graph().nodes().map(n => n.id()).sort()) !== {previous!r}",
        )


def nodes(d) -> list[dict]:
    return d.execute_script("return provrepo.graph().nodes('.record, .group').map(n => n.data())")


def node_ids(d) -> str:
    return d.execute_script(
        "return JSON.stringify(provrepo.graph().nodes().map(n => n.id()).sort())"
    )


def no_xss(d) -> None:
    assert d.execute_script("return document.body.dataset.xss") is None
    assert d.execute_script("return document.querySelectorAll('img').length") == 0
    assert d.execute_script("return document.scripts.length") == 3  # the page's own


def test_search_form_table_and_event_panel(site):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = open_page(site, "/")
    form = d.find_element(By.ID, "search-form")
    Select(form.find_element(By.NAME, "type")).select_by_value("FAIL")
    form.find_element(By.ID, "search-button").click()
    _browser.wait_for(d, "document.getElementById('search-status').textContent.includes('in ')")
    want = api(site, "/api/search?type=FAIL")
    rows = d.find_elements(By.CSS_SELECTOR, "#results tbody tr")
    assert len(rows) == want["count"] >= 1
    assert "type=FAIL" in d.current_url
    rows[0].click()
    _browser.wait_for(d, "document.getElementById('event-data')")
    text = d.find_element(By.ID, "event-data").text
    assert text == LINES[9]  # the culprit's raw line, markup shown as text
    no_xss(d)

    # Exclusion: every event of the run but the RECEIVE ones, paged and sorted.
    d = open_page(site, f"/?view=search&run={quote(site['run'])}&type=RECEIVE&exclude_type=true")
    _browser.wait_for(d, "document.getElementById('search-status').textContent.includes('in ')")
    want = api(site, f"/api/search?run={quote(site['run'])}&exclude_type=RECEIVE&limit=1000")
    status = d.find_element(By.ID, "search-status").text
    assert status.startswith(f"{want['count']:,} events")
    shown = d.find_elements(By.CSS_SELECTOR, "#results tbody td:nth-child(3)")
    assert shown and "RECEIVE" not in {x.text for x in shown}
    d.find_element(By.CSS_SELECTOR, '#results th[data-key="event_id"]').click()
    ids = [int(x.text) for x in d.find_elements(By.CSS_SELECTOR, "#results tbody td:first-child")]
    assert ids == sorted(ids) and len(ids) == min(50, want["count"])


def test_deep_link_draws_collapsed_trace_and_expands_a_group(site):
    from selenium.webdriver.common.by import By

    code = "E100"
    want = expected_lines(code)
    assert len(want) > 200  # more than the collapse threshold: the source level collapses
    d = open_page(
        site, f"/?record={site['outputs'][code]}", "document.body.dataset.graph === 'ready'"
    )
    status = d.find_element(By.ID, "trace-status").text
    assert status.startswith(f"{len(want) + 2 + 1 + 1:,} records traced")
    shown = nodes(d)
    groups = [n for n in shown if n["kind"] == "group"]
    assert sum(g["count"] for g in groups) == len(want)
    assert {g["capture_point"] for g in groups} == {1}
    (root,) = [n for n in shown if n.get("root")]
    assert root["record"] == site["outputs"][code] and root["text"] == f"('{code}', {len(want)})"
    _browser.wait_for(d, "document.getElementById('panel-title').textContent.startsWith('Event')")

    # Click a group, then "Show records": its lines appear one by one, as text labels.
    group = groups[0]
    before = node_ids(d)
    d.execute_script(f"provrepo.graph().getElementById({group['id']!r}).emit('tap')")
    d.find_element(By.ID, "expand-group").click()
    graph_ready(d, before)
    part = group["partition"]
    shown = nodes(d)
    lines = {n["text"] for n in shown if n["kind"] == "record" and n["capture_point"] == 1}
    in_part = {
        n["text"]
        for n in api(site, f"/api/trace/{site['outputs'][code]}?expand=1:{part}&limit=5000")[
            "nodes"
        ]
        if n["kind"] == "record" and n["capture_point"] == 1
    }
    assert lines == in_part and len(lines) == group["count"] and lines <= set(want)
    assert f"expand=1%3A{part}" in d.current_url or f"expand=1:{part}" in d.current_url
    assert d.execute_script("return provrepo.graph().nodes('.record').length") == len(
        [n for n in shown if n["kind"] == "record"]
    )
    no_xss(d)


def test_expand_parents_one_hop_at_a_time(site):
    from selenium.webdriver.common.by import By

    out = site["outputs"]["E101"]
    d = open_page(site, f"/?record={out}&depth=1", "document.body.dataset.graph === 'ready'")
    shown = nodes(d)
    assert len(shown) == 2  # the output and its reducer record
    (parent,) = [n for n in shown if not n.get("root")]
    assert parent["more"] == ["backward"]
    before = node_ids(d)
    d.execute_script(f"provrepo.graph().getElementById({parent['id']!r}).emit('tap')")
    ev = parent["event_id"]  # the root's panel has the same buttons: wait for the parent's
    _browser.wait_for(d, f"document.getElementById('panel-body').dataset.event === '{ev}'")
    d.find_element(By.ID, "expand-parents").click()
    graph_ready(d, before)
    shown = nodes(d)
    combiners = [n for n in shown if n["capture_point"] == 2]
    assert len(combiners) == 2 and len(shown) == 4  # one combiner record per map partition
    assert all(n["more"] == ["backward"] for n in combiners)


def test_xss_payload_in_a_record_stays_text(site):
    from selenium.webdriver.common.by import By

    d = open_page(
        site,
        f"/?record={site['xss_record']}&direction=forward",
        "document.body.dataset.graph === 'ready' && document.getElementById('event-data')",
    )
    assert d.find_element(By.ID, "event-data").text == LINES[5]
    (root,) = d.execute_script("return provrepo.graph().nodes('.root').map(n => n.data())")
    assert root["text"] == LINES[5] and LINES[5].startswith(root["label"].rstrip("…"))
    no_xss(d)
    # The culprit's markup, in the run view's culprit list.
    d = open_page(site, f"/?run={quote(site['run'])}", "document.body.dataset.run")
    culprits = d.find_element(By.ID, "culprits").text
    assert LINES[9] in culprits
    no_xss(d)


def test_run_view_draws_the_capture_point_dag(site):
    from selenium.webdriver.common.by import By

    d = open_page(site, f"/?run={quote(site['run'])}", "document.body.dataset.run")
    want = api(site, f"/api/runs/{quote(site['run'])}")
    cy = d.execute_script(
        "const g = provrepo.runGraph(); return {nodes: g.nodes().map(n => n.data()),"
        " edges: g.edges().length, culprit: g.nodes('.culprit').map(n => n.data('component_id'))}"
    )
    assert len(cy["nodes"]) == len(want["nodes"]) == 4  # textFile, combiner, reducer, collect
    assert cy["edges"] == len(want["edges"]) == 3
    assert cy["culprit"] == ["textFile#0"]
    assert "culprits (1)" in d.find_element(By.ID, "panel-body").text.lower()
    summary = d.find_element(By.ID, "run-summary").text
    assert "1 culprit" in summary
    # Dagre laid it out left to right: sources left of what they feed.
    x = {n["capture_point"]: n for n in cy["nodes"]}
    pos = d.execute_script(
        "return Object.fromEntries(provrepo.runGraph().nodes().map(n => [n.data('capture_point'),"
        " n.position('x')]))"
    )
    for e in want["edges"]:
        assert pos[str(e["source"])] < pos[str(e["target"])], (x[e["source"]], x[e["target"]])


def test_traversal_attempt_in_the_browser(site):
    d = site["driver"]
    for path in ("/static/%2e%2e/_server.py", "/static/..%2f_api.py", "/..%2f..%2fetc/passwd"):
        d.get(site["base"] + path)
        body = d.execute_script("return document.body.innerText")
        assert json.loads(body)["error"].startswith("no such page")
        assert "import" not in body


def test_culprit_link_opens_its_lineage(site):
    """From the run view's culprit list to the failing line's own trace."""
    from selenium.webdriver.common.by import By

    d = open_page(site, f"/?run={quote(site['run'])}", "document.body.dataset.run")
    link = d.find_element(By.CSS_SELECTOR, "#culprits button.link")
    record = link.text
    assert record.startswith("1:")  # a source line
    link.click()
    graph_ready(d)
    assert d.execute_script("return provrepo.graph().nodes('.root').data('record')") == record
