"""The deferred narrow policy (`LineageContext(narrow="deferred")`): Smoke's *defer*.

Eagerly, a map-side combiner records every (input record, combiner record) association of its
segment's narrow chain: for word count that is every (line, word) pair, close to its
information floor and most of the lineage's bytes. Deferred, a combiner record keeps:

- its key (the combiner's records are one per key and partition), and
- which input records its values came from *coarsely*: a record with at most `EXACT` parents
  keeps them as they are; one with more keeps the groups of `GROUP` consecutive input records
  (positions // GROUP) that held them.

At trace time the repository re-runs the same narrow chain (`DeferredChain`, stored pickled in
the run descriptor) on just the input records of those groups and keeps the ones that emit the
record's key: the associations are re-derived exactly (narrow operations are deterministic,
as replay already assumes). Rare keys cost what they cost eagerly; a frequent key's trace
re-runs the chain on up to GROUP input records per stored group. Only chains over a source
(text lines, parallelized elements: records that can be re-read) without `mapPartitions`
(whose functions see a whole partition) are deferred; other combiners stay eager.

Executor side: imports nothing heavier than the worker's own modules.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

from . import _inputs as inputs
from ._plan import ParallelSource, PlanNode, TextSource
from ._spec import NarrowOp
from ._worker import apply_ops, ignore_error, skipping

EXACT = 64  # a combiner record with at most this many parents keeps them exactly
GROUP = 256  # otherwise: groups of this many consecutive input records
NARROW_POLICIES = ("eager", "deferred")


def deferrable(ops: Sequence[NarrowOp]) -> bool:
    """Whether a chain can be re-run one input record at a time (no mapPartitions)."""
    return not any(op.name == "mapPartitions" for op in ops)


def defer_plan(node: PlanNode, on_error: str) -> tuple[tuple[int, int], dict[str, Any]] | None:
    """For a combiner over `node`'s records: the sink's (exact, group) and the capture point's
    descriptor fields (the pickled chain the repository re-runs), or None when the segment
    cannot be deferred (its input is not a source, or it holds a mapPartitions). Driver side."""
    start, ops = node.chain()
    s = start.segment_start()
    if not isinstance(s, TextSource | ParallelSource) or not deferrable(ops):
        return None
    from pyspark import cloudpickle  # user functions by value, as Spark ships them

    chain = base64.b64encode(cloudpickle.dumps(DeferredChain(ops, on_error))).decode("ascii")
    fields = {
        "narrow": "deferred",
        "exact": EXACT,
        "group": GROUP,
        "input": s.cp.number,
        "chain": chain,
    }
    return (EXACT, GROUP), fields


class DeferredChain:
    """A segment's narrow chain, re-run at trace time: the keys each input record emits into
    its combiner (in the order emitted, repeats kept)."""

    def __init__(self, ops: Sequence[NarrowOp], on_error: str) -> None:
        if not deferrable(ops):
            raise ValueError("a chain with mapPartitions cannot be re-run record by record")
        self.ops = tuple(ops)
        self.on_error = on_error

    def keys(self, split: int, values: Iterable[Any]) -> list[list[Any]]:
        """For each input value (of partition `split`), the keys its records have when they
        reach the combiner. Under on_error="skip" a record whose processing raises emits
        what it emitted in the capture run (the same skipping code runs); under "fail" an
        error means the run could not have succeeded with this input: it propagates."""
        skip = self.on_error == "skip"
        state = inputs.InputState(0)
        out: list[list[Any]] = []
        for value in values:
            records = apply_ops(
                iter((value,)), self.ops, split, state, [], ignore_error if skip else None
            )
            if skip:
                records = skipping(records, ignore_error)
            out.append([k for k, _v in records])
        return out
