"""Per-context capture policies of the DataFrame agent (no pyspark import: the context
checks them before any Spark work)."""

from __future__ import annotations

# "eager": aggregates collect their groups' ids while they run; "lazy": a DataFrame aggregate
# filtered on its output (or an `lc.sql` HAVING block) collects them after the filter, for
# the surviving groups only (`_lazyagg`); "auto" (the default): lazy where the aggregate's
# input reads only Parquet files or `createDataFrame` rows (reading it again costs little),
# eager over CSV / JSON / text (parsing the input again costs more than the ids it saves).
AGGREGATE_POLICIES = ("auto", "eager", "lazy")
DEFAULT_AGGREGATES = "auto"

# Source formats whose second read costs little: Parquet prunes the columns the lazy form
# re-reads (keys and ids); `createDataFrame` rows are in the driver's plan already (no scan
# descriptor: format None).
CHEAP_SOURCES = frozenset({"parquet", None})

# The most surviving groups (rows) and Arrow bytes the lazy form takes to the driver and
# broadcasts; more, or an error collecting them, and the filter runs on the eager aggregate
# (the same rows and lineage). Spark's own limits for a broadcast are far above (1g
# `spark.driver.maxResultSize`, 8 GB, 512 M rows) but the driver's heap is not: these keep
# the survivors a few MB. Read at each use (tests lower them).
SURVIVORS_ROWS = 100_000
SURVIVORS_BYTES = 32 << 20
