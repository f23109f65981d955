"""Sharded, time-named Tantivy indexes over event logs; the indexing thread; search queries.

The index is derived data: one document per span of consecutive event ids (a lineage batch,
or a run of rich events), holding every value its events have; a search finds candidate spans
here and the caller reads and filters the events exactly. This package imports only `journals`
and tantivy; the repository feeds it spans and reads the events.
"""

from ._model import LogSpans, Span, SpanHit
from ._query import Predicates, QueryError, UserQuery
from ._search import candidate_spans
from ._shards import ShardSet
from ._worker import IndexWorker

__all__ = [
    "IndexWorker",
    "LogSpans",
    "Predicates",
    "QueryError",
    "ShardSet",
    "Span",
    "SpanHit",
    "UserQuery",
    "candidate_spans",
]
