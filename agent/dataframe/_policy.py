"""Per-context capture policies of the DataFrame agent (no pyspark import: the context
checks them before any Spark work)."""

from __future__ import annotations

# "eager": aggregates collect their groups' ids while they run.
AGGREGATE_POLICIES = ("eager",)
