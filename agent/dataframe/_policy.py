"""Per-context capture policies of the DataFrame agent (no pyspark import: the context
checks them before any Spark work)."""

from __future__ import annotations

# "eager": aggregates collect their groups' ids while they run; "lazy": a DataFrame aggregate
# filtered on its output collects them after the filter, for the surviving groups only,
# which are broadcast (`_lazyagg`).
AGGREGATE_POLICIES = ("eager", "lazy")
