"""The UI's JSON API: read-only answers over the repository's public facade.

Each endpoint takes the path's tail and the query parameters (lists of strings, as
`urllib.parse.parse_qs` gives them) and returns JSON-ready data. Malformed input raises
`BadInput` (HTTP 400), unknown runs, events and records raise `NotFound` (404); nothing here
ever writes. Record ids go out both as integers (as the CLI prints them) and as
`cp:partition:position` strings, which stay exact in JavaScript (ids pass 2**53).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import unquote

import numpy as np

from journals import EventType, ProvenanceEvent, unpack_record_ids

from .. import (
    RUN_COMPONENT_TYPE,
    BadInput,
    CapturePointInfo,
    Culprit,
    LineageIndex,
    NotFound,
    ProvenanceRepository,
    RecordRef,
    format_record_id,
    jsonable,
    parse_record_ref,
    resolve_record,
    resolve_records,
)
from ._graph import DEFAULT_COLLAPSE, DEFAULT_LIMIT, GraphRequest, TraceGraphs, data_text

Params = dict[str, list[str]]

_SEARCH_PARAMS = {
    "from",
    "to",
    "type",
    "component",
    "run",
    "attr",
    "query",
    "limit",
    "oldest_first",
    "exclude_type",
    "exclude_component",
    "exclude_run",
    "exclude_attr",
}
_TRACE_PARAMS = {"run", "direction", "depth", "limit", "collapse", "expand", "hop"}
_MAX_SEARCH = 10_000
_LINKS = 200  # parents / children listed in an event's answer
_DATA = 64 * 1024  # characters of raw data in an event's answer
_CULPRITS = 200
_SUSPECTS = 50
_REFRESH_S = 0.5


class Api:
    """Endpoints over one repository (opened read-only: the UI never writes)."""

    def __init__(self, repo: ProvenanceRepository) -> None:
        self.repo = repo
        self.graphs = TraceGraphs(repo.lineage)
        self._lock = threading.Lock()
        self._refreshed = 0.0
        self._memo: dict[tuple, Any] = {}
        self._stats = repo.stats()

    # -- plumbing ----------------------------------------------------------------------------

    def route(self, path: str, params: Params) -> Any:
        """The answer for an `/api/...` path; BadInput / NotFound for the client's mistakes."""
        parts = path.split("/")[2:]  # "", "api", ...
        if not parts or not parts[0]:
            raise NotFound(f"no API endpoint {path} (see /api/info)")
        name, args = parts[0], [unquote(p) for p in parts[1:]]
        handler: Callable[..., Any] | None = {
            "info": self.info,
            "runs": self.runs if not args else self.run,
            "search": self.search,
            "events": self.event,
            "trace": self.trace,
        }.get(name)
        if handler is None:
            raise NotFound(f"no API endpoint {path} (see /api/info)")
        wants_arg = handler in (self.run, self.event, self.trace)
        if len(args) != (1 if wants_arg else 0) or (wants_arg and not args[0]):
            raise NotFound(f"no API endpoint {path} (see /api/info)")
        self._refresh()
        return handler(*args, params) if wants_arg else handler(params)

    def _refresh(self) -> None:
        """Pick up logs the owner committed meanwhile, and the stats (at most twice a second:
        stats list the repository's files)."""
        now = time.monotonic()
        with self._lock:
            if now - self._refreshed < _REFRESH_S:
                return
            self._refreshed = now
        if self.repo.read_only:
            self.repo.refresh()
        self._stats = self.repo.stats()

    def _version(self) -> tuple:
        return (self.repo.min_event_id, self.repo.max_event_id)

    def _memoized(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """Per-run answers that cost a scan, kept until the repository changes."""
        full = (*key, self._version())
        with self._lock:
            if full in self._memo:
                return self._memo[full]
        value = compute()
        with self._lock:
            if len(self._memo) > 64:
                self._memo.clear()
            self._memo[full] = value
        return value

    # -- endpoints ---------------------------------------------------------------------------

    def info(self, params: Params) -> dict:
        _only(params, set())
        st = self._stats
        return {
            "path": self.repo.path,
            "events": st.events,
            "first_event_id": st.first_event_id,
            "max_event_id": st.max_event_id,
            "events_not_indexed": st.events_not_indexed,
            "owner": st.owner,
            "event_types": [t.value for t in EventType],
            "indexed_attributes": list(self.repo.config.indexed_attributes),
            "endpoints": [
                "/api/info",
                "/api/runs",
                "/api/runs/{run}",
                "/api/search",
                "/api/events/{id}",
                "/api/trace/{record}",
            ],
        }

    def runs(self, params: Params) -> dict:
        _only(params, set())
        index = self.repo.lineage
        culprits = self._memoized(("culprits",), lambda: self.repo.culprits())
        per_run: dict[str, int] = {}
        for c in culprits:
            per_run[c.run_id] = per_run.get(c.run_id, 0) + 1
        out = []
        for run in reversed(index.runs()):  # newest first
            info = index.run_info(run)
            first = self.repo.get_event(info.first_event_id)
            desc = info.descriptor or {}
            out.append(
                {
                    "run_id": run,
                    "app": desc.get("app"),
                    "started": _iso(first.event_time_ns) if first else None,
                    "events": [info.first_event_id, info.last_event_id],
                    "records": info.records,
                    "culprits": per_run.get(run, 0),
                    "capture_points": [_cp_dict(c) for c in info.capture_points.values()],
                }
            )
        return {"runs": out}

    def run(self, run: str, params: Params) -> dict:
        _only(params, set())
        index = self.repo.lineage
        info = index.run_info(run)  # NotFound naming the runs there are
        culprits = self._memoized(("culprits", run), lambda: self.repo.culprits(run, True))
        mined, note = self._memoized(("mine", run), lambda: self._mine(run))
        by_cp_culprits: dict[int, int] = {}
        for c in culprits:
            by_cp_culprits[c.capture_point] = by_cp_culprits.get(c.capture_point, 0) + 1
        by_cp_suspects: dict[int, list] = {}
        for s in mined:
            by_cp_suspects.setdefault(s["capture_point"], []).append(s)
        nodes, edges = [], []
        for c in info.capture_points.values():
            if c.component_type == RUN_COMPONENT_TYPE:
                continue
            sus = by_cp_suspects.get(c.number, [])
            nodes.append(
                {
                    **_cp_dict(c),
                    "partitions": len(index.partitions(run, c.number)),
                    "culprits": by_cp_culprits.get(c.number, 0),
                    "suspects": len(sus),
                    "score": max((s["score"] for s in sus), default=None),
                }
            )
            counts = self._memoized(
                ("edges", run, c.number), partial(index.parent_counts, run, c.number)
            )
            for parent in sorted(set(c.parents) | set(counts)):
                if parent in info.capture_points and parent != c.number:
                    edges.append(
                        {"source": parent, "target": c.number, "associations": counts.get(parent)}
                    )
        desc = {k: v for k, v in (info.descriptor or {}).items() if k != "capture_points"}
        return {
            "run_id": run,
            "descriptor": desc,
            "events": [info.first_event_id, info.last_event_id],
            "records": info.records,
            "nodes": nodes,
            "edges": edges,
            "culprits": [_culprit_dict(c) for c in culprits[:_CULPRITS]],
            "culprits_total": len(culprits),
            "suspects": mined[:_SUSPECTS],
            "suspects_total": len(mined),
            "mine_note": note,
        }

    def _mine(self, run: str) -> tuple[list[dict], str | None]:
        try:
            report = self.repo.mine(run)
        except (BadInput, ValueError, RuntimeError) as e:  # mining is a hint: the view stands
            return [], f"anomaly mining failed: {e}"
        out = []
        for rank, inst in enumerate(report.instances, 1):
            if not inst.suspect:
                continue
            d = inst.to_dict()
            d["rank"] = rank
            d["outlier_examples"] = [format_record_id(r) for r in inst.outlier_examples]
            d["trace_examples"] = [format_record_id(r) for r in inst.trace_examples]
            out.append(d)
        return out, None

    def search(self, params: Params) -> dict:
        _only(params, _SEARCH_PARAMS)
        limit = _int(params, "limit", 100, 1, _MAX_SEARCH)
        attrs = dict(_attr(a) for a in params.get("attr", []))
        query = _with_exclusions(_one(params, "query"), params)
        events = self.repo.search(
            start=_one(params, "from"),
            end=_one(params, "to"),
            event_types=params.get("type") or None,
            components=params.get("component") or None,
            runs=params.get("run") or None,
            attributes=attrs or None,
            query=query,
            limit=limit,
            newest_first=not _bool(params, "oldest_first"),
        )
        return {
            "events": [_event_dict(ev) for ev in events],
            "count": len(events),
            "limit": limit,
            "query": query,
            "events_not_indexed": self._stats.events_not_indexed,
        }

    def event(self, text: str, params: Params) -> dict:
        _only(params, set())
        try:
            event_id = int(text)
        except ValueError:
            raise BadInput(f"{text!r} is not an event id (a positive integer)") from None
        if event_id <= 0:
            raise BadInput(f"{text!r} is not an event id (a positive integer)")
        ev = self.repo.get_event(event_id)
        if ev is None:
            lo = self.repo.min_event_id
            have = f"ids {lo}..{self.repo.max_event_id}" if lo is not None else "no events"
            raise NotFound(f"no event with id {event_id} (the repository holds {have})")
        index = self.repo.lineage
        in_lineage = ev.run_id in index.runs()
        is_record = False
        if in_lineage and ev.record_id >= 0:
            ids = np.array([ev.record_id], dtype=np.int64)
            is_record = int(index.event_ids(ev.run_id, ids)[0]) == ev.event_id
        data = self.repo.event_data(ev)
        out = {
            "event": _event_dict(ev),
            "data": jsonable(data),
            "data_text": data_text(data, _DATA),
            "lineage_record": is_record,
        }
        parents = np.array([p for p in ev.parent_ids if p >= 0], dtype=np.int64)
        out["parents"] = _links(index, ev.run_id, parents[:_LINKS], in_lineage)
        out["parents_total"] = len(parents)
        if is_record:
            kids = index.children(ev.run_id, np.array([ev.record_id], dtype=np.int64))
            out["children"] = _links(index, ev.run_id, kids[:_LINKS], True)
            out["children_total"] = len(kids)
        else:
            out["children"], out["children_total"] = [], 0
        return out

    def trace(self, text: str, params: Params) -> dict:
        _only(params, _TRACE_PARAMS)
        index = self.repo.lineage
        run, rids = resolve_records(index, _ref(text), _one(params, "run"))
        depth_text = _one(params, "depth")
        depth = None if depth_text in (None, "", "all") else _int(params, "depth", 1, 1, 10_000)
        hops = []
        for h in params.get("hop", []):
            way, sep, ref = h.partition(":")
            if not sep or way not in ("backward", "forward"):
                raise BadInput(f"hop={h!r}: expected backward:RECORD or forward:RECORD")
            hops.append((resolve_record(index, _ref(ref), run)[1], way))
        expand = [k for e in params.get("expand", []) for k in e.split(",") if k]
        req = GraphRequest(
            run=run,
            root=rids[0],
            also=tuple(rids[1:]),
            direction=_one(params, "direction") or "backward",
            depth=depth,
            expand=tuple(expand),
            hops=tuple(hops),
            collapse=_int(params, "collapse", DEFAULT_COLLAPSE, 1, 5000),
            limit=_int(params, "limit", DEFAULT_LIMIT, 1, 5000),
        )
        return self.graphs.graph(req, self._version())


# -- helpers -----------------------------------------------------------------------------------


def _only(params: Params, allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise BadInput(f"unknown parameter {unknown[0]!r} (this endpoint takes: {known})")


def _one(params: Params, name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadInput(f"{name} given {len(values)} times; give it once")
    return values[0]


def _int(params: Params, name: str, default: int, lo: int, hi: int) -> int:
    text = _one(params, name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name}={text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise BadInput(f"{name}={value} is out of range {lo}..{hi}")
    return value


def _bool(params: Params, name: str) -> bool:
    text = (_one(params, name) or "").lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise BadInput(f"{name}={text!r} is not a boolean (true/false)")


def _attr(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise BadInput(f"attr={text!r} is not NAME=VALUE")
    return name, value


def _ref(text: str) -> RecordRef:
    try:
        return parse_record_ref(text)
    except BadInput:
        raise
    except ValueError as e:
        raise BadInput(f"{text!r} is not a record id: {e}") from None


def _quoted(value: str, what: str) -> str:
    if '"' in value or "\\" in value:
        raise BadInput(f"cannot exclude {what} {value!r}: it holds a quote or a backslash")
    return f'"{value}"'


def _with_exclusions(query: str | None, params: Params) -> str | None:
    """The user's query AND NOT each excluded value (the facade takes exclusions as query
    clauses, so they mean exactly what `provrepo search --query` would)."""
    clauses = []
    for param, field in (
        ("exclude_type", "type"),
        ("exclude_component", "component"),
        ("exclude_run", "run"),
    ):
        for value in params.get(param, []):
            clauses.append(f"NOT {field}:{_quoted(value, field)}")
    for text in params.get("exclude_attr", []):
        name, value = _attr(text)
        clauses.append(f"NOT attrs.{name}:{_quoted(value, 'attribute')}")
    if not clauses:
        return query
    positive = f"({query})" if query and query.strip() else "*"
    return " AND ".join([positive, *clauses])


def _iso(ns: int) -> str:
    when = dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


def _event_dict(ev: ProvenanceEvent) -> dict:
    d = ev.to_dict()
    d["record"] = format_record_id(ev.record_id) if ev.record_id >= 0 else None
    d["time"] = _iso(ev.event_time_ns)
    return d


def _cp_dict(c: CapturePointInfo) -> dict:
    return {
        "capture_point": c.number,
        "component_id": c.component_id,
        "component_type": c.component_type,
        "event_type": c.event_type,
        "parents": list(c.parents),
        "dependency": c.dependency,
        "records": c.records,
        "associations": c.associations,
    }


def _culprit_dict(c: Culprit) -> dict:
    d = c.to_dict()
    d["record"] = format_record_id(c.record_id) if c.record_id >= 0 else None
    d["data"] = data_text(d["data"], 2000)
    return d


def _links(index: LineageIndex, run: str, ids: np.ndarray, in_lineage: bool) -> list[dict]:
    """Record ids as links: triple, integer, event id, component."""
    if not len(ids):
        return []
    events = index.event_ids(run, ids).tolist() if in_lineage else [0] * len(ids)
    cps = unpack_record_ids(ids)[0].tolist()
    info = index.run_info(run) if in_lineage else None
    out = []
    for rid, ev, cp in zip(ids.tolist(), events, cps):
        c = info.capture_points.get(cp) if info else None
        out.append(
            {
                "record": format_record_id(rid),
                "record_id": rid,
                "event_id": ev or None,
                "component_id": c.component_id if c else None,
            }
        )
    return out
