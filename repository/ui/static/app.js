/* provrepo's provenance UI: search, event details, lineage graphs, runs.
 *
 * Every piece of record data goes into the page as text: elements are built with el(),
 * which adds strings as text nodes, never as HTML; graph labels are drawn on a canvas.
 * Record ids travel as "cp:partition:position" strings (exact; integer ids pass 2**53).
 */
"use strict";

(function () {
  const PAGE = 50;
  const state = {
    info: null,
    runs: null,
    search: { events: [], page: 0, sort: null, desc: false, selected: null },
    trace: null, // {record, run, direction, depth, collapse, expand: [], hop: []}
    graph: null, // {cy, initial(cy), moved}
    runGraph: null,
  };

  // -- DOM helpers (text only) ------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "onclick") node.addEventListener("click", v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  const $ = (id) => document.getElementById(id);
  const fmt = (n) => (n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"));
  const plural = (n, word) => `${fmt(n)} ${word}${Number(n) === 1 ? "" : "s"}`;

  function shortTime(iso) {
    return iso ? iso.replace("T", " ").replace(/(\.\d{3})\d*Z$/, "$1") : "";
  }

  function showError(msg) {
    const box = $("error");
    if (!msg) {
      box.hidden = true;
      return;
    }
    clear(box).appendChild(document.createTextNode(msg));
    box.hidden = false;
  }

  async function api(path, params) {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v === null || v === undefined || v === "" || v === false) continue;
      if (Array.isArray(v)) v.forEach((x) => qs.append(k, x));
      else qs.append(k, v === true ? "true" : String(v));
    }
    const q = qs.toString();
    const resp = await fetch(path + (q ? "?" + q : ""), { headers: { Accept: "application/json" } });
    let body;
    try {
      body = await resp.json();
    } catch (e) {
      throw new Error(`${resp.status} ${resp.statusText}`);
    }
    if (!resp.ok) throw new Error(body.error || `${resp.status} ${resp.statusText}`);
    return body;
  }

  function link(text, onclick, title) {
    return el("button", { class: "link", type: "button", title, onclick }, text);
  }

  // -- navigation ---------------------------------------------------------------------------

  function setView(name) {
    for (const v of ["search", "runs", "lineage"]) {
      $("view-" + v).hidden = v !== name;
      $("nav-" + v).classList.toggle("active", v === name);
    }
    document.body.dataset.view = name;
  }

  function pushUrl(params) {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v === null || v === undefined || v === "" || v === false) continue;
      if (Array.isArray(v)) v.forEach((x) => qs.append(k, x));
      else qs.append(k, String(v));
    }
    const url = "/" + (qs.toString() ? "?" + qs.toString() : "");
    if (url !== location.pathname + location.search) history.pushState(null, "", url);
  }

  async function route() {
    showError(null);
    const p = new URLSearchParams(location.search);
    try {
      if (p.has("record")) {
        setView("lineage");
        await openTrace(
          {
            record: p.get("record"),
            run: p.get("run") || "",
            direction: p.get("direction") || "both",
            depth: p.get("depth") || "all",
            collapse: p.get("collapse") || "200",
            expand: p.getAll("expand"),
            hop: p.getAll("hop"),
          },
          false
        );
      } else if (p.has("run") && p.get("view") !== "search") {
        setView("runs");
        await showRuns();
        await showRun(p.get("run"), false);
      } else if (p.get("view") === "runs") {
        setView("runs");
        await showRuns();
        $("run-view").hidden = true;
      } else if (p.get("view") === "lineage") {
        setView("lineage");
      } else {
        setView("search");
        fillSearchForm(p);
        await runSearch(false);
      }
      if (p.has("event")) await showEvent(p.get("event"));
    } catch (e) {
      showError(e.message);
    }
  }

  // -- search -------------------------------------------------------------------------------

  const SEARCH_FIELDS = ["from", "to", "type", "run", "component", "attr", "query", "limit"];
  const SEARCH_CHECKS = ["exclude_type", "exclude_run", "exclude_component", "exclude_attr", "oldest_first"];

  function fillSearchForm(p) {
    const f = $("search-form");
    for (const name of SEARCH_FIELDS) {
      const v = name === "query" ? p.get("q") || p.get("query") : p.get(name);
      if (v !== null) {
        if (f.elements[name].tagName === "SELECT" && ![...f.elements[name].options].some((o) => o.value === v)) {
          f.elements[name].appendChild(el("option", { value: v }, v));
        }
        f.elements[name].value = v;
      }
    }
    for (const name of SEARCH_CHECKS) f.elements[name].checked = p.get(name) === "true";
  }

  function searchParams() {
    const f = $("search-form");
    const out = {};
    for (const name of SEARCH_FIELDS) out[name] = f.elements[name].value.trim();
    for (const name of SEARCH_CHECKS) out[name] = f.elements[name].checked;
    return out;
  }

  async function runSearch(push) {
    const p = searchParams();
    const params = {
      from: p.from,
      to: p.to,
      query: p.query,
      limit: p.limit || 1000,
      oldest_first: p.oldest_first,
    };
    for (const name of ["type", "run", "component", "attr"]) {
      if (p[name]) params[p["exclude_" + name] ? "exclude_" + name : name] = p[name];
    }
    if (push) {
      const url = { view: "search", q: p.query };
      for (const name of SEARCH_FIELDS) if (name !== "query" && name !== "limit") url[name] = p[name];
      if (p.limit && p.limit !== "1000") url.limit = p.limit;
      for (const name of SEARCH_CHECKS) url[name] = p[name] ? "true" : "";
      pushUrl(url);
    }
    $("search-status").textContent = "Searching…";
    const t0 = performance.now();
    let res;
    try {
      res = await api("/api/search", params);
    } catch (e) {
      $("search-status").textContent = "";
      state.search.events = [];
      renderResults();
      throw e;
    }
    const ms = Math.round(performance.now() - t0);
    state.search.events = res.events;
    state.search.page = 0;
    state.search.sort = null;
    const order = p.oldest_first ? "oldest first" : "newest first";
    let status = `${fmt(res.count)} event${res.count === 1 ? "" : "s"} (${order}` +
      `${res.count >= res.limit ? ", limit reached" : ""}) in ${ms} ms`;
    if (res.events_not_indexed) status += ` · ${fmt(res.events_not_indexed)} events not indexed yet`;
    $("search-status").textContent = status;
    renderResults();
  }

  function sortedEvents() {
    const s = state.search;
    const events = s.events.slice();
    if (s.sort) {
      const th = document.querySelector(`#results th[data-key="${s.sort}"]`);
      const num = th && th.dataset.num;
      events.sort((a, b) => {
        const x = a[s.sort], y = b[s.sort];
        let c;
        if (num) c = (x ?? -1) - (y ?? -1);
        else c = String(x ?? "").localeCompare(String(y ?? ""), "en", { numeric: true });
        return s.desc ? -c : c;
      });
    }
    return events;
  }

  function renderResults() {
    const s = state.search;
    const events = sortedEvents();
    const pages = Math.max(1, Math.ceil(events.length / PAGE));
    s.page = Math.min(s.page, pages - 1);
    const body = clear(document.querySelector("#results tbody"));
    for (const ev of events.slice(s.page * PAGE, (s.page + 1) * PAGE)) {
      const tr = el(
        "tr",
        { dataset: { event: ev.event_id }, class: ev.event_id === s.selected ? "selected" : null },
        el("td", {}, ev.event_id),
        el("td", {}, shortTime(ev.time)),
        el("td", {}, ev.event_type),
        el("td", {}, ev.run_id),
        el("td", {}, ev.component_id),
        el("td", {}, ev.partition),
        el("td", {}, ev.record || "")
      );
      tr.addEventListener("click", () => {
        s.selected = ev.event_id;
        for (const r of body.querySelectorAll("tr.selected")) r.classList.remove("selected");
        tr.classList.add("selected");
        showEvent(ev.event_id).catch((e) => showError(e.message));
      });
      body.appendChild(tr);
    }
    $("page-info").textContent = `page ${s.page + 1} of ${pages}`;
    $("page-prev").disabled = s.page === 0;
    $("page-next").disabled = s.page >= pages - 1;
    for (const th of document.querySelectorAll("#results th")) {
      th.classList.toggle("sorted-asc", th.dataset.key === s.sort && !s.desc);
      th.classList.toggle("sorted-desc", th.dataset.key === s.sort && s.desc);
    }
  }

  // -- event panel --------------------------------------------------------------------------

  function openPanel(title) {
    $("panel").hidden = false;
    $("panel-title").textContent = title;
    return clear($("panel-body"));
  }

  function fields(rows) {
    const dl = el("dl", { class: "fields" });
    for (const [k, v] of rows) {
      if (v === null || v === undefined || v === "") continue;
      dl.appendChild(el("dt", {}, k));
      dl.appendChild(el("dd", {}, v instanceof Node ? v : String(v)));
    }
    return dl;
  }

  function recordLinks(items, total, what) {
    const box = el("div", {});
    box.appendChild(el("h3", {}, `${what} (${fmt(total)})`));
    if (!items.length) {
      box.appendChild(el("div", { class: "muted" }, "none"));
      return box;
    }
    const ul = el("ul", { class: "links" });
    for (const it of items) {
      const label = `${it.record}${it.component_id ? "  " + it.component_id : ""}`;
      ul.appendChild(
        el(
          "li",
          {},
          it.event_id
            ? link(label, () => showEvent(it.event_id).catch((e) => showError(e.message)), `event ${it.event_id}`)
            : el("span", {}, label)
        )
      );
    }
    box.appendChild(ul);
    if (total > items.length) box.appendChild(el("div", { class: "muted" }, `… and ${fmt(total - items.length)} more`));
    return box;
  }

  async function showEvent(id, extraActions) {
    const res = await api("/api/events/" + encodeURIComponent(id));
    const ev = res.event;
    const body = openPanel(`Event ${ev.event_id}`);
    body.dataset.event = ev.event_id;
    const loc = ev.location ? `${ev.location.uri} @ ${ev.location.offset} (+${ev.location.length})` : null;
    body.appendChild(
      fields([
        ["event id", ev.event_id],
        ["time (UTC)", shortTime(ev.time)],
        ["type", ev.event_type],
        ["run", ev.run_id],
        ["component", ev.component_id],
        ["component type", ev.component_type],
        ["partition", ev.partition],
        ["attempt", ev.attempt],
        ["record", ev.record ? `${ev.record} (${ev.record_id})` : null],
        ["location", loc],
      ])
    );
    const actions = el("div", { class: "actions" });
    if (ev.record && (res.lineage_record || ev.event_type === "FAIL")) {
      actions.appendChild(
        el("button", { type: "button", id: "show-lineage", onclick: () => gotoTrace(ev.record, ev.run_id) }, "Show lineage")
      );
    }
    for (const a of extraActions || []) actions.appendChild(a);
    if (actions.childNodes.length) body.appendChild(actions);
    const attrs = Object.entries(ev.attributes || {});
    if (attrs.length) {
      body.appendChild(el("h3", {}, "Attributes"));
      body.appendChild(fields(attrs));
    }
    body.appendChild(el("h3", {}, "Data"));
    body.appendChild(
      res.data_text === null
        ? el("div", { class: "muted" }, "no raw data captured")
        : el("pre", { class: "data", id: "event-data" }, res.data_text)
    );
    if (ev.details) {
      body.appendChild(el("h3", {}, "Details"));
      body.appendChild(el("pre", { class: "data" }, ev.details));
    }
    body.appendChild(recordLinks(res.parents, res.parents_total, "Parents"));
    if (res.lineage_record) body.appendChild(recordLinks(res.children, res.children_total, "Children"));
    return res;
  }

  // -- graphs -------------------------------------------------------------------------------

  // The side panel opens and closes beside a graph: redraw at the new size, and re-apply the
  // first view unless the user has moved it since.
  function watchSize(container, key) {
    new ResizeObserver(() => {
      const g = state[key];
      if (!g) return;
      g.cy.resize();
      if (!g.moved) g.initial(g.cy);
    }).observe(container);
  }

  function mount(key, cy, initial) {
    const g = { cy, initial, moved: false };
    state[key] = g;
    initial(cy);
    cy.on("scrollzoom tapstart", () => (g.moved = true));
    return g;
  }

  // -- lineage graph ------------------------------------------------------------------------

  function gotoTrace(record, run) {
    const t = { record, run: run || "", direction: "both", depth: "all", collapse: "200", expand: [], hop: [] };
    setView("lineage");
    openTrace(t, true).catch((e) => showError(e.message));
  }

  function traceUrl(t) {
    return {
      record: t.record,
      run: t.run,
      direction: t.direction !== "both" ? t.direction : "",
      depth: t.depth !== "all" ? t.depth : "",
      collapse: t.collapse !== "200" ? t.collapse : "",
      expand: t.expand,
      hop: t.hop,
    };
  }

  async function openTrace(t, push) {
    const f = $("trace-form");
    for (const k of ["record", "run", "direction", "depth", "collapse"]) f.elements[k].value = t[k];
    state.trace = t;
    if (push) pushUrl(traceUrl(t));
    document.body.dataset.graph = "loading";
    $("trace-status").textContent = "Tracing…";
    const t0 = performance.now();
    let res;
    try {
      res = await api("/api/trace/" + encodeURIComponent(t.record), {
        run: t.run,
        direction: t.direction,
        depth: t.depth,
        collapse: t.collapse,
        expand: t.expand,
        hop: t.hop,
      });
    } catch (e) {
      $("trace-status").textContent = "";
      document.body.dataset.graph = "error";
      throw e;
    }
    const t1 = performance.now();
    t.run = res.run;
    f.elements.run.value = res.run;
    drawTrace(res, () => {
      const ms = Math.round(performance.now() - t0);
      const groups = res.nodes.filter((n) => n.kind === "group").length;
      const records = res.nodes.length - groups;
      let s = `${plural(res.records, "record")} traced (run ${res.run}); showing ` +
        `${plural(records, "record node")} and ${plural(groups, "group")} ` +
        `(${fmt(res.collapsed_records)} collapsed) · ${ms} ms (server ${Math.round(t1 - t0)} ms)`;
      if (res.truncated) s += " · limit reached: some expanded records stay grouped";
      $("trace-status").textContent = s;
      document.body.dataset.graph = "ready";
      document.body.dataset.graphMs = String(ms);
      document.body.dataset.graphNodes = String(res.nodes.length);
    });
    const root = res.nodes.find((n) => n.root);
    if (root && root.event_id && push !== "keep-panel") showRecordPanel(root);
    return res;
  }

  const GRAPH_STYLE = [
    {
      selector: "node",
      style: {
        "font-size": 10,
        "text-valign": "center",
        "text-halign": "center",
        "min-zoomed-font-size": 5,
        "border-width": 1,
        color: "#1d2330",
      },
    },
    {
      selector: "node.record",
      style: {
        shape: "round-rectangle",
        width: 200,
        height: 26,
        "background-color": "#e8f0ff",
        "border-color": "#8aa6dd",
        label: "data(label)",
      },
    },
    { selector: "node.record.more", style: { "border-style": "dashed", "border-width": 2 } },
    {
      selector: "node.group",
      style: {
        shape: "round-rectangle",
        width: 200,
        height: 52,
        "background-color": "#dfe5ef",
        "border-color": "#7b8798",
        "border-width": 2,
        "text-wrap": "wrap",
        label: "data(label)",
        "font-size": 11,
        "font-weight": "bold",
      },
    },
    { selector: "node.group.rest", style: { "border-style": "dashed" } },
    {
      selector: "node.block",
      style: {
        shape: "round-rectangle",
        "background-color": "#f7f9fc",
        "background-opacity": 0.6,
        "border-color": "#c6cedd",
        label: "data(label)",
        "text-valign": "top",
        "text-halign": "center",
        "font-size": 12,
        "font-weight": "bold",
        "text-wrap": "none",
        color: "#3a4560",
        padding: 14,
      },
    },
    {
      selector: "node.title",
      style: {
        shape: "rectangle",
        width: 1,
        height: 1,
        "background-opacity": 0,
        "border-width": 0,
        label: "data(label)",
        "font-size": 12,
        "font-weight": "bold",
        "text-wrap": "none",
        color: "#3a4560",
      },
    },
    { selector: "node.root", style: { "background-color": "#ffd66b", "border-color": "#b07d00", "border-width": 3 } },
    { selector: "node:selected", style: { "border-color": "#e0383e", "border-width": 3 } },
    {
      selector: "edge",
      style: {
        width: 1,
        "line-color": "#a8b3c7",
        "curve-style": "straight",
        "target-arrow-shape": "triangle",
        "target-arrow-color": "#a8b3c7",
        "arrow-scale": 0.7,
      },
    },
    { selector: "edge.counted", style: { label: "data(label)", "font-size": 10, color: "#4a5468", "text-background-color": "#fff", "text-background-opacity": 1, width: 2 } },
  ];

  // Labels are clipped here: Cytoscape's own ellipsis measures every label's text, which
  // costs seconds for a thousand nodes on a software-rendered canvas.
  function clip(text, n) {
    text = String(text).replace(/\s+/g, " ");
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  function drawTrace(res, done) {
    if (state.graph) state.graph.cy.destroy();
    const elements = [];
    // A box per capture point (a compound node) reads well, but Cytoscape re-measures a
    // compound's children as it draws: past a few hundred nodes, a title above each column
    // instead (a thousand-node picture draws in a third of the time).
    const big = res.nodes.length > 300;
    const top = new Map();
    for (const n of res.nodes) top.set(n.capture_point, Math.min(top.get(n.capture_point) ?? Infinity, n.y));
    for (const c of res.columns) {
      const title = `${c.component_id || "cp " + c.capture_point} · ${plural(c.records, "record")}`;
      elements.push({
        group: "nodes",
        data: { id: `cp${c.capture_point}`, label: title },
        classes: big ? "title" : "block",
        selectable: false,
        position: big ? { x: c.x, y: top.get(c.capture_point) - 44 } : undefined,
      });
    }
    for (const n of res.nodes) {
      const label =
        n.kind === "group"
          ? `${n.partition === null ? "all partitions" : "partition " + n.partition}\n${n.rest ? "+ " : ""}${plural(n.count, "record")}`
          : clip(n.text !== null && n.text !== undefined ? n.text : n.record, 34);
      const classes = [n.kind, n.root ? "root" : "", n.more && n.more.length ? "more" : "", n.rest ? "rest" : ""];
      elements.push({
        group: "nodes",
        data: { ...n, id: n.id, label, parent: big ? undefined : `cp${n.capture_point}` },
        position: { x: n.x, y: n.y },
        classes: classes.join(" ").trim(),
      });
    }
    res.edges.forEach((e, i) => {
      elements.push({
        group: "edges",
        data: { id: "e" + i, source: e.source, target: e.target, count: e.count, label: fmt(e.count) },
        classes: e.count > 1 ? "counted" : "",
      });
    });
    const cy = cytoscape({
      container: $("trace-graph"),
      elements,
      // Many edges: haystack lines (no arrows: the layers already say which way) draw fast.
      style: big ? GRAPH_STYLE.concat([{ selector: "edge", style: { "curve-style": "haystack", "target-arrow-shape": "none" } }]) : GRAPH_STYLE,
      layout: { name: "preset", fit: false },
      minZoom: 0.02,
      maxZoom: 3,
      textureOnViewport: big,
      hideEdgesOnViewport: big,
      pixelRatio: big ? 1 : "auto",
      autoungrabify: true,
    });
    mount("graph", cy, initialView);
    cy.on("tap", "node.record", (evt) => showRecordPanel(evt.target.data()));
    cy.on("tap", "node.group", (evt) => showGroupPanel(evt.target.data()));
    cy.on("dbltap", "node.group", (evt) => expandGroup(evt.target.data().group));
    cy.one("render", () => requestAnimationFrame(() => done()));
    cy.forceRender();
  }

  // Fit the whole picture when it stays legible; otherwise zoom to a readable size and keep
  // the root in view (a column of a thousand records is never squeezed into a sliver).
  function initialView(cy) {
    const bb = cy.elements().boundingBox();
    const w = cy.width(), h = cy.height();
    const fits = (w - 60) / Math.max(bb.w, 1), fitsH = (h - 60) / Math.max(bb.h, 1);
    const zoom = Math.min(1.2, Math.max(0.6, Math.min(fits, fitsH)));
    const root = cy.nodes(".root");
    const rp = root.length ? root.position() : { x: bb.x1 + bb.w / 2, y: bb.y1 + bb.h / 2 };
    const cx = bb.w * zoom <= w - 60 ? bb.x1 + bb.w / 2 : rp.x;
    const cyy = bb.h * zoom <= h - 60 ? bb.y1 + bb.h / 2 : rp.y;
    cy.viewport({ zoom, pan: { x: w / 2 - cx * zoom, y: h / 2 - cyy * zoom } });
  }

  function retrace(change) {
    const t = { ...state.trace, expand: state.trace.expand.slice(), hop: state.trace.hop.slice() };
    change(t);
    openTrace(t, "keep-panel").catch((e) => showError(e.message));
    pushUrl(traceUrl(t));
  }

  function expandGroup(key) {
    if (state.trace.expand.includes(key)) return;
    retrace((t) => t.expand.push(key));
  }

  function hop(record, way) {
    const h = `${way}:${record}`;
    if (state.trace.hop.includes(h)) return;
    retrace((t) => t.hop.push(h));
  }

  function showRecordPanel(n) {
    const actions = [
      el("button", { type: "button", id: "expand-parents", onclick: () => hop(n.record, "backward") }, "Expand parents"),
      el("button", { type: "button", id: "expand-children", onclick: () => hop(n.record, "forward") }, "Expand children"),
      el(
        "button",
        {
          type: "button",
          id: "make-root",
          onclick: () => openTrace({ ...state.trace, record: n.record, expand: [], hop: [] }, true).catch((e) => showError(e.message)),
        },
        "Trace from here"
      ),
    ];
    if (!n.event_id) {
      const body = openPanel(`Record ${n.record}`);
      body.appendChild(fields([["record", n.record], ["component", n.component_id]]));
      body.appendChild(el("div", { class: "actions" }, actions));
      return;
    }
    showEvent(n.event_id, actions).catch((e) => showError(e.message));
  }

  function showGroupPanel(n) {
    const body = openPanel(`${n.count} records`);
    body.appendChild(
      fields([
        ["capture point", `${n.capture_point} (${n.component_id || "?"})`],
        ["partition", n.partition === null ? "all" : n.partition],
        ["records", fmt(n.count)],
      ])
    );
    const expandable = !n.rest;
    body.appendChild(
      el(
        "div",
        { class: "actions" },
        el(
          "button",
          { type: "button", id: "expand-group", disabled: !expandable, onclick: () => expandGroup(n.group) },
          n.partition === null ? "Split by partition" : "Show records"
        ),
        el("span", { class: "muted" }, expandable ? "(or double-click the group)" : "(the rest of an expanded group: the record limit is reached)")
      )
    );
  }

  // -- runs -----------------------------------------------------------------------------------

  async function loadRuns() {
    if (!state.runs) state.runs = (await api("/api/runs")).runs;
    return state.runs;
  }

  async function showRuns() {
    const runs = await loadRuns();
    $("runs-status").textContent = `${fmt(runs.length)} run${runs.length === 1 ? "" : "s"} with lineage`;
    const body = clear(document.querySelector("#runs-table tbody"));
    for (const r of runs) {
      const tr = el(
        "tr",
        { dataset: { run: r.run_id } },
        el("td", {}, r.run_id),
        el("td", {}, r.app || ""),
        el("td", {}, shortTime(r.started)),
        el("td", {}, fmt(r.records)),
        el("td", {}, r.capture_points.length),
        el("td", {}, r.culprits ? el("span", { class: "badge culprit" }, fmt(r.culprits)) : "0")
      );
      tr.addEventListener("click", () => showRun(r.run_id, true).catch((e) => showError(e.message)));
      body.appendChild(tr);
    }
  }

  async function showRun(run, push) {
    if (push) pushUrl({ run });
    const res = await api("/api/runs/" + encodeURIComponent(run));
    $("run-view").hidden = false;
    $("run-title").textContent = `Run ${res.run_id}`;
    const sus = res.suspects_total;
    $("run-summary").textContent =
      `${fmt(res.records)} records at ${res.nodes.length} capture points · ` +
      `${fmt(res.culprits_total)} culprit${res.culprits_total === 1 ? "" : "s"} · ` +
      `${fmt(sus)} mining suspect${sus === 1 ? "" : "s"}` + (res.mine_note ? ` · ${res.mine_note}` : "");
    showRunPanel(res);
    drawRun(res);
    document.body.dataset.run = res.run_id;
    return res;
  }

  function drawRun(res) {
    if (state.runGraph) state.runGraph.cy.destroy();
    const elements = [];
    for (const n of res.nodes) {
      const lines = [n.component_id, `${n.component_type} · ${n.event_type}`, `${fmt(n.records)} records · ${n.partitions} partitions`];
      if (n.culprits) lines.push(`${fmt(n.culprits)} culprit${n.culprits === 1 ? "" : "s"}`);
      if (n.suspects) lines.push(`${n.suspects} suspect${n.suspects === 1 ? "" : "s"} (score ${n.score.toFixed(1)})`);
      const classes = [n.culprits ? "culprit" : "", n.suspects ? "suspect" : ""].join(" ").trim();
      elements.push({ group: "nodes", data: { ...n, id: "c" + n.capture_point, label: lines.join("\n") }, classes });
    }
    for (const e of res.edges) {
      elements.push({
        group: "edges",
        data: {
          id: `e${e.source}-${e.target}`,
          source: "c" + e.source,
          target: "c" + e.target,
          label: e.associations === null ? "" : fmt(e.associations),
        },
      });
    }
    const cy = cytoscape({
      container: $("run-graph"),
      elements,
      autoungrabify: true,
      style: [
        {
          selector: "node",
          style: {
            shape: "round-rectangle",
            width: 230,
            height: 78,
            label: "data(label)",
            "text-wrap": "wrap",
            "text-valign": "center",
            "font-size": 11,
            "background-color": "#e8f0ff",
            "border-width": 1,
            "border-color": "#8aa6dd",
          },
        },
        { selector: "node.suspect", style: { "background-color": "#fff0d6", "border-color": "#d08a00", "border-width": 3 } },
        { selector: "node.culprit", style: { "border-color": "#d0343a", "border-width": 3 } },
        { selector: "node:selected", style: { "border-color": "#1f2a44", "border-width": 4 } },
        {
          selector: "edge",
          style: {
            width: 2,
            "curve-style": "bezier",
            "target-arrow-shape": "triangle",
            "line-color": "#a8b3c7",
            "target-arrow-color": "#a8b3c7",
            label: "data(label)",
            "font-size": 10,
            "text-background-color": "#fff",
            "text-background-opacity": 1,
          },
        },
      ],
      layout: { name: "dagre", rankDir: "LR", nodeSep: 30, rankSep: 90, fit: false },
      maxZoom: 1.5,
    });
    mount("runGraph", cy, (cy) => cy.fit(undefined, 30));
    cy.on("tap", "node", (evt) => showCapturePointPanel(res, evt.target.data()));
  }

  function culpritList(culprits) {
    const box = el("div", { id: "culprits" });
    for (const c of culprits) {
      box.appendChild(
        el(
          "div",
          { class: "culprit" },
          el(
            "div",
            {},
            c.record ? link(c.record, () => gotoTrace(c.record, c.run_id), "show its lineage") : "(no record)",
            "  ",
            el("span", { class: "muted" }, `${c.component_id} · ${c.exception}: ${c.message}`)
          ),
          c.data === null ? null : el("pre", { class: "data" }, c.data)
        )
      );
    }
    return box;
  }

  function suspectTable(suspects) {
    const t = el(
      "table",
      { class: "table", id: "suspects" },
      el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "Actor"), el("th", {}, "Part."), el("th", {}, "Score"), el("th", {}, "Mult. (typical)"), el("th", {}, "Examples")))
    );
    const tb = el("tbody");
    for (const s of suspects) {
      const typical = s.typical_multiplicity === null ? "-" : s.typical_multiplicity.toFixed(2);
      tb.appendChild(
        el(
          "tr",
          {},
          el("td", {}, s.rank),
          el("td", {}, `${s.component_id} ← ${s.parent_component_id}`),
          el("td", {}, s.partition),
          el("td", {}, s.score.toFixed(1)),
          el("td", {}, `${s.multiplicity.toFixed(2)} (${typical})`),
          el("td", {}, s.outlier_examples.slice(0, 3).map((r) => [link(r, () => gotoTrace(r, s.run_id || state.runId)), " "]))
        )
      );
    }
    t.appendChild(tb);
    return t;
  }

  function showRunPanel(res) {
    state.runId = res.run_id;
    const body = openPanel(`Run ${res.run_id}`);
    const d = res.descriptor || {};
    body.appendChild(
      fields([
        ["run", res.run_id],
        ["app", d.app],
        ["spark", d.spark_version],
        ["events", `${res.events[0]}..${res.events[1]}`],
        ["records", fmt(res.records)],
      ])
    );
    body.appendChild(
      el(
        "div",
        { class: "legend" },
        el("span", { class: "badge culprit" }, "red border: culprits"),
        el("span", { class: "badge suspect" }, "orange: mining suspects")
      )
    );
    body.appendChild(el("h3", {}, `Culprits (${fmt(res.culprits_total)})`));
    body.appendChild(res.culprits.length ? culpritList(res.culprits) : el("div", { class: "muted" }, "none: no user function raised"));
    body.appendChild(el("h3", {}, `Mining suspects (${fmt(res.suspects_total)})`));
    body.appendChild(res.suspects.length ? suspectTable(res.suspects) : el("div", { class: "muted" }, "none above the threshold"));
  }

  function showCapturePointPanel(res, n) {
    const body = openPanel(n.component_id);
    body.appendChild(
      fields([
        ["capture point", n.capture_point],
        ["component", n.component_id],
        ["type", n.component_type],
        ["event type", n.event_type],
        ["dependency", n.dependency],
        ["records", fmt(n.records)],
        ["partitions", n.partitions],
        ["associations", fmt(n.associations)],
      ])
    );
    body.appendChild(
      el(
        "div",
        { class: "actions" },
        el(
          "a",
          { class: "link", href: `/?view=search&run=${encodeURIComponent(res.run_id)}&component=${encodeURIComponent(n.component_id)}` },
          "Search its events"
        ),
        link("Back to the run", () => showRunPanel(res))
      )
    );
    const mine = res.culprits.filter((c) => c.capture_point === n.capture_point);
    if (mine.length) {
      body.appendChild(el("h3", {}, "Culprits here"));
      body.appendChild(culpritList(mine));
    }
    const sus = res.suspects.filter((s) => s.capture_point === n.capture_point);
    if (sus.length) {
      body.appendChild(el("h3", {}, "Suspects here"));
      body.appendChild(suspectTable(sus));
    }
  }

  // -- start -----------------------------------------------------------------------------------

  async function start() {
    $("search-form").addEventListener("submit", (e) => {
      e.preventDefault();
      runSearch(true).catch((err) => showError(err.message));
    });
    $("search-reset").addEventListener("click", () => setTimeout(() => showError(null)));
    $("page-prev").addEventListener("click", () => {
      state.search.page--;
      renderResults();
    });
    $("page-next").addEventListener("click", () => {
      state.search.page++;
      renderResults();
    });
    for (const th of document.querySelectorAll("#results th")) {
      th.addEventListener("click", () => {
        const s = state.search;
        if (s.sort === th.dataset.key) s.desc = !s.desc;
        else {
          s.sort = th.dataset.key;
          s.desc = false;
        }
        renderResults();
      });
    }
    $("trace-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const f = e.target.elements;
      const t = {
        record: f.record.value.trim(),
        run: f.run.value.trim(),
        direction: f.direction.value,
        depth: f.depth.value,
        collapse: f.collapse.value || "200",
        expand: [],
        hop: [],
      };
      if (state.trace && state.trace.record === t.record && state.trace.run === t.run) {
        t.expand = state.trace.expand;
        t.hop = state.trace.hop;
      }
      openTrace(t, true).catch((err) => showError(err.message));
    });
    $("trace-fit").addEventListener("click", () => state.graph && state.graph.cy.fit(undefined, 30));
    watchSize($("trace-graph"), "graph");
    watchSize($("run-graph"), "runGraph");
    $("trace-reset").addEventListener("click", () => state.trace && retrace((t) => { t.expand = []; t.hop = []; }));
    $("panel-close").addEventListener("click", () => ($("panel").hidden = true));
    for (const a of document.querySelectorAll("header nav a")) {
      a.addEventListener("click", (e) => {
        e.preventDefault();
        history.pushState(null, "", a.getAttribute("href"));
        route();
      });
    }
    window.addEventListener("popstate", route);
    try {
      state.info = await api("/api/info");
      $("repo-path").textContent = `${state.info.path} · ${fmt(state.info.events)} events`;
      const typeSel = $("search-form").elements.type;
      for (const t of state.info.event_types) typeSel.appendChild(el("option", { value: t }, t));
      const runs = await loadRuns();
      const runSel = $("search-form").elements.run;
      for (const r of runs) runSel.appendChild(el("option", { value: r.run_id }, r.run_id));
    } catch (e) {
      showError(e.message);
    }
    await route();
    document.body.dataset.ready = "1";
  }

  // For the console and the browser tests: the graphs on screen.
  window.provrepo = {
    graph: () => state.graph && state.graph.cy,
    runGraph: () => state.runGraph && state.runGraph.cy,
  };

  if (typeof cytoscape !== "undefined" && typeof cytoscapeDagre !== "undefined") cytoscape.use(cytoscapeDagre);
  start();
})();
