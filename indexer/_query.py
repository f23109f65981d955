"""Search predicates: exact per-event tests, and the Tantivy query that finds candidate spans.

Two views of one predicate:
- `matches(event)`: the exact answer for one event (the definition of a search result);
- `span_query(attributes)`: a Tantivy query over span documents that matches every span holding
  at least one matching event (a superset; the exact test runs on the events afterwards).

A user query (Tantivy syntax over per-event fields) is validated by Tantivy's own parser, then
compiled from its syntax tree into both views. Making the span view a superset means: negated
clauses are dropped (a span with one FAIL event can still hold non-FAIL events), per-event
`time`/`id` become overlap tests on the span's bounds, and what spans cannot test (text
ranges, attributes a shard did not index) becomes match-all.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from functools import partial
from operator import attrgetter
from typing import Any

import tantivy

from journals import ProvenanceEvent

from ._schema import (
    ATTRS_FIELD,
    BOUND_FIELDS,
    DEFAULT_FIELDS,
    EVENT_SCHEMA,
    INT_FIELDS,
    SPAN_ATTR_FIELD,
    SPAN_SCHEMA,
    TEXT_FIELDS,
    attr_term,
)

Query = tantivy.Query
_MUST, _SHOULD = tantivy.Occur.Must, tantivy.Occur.Should
_INT = tantivy.FieldType.Integer
_VALIDATOR = tantivy.Index(EVENT_SCHEMA)  # in memory and empty: only its parser is used
_MAX_QUERY = 10_000

EventTest = Callable[[ProvenanceEvent], bool]

_TEXT_GET: dict[str, Callable[[ProvenanceEvent], str]] = {
    "type": lambda e: e.event_type.value,
    "run": attrgetter("run_id"),
    "component": attrgetter("component_id"),
    "component_type": attrgetter("component_type"),
}
_INT_GET: dict[str, Callable[[ProvenanceEvent], int]] = {
    "partition": attrgetter("partition"),
    "attempt": attrgetter("attempt"),
    "time": attrgetter("event_time_ns"),
    "id": attrgetter("event_id"),
}


class QueryError(ValueError):
    """A malformed query, or one that names a field or attribute that is not indexed."""


class _Parser:
    """Tantivy's query parser on a thread of its own with a large stack.

    The parser recurses once per nesting level in native code: 9,000 open parentheses
    overflow an 8 MB stack (a segfault, not an exception), and threads may have far smaller
    stacks. A 64 MB stack is ample for any query under `_MAX_QUERY` characters; the parsed
    tree is then refused if deeper than `MAX_DEPTH`, so searching (in the caller's thread)
    and compiling never recurse deeply.
    """

    STACK = 64 * 1024 * 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[str, Future[dict[str, Any]]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:  # a forked child has no parser thread
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._thread = None

    def parse(self, text: str) -> dict[str, Any]:
        """Validate `text` against the per-event schema and return its syntax tree."""
        with self._lock:
            if self._thread is None:
                old = threading.stack_size(self.STACK)
                try:
                    self._thread = threading.Thread(
                        target=self._run, name="provrepo-query-parser", daemon=True
                    )
                    self._thread.start()
                finally:
                    threading.stack_size(old)
        done: Future[dict[str, Any]] = Future()
        self._jobs.put((text, done))
        return done.result()

    def _run(self) -> None:
        while True:
            text, done = self._jobs.get()
            try:
                _VALIDATOR.parse_query(text, DEFAULT_FIELDS)
                done.set_result(tantivy.parse_query(text))
            except BaseException as e:  # handed to the caller, panics included
                done.set_exception(e)


_PARSER = _Parser()
# Searching recurses in native code too, on the caller's stack: ~5 KB a level. 16 levels run
# in a 128 KB thread stack (musl's default) with room to spare.
MAX_DEPTH = 16


def _depth(ast: Mapping[str, Any]) -> int:
    """Nesting depth of a syntax tree (iteratively: the tree may be very deep)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(ast, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        if not isinstance(node, Mapping):
            continue
        if node.get("type") == "boost":
            todo.append((node.get("underlying"), d + 1))
        for _occur, sub in node.get("clauses") or ():
            todo.append((sub, d + 1))
    return deepest


def _attribute_is(name: str, value: str, e: ProvenanceEvent) -> bool:
    return e.attributes.get(name) == value


def _true(_e: ProvenanceEvent) -> bool:
    return True


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class UserQuery:
    """A query in Tantivy's syntax over per-event fields, checked and compiled.

    Fields: type, run, component, component_type (exact text), partition, attempt, time (ns),
    id (event id), and `attrs.<name>` for each indexed attribute. A bare word matches
    type, run, component or component_type. Raises `QueryError` on anything malformed.
    """

    def __init__(self, text: str, indexed_attributes: Iterable[str] = ()) -> None:
        if not isinstance(text, str):
            raise QueryError(f"query must be a string, got {type(text).__name__}")
        if not text.strip():
            raise QueryError("query is empty")
        if len(text) > _MAX_QUERY:
            raise QueryError(f"query is longer than {_MAX_QUERY} characters")
        self.text = text
        self.indexed_attributes = frozenset(indexed_attributes)
        try:
            ast = _PARSER.parse(text)
        except ValueError as e:
            raise QueryError(f"malformed query {text!r}: {_one_line(e)}") from None
        except BaseException as e:  # a panic inside tantivy is not an Exception subclass
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise QueryError(f"malformed query {text!r}: {_one_line(e)}") from None
        if _depth(ast) > MAX_DEPTH:
            raise QueryError(f"query is nested more than {MAX_DEPTH} levels deep")
        self.ast = ast
        self.uses_ids = False
        self._test = self._compile(ast)

    def matches(self, event: ProvenanceEvent) -> bool:
        return self._test(event)

    # -- exact, per event --------------------------------------------------------------------

    def _field(self, name: str | None) -> tuple[str, str | None]:
        """(kind, attribute) of a field name: kind is text, int, attr or default."""
        if name is None:
            return "default", None
        if name in TEXT_FIELDS:
            return "text", None
        if name in INT_FIELDS or name in BOUND_FIELDS:
            if name == "id":
                self.uses_ids = True
            return "int", None
        if name.startswith(ATTRS_FIELD + "."):
            attr = name[len(ATTRS_FIELD) + 1 :]
            if attr not in self.indexed_attributes:
                have = ", ".join(sorted(self.indexed_attributes)) or "none"
                raise QueryError(
                    f"attribute {attr!r} is not indexed (indexed: {have}); "
                    "filter on it with attributes= / --attr instead"
                )
            return "attr", attr
        raise QueryError(f"field {name!r} cannot be searched")

    def _int(self, text: str, field: str) -> int:
        try:
            return int(text)
        except (TypeError, ValueError):
            raise QueryError(f"{field}: {text!r} is not an integer") from None

    def _compile(self, node: Mapping[str, Any]) -> EventTest:
        kind = node.get("type")
        if kind == "all":
            return _true
        if kind == "boost":
            return self._compile(node["underlying"])
        if kind == "literal":
            return self._literal(node)
        if kind == "range":
            return self._range(node)
        if kind == "set":
            return self._set(node)
        if kind == "bool":
            return self._bool(node)
        raise QueryError(f"query clause of type {kind!r} is not supported")

    def _literal(self, node: Mapping[str, Any]) -> EventTest:
        phrase = node["phrase"]
        prefix = bool(node.get("prefix"))
        field, attr = self._field(node.get("field_name"))

        def same(v: str | None) -> bool:
            return v is not None and (v.startswith(phrase) if prefix else v == phrase)

        if field == "default":
            gets = [_TEXT_GET[f] for f in DEFAULT_FIELDS]
            return lambda e: any(same(g(e)) for g in gets)
        if field == "text":
            get = _TEXT_GET[node["field_name"]]
            return lambda e: same(get(e))
        if field == "attr":
            key = str(attr)  # set for attribute fields
            return lambda e: same(e.attributes.get(key))
        want = self._int(phrase, node["field_name"])
        iget = _INT_GET[node["field_name"]]
        return lambda e: iget(e) == want

    def _bounds(
        self, node: Mapping[str, Any], conv: Callable[[str], Any]
    ) -> list[tuple[Any, bool]]:
        out: list[tuple[Any, bool]] = []
        for side in ("lower", "upper"):
            b = node[side]
            if b["type"] == "unbounded":
                out.append((None, True))
            else:
                out.append((conv(b["value"]), b["type"] == "inclusive"))
        return out

    def _range(self, node: Mapping[str, Any]) -> EventTest:
        name = node["field"]
        field, _ = self._field(name)
        if field == "text":
            get: Callable[[ProvenanceEvent], Any] = _TEXT_GET[name]
            (lo, lo_inc), (hi, hi_inc) = self._bounds(node, str)
        elif field == "int":
            get = _INT_GET[name]
            (lo, lo_inc), (hi, hi_inc) = self._bounds(node, lambda s: self._int(s, name))
        else:
            raise QueryError(f"range queries on {name!r} are not supported")

        def test(e: ProvenanceEvent) -> bool:
            v = get(e)
            if lo is not None and (v < lo or (v == lo and not lo_inc)):
                return False
            return not (hi is not None and (v > hi or (v == hi and not hi_inc)))

        return test

    def _set(self, node: Mapping[str, Any]) -> EventTest:
        name = node["field"]
        field, attr = self._field(name)
        elements = node["elements"]
        if field == "text":
            get = _TEXT_GET[name]
            values = frozenset(elements)
            return lambda e: get(e) in values
        if field == "attr":
            key = str(attr)  # set for attribute fields
            values = frozenset(elements)
            return lambda e: e.attributes.get(key) in values
        if field == "int":
            iget = _INT_GET[name]
            ints = frozenset(self._int(x, name) for x in elements)
            return lambda e: iget(e) in ints
        raise QueryError(f"set queries on {name!r} are not supported")

    def _bool(self, node: Mapping[str, Any]) -> EventTest:
        must: list[EventTest] = []
        should: list[EventTest] = []
        must_not: list[EventTest] = []
        for occur, sub in node["clauses"]:
            {"must": must, "must_not": must_not}.get(occur, should).append(self._compile(sub))
        if not must and not should:
            # `a AND NOT b` parses as must(a), must(group(must_not(b))). Tantivy makes such a
            # group match nothing (so the whole query matches nothing); boolean logic, which
            # is what anyone writing it means, makes it "everything except b".
            return lambda e: not any(t(e) for t in must_not)

        def test(e: ProvenanceEvent) -> bool:
            if must:
                if not all(t(e) for t in must):
                    return False
            elif not any(t(e) for t in should):
                return False
            return not any(t(e) for t in must_not)

        return test

    # -- superset, per span ------------------------------------------------------------------

    def span_query(self, shard_attributes: Iterable[str]) -> Query:
        """A Tantivy query matching every span document that may hold a matching event."""
        return _relax(self.ast, frozenset(shard_attributes))


def _term(field: str, value: Any) -> Query:
    return Query.term_query(SPAN_SCHEMA, field, value)


def _all(queries: list[Query]) -> Query:
    if not queries:
        return Query.all_query()
    if len(queries) == 1:
        return queries[0]
    return Query.boolean_query([(_MUST, q) for q in queries])


def _any(queries: list[Query]) -> Query:
    if not queries:
        return Query.empty_query()
    if len(queries) == 1:
        return queries[0]
    return Query.boolean_query([(_SHOULD, q) for q in queries])


def overlap(
    field: str, lo: int | None, hi: int | None, lo_inc: bool = True, hi_inc: bool = True
) -> Query:
    """Spans whose [low, high] bounds of a per-event field meet the range lo..hi."""
    low_f, high_f = BOUND_FIELDS[field]
    parts = []
    if lo is not None:
        parts.append(Query.range_query(SPAN_SCHEMA, high_f, _INT, lo, None, lo_inc, True))
    if hi is not None:
        parts.append(Query.range_query(SPAN_SCHEMA, low_f, _INT, None, hi, True, hi_inc))
    return _all(parts)


def _relax(node: Mapping[str, Any], attrs: frozenset[str]) -> Query:
    kind = node.get("type")
    if kind == "boost":
        return _relax(node["underlying"], attrs)
    if kind == "literal":
        name, phrase = node.get("field_name"), node["phrase"]
        if node.get("prefix"):
            return Query.all_query()
        if name is None:
            return _any([_term(f, phrase) for f in DEFAULT_FIELDS])
        if name in TEXT_FIELDS:
            return _term(name, phrase)
        if name in INT_FIELDS:
            return _term(name, int(phrase))
        if name in BOUND_FIELDS:
            v = int(phrase)
            return overlap(name, v, v)
        attr = name[len(ATTRS_FIELD) + 1 :]
        return (
            _term(SPAN_ATTR_FIELD, attr_term(attr, phrase)) if attr in attrs else Query.all_query()
        )
    if kind == "range":
        name = node["field"]
        if name not in INT_FIELDS and name not in BOUND_FIELDS:
            return Query.all_query()  # text ranges: spans cannot test them, events can
        lo, hi = node["lower"], node["upper"]
        lo_v = None if lo["type"] == "unbounded" else int(lo["value"])
        hi_v = None if hi["type"] == "unbounded" else int(hi["value"])
        lo_inc, hi_inc = lo["type"] != "exclusive", hi["type"] != "exclusive"
        if name in INT_FIELDS:
            return Query.range_query(SPAN_SCHEMA, name, _INT, lo_v, hi_v, lo_inc, hi_inc)
        return overlap(name, lo_v, hi_v, lo_inc, hi_inc)
    if kind == "set":
        name, elements = node["field"], node["elements"]
        if not elements:
            return Query.empty_query()
        if name in TEXT_FIELDS:
            return Query.term_set_query(SPAN_SCHEMA, name, list(elements))
        if name in INT_FIELDS:
            return Query.term_set_query(SPAN_SCHEMA, name, [int(x) for x in elements])
        if name in BOUND_FIELDS:
            return _any([overlap(name, int(x), int(x)) for x in elements])
        attr = name[len(ATTRS_FIELD) + 1 :]
        if attr in attrs:
            terms = [attr_term(attr, x) for x in elements]
            return Query.term_set_query(SPAN_SCHEMA, SPAN_ATTR_FIELD, terms)
        return Query.all_query()
    if kind == "bool":
        must, should = [], []
        for occur, sub in node["clauses"]:
            if occur == "must":
                must.append(_relax(sub, attrs))
            elif occur != "must_not":  # negated clauses are dropped: they only remove events
                should.append(_relax(sub, attrs))
        if must:
            return _all(must)  # optional clauses beside required ones select nothing
        if should:
            return _any(should)
        return Query.all_query()  # only negative clauses: "everything except ..."
    return Query.all_query()


class Predicates:
    """Everything a search asks for. Sets are exact-match alternatives; None means any.

    Time is the half-open range start_ns <= event time < end_ns.
    """

    def __init__(
        self,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        event_types: Iterable[str] | None = None,
        runs: Iterable[str] | None = None,
        components: Iterable[str] | None = None,
        attributes: Mapping[str, str] | None = None,
        query: UserQuery | None = None,
    ) -> None:
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.event_types = None if event_types is None else frozenset(event_types)
        self.runs = None if runs is None else frozenset(runs)
        self.components = None if components is None else frozenset(components)
        self.attributes = dict(attributes or {})
        self.query = query
        self.uses_ids = query is not None and query.uses_ids
        self.impossible = any(
            s is not None and not s for s in (self.event_types, self.runs, self.components)
        ) or (start_ns is not None and end_ns is not None and end_ns <= start_ns)
        self._tests = self._compile()

    def _compile(self) -> list[EventTest]:
        """The tests other than time (time is checked inline: it is the hot one)."""
        tests: list[EventTest] = []
        if self.event_types is not None:
            types = self.event_types
            tests.append(lambda e: e.event_type.value in types)
        if self.runs is not None:
            runs = self.runs
            tests.append(lambda e: e.run_id in runs)
        if self.components is not None:
            comps = self.components
            tests.append(lambda e: e.component_id in comps)
        for k, v in self.attributes.items():
            tests.append(partial(_attribute_is, k, v))
        if self.query is not None:
            tests.append(self.query.matches)
        return tests

    def matches(self, event: ProvenanceEvent) -> bool:
        """The exact answer for one event."""
        return self._in_time(event.event_time_ns) and all(t(event) for t in self._tests)

    def _in_time(self, t: int) -> bool:
        lo, hi = self.start_ns, self.end_ns
        return (lo is None or t >= lo) and (hi is None or t < hi)

    def filter(self, events: list[ProvenanceEvent]) -> list[ProvenanceEvent]:
        """The events that match, in order (one pass per test: no per-event call chain)."""
        lo, hi = self.start_ns, self.end_ns
        if lo is not None and hi is not None:
            events = [e for e in events if lo <= e.event_time_ns < hi]
        elif lo is not None:
            events = [e for e in events if e.event_time_ns >= lo]
        elif hi is not None:
            events = [e for e in events if e.event_time_ns < hi]
        for test in self._tests:
            if not events:
                break
            events = [e for e in events if test(e)]
        return events

    def span_query(self, shard_attributes: Iterable[str]) -> Query:
        """Span documents that may hold a matching event, in a shard that indexed these
        attributes."""
        if self.impossible:
            return Query.empty_query()
        attrs = frozenset(shard_attributes)
        parts = []
        for field, values in (
            ("type", self.event_types),
            ("run", self.runs),
            ("component", self.components),
        ):
            if values is not None:
                parts.append(Query.term_set_query(SPAN_SCHEMA, field, sorted(values)))
        for k, v in self.attributes.items():
            if k in attrs:
                parts.append(_term(SPAN_ATTR_FIELD, attr_term(k, v)))
        if self.query is not None:
            parts.append(self.query.span_query(attrs))
        if parts:  # spans whose values were not read may hold anything
            parts = [_any([_all(parts), _term("opaque", 1)])]
        if self.start_ns is not None or self.end_ns is not None:
            parts.append(overlap("time", self.start_ns, self.end_ns, True, False))
        return _all(parts)
