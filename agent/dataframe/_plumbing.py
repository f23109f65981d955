"""Everything the DataFrame agent asks of `LineageContext` and the repository, in one place.

Capture points, run descriptors, actions and journaling are the RDD agent's plumbing; the
DataFrame agent reaches it only through this module, so when that plumbing moves (a planner
object) only this file changes.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from journals import EventType, LineageBatch, record_id_base

from .._spec import CapturePoint

if TYPE_CHECKING:
    from .._context import LineageContext
    from .._trace import LineageRDD

_PICKLE = pickle.HIGHEST_PROTOCOL


class Plumbing:
    """A LineageContext seen from the DataFrame agent."""

    def __init__(self, lc: LineageContext) -> None:
        self.lc = lc
        # output capture point -> the LineageDataFrame its action ran on (for replay)
        self.frames_of: dict[int, Any] = {}
        # Called with an action's error before it propagates (UDF culprits: `_udf.blame`).
        self.on_failure: Callable[[BaseException, Any], None] | None = None

    @property
    def capture(self) -> bool:
        return bool(self.lc.capture)

    @property
    def run_id(self) -> str:
        return self.lc.run_id

    @property
    def on_error(self) -> str:
        return self.lc.on_error

    @property
    def writer_spec(self):
        return self.lc.writer_spec

    def node_name(self, op: str) -> str:
        return self.lc.planner.node_name(op)

    def source_cp(self, op: str, partitions: int, **extra: Any) -> CapturePoint:
        """A capture point whose records are a DataFrame source's rows."""
        name = self.node_name(op)
        return self.lc.planner.capture_point(name, op, "RECEIVE", [], "source", partitions, **extra)

    def output_cp(self, action: str, parents: list[int], of: str) -> CapturePoint:
        """A capture point whose records are an action's output rows; their parents are
        records of `parents` (source rows, or group records of deferred aggregates)."""
        name = self.node_name(action)
        return self.lc.planner.capture_point(
            name, action, "SEND", sorted(parents), "shuffle", 1, of=of
        )

    def journal(
        self,
        cp: CapturePoint,
        n: int,
        *,
        partition: int = 0,
        first: int = 0,
        parent_counts: np.ndarray | None = None,
        parent_ids: np.ndarray | None = None,
        values: list[bytes] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> None:
        """Journal records first..first+n-1 of (cp, partition) from the driver."""
        if n <= 0:
            return
        base = record_id_base(cp.number, partition) + first
        batch = LineageBatch.build(
            event_time_ns=time.time_ns(),
            event_type=EventType(cp.event_type),
            run_id=self.lc.run_id,
            component_id=cp.component_id,
            component_type=cp.component_type,
            partition=partition,
            attempt=0,
            record_ids=range(base, base + n),
            parent_counts=parent_counts,
            parent_ids=parent_ids,
            values=values,
            attributes=attributes,
        )
        self.lc.repo.register_events(batch)

    @contextmanager
    def action(self, frame: Any, cp: CapturePoint) -> Iterator[None]:
        """Around an action: describe the run and roll over afterwards; the frame's
        `lineage()` is then this action's output."""
        with self.lc.planner.action(cp):
            self.frames_of[cp.number] = frame
            try:
                yield
            except Exception as error:
                if self.on_failure is not None:
                    self.on_failure(error, frame)
                raise
            frame.last_output = cp

    def lineage_of(self, cp: CapturePoint) -> LineageRDD:
        return self.lc.planner.lineage_of(cp)

    def capture_python(self, modules: tuple[str, ...]) -> Any:
        """Python functions built inside run an interpreter that can import `modules` (the
        RDD agent's rule; nothing to choose under Spark Connect: the server does)."""
        from contextlib import nullcontext

        from .._interpreter import capture_python

        return capture_python(self.lc.sc, modules) if self.lc.sc is not None else nullcontext()

    def rollover(self) -> None:
        self.lc.repo.rollover()

    def stored_parents(self, record_ids: np.ndarray) -> dict[int, np.ndarray]:
        return self.lc.repo.lineage.parent_lists(self.lc.run_id, record_ids)


def pickled(values: list) -> list[bytes]:
    return [pickle.dumps(v, _PICKLE) for v in values]
