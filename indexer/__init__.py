"""Sharded, time-named Tantivy indexes over event logs; the indexing thread; search queries.

The index is derived data: one document per span of consecutive event ids (a lineage batch,
or a run of rich events), holding every value its events have; a search finds candidate spans
here and the caller reads and filters the events exactly. This package imports only `journals`
and tantivy; the repository feeds it spans and reads the events.
"""

from ._model import LogSpans, Manifest, ShardInfo, Span, SpanHit
from ._query import Predicates, QueryError, UserQuery
from ._schema import ATTRS_FIELD, BOUND_FIELDS, DEFAULT_FIELDS, INT_FIELDS, TEXT_FIELDS
from ._search import candidate_spans
from ._shards import IndexDamaged, ShardSet
from ._worker import IndexStats, IndexWorker, LogSource

__all__ = [
    "ATTRS_FIELD",
    "BOUND_FIELDS",
    "DEFAULT_FIELDS",
    "INT_FIELDS",
    "TEXT_FIELDS",
    "IndexDamaged",
    "IndexStats",
    "IndexWorker",
    "LogSource",
    "LogSpans",
    "Manifest",
    "Predicates",
    "QueryError",
    "ShardInfo",
    "ShardSet",
    "Span",
    "SpanHit",
    "UserQuery",
    "candidate_spans",
]
