"""Everything the DataFrame agent asks of `LineageContext` and the repository, in one place.

Capture points, run descriptors, actions and journaling are the RDD agent's plumbing; the
DataFrame agent reaches it only through this module, so when that plumbing moves (a planner
object) only this file changes.
"""

from __future__ import annotations

import pickle
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
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
        # The context's parts, not the context: the context holds the DataFrame agent, which
        # holds this, and a reference back would put the context in a reference cycle (it is
        # then freed only by Python's cyclic GC, and with it the frames it keeps for replay).
        self.run_id: str = lc.run_id
        self.capture = bool(lc.capture)
        self.on_error: str = lc.on_error
        self.writer_spec = lc.writer_spec
        self._planner = lc.planner
        self._lc = weakref.ref(lc)  # for RDDs made of rows (`df.rdd`): no cycle, see above
        self._repo = lc.repo
        self._sc = lc.sc
        # output capture point -> the LineageDataFrame its action ran on (for replay)
        self.frames_of: dict[int, Any] = {}
        # Called with an action's error before it propagates (UDF culprits: `_udf.blame`).
        self.on_failure: Callable[[BaseException, Any], None] | None = None
        # Called with the frame and the output's component id before an action runs (the
        # scans' plans brought up to date: `_reader.scan_plans`).
        self.before_action: Callable[[Any, str], None] | None = None
        # Set once the context is gone: no replay can ask for an action's frame any more.
        self.released = False

    @property
    def classic(self) -> bool:
        """Whether the session is classic PySpark (a SparkContext here), not Spark Connect."""
        return self._sc is not None

    def release(self) -> None:
        """Forget the frames kept for replay (the context is gone)."""
        self.released = True
        self.frames_of.clear()

    def node_name(self, op: str) -> str:
        return self._planner.node_name(op)

    def source_cp(self, op: str, partitions: int, **extra: Any) -> CapturePoint:
        """A capture point whose records are a DataFrame source's rows."""
        name = self.node_name(op)
        return self._planner.capture_point(name, op, "RECEIVE", [], "source", partitions, **extra)

    def group_cp(self, op: str, parents: list[int]) -> CapturePoint:
        """A capture point whose records are groups journaled by executors (one per partition
        of a `mapInPandas`); a group's parents are records of `parents`, and the rows made
        from it name it."""
        name = self.node_name(op)
        return self._planner.capture_point(name, op, "JOIN", sorted(parents), "shuffle", 1)

    def source_cps(self, cps: Iterable[int]) -> set[int]:
        """The source capture points whose rows records at `cps` were made from (`cps`
        themselves, but for group capture points)."""
        return self._planner.source_points(cps)

    def output_cp(self, action: str, parents: list[int], of: str) -> CapturePoint:
        """A capture point whose records are an action's output rows; their parents are
        records of `parents` (source rows, or group records of deferred aggregates)."""
        name = self.node_name(action)
        return self._planner.capture_point(
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
            run_id=self.run_id,
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
        self._repo.register_events(batch)

    @contextmanager
    def action(self, frame: Any, cp: CapturePoint) -> Iterator[None]:
        """Around an action: describe the run and roll over afterwards; the frame's
        `lineage()` is then this action's output."""
        self.prepare(frame, cp.component_id)
        with self._planner.action(cp):
            if not self.released:
                self.frames_of[cp.number] = frame
            with self.blaming(frame):
                yield
            frame.last_output = cp

    def prepare(self, frame: Any, what: str) -> None:
        """Before Spark plans `frame`'s query for good (an action; `df.rdd`, once): its
        scans planned under the settings of the moment (see `_reader.ScanPlans`)."""
        if self.before_action is not None:
            self.before_action(frame, what)

    @contextmanager
    def blaming(self, frame: Any) -> Iterator[None]:
        """Errors raised inside are handed to `on_failure` (UDF culprits) with `frame`: around
        this agent's actions and the RDD agent's that read `frame`'s rows (`df.rdd`)."""
        try:
            yield
        except Exception as error:
            if self.on_failure is not None:
                self.on_failure(error, frame)
            raise

    def rows_rdd(
        self,
        op: str,
        rdd: Any,
        parents: Iterable[int],
        around: Callable,
        fields: list[str] | None,
    ) -> Any:
        """A captured RDD (the RDD agent's) of `rdd`'s rows: see `LineageContext.rows_rdd`."""
        lc = self._lc()
        if lc is None:
            raise RuntimeError("the LineageContext of this DataFrame is gone")
        return lc.rows_rdd(op, rdd, parents, around, fields)

    def lineage_of(self, cp: CapturePoint) -> LineageRDD:
        return self._planner.lineage_of(cp)

    def capture_python(self, modules: tuple[str, ...]) -> Any:
        """Python functions built inside run an interpreter that can import `modules` (the
        RDD agent's rule; nothing to choose under Spark Connect: the server does)."""
        from contextlib import nullcontext

        from .._interpreter import capture_python

        return capture_python(self._sc, modules) if self._sc is not None else nullcontext()

    def rollover(self) -> None:
        self._repo.rollover()

    def run_info(self) -> Any:
        """This run's descriptor as stored (capture points by number)."""
        return self._repo.lineage.run_info(self.run_id)

    def stored_parents(self, record_ids: np.ndarray) -> dict[int, np.ndarray]:
        return self._repo.lineage.parent_lists(self.run_id, record_ids)


def pickled(values: list) -> list[bytes]:
    return [pickle.dumps(v, _PICKLE) for v in values]
