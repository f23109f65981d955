"""`LineageContext`: Titian's entry point, in Python, durable in a provenance repository."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from journals import EventType, LineageBatch, pack_record_id
from repository import RUN_COMPONENT_TYPE, BadInput, Culprit, ProvenanceRepository

from ._interpreter import capture_python, check_capture_python
from ._rdd import CapturedRDD, KeySampler
from ._spec import CapturePoint, OutputSink
from ._splits import compute_splits, list_input_files
from ._trace import LineageRDD

_ON_ERROR = ("fail", "skip")


class LineageContext:
    """Wraps a SparkSession or SparkContext; sources made through it capture lineage into
    `repo`, a `ProvenanceRepository` opened by this (driver) process.

    - `run_id`: names this run in the repository (default: time + random suffix).
    - `on_error`: "fail" (default) records the input whose processing raised (a FAIL event)
      and fails the job as Spark would; "skip" records it, drops the record and goes on.
    - `capture=False` runs the same pipelines without recording lineage (`lineage()` then
      has nothing to trace).
    """

    def __init__(
        self,
        spark: Any,
        repo: ProvenanceRepository,
        *,
        run_id: str | None = None,
        on_error: str = "fail",
        capture: bool = True,
    ) -> None:
        sc = getattr(spark, "sparkContext", spark)
        if not hasattr(sc, "parallelize") or not hasattr(sc, "runJob"):
            raise TypeError(f"LineageContext needs a SparkSession or SparkContext, got {spark!r}")
        if not isinstance(repo, ProvenanceRepository):
            raise TypeError(f"LineageContext needs a ProvenanceRepository, got {repo!r}")
        if repo.read_only:
            raise BadInput("LineageContext needs a repository opened for writing (its owner)")
        if on_error not in _ON_ERROR:
            raise BadInput(f"on_error must be one of {', '.join(_ON_ERROR)}, got {on_error!r}")
        self.sc = sc
        check_capture_python(sc)  # fails now, not in every task, if workers cannot capture
        self.repo = repo
        self.run_id = run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.on_error = on_error
        self.capture = capture
        self.writer_spec = repo.writer_spec()
        self._lock = threading.Lock()
        self._nodes = 0
        self._next_cp = 1  # capture point 0 names the run descriptor
        self._cps: dict[int, dict] = {}
        self._outputs: dict[int, CapturedRDD] = {}  # output capture point -> its RDD
        self._actions = 0

    # -- naming ------------------------------------------------------------------------------

    def node_name(self, op: str) -> str:
        with self._lock:
            n = self._nodes
            self._nodes += 1
        return f"{op}#{n}"

    def new_cp(
        self,
        component_id: str,
        component_type: str,
        event_type: str,
        parents: list[int],
        dependency: str,
        partitions: int,
        **extra: Any,
    ) -> CapturePoint:
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

    def output_cp(self, node: CapturedRDD, action: str) -> CapturePoint:
        kind = "saveAsTextFile" if action == "save" else action
        return self.new_cp(
            self.node_name(kind),
            kind,
            "SEND",
            node.effective_cps(),
            node._segment_dependency(),
            node.getNumPartitions(),
            of=node.name,
        )

    # -- sources -----------------------------------------------------------------------------

    def textFile(
        self, name: str, minPartitions: int | None = None, use_unicode: bool = True
    ) -> CapturedRDD:
        """Lines of text files (a path, directory, glob or comma-separated list; local or a
        shared filesystem). Each line is named by its position; its byte offset is kept, so
        traces re-read the raw line by seeking."""
        if not use_unicode:
            raise BadInput("textFile(use_unicode=False) is not supported by the capture agent")
        files = list_input_files(name)
        n = minPartitions if minPartitions is not None else self.sc.defaultMinPartitions
        splits = compute_splits(files, n)
        node = self.node_name("textFile")
        cp = self.new_cp(
            node, "textFile", "RECEIVE", [], "source", len(splits), path=name, files=files
        )
        start = {"type": "text", "cp": cp, "splits": splits}
        return CapturedRDD(self, "source", [], node, len(splits), start=start)

    def parallelize(self, c: Iterable, numSlices: int | None = None) -> CapturedRDD:
        """A collection from the driver; records named (partition, index), values captured."""
        rdd = self.sc.parallelize(c, numSlices)
        n = rdd.getNumPartitions()
        node = self.node_name("parallelize")
        cp = self.new_cp(node, "parallelize", "RECEIVE", [], "source", n)
        start = {"type": "parallel", "cp": cp, "rdd": rdd}
        return CapturedRDD(self, "source", [], node, n, start=start)

    # -- actions and runs --------------------------------------------------------------------

    @contextmanager
    def action(self, node: CapturedRDD, cp: CapturePoint) -> Iterator[None]:
        """Around a Spark action: afterwards, describe the run and ask for a rollover so the
        lineage is traceable at once (also when the action failed: its FAIL events)."""
        try:
            with capture_python(self.sc):  # the action builds the last Python function
                yield
            node.last_output = cp
            self._outputs[cp.number] = node
        finally:
            self._describe_run()
            self.repo.request_rollover()

    def _describe_run(self) -> None:
        with self._lock:
            self._actions += 1
            version = self._actions
            desc = {
                "run_id": self.run_id,
                "app": self.sc.appName,
                "spark_version": self.sc.version,
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

    def lineage_of(self, cp: CapturePoint) -> LineageRDD:
        """Every record an action emitted at `cp`, traceable (merges pending journals first)."""
        self.repo.rollover()
        ids = self.repo.lineage.all_records(self.run_id, cp.number)
        return LineageRDD(self.repo, self.run_id, ids, sc=self.sc, origin=(cp, ids))

    def output_node(self, cp: CapturePoint) -> CapturedRDD:
        node = self._outputs.get(cp.number)
        if node is None:
            raise BadInput(f"capture point {cp.component_id} is not an action of this context")
        return node

    # -- debugging ---------------------------------------------------------------------------

    def culprits(self, run: str | None = None, with_data: bool = True) -> list[Culprit]:
        """Input records whose processing raised in this run (or `run`), with their raw data.

        With `on_error="skip"` the job went on without them; with "fail" the job failed (or a
        retry succeeded). Pending journals are merged first."""
        self.repo.rollover()
        return self.repo.culprits(run or self.run_id, with_data)

    def replay(
        self,
        what: LineageRDD | CapturedRDD,
        exclude: LineageRDD | None = None,
        local: bool | None = None,
    ) -> list:
        """Replay, capture off, and return what the action returns (a list of records).

        - `lc.replay(traced)`: selective replay. `traced` is a LineageRDD traced back from an
          action's output (e.g. `out.lineage().filter(f).go_back_all()`); the pipeline is
          re-run on exactly those records, each capture point keeping only records on the
          traced paths, so the traced outputs are reproduced exactly. A small replay runs
          in the driver, without a Spark job (`local=None`: when the traced input is small;
          `local=False`: always on Spark; `local=True`: in the driver or fail).
        - `lc.replay(rdd, exclude=traced)`: exclusive replay (Newt's ex-replay). `rdd`'s
          pipeline is re-run on all its input minus `traced`'s records, removed at their
          capture point (a source or any intermediate point).
        """
        from . import _replay

        if exclude is not None:
            if not isinstance(what, CapturedRDD):
                raise BadInput("replay(rdd, exclude=...): rdd must be a captured RDD")
            if not isinstance(exclude, LineageRDD):
                raise BadInput("replay(..., exclude=...) takes a LineageRDD")
            return _replay.exclusive(self, what, exclude)
        if not isinstance(what, LineageRDD):
            raise BadInput("replay(traced): traced must be a LineageRDD (see rdd.lineage())")
        return _replay.selective(self, what, local)

    def range_bounds(self, parent: CapturedRDD, n: int, keyfunc, replay=None) -> list:
        """sortByKey's range boundaries from a sample of keys (jobs that capture nothing)."""
        if n <= 1:
            return []
        counter = parent._build(
            OutputSink(None, "count", capture_values=False), capture=False, replay=replay
        )
        size = int(sum(counter.collect()))
        if size == 0:
            return []
        fraction = min(n * 20.0 / size, 1.0)
        records = parent._build(
            OutputSink(None, "collect", capture_values=False), capture=False, replay=replay
        )
        samples = sorted(
            records.mapPartitionsWithIndex(KeySampler(fraction)).collect(), key=keyfunc
        )
        if not samples:
            return []
        return [keyfunc(samples[int(len(samples) * (i + 1) / n)]) for i in range(n - 1)]

    def __repr__(self) -> str:
        return f"LineageContext(run_id={self.run_id!r}, repo={self.repo.path!r})"
