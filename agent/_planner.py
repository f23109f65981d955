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
- hand back what an action emitted: `lineage_of(cp)` -> a `LineageRDD`;
- tell listeners (`add_listener`, e.g. the OpenLineage emitter) when each action starts and
  ends, with what every action knows (`ActionInfo`): its output capture point, the capture
  points it ran through (inputs read, outputs written), and how it ended.

The run descriptor is a lineage batch of one record at capture point 0 (component type
`RUN_COMPONENT_TYPE`, partition = its version), whose details are JSON:
`{"run_id", "app", "spark_version", "version", "capture_points": [{"cp", "component_id",
"component_type", "event_type", "parents", "dependency", "partitions", ...extra}]}`. Each
action journals a new version; the newest wins.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from journals import EventType, LineageBatch, pack_record_id
from repository import RUN_COMPONENT_TYPE, BadInput, ProvenanceRepository

from ._interpreter import CAPTURE_MODULES, capture_python
from ._plan import Dependency, PlanNode
from ._rdd import UnsupportedOperation
from ._spark_trace import SPARK_THRESHOLD
from ._spec import CapturePoint
from ._trace import LineageRDD

EventTypeName = Literal["RECEIVE", "JOIN", "FORK", "SEND"]
log = logging.getLogger("provrepo.agent")


@dataclass(frozen=True)
class ActionInfo:
    """What every action knows, whichever front-end ran it: handed to action listeners.

    `capture_points` are the descriptor entries (see the module doc) of the action's output
    capture point and every capture point upstream of it: sources carry what they read (text
    sources: `path`, `files`), an output written to files its `path`. `ended_ns` and `error`
    are set when the action has ended (`error`: what it raised, None if it succeeded)."""

    run_id: str
    app: str
    spark_version: str
    output: CapturePoint
    capture_points: tuple[dict[str, Any], ...]
    started_ns: int
    ended_ns: int | None = None
    error: BaseException | None = None

    def sources(self) -> list[dict[str, Any]]:
        """The capture points the action read its input at."""
        return [c for c in self.capture_points if c["dependency"] == "source"]


class ActionListener(Protocol):
    """Told about every action of a run, on the driver's action path: return at once (hand
    slow work to another thread). What it raises is logged, never passed to the job."""

    def action_started(self, info: ActionInfo) -> None: ...

    def action_ended(self, info: ActionInfo) -> None: ...


# What an RDD replay of an action without an RDD plan says (DataFrame/SQL actions: their
# plans are Spark's; `lc.replay` sends their traces to the DataFrame replay instead).
NO_RDD_PLAN = (
    "this action ran no RDD plan of this context (DataFrame and SQL actions replay through "
    "the LineageContext that ran them)"
)


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
        self._planless: set[int] = set()  # outputs of actions without a replayable plan
        self._actions = 0
        self._listeners: list[ActionListener] = []

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

    def source_points(self, numbers: Iterable[int]) -> set[int]:
        """The source capture points (no parents) that records at `numbers` come from,
        through every capture point between (a DataFrame's group records)."""
        out: set[int] = set()
        with self._lock:
            todo = list(numbers)
            while todo:
                n = todo.pop()
                parents = self._cps[n]["parents"] if n in self._cps else []
                if parents:
                    todo.extend(parents)
                else:
                    out.add(n)
        return out

    def output_point(self, node: PlanNode, action: str, **extra: Any) -> CapturePoint:
        """The capture point of an action's output (SEND records) over `node`'s records;
        `extra` as `capture_point` takes it (an output written to files: its `path`)."""
        kind = "saveAsTextFile" if action == "save" else action
        return self.capture_point(
            self.node_name(kind),
            kind,
            "SEND",
            node.capture_points(),
            node.segment_dependency(),
            node.num_partitions,
            of=node.name,
            **extra,
        )

    def add_listener(self, listener: ActionListener) -> None:
        """Tell `listener` when each action of this run starts and ends (see `ActionInfo`)."""
        with self._lock:
            self._listeners.append(listener)

    def action_info(self, cp: CapturePoint) -> ActionInfo:
        """What is known of an action outputting at `cp` before it runs."""
        with self._lock:
            todo, seen = [cp.number], set()
            while todo:  # the output's capture point and everything upstream of it
                n = todo.pop()
                if n in seen or n not in self._cps:
                    continue
                seen.add(n)
                todo.extend(self._cps[n]["parents"])
            cps = tuple(json.loads(json.dumps(self._cps[n], default=str)) for n in sorted(seen))
        return ActionInfo(self.run_id, self._app, self._spark_version, cp, cps, time.time_ns())

    def _tell(self, event: str, info: ActionInfo) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                getattr(listener, event)(info)
            except Exception:  # a listener must never fail or change the job
                log.exception("action listener %r failed on %s", listener, event)

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
        info = self.action_info(cp) if self._listeners else None
        if info is not None:
            self._tell("action_started", info)
        error: BaseException | None = None
        try:
            with capture_python(self._sc, modules), ExitStack() as frames:
                # Rows of DataFrames read (`df.rdd`): their agent's failure handling, as
                # around its own actions.
                for s in node.frame_sources() if node is not None else ():
                    frames.enter_context(s.around())
                yield  # the action builds the last Python function in here
            with self._lock:
                if node is not None:
                    self._outputs[cp.number] = node
                else:
                    self._planless.add(cp.number)
        except BaseException as e:
            error = e
            raise
        finally:
            self._describe_run()
            self.repo.request_rollover()
            if info is not None:
                self._tell("action_ended", replace(info, ended_ns=time.time_ns(), error=error))

    def output_node(self, cp: CapturePoint) -> PlanNode:
        """The node whose records an action of this run output at `cp` (BadInput if none;
        UnsupportedOperation for an action without an RDD plan: DataFrame/SQL actions)."""
        with self._lock:
            node = self._outputs.get(cp.number)
            planless = cp.number in self._planless
        if node is None and planless:
            raise UnsupportedOperation(f"RDD replay of {cp.component_id}: {NO_RDD_PLAN}")
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
