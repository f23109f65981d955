"""`Planner`: the run-level bookkeeping every capture front-end shares (`lc.planner`).

A front-end (the RDD agent in `_rdd`, a DataFrame agent beside it) builds `PlanNode`s and asks
the planner to:

- name nodes: `node_name("map")` -> "map#3", unique in the run;
- register capture points: `capture_point(...)` -> a `CapturePoint` whose number names the
  records there (record id = (capture point, partition, position)); the registry is the run
  descriptor's `capture_points` list, which the repository reads to trace and replay;
- wrap each Spark action: `with planner.action(cp, node): ...` journals the run descriptor
  and asks the repository for a rollover afterwards, also when the action failed (its FAIL
  events are then traceable at once);
- hand back what an action emitted: `lineage_of(cp)` -> a `LineageRDD`.

The run descriptor is a lineage batch of one record at capture point 0 (component type
`RUN_COMPONENT_TYPE`, partition = its version), whose details are JSON:
`{"run_id", "app", "spark_version", "version", "capture_points": [{"cp", "component_id",
"component_type", "event_type", "parents", "dependency", "partitions", ...extra}]}`. Each
action journals a new version; the newest wins.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from journals import EventType, LineageBatch, pack_record_id
from repository import RUN_COMPONENT_TYPE, BadInput, ProvenanceRepository

from ._interpreter import CAPTURE_MODULES, capture_python
from ._plan import Dependency, PlanNode
from ._spark_trace import SPARK_THRESHOLD
from ._spec import CapturePoint
from ._trace import LineageRDD

EventTypeName = Literal["RECEIVE", "JOIN", "FORK", "SEND"]


class Planner:
    """Names, capture points, actions and outputs of one captured run (see the module doc).

    Thread-safe: several threads may build plans and run actions of one run at once.
    """

    def __init__(
        self,
        repo: ProvenanceRepository,
        run_id: str,
        *,
        app: str = "",
        spark_version: str = "",
        sc: Any = None,
        spark_threshold: int | None = SPARK_THRESHOLD,
    ) -> None:
        self.repo = repo
        # Traces of the LineageRDDs made here go on as Spark jobs past this many records.
        self.spark_threshold = spark_threshold
        self.run_id = run_id
        self._app = app
        self._spark_version = spark_version
        self._sc = sc  # handed to the LineageRDDs made here (for their native operations)
        self._lock = threading.Lock()
        self._nodes = 0
        self._next_cp = 1  # capture point 0 names the run descriptor
        self._cps: dict[int, dict[str, Any]] = {}
        self._outputs: dict[int, PlanNode] = {}  # output capture point -> the node it output
        self._actions = 0

    # -- naming ------------------------------------------------------------------------------

    def node_name(self, op: str) -> str:
        """A name for a new node of operation `op`, unique in the run: "<op>#<n>"."""
        with self._lock:
            n = self._nodes
            self._nodes += 1
        return f"{op}#{n}"

    def capture_point(
        self,
        component_id: str,
        component_type: str,
        event_type: EventTypeName,
        parents: Sequence[int],
        dependency: Dependency,
        partitions: int,
        **extra: Any,
    ) -> CapturePoint:
        """Register a capture point of the run and return it.

        - `component_id`: usually the node name ("reduceByKey#4", "reduceByKey#4.combine");
          `component_type`: the operation ("textFile", "combiner", "reducer", "collect").
        - `event_type`: what its records' events are (RECEIVE at sources, JOIN where records
          merge, FORK where one becomes several, SEND at outputs).
        - `parents`: the capture points its records' parents sit at; `dependency`: "source"
          (no parents), "narrow" (same partition), "shuffle" or "union".
        - `partitions`: how many partitions it has.
        - `extra`: more descriptor fields, JSON-serializable (e.g. `path`, `files` for text
          sources, `of` for outputs, `captures` for aggregations: "value" or "key").
        """
        with self._lock:
            number = self._next_cp
            self._next_cp += 1
            self._cps[number] = {
                "cp": number,
                "component_id": component_id,
                "component_type": component_type,
                "event_type": event_type,
                "parents": list(parents),
                "dependency": dependency,
                "partitions": partitions,
                **extra,
            }
        return CapturePoint(number, component_id, component_type, event_type)

    def output_point(self, node: PlanNode, action: str) -> CapturePoint:
        """The capture point of an action's output (SEND records) over `node`'s records."""
        kind = "saveAsTextFile" if action == "save" else action
        return self.capture_point(
            self.node_name(kind),
            kind,
            "SEND",
            node.capture_points(),
            node.segment_dependency(),
            node.num_partitions,
            of=node.name,
        )

    # -- actions and outputs -----------------------------------------------------------------

    @contextmanager
    def action(
        self,
        cp: CapturePoint,
        node: PlanNode | None = None,
        *,
        modules: Sequence[str] = CAPTURE_MODULES,
    ) -> Iterator[None]:
        """Around a Spark action whose output is `cp` (over `node`, for replay): the Python
        functions built inside run an interpreter that imports `modules` (the executor-side
        capture code; see `_interpreter`); afterwards, journal the run descriptor and ask for a
        rollover so the lineage is traceable at once (also when the action failed: its FAIL
        events)."""
        try:
            with capture_python(self._sc, modules):  # the action builds the last Python function
                yield
            if node is not None:
                with self._lock:
                    self._outputs[cp.number] = node
        finally:
            self._describe_run()
            self.repo.request_rollover()

    def output_node(self, cp: CapturePoint) -> PlanNode:
        """The node whose records an action of this run output at `cp` (BadInput if none)."""
        with self._lock:
            node = self._outputs.get(cp.number)
        if node is None:
            raise BadInput(f"capture point {cp.component_id} is not an action of this context")
        return node

    def lineage_of(self, cp: CapturePoint) -> LineageRDD:
        """Every record an action emitted at `cp`, traceable (merges pending journals first)."""
        self.repo.rollover()
        ids = self.repo.lineage.all_records(self.run_id, cp.number)
        return LineageRDD(
            self.repo,
            self.run_id,
            ids,
            sc=self._sc,
            origin=(cp, ids),
            spark_threshold=self.spark_threshold,
        )

    def _describe_run(self) -> None:
        with self._lock:
            self._actions += 1
            version = self._actions
            desc = {
                "run_id": self.run_id,
                "app": self._app,
                "spark_version": self._spark_version,
                "version": version,
                "capture_points": sorted(self._cps.values(), key=lambda c: c["cp"]),
            }
        rid = pack_record_id(0, version, 0)
        batch = LineageBatch.build(
            event_time_ns=time.time_ns(),
            event_type=EventType.CREATE,
            run_id=self.run_id,
            component_id="run",
            component_type=RUN_COMPONENT_TYPE,
            partition=version,
            attempt=0,
            record_ids=range(rid, rid + 1),
            details=json.dumps(desc, default=str),
        )
        self.repo.register_events(batch)
