"""The query language: per-event evaluation against a reference, against Tantivy itself, and the
span query as a superset of every span holding a matching event (what makes search exact)."""

from __future__ import annotations

import itertools
import random

import msgspec
import pytest
import tantivy
from _search_data import BASE, HOUR, rich_events
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer import Predicates, QueryError, Span, UserQuery
from indexer._schema import SPAN_SCHEMA

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

EVENTS = rich_events(random.Random(11), 300, BASE, BASE + 4 * HOUR)
for _i, _e in enumerate(EVENTS, 1):
    _e.event_id = _i * 3  # ids are not positions

# -- queries as trees: (text, reference predicate, uses negation) ---------------------------

T1, T2 = BASE + HOUR, BASE + 2 * HOUR


def _leaf(text, test):
    return st.just((text, test, False))


LEAVES = st.one_of(
    _leaf("type:FAIL", lambda e: e.event_type.value == "FAIL"),
    _leaf("type:JOIN", lambda e: e.event_type.value == "JOIN"),
    _leaf("SEND", lambda e: e.event_type.value == "SEND"),
    _leaf("run-b", lambda e: e.run_id == "run-b"),
    _leaf("run:run-a", lambda e: e.run_id == "run-a"),
    _leaf('component:"map#1"', lambda e: e.component_id == "map#1"),
    _leaf("component_type:combiner", lambda e: e.component_type == "combiner"),
    _leaf("partition:2", lambda e: e.partition == 2),
    _leaf("attempt:1", lambda e: e.attempt == 1),
    _leaf("attrs.host:w1", lambda e: e.attributes.get("host") == "w1"),
    _leaf("partition:[1 TO 2]", lambda e: 1 <= e.partition <= 2),
    _leaf("partition:{1 TO 3]", lambda e: 1 < e.partition <= 3),
    _leaf("partition:>=2", lambda e: e.partition >= 2),
    _leaf(f"time:[{T1} TO {T2}}}", lambda e: T1 <= e.event_time_ns < T2),
    _leaf(f"time:<{T1}", lambda e: e.event_time_ns < T1),
    _leaf("id:[30 TO 300]", lambda e: 30 <= e.event_id <= 300),
    _leaf("run:[run-a TO run-b]", lambda e: "run-a" <= e.run_id <= "run-b"),
    _leaf("type:>=JOIN", lambda e: e.event_type.value >= "JOIN"),
    _leaf("type:IN [SEND DROP]", lambda e: e.event_type.value in ("SEND", "DROP")),
    _leaf("partition:IN [0 3]", lambda e: e.partition in (0, 3)),
    _leaf("attrs.host:IN [w0 w2]", lambda e: e.attributes.get("host") in ("w0", "w2")),
    _leaf("*", lambda e: True),
)


def _and(a, b):
    return (f"({a[0]} AND {b[0]})", lambda e: a[1](e) and b[1](e), a[2] or b[2])


def _or(a, b):
    return (f"({a[0]} OR {b[0]})", lambda e: a[1](e) or b[1](e), a[2] or b[2])


def _and_not(a, b):
    return (f"({a[0]} AND NOT {b[0]})", lambda e: a[1](e) and not b[1](e), True)


def _plus_minus(a, b):
    return (f"(+{a[0]} -{b[0]})", lambda e: a[1](e) and not b[1](e), True)


def _juxtaposed(a, b):  # default operator: OR
    return (f"({a[0]} {b[0]})", lambda e: a[1](e) or b[1](e), a[2] or b[2])


def _pairs(sub):
    # Two different operands: Tantivy's grammar merges identical clauses of a group, so
    # `a (b AND b)` means `a +b` there (and here: evaluation follows the parsed tree).
    return st.tuples(sub, sub).filter(lambda ab: ab[0][0] != ab[1][0])


QUERIES = st.recursive(
    LEAVES,
    lambda sub: st.one_of(
        _pairs(sub).map(lambda ab: _and(*ab)),
        _pairs(sub).map(lambda ab: _or(*ab)),
        _pairs(sub).map(lambda ab: _and_not(*ab)),
        _pairs(sub).map(lambda ab: _plus_minus(*ab)),
        _pairs(sub).map(lambda ab: _juxtaposed(*ab)),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(QUERIES)
def test_evaluation_is_boolean_logic(q):
    text, test, _ = q
    uq = UserQuery(text, ["host"])
    assert [e.event_id for e in EVENTS if uq.matches(e)] == [e.event_id for e in EVENTS if test(e)]


def _event_index():
    sb = tantivy.SchemaBuilder()
    for f in ("type", "run", "component", "component_type"):
        sb.add_text_field(f, tokenizer_name="raw", index_option="basic")
    for f in ("partition", "attempt", "time"):
        sb.add_integer_field(f, indexed=True)
    sb.add_integer_field("id", indexed=True, fast=True)
    sb.add_json_field("attrs", tokenizer_name="raw", index_option="basic")
    schema = sb.build()
    index = tantivy.Index(schema)
    w = index.writer(15_000_000, 1)
    for e in EVENTS:
        doc = tantivy.Document()
        doc.add_text("type", e.event_type.value)
        doc.add_text("run", e.run_id)
        doc.add_text("component", e.component_id)
        doc.add_text("component_type", e.component_type)
        doc.add_integer("partition", e.partition)
        doc.add_integer("attempt", e.attempt)
        doc.add_integer("time", e.event_time_ns)
        doc.add_integer("id", e.event_id)
        if "host" in e.attributes:
            doc.add_json("attrs", {"host": e.attributes["host"]})
        w.add_document(doc)
    w.commit()
    index.reload()
    return index


_INDEX = _event_index()


@settings(max_examples=200, deadline=None)
@given(QUERIES.filter(lambda q: not q[2]))
def test_evaluation_agrees_with_tantivy(q):
    """Without negation, Tantivy over one document per event gives exactly the same events."""
    text, _, _ = q
    searcher = _INDEX.searcher()
    query = _INDEX.parse_query(text, ["type", "run", "component", "component_type"])
    hits = searcher.search(query, len(EVENTS) + 1).hits
    ids = sorted(searcher.fast_field_values("id", [a for _, a in hits]))
    uq = UserQuery(text, ["host"])
    assert ids == [e.event_id for e in EVENTS if uq.matches(e)]


def _span(events, log_id=1) -> Span:
    def vals(f):
        return tuple(sorted({f(e) for e in events}))

    hosts = vals(lambda e: e.attributes.get("host", ""))
    return Span(
        log_id=log_id,
        first_id=events[0].event_id,
        count=events[-1].event_id - events[0].event_id + 1,
        min_time_ns=min(e.event_time_ns for e in events),
        max_time_ns=max(e.event_time_ns for e in events),
        types=vals(lambda e: e.event_type.value),
        runs=vals(lambda e: e.run_id),
        components=vals(lambda e: e.component_id),
        component_types=vals(lambda e: e.component_type),
        partitions=vals(lambda e: e.partition),
        attempts=vals(lambda e: e.attempt),
        attributes={"host": tuple(h for h in hosts if h)},
    )


def _span_index(cuts: list[int], opaque: frozenset[int] = frozenset()):
    index = tantivy.Index(SPAN_SCHEMA)
    w = index.writer(15_000_000, 1)
    groups = []
    bounds = [0, *sorted(set(cuts)), len(EVENTS)]
    for a, b in itertools.pairwise(bounds):
        if a < b:
            span = _span(EVENTS[a:b])
            if len(groups) in opaque:  # values not read: only time bounds
                span = msgspec.structs.replace(
                    span,
                    types=(),
                    runs=(),
                    components=(),
                    component_types=(),
                    partitions=(),
                    attempts=(),
                    attributes={},
                    opaque=True,
                )
            groups.append(EVENTS[a:b])
            w.add_document(span.document())
    w.commit()
    index.reload()
    return index, groups


@settings(max_examples=150, deadline=None)
@given(
    QUERIES,
    st.lists(st.integers(1, len(EVENTS) - 1), max_size=60),
    st.sampled_from([["host"], []]),
    st.one_of(st.none(), st.integers(BASE, BASE + 4 * HOUR)),
    st.frozensets(st.integers(0, 60), max_size=10),
)
def test_span_query_finds_every_span_with_a_match(q, cuts, shard_attrs, start, opaque):
    """Spans hold many events with many values (or, opaque, none known): the span query must
    not lose any of them."""
    text, _, _ = q
    index, groups = _span_index(cuts, opaque)
    preds = Predicates(start_ns=start, query=UserQuery(text, ["host"]))
    searcher = index.searcher()
    hits = searcher.search(preds.span_query(shard_attrs), len(groups) + 1).hits
    found = set(searcher.fast_field_values("first_id", [a for _, a in hits]))
    need = {g[0].event_id for g in groups if any(preds.matches(e) for e in g)}
    assert need <= found


@pytest.mark.parametrize(
    "text",
    [
        "type:(",
        "-type:FAIL",
        "NOT run:a",
        "nofield:1",
        "partition:x",
        "attrs.code:E1",
        "attrs.host:*",
        "type:/F.*/",
        "attrs.host:[a TO b]",
        "",
        "   ",
        "AND",
        "x" * 20_000,
        "(" * 9_990,  # overflowed the parser's native stack: a segfault, once
        "NOT " * 2_400 + "a",
        "(a AND " * 20 + "a" + ")" * 20,  # deeper than MAX_DEPTH
    ],
)
def test_malformed_queries_raise_query_error(text):
    with pytest.raises(QueryError):
        UserQuery(text, ["host"])


def test_only_negative_with_a_positive_part():
    uq = UserQuery("* -type:FAIL", [])
    assert [e for e in EVENTS if uq.matches(e)] == [
        e for e in EVENTS if e.event_type.value != "FAIL"
    ]


TOKENS = [*'()[]{}":*^~+-!\\/ ', "AND ", "OR ", "NOT ", "TO ", "IN ", "type:", "time:"]
TOKENS += ["attrs.host:", "attrs.x:", "partition:", "a", "1", "-1", "\u00e9", "\x00"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_any_text_is_a_query_or_a_query_error(text):
    """Garbage never escapes as anything but QueryError (no panic, no crash)."""
    try:
        uq = UserQuery(text, ["host"])
    except QueryError:
        return
    Predicates(query=uq).span_query(["host"])
    for e in EVENTS[:20]:
        uq.matches(e)
