"""The two Tantivy schemas: span documents on disk, and per-event fields for user queries.

A shard holds one document per *span*: a run of consecutive event ids of one log (a lineage
batch, or a run of rich events). Its fields hold every value any event of the span has, so a
query over span documents finds a superset of the matching events; the exact filter runs on
the events afterwards. Users write queries against per-event fields (`type:FAIL`, `time:[a TO
b]`); the query is validated with Tantivy's own parser against the per-event schema.
"""

from __future__ import annotations

import tantivy

# Per-event fields a query may name. Text fields use the `raw` tokenizer: values match exactly
# (case-sensitive, whole value), which is what run ids and component ids need.
TEXT_FIELDS: tuple[str, ...] = ("type", "run", "component", "component_type")
INT_FIELDS: tuple[str, ...] = ("partition", "attempt")
# Per-event integer fields that span documents keep as [low, high] bounds instead of values.
BOUND_FIELDS: dict[str, tuple[str, str]] = {
    "time": ("min_time", "max_time"),  # event time, ns since the epoch
    "id": ("first_id", "last_id"),  # event id
}
ATTRS_FIELD = "attrs"  # in queries: attrs.<name>, an indexed attribute
# Span documents keep attribute values as raw "name=value" terms in one multi-valued text
# field, not in a JSON field: term queries on JSON paths need tantivy >= 0.27, which has no
# wheel for Python 3.10.
SPAN_ATTR_FIELD = "attr"
DEFAULT_FIELDS: list[str] = list(TEXT_FIELDS)  # what a bare word is matched against

# Span-only fields (fast: read back per hit without stored documents).
SPAN_INT_FIELDS: tuple[str, ...] = (
    "log",
    "first_id",
    "last_id",
    "min_time",
    "max_time",
    "uniform",
    "opaque",  # 1: the span's field values were not read (only its time bounds are known)
)


def span_schema() -> tantivy.Schema:
    """The schema of the documents stored in shards."""
    sb = tantivy.SchemaBuilder()
    for name in SPAN_INT_FIELDS:
        sb.add_integer_field(name, indexed=True, fast=True)
    for name in TEXT_FIELDS:
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    for name in INT_FIELDS:
        sb.add_integer_field(name, indexed=True)
    sb.add_text_field(SPAN_ATTR_FIELD, tokenizer_name="raw", index_option="basic")
    return sb.build()


def attr_term(name: str, value: str) -> str:
    """The span-document term of one attribute value."""
    return f"{name}={value}"


def event_schema() -> tantivy.Schema:
    """Per-event fields, used only to validate user queries with Tantivy's parser.

    Nothing here is a fast field, so `field:*` (exists) and JSON ranges are rejected: they
    would have no exact per-event meaning.
    """
    sb = tantivy.SchemaBuilder()
    for name in TEXT_FIELDS:
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    for name in (*INT_FIELDS, *BOUND_FIELDS):
        sb.add_integer_field(name, indexed=True)
    sb.add_json_field(ATTRS_FIELD, tokenizer_name="raw", index_option="basic")
    return sb.build()


SPAN_SCHEMA = span_schema()
EVENT_SCHEMA = event_schema()
